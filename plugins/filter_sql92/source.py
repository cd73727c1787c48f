"""The expression text: how errors point into it.

Every compile-time error is a :class:`~mqcore.errors.FilterExpressionError` whose message
reads ``<what went wrong> at column <n>``, optionally followed by a hint in parentheses,
then the offending part of the expression with a caret under the column.
"""

from __future__ import annotations

from mqcore.errors import FilterExpressionError

__all__ = ["MAX_DEPTH", "describe", "expression_error"]

#: How deeply conditions may nest once parentheses and chains of one operator are
#: flattened; deeper expressions are refused so that neither the compiler nor the
#: compiled evaluator can exhaust Python's recursion limit.
MAX_DEPTH = 100

_SNIPPET = 60  # characters of context shown on each side of the column


def describe(text: str) -> str:
    """A token as shown in messages: quoted, shortened when long."""
    if len(text) > 30:
        text = text[:27] + "..."
    return repr(text)


def _snippet(expression: str, column: int) -> str:
    index = max(0, min(column - 1, len(expression)))
    start = max(0, index - _SNIPPET)
    end = min(len(expression), index + _SNIPPET)
    line = expression[start:end]
    # Keep the caret aligned: tabs and line breaks become spaces in the excerpt.
    line = "".join(" " if ch in "\t\n\r\f\v" else ch for ch in line)
    prefix = "..." if start > 0 else ""
    suffix = "..." if end < len(expression) else ""
    caret = " " * (len(prefix) + index - start) + "^"
    return f"\n  {prefix}{line}{suffix}\n  {caret}"


def expression_error(
    expression: str, column: int | None, message: str, hint: str | None = None
) -> FilterExpressionError:
    """Build the error for ``message`` at 1-based ``column`` of ``expression``."""
    text = message if column is None else f"{message} at column {column}"
    if hint:
        text += f" ({hint})"
    if column is not None and expression:
        text += _snippet(expression, column)
    return FilterExpressionError(text, expression=expression, column=column)
