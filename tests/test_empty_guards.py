"""No choice from a list that may be empty goes unguarded.

A producer once chose its queue with ``mqs[index % len(mqs)]`` and raised ZeroDivisionError
when every master of the topic was down (no writable queue). This test reads the source of
mqcore, its bundled plugins and contrib, and finds every expression that divides by a
length or picks from a sequence by position or at random: ``x % len(y)``, ``x // len(y)``,
``divmod(x, len(y))``, ``random.choice(y)``, ``randrange(len(y))``, ``min(y)``/``max(y)``
as an index (``d[min(d)]``), and the first or last item (``y[0]``, ``y[-1]``) of a route's
lists (queues, brokers, addresses, members, consumer ids). Each must follow, in its
function, a test of that same ``y`` for emptiness (``if not y``, ``if y``, ``assert y``,
``len(y) ==/>/< ...``, ``y and ...``), or be listed in :data:`REVIEWED` with the reason it
cannot be empty. (The check is by name and position, not flow: a guard anywhere earlier in
the function counts.)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("mqcore", "plugins", "contrib")

#: (file, expression) -> why its sequence is never empty there (reviewed by hand).
REVIEWED = {
    (
        "mqcore/dashboard/charts.py",
        "i % len(_COLOURS)",
    ): "_COLOURS is a constant tuple of seven colours",
    (
        "mqcore/client/transport_remote.py",
        "(start + i) % len(self.namesrv_addrs)",
    ): "__init__ refuses an address string with no name server in it",
    (
        "mqcore/client/transport_remote.py",
        "random.randrange(len(self.namesrv_addrs))",
    ): "__init__ refuses an address string with no name server in it",
    (
        "mqcore/benchmark.py",
        "i % len(ready)",
    ): "ready slices message_pool(), which holds at least one batch",
    (
        "mqcore/benchmark.py",
        "full % len(ready)",
    ): "ready slices message_pool(), which holds at least one batch",
    (
        "mqcore/client/transport_remote.py",
        "self._all_brokers()[0]",
    ): "_all_brokers() falls back to the first name server, and there is always one",
    (
        "mqcore/client/admin.py",
        "self.transport.namesrv_addrs[0]",
    ): "RemoteTransport.__init__ refuses an address string with no name server in it",
    (
        "plugins/allocate.py",
        "divmod(len(kept), len(cids))",
    ): "cids comes from check_allocate_args(), which refuses an empty cid_all",
}

#: what a route's lists are called: their first or last item is a choice from them too
_ROUTE_LISTS = re.compile(
    r"^(.*_)?(queues|mqs|mq_all|brokers|broker_datas|queue_datas|addrs|members|cids|cid_all"
    r"|routes|write_queues|read_queues)$"
)


def _sources() -> Iterator[Path]:
    for top in SOURCES:
        yield from sorted((ROOT / top).rglob("*.py"))


def _risky(node: ast.AST) -> ast.expr | None:
    """The sequence ``node`` needs to be non-empty, if it is a risky expression."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.FloorDiv)):
        right = node.right
        if _is_call(right, "len") and right.args:  # type: ignore[attr-defined]
            return right.args[0]  # type: ignore[attr-defined, no-any-return]
    if isinstance(node, ast.Call):
        if _is_call(node, "divmod") and len(node.args) == 2 and _is_call(node.args[1], "len"):
            return node.args[1].args[0]  # type: ignore[attr-defined, no-any-return]
        if _is_call(node, "choice") and node.args:
            return node.args[0]
        if _is_call(node, "randrange") and node.args and _is_call(node.args[0], "len"):
            return node.args[0].args[0]  # type: ignore[attr-defined, no-any-return]
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Call):
        index = node.slice
        if (_is_call(index, "min") or _is_call(index, "max")) and len(index.args) == 1:
            return index.args[0]
    if (
        isinstance(node, ast.Subscript)
        and _first_or_last(node.slice)
        and _ROUTE_LISTS.match(_last_name(node.value))
        and not isinstance(node.ctx, ast.Store)
    ):
        return node.value
    return None


