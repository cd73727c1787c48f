"""The SQL92 message filter: RocketMQ's filter language over message properties.

``Kernel().filter("SQL92", "a > 5 AND b = 'x'")`` lexes, parses and checks the expression
the way RocketMQ's ``filter`` module does, then compiles it into a Python function (see
:mod:`.compiler`). The message tag is visible as the property ``TAGS``. Only a TRUE
result matches: FALSE, unknown (a missing property) and evaluation errors (a property that
is not a number where a number is compared) do not, as on a RocketMQ broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mqcore.errors import FilterExpressionError
from mqcore.hookspecs import RegisterFilters, hookimpl
from mqcore.plugins.filter_sql92.compiler import compile_tree
from mqcore.plugins.filter_sql92.parser import parse

__all__ = ["MAX_EXPRESSION_BYTES", "Sql92Filter", "mqcore_register_filters"]

#: The longest expression compiled, in UTF-8 bytes (a subscription comes from the network once
#: the broker serves remote clients; compiling is linear but not free).
MAX_EXPRESSION_BYTES = 64 * 1024


class Sql92Filter:
    """A compiled SQL92 expression; build one with ``Kernel().filter("SQL92", text)``.

    :param max_bytes: the longest expression accepted, in UTF-8 bytes
        (:data:`MAX_EXPRESSION_BYTES` by default; the class attribute ``max_expression_bytes``
        changes it for every filter compiled afterwards).
    :raises FilterExpressionError: when ``expression`` is empty, too long or invalid; the
        error's ``column`` points at the problem.
    """

    max_expression_bytes = MAX_EXPRESSION_BYTES

    expression_type = "SQL92"
    uses_properties = True

    __slots__ = ("_evaluate", "expression", "source")

    def __init__(self, expression: str | None, *, max_bytes: int | None = None) -> None:
        if expression is None or not isinstance(expression, str) or not expression.strip():
            shown = "None" if expression is None else repr(expression)
            if expression is not None and not isinstance(expression, str):
                shown = f"a {type(expression).__name__}"
            raise FilterExpressionError(
                f"an SQL92 filter needs an expression, got {shown}; "
                "write TRUE to match every message",
                expression=expression if isinstance(expression, str) else None,
                column=1 if isinstance(expression, str) else None,
            )
        limit = self.max_expression_bytes if max_bytes is None else max_bytes
        # Most expressions are short ASCII: encode only when the length could be over.
        if len(expression) * 4 > limit and len(expression.encode("utf-8", "replace")) > limit:
            encoded = expression.encode("utf-8", "replace")
            raise FilterExpressionError(
                f"the SQL92 expression is {len(encoded)} bytes long; the limit is {limit} "
                "(Sql92Filter.max_expression_bytes)",
                expression=expression,
                column=len(encoded[:limit].decode("utf-8", "ignore")) + 1,
            )
        self.expression = expression
        try:
            # The parser is iterative; the code generator recurses once per nesting level.
            evaluate, source = compile_tree(parse(expression))
        except RecursionError:
            # Nesting is capped well below the recursion limit; only a caller already
            # deep in its own stack can get here.
            raise FilterExpressionError(
                "the expression nests too deeply to compile from this point of the call stack",
                expression=expression,
            ) from None
        self._evaluate = evaluate
        #: the generated Python source, for the curious
        self.source = source

    def evaluate(self, properties: Mapping[str, str]) -> bool | None:
        """The three-valued result: True, False or None (unknown).

        :raises FilterEvaluationError: where RocketMQ's evaluation throws (a property that
            does not parse as the number it is compared with...).
        """
        return self._evaluate(properties)

    def matches_properties(self, properties: Mapping[str, str]) -> bool:
        """Whether stored ``properties`` (TAGS included) match; never raises."""
        try:
            return self._evaluate(properties) is True
        except Exception:  # an evaluation error means "no match", as on the broker
            return False

    def matches(self, message: Any) -> bool:
        """Whether ``message`` (Message or MessageExt) matches; never raises."""
        try:
            return self._evaluate(message.all_properties()) is True
        except Exception:
            return False

    def matches_tags_code(self, tags_code: int) -> bool:
        """SQL92 does not filter on the consume queue's tags code: always True."""
        return True

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"


@hookimpl(trylast=True)
def mqcore_register_filters(register: RegisterFilters) -> None:
    """Register the ``SQL92`` filter."""
    register("SQL92", Sql92Filter)
