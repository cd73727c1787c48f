"""Compile a checked SQL92 tree into a Python function of the message properties.

The result is one plain function ``f(properties) -> True | False | None`` built from
generated Python source, so that evaluating a message runs straight-line code instead of
walking the tree. Nothing from the expression text is ever pasted into that source:
property names and literal values are handed over as named constants of the function's
namespace; the source itself only contains identifiers chosen here.

Shape of the generated code: each chain of one logical operator (``a AND b AND c``)
becomes one function whose operands are inlined, with RocketMQ's short-circuit order
(left to right, stop at the first FALSE for AND, the first TRUE for OR). A condition
nested inside another operator gets a function of its own. Long chains are cut into
functions of :data:`_CHUNK` operands, so generated functions stay small whatever the
length of the expression; the nesting depth is bounded by the parser.

Values follow RocketMQ's evaluation: a missing property is NULL, comparisons with NULL
are unknown (None), a property that does not convert to the literal's number type raises
:class:`~mqcore.errors.FilterEvaluationError` (the caller treats it as no match).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mqcore.errors import FilterEvaluationError, FilterExpressionError
from mqcore.plugins.filter_sql92 import javatypes
from mqcore.plugins.filter_sql92.nodes import (
    BoolCast,
    Compare,
    Const,
    In,
    IsNull,
    Logic,
    Neg,
    Node,
    Not,
    Prop,
    StrMatch,
    logic_children,
)

__all__ = ["Evaluator", "compile_tree"]

Evaluator = Callable[[Mapping[str, str]], "bool | None"]

_CHUNK = 64  # operands per generated function for long AND/OR chains
_CONVERT = {"I": "_int", "L": "_long", "D": "_double"}
_STR_METHOD = {"STARTSWITH": "startswith", "ENDSWITH": "endswith"}
_ORDER_TEST: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _fail(message: str) -> Any:
    raise FilterEvaluationError(message)


def _null(_evaluated: object) -> None:
    return None


def _ordering(op: str, lv: Any, lt: str, rv: Any, rt: str) -> bool | None:
    """A comparison for operand types that have no inlined code (rare)."""
    if lv is None or rv is None:
        return None
    if lt == "S" and rt == "S":
        lv, lt, rv, rt = javatypes.java_double(lv), "D", javatypes.java_double(rv), "D"
    return _ORDER_TEST[op](javatypes.compare(lv, lt, rv, rt))


class _Operand:
    """How generated code reads one side of a comparison."""

    __slots__ = ("code", "jtype", "static", "value")

    def __init__(self, code: str, jtype: str, static: bool = False, value: Any = None) -> None:
        self.code = code  # a Python expression
        self.jtype = jtype  # the Java type, N for a value that is always NULL
        self.static = static  # known now (a literal or a folded negation)
        self.value = value


class _Codegen:
    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "__builtins__": {},
            "_int": javatypes.java_int,
            "_long": javatypes.java_long,
            "_double": javatypes.java_double,
            "_boolean": javatypes.java_boolean,
            "_dcmp": javatypes.double_compare,
            "_equality": javatypes.equality,
            "_ordering": _ordering,
            "_fail": _fail,
            "_null": _null,
        }
        self.sources: list[str] = []
        self.names: dict[tuple[str, Any], str] = {}
        self.functions = 0

    # -- names ----------------------------------------------------------------------------

    def constant(self, value: Any, prefix: str = "_c") -> str:
        """A namespace name holding ``value`` (values are never written into the source)."""
        key = (prefix, (type(value), value))
        name = self.names.get(key)
        if name is None:
            name = self.names[key] = f"{prefix}{len(self.names)}"
            self.ns[name] = value
        return name

    def prop(self, node: Prop) -> str:
        """Code reading property ``node`` (NULL when missing)."""
        return f"p.get({self.constant(node.name, '_k')})"

    def new_function(self, body: list[str]) -> str:
        """Add a generated function with ``body``; returns its name."""
        name = f"_f{self.functions}"
        self.functions += 1
        self.sources.append("\n".join([f"def {name}(p):", *("    " + line for line in body)]))
        return name

    # -- conditions -----------------------------------------------------------------------

    def condition(self, node: Node, out: list[str]) -> None:
        """Append statements that set ``r`` to the three-valued result of ``node``."""
        if isinstance(node, Const):
            out.append(f"r = {node.value!r}")  # True, False or None: never user text
        elif isinstance(node, BoolCast):
            out.append(f"r = None if {self.prop(node.prop)} is None else False")
        elif isinstance(node, Not):
            self.condition(node.operand, out)
            out.append("if r is not None: r = not r")
        elif isinstance(node, Logic):
            out.append(f"r = {self.chain(node.op, logic_children(node))}(p)")
        elif isinstance(node, Compare):
            if node.op == "=":
                self.equality(node, out)
            else:
                self.ordering(node, out)
        elif isinstance(node, IsNull):
            value = self.operand(node.operand)
            if value.static:
                out.append(f"r = {value.value is None!r}")
            else:
                out.append(f"r = {value.code} is None")
        elif isinstance(node, In):
            values = self.constant(node.values, "_s")
            test = "not in" if node.negated else "in"
            out.append(f"v = {self.prop(node.prop)}")
            out.append(f"r = None if v is None else v {test} {values}")
        elif isinstance(node, StrMatch):
            self.str_match(node, out)
        else:  # the parser casts properties and refuses other values as conditions
            raise FilterExpressionError(f"not a condition: {node!r}")

    def chain(self, op: str, children: list[Node] | list[str]) -> str:
        """A function for ``c1 op c2 op ...``; children are nodes or generated functions."""
        if len(children) > _CHUNK:
            children = [
                self.chain(op, children[i : i + _CHUNK]) for i in range(0, len(children), _CHUNK)
            ]
        stop = "False" if op == "AND" else "True"
        body = ["u = False"]
        for i, child in enumerate(children):
            if isinstance(child, str):
                body.append(f"r = {child}(p)")
            else:
                self.condition(child, body)
            body.append(f"if r is {stop}: return {stop}")
            if i < len(children) - 1:
                body.append("if r is None: u = True")
        body.append(f"return None if u or r is None else {'True' if op == 'AND' else 'False'}")
        return self.new_function(body)

    def function(self, node: Node) -> str:
        """A function returning the result of condition ``node``."""
        if isinstance(node, Logic):
            return self.chain(node.op, logic_children(node))
        body: list[str] = []
        self.condition(node, body)
        body.append("return r")
        return self.new_function(body)

    # -- operands -------------------------------------------------------------------------

    def operand(self, node: Node) -> _Operand:
        """How to read ``node`` as one side of a comparison."""
        if isinstance(node, Prop):
            return _Operand(self.prop(node), "S")
        if isinstance(node, Neg) and node.effect is not None:
            # NULL, once the condition under the minus has been evaluated
            return _Operand(f"_null({self.function(node.effect)}(p))", "N")
        if isinstance(node, (Const, Neg)):
            if node.jtype == "N":
                return _Operand("None", "N", True, None)
            return _Operand(self.constant(node.value), node.jtype, True, node.value)
        return _Operand(f"{self.function(node)}(p)", "B")

    def equality(self, node: Compare, out: list[str]) -> None:
        """RocketMQ's ``=``: both sides evaluated, then its NULL rules and conversions."""
        left, right = self.operand(node.left), self.operand(node.right)
        if left.static and right.static:
            try:
                result = javatypes.equality(left.value, left.jtype, right.value, right.jtype)
            except FilterEvaluationError as exc:
                out.append(f"r = _fail({self.constant(str(exc))})")
            else:
                out.append(f"r = {result!r}")
            return
        prop_left = left.jtype == "S" and not left.static
        prop_right = right.jtype == "S" and not right.static
        if prop_left and prop_right:
            out.append(f"v = {left.code}")
            out.append(f"w = {right.code}")
            out.append("r = (w is None) or None if v is None else (False if w is None else v == w)")
        elif prop_left and right.static and right.jtype != "N":
            out.append(f"v = {left.code}")
            out.append(
                f"r = None if v is None else {self.converted('v', right.jtype)} == {right.code}"
            )
        elif prop_right and left.static and left.jtype not in ("N", "B"):
            out.append(f"v = {right.code}")
            out.append(
                f"r = False if v is None else {left.code} == {self.converted('v', left.jtype)}"
            )
        else:
            out.append(f"r = _equality({left.code}, {left.jtype!r}, {right.code}, {right.jtype!r})")

    @staticmethod
    def converted(var: str, jtype: str) -> str:
        """Code converting property value ``var`` to Java type ``jtype`` (as RocketMQ does)."""
        if jtype == "S":
            return var
        if jtype == "B":
            return f"_boolean({var})"
        return f"{_CONVERT[jtype]}({var})"

    def ordering(self, node: Compare, out: list[str]) -> None:
        """``>``, ``>=``, ``<``, ``<=``: NULL on either side gives NULL."""
        op = node.op
        left, right = self.operand(node.left), self.operand(node.right)
        if left.jtype == "N" or right.jtype == "N":
            # NULL either way, but RocketMQ evaluates the left side, then the right one
            # unless the left is NULL, and a condition under a minus sign may fail.
            if not (left.static and right.static):
                out.append(f"v = {left.code}")
                if not right.static:
                    out.append(f"if v is not None: {right.code}")
            out.append("r = None")
        elif left.static and right.static:
            sign = javatypes.compare(left.value, left.jtype, right.value, right.jtype)
            out.append(f"r = {_ORDER_TEST[op](sign)!r}")
        elif right.static and left.jtype == "S":
            out.append(f"v = {left.code}")
            if right.jtype == "D":
                # Double.compareTo puts NaN above everything; the literal is never NaN or 0.
                nan = " or v != v" if op in (">", ">=") else ""
                out.append("if v is not None: v = _double(v)")
                out.append(f"r = None if v is None else (v {op} {right.code}{nan})")
            else:
                out.append(
                    f"r = None if v is None else {_CONVERT[right.jtype]}(v) {op} {right.code}"
                )
        elif left.static and right.jtype == "S":
            out.append(f"v = {right.code}")
            if left.jtype == "D":
                nan = " or v != v" if op in ("<", "<=") else ""
                out.append("if v is not None: v = _double(v)")
                out.append(f"r = None if v is None else ({left.code} {op} v{nan})")
            else:
                out.append(f"r = None if v is None else {left.code} {op} {_CONVERT[left.jtype]}(v)")
        elif left.jtype == "S" and right.jtype == "S":
            out.append(f"v = {left.code}")
            out.append(f"w = {right.code}")
            out.append(
                f"r = None if v is None or w is None else _dcmp(_double(v), _double(w)) {op} 0"
            )
        else:
            out.append(
                f"r = _ordering({op!r}, {left.code}, {left.jtype!r}, {right.code}, {right.jtype!r})"
            )

    def str_match(self, node: StrMatch, out: list[str]) -> None:
        """CONTAINS, STARTSWITH, ENDSWITH: FALSE for anything but a string."""
        if not node.search:
            out.append("r = False")  # RocketMQ: an empty search string never matches
            return
        value = self.operand(node.operand)
        if value.static or value.jtype != "S":
            if not value.static:
                out.append(value.code)  # evaluated for its errors, as RocketMQ does
            out.append(f"r = {self.static_match(node, value)!r}")
            return
        search = self.constant(node.search)
        out.append(f"v = {value.code}")
        if node.op == "CONTAINS":
            test = f"{search} {'not in' if node.negated else 'in'} v"
        else:
            test = f"{'not ' if node.negated else ''}v.{_STR_METHOD[node.op]}({search})"
        out.append(f"r = v is not None and {test}")

    @staticmethod
    def static_match(node: StrMatch, value: _Operand) -> bool:
        """The result of a string match on a literal, known now."""
        if value.jtype != "S" or not value.static:
            return False  # NULL, numbers and booleans are not strings: FALSE either way
        text: str = value.value
        if node.op == "CONTAINS":
            hit = node.search in text
        elif node.op == "STARTSWITH":
            hit = text.startswith(node.search)
        else:
            hit = text.endswith(node.search)
        return hit != node.negated


def compile_tree(tree: Node) -> tuple[Evaluator, str]:
    """The evaluator for ``tree`` and the generated source (for debugging)."""
    gen = _Codegen()
    name = gen.function(tree)
    source = "\n\n".join(gen.sources) + "\n"
    # The source is ours alone: user text only ever reaches it as namespace values.
    exec(compile(source, "<mqcore sql92 filter>", "exec"), gen.ns)
    return gen.ns[name], source