def _last_name(node: ast.expr) -> str:
    """The name an expression ends with: ``self._all_brokers()`` -> ``_all_brokers``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _first_or_last(index: ast.expr) -> bool:
    if isinstance(index, ast.Constant) and index.value == 0:
        return True
    return (
        isinstance(index, ast.UnaryOp)
        and isinstance(index.op, ast.USub)
        and isinstance(index.operand, ast.Constant)
        and index.operand.value == 1
    )


def _is_call(node: ast.AST, name: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == name) or (
        isinstance(func, ast.Attribute) and func.attr == name
    )


def _tests_emptiness(test: ast.AST, target: str) -> bool:
    """Whether ``test`` (a condition) looks at ``target``'s emptiness."""
    for node in ast.walk(test):
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.Not)
            and ast.unparse(node.operand) == target
        ):
            return True
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if _is_call(side, "len") and ast.unparse(side.args[0]) == target:  # type: ignore[attr-defined]
                    return True
        if isinstance(node, ast.expr) and ast.unparse(node) == target and node is test:
            return True
        if isinstance(node, ast.BoolOp) and any(ast.unparse(v) == target for v in node.values):
            return True
    return False


def _conditions(scope: ast.AST, before: int) -> Iterator[ast.AST]:
    """Every condition in ``scope`` that starts at or before line ``before``."""
    for node in ast.walk(scope):
        if getattr(node, "lineno", before + 1) > before:
            continue
        if isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
            yield node.test
        elif isinstance(node, ast.comprehension):
            yield from node.ifs
        elif isinstance(node, ast.BoolOp):
            yield node


def _scopes(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(innermost function or the module, node) for every node."""

    def visit(scope: ast.AST, node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            inner = (
                child
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                else scope
            )
            yield inner, child
            yield from visit(inner, child)

    yield from visit(tree, tree)


def unguarded() -> list[tuple[str, int, str, str]]:
    """(file, line, expression, sequence) of each risky expression with no guard."""
    found = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for scope, node in _scopes(tree):
            seq = _risky(node)
            if seq is None:
                continue
            target = ast.unparse(seq)
            line = node.lineno  # type: ignore[attr-defined]
            if any(_tests_emptiness(t, target) for t in _conditions(scope, line)):
                continue
            found.append((rel, line, ast.unparse(node), target))
    return found


def test_every_choice_from_a_sequence_is_guarded_or_reviewed() -> None:
    """New code that picks from a list by position or divides by its length tests the list
    for emptiness first (or says here why it cannot be empty)."""
    left = [
        f"{rel}:{line}: {expr} (is {seq} ever empty?)"
        for rel, line, expr, seq in unguarded()
        if (rel, expr) not in REVIEWED
    ]
    assert not left, "\n".join(left)


def test_the_reviewed_list_names_code_that_still_exists() -> None:
    """An entry whose expression is gone (fixed, renamed) is removed from the list."""
    found = {(rel, expr) for rel, _, expr, _ in unguarded()}
    assert set(REVIEWED) <= found, set(REVIEWED) - found


def test_the_scan_finds_the_producer_bug_it_was_written_for(tmp_path: Path) -> None:
    """The scan flags the unguarded form and accepts the guarded ones."""
    bad = "def pick(mqs, i):\n    return mqs[i % len(mqs)]\n"
    good = (
        "def pick(mqs, i):\n    if not mqs:\n        raise ValueError\n"
        "    return mqs[i % len(mqs)]\n"
        "def other(xs, i):\n    if xs:\n        return xs[i % len(xs)]\n"
        "def third(d):\n    return d[min(d)] if d else None\n"
    )
    for text, count in ((bad, 1), (good, 0)):
        tree = ast.parse(text)
        hits = [
            n
            for scope, n in _scopes(tree)
            if _risky(n) is not None
            and not any(
                _tests_emptiness(t, ast.unparse(_risky(n))) for t in _conditions(scope, n.lineno)
            )
        ]
        assert len(hits) == count, text
