"""Tokens of RocketMQ's SQL92 filter language.

The token set is RocketMQ's ``SelectorParser.jj``: case-insensitive keywords, ASCII
identifiers (``[A-Za-z_$][A-Za-z0-9_$]*``), single-quoted strings with ``''`` for a quote,
decimal integers (no leading zeros, optional ``L``), floats (``5.``, ``.5``, ``5E10``),
the operators ``= <> > >= < <= ( , ) + -``, blanks (space, tab, CR, LF, FF), ``/* */``
comments and ``--`` comments. RocketMQ ends a ``--`` comment only at a line break; without
one the two dashes are minus signs, as there.

Numbers are converted here, with RocketMQ's limits: integers that fit in 32 bits are Java
``Integer``, larger ones ``Long`` (beyond 64 bits is an error); floats are ``Double`` and
RocketMQ refuses one that is infinite or below ``Double.MIN_VALUE`` (zero included).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from mqcore.plugins.filter_sql92.javatypes import INT_MAX, LONG_MAX
from mqcore.plugins.filter_sql92.source import describe, expression_error

__all__ = ["KEYWORDS", "Token", "tokenize"]

KEYWORDS = frozenset(
    {
        "NOT",
        "AND",
        "OR",
        "BETWEEN",
        "IN",
        "TRUE",
        "FALSE",
        "NULL",
        "IS",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
    }
)

# Alternatives are tried in order; floats come before integers so that the longest
# number wins, as in JavaCC ("0e5" is one float, "05" is "0" then "5").
_TOKEN = re.compile(
    r"""
    (?P<blank>[ \t\n\r\f]+)
  | (?P<comment>/\*.*?\*/)
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?
             |[0-9]+[eE][+-]?[0-9]+)
  | (?P<int>0|[1-9][0-9]*[lL]?)
  | (?P<string>'[^']*(?:''[^']*)*')
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+\-])
    """,
    re.VERBOSE | re.DOTALL,
)

_LINE_BREAK = re.compile(r"\r\n|\n|\r")

_HINTS = {
    "!": "use <> for 'not equal'",
    '"': "strings are written in single quotes",
    "&": "use AND",
    "|": "use OR",
    "*": "there is no arithmetic in RocketMQ's SQL92",
    "/": "there is no arithmetic in RocketMQ's SQL92",
}


class Token(NamedTuple):
    """One token: ``kind`` is a keyword (upper case), ``ID``, ``STRING``, ``INT``, ``FLOAT``,
    an operator's text or ``EOF``; ``value`` is the decoded literal; ``column`` is 1-based."""

    kind: str
    text: str
    column: int
    value: Any = None
    jtype: str = ""

    def shown(self) -> str:
        """How messages name this token."""
        return "the end of the expression" if self.kind == "EOF" else describe(self.text)


def _number(expression: str, kind: str, text: str, column: int) -> Token:
    if kind == "int":
        digits = text.rstrip("lL")
        # Checked before int(): Python refuses to convert over 4300 digits (a ValueError),
        # and a literal has no leading zeros, so more than 19 digits never fits a long.
        number = int(digits) if len(digits) <= 19 else LONG_MAX + 1
        if number > LONG_MAX:
            raise expression_error(
                expression,
                column,
                f"integer {describe(text)} does not fit in a 64-bit long",
                f"the largest is {LONG_MAX}",
            )
        return Token("INT", text, column, number, "I" if number <= INT_MAX else "L")
    value = float(text)
    if value == float("inf"):
        raise expression_error(
            expression,
            column,
            f"number {describe(text)} is too large for a double",
            "the largest is 1.7976931348623157E308",
        )
    if value == 0.0:
        raise expression_error(
            expression,
            column,
            f"float {describe(text)} is below Double.MIN_VALUE",
            "RocketMQ refuses float literals that are zero or round to zero; "
            "write 0 to compare as integers",
        )
    return Token("FLOAT", text, column, value, "D")


def _lex_error(expression: str, pos: int) -> Exception:
    column = pos + 1
    ch = expression[pos]
    if ch == "'":
        return expression_error(
            expression, column, "unterminated string", "close it with ' and write '' for a quote"
        )
    if expression.startswith("/*", pos):
        return expression_error(expression, column, "unterminated comment", "close it with */")
    return expression_error(
        expression, column, f"unexpected character {describe(ch)}", _HINTS.get(ch)
    )


def tokenize(expression: str) -> Iterator[Token]:
    """Yield the tokens of ``expression``, then one ``EOF`` token."""
    pos, end = 0, len(expression)
    match = _TOKEN.match
    # A -- comment needs a line break after it; past the last one, -- is two minus signs.
    last_break = max(expression.rfind("\n"), expression.rfind("\r"))
    while pos < end:
        if pos < last_break and expression.startswith("--", pos):
            brk = _LINE_BREAK.search(expression, pos)
            pos = brk.end() if brk is not None else end
            continue
        m = match(expression, pos)
        if m is None:
            raise _lex_error(expression, pos)
        kind = m.lastgroup or ""
        text = m.group()
        column = pos + 1
        pos = m.end()
        if kind == "blank" or kind == "comment":
            continue
        if kind == "id":
            upper = text.upper()
            if upper in KEYWORDS:
                yield Token(upper, text, column)
            else:
                yield Token("ID", text, column, text)
        elif kind == "string":
            yield Token("STRING", text, column, text[1:-1].replace("''", "'"), "S")
        elif kind == "op":
            yield Token(text, text, column)
        else:
            yield _number(expression, kind, text, column)
    yield Token("EOF", "", end + 1)
