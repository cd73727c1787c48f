"""An iterative parser for RocketMQ's SQL92 filter grammar.

The grammar (``SelectorParser.jj``), lowest precedence first::

    expression  := and ( OR and )*
    and         := equality ( AND equality )*
    equality    := comparison ( "=" comparison | "<>" comparison | IS [NOT] NULL )*
    comparison  := unary ( (">" | ">=" | "<" | "<=") unary
                         | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
                         | [NOT] BETWEEN unary AND unary
                         | [NOT] IN "(" string ( "," string )* ")" )*
    unary       := "+" unary | "-" unary | NOT unary | primary
    primary     := literal | identifier | "(" expression ")"

so NOT binds tighter than any comparison (``NOT a = 'x'`` is ``(NOT a) = 'x'``), and
every binary operator is left-associative. The parser is an operator-precedence parser
with explicit stacks instead of recursion, so a thousand nested parentheses cost nothing
but memory. Unlike RocketMQ, which stops at the first token it cannot continue with and
silently ignores the rest, the whole text must parse: trailing tokens are an error.
"""

from __future__ import annotations

from collections.abc import Iterator

from mqcore.plugins.filter_sql92.lexer import Token, tokenize
from mqcore.plugins.filter_sql92.nodes import Const, Node, Prop
from mqcore.plugins.filter_sql92.semantics import Builder
from mqcore.plugins.filter_sql92.source import describe, expression_error

__all__ = ["parse"]

# Binding strength of what can sit on the operator stack; barriers (parenthesis, the
# BETWEEN waiting for its AND) have 0 and are never reduced by an operator.
_PREC = {"OR": 1, "AND": 2, "=": 3, "<>": 3, ">": 4, ">=": 4, "<": 4, "<=": 4}
_BETWEEN_HI = 5  # a BETWEEN with both bounds read: its upper bound is a unary expression
_PREFIX = 6
_POSTFIX = {"IS": 3, "CONTAINS": 4, "STARTSWITH": 4, "ENDSWITH": 4, "BETWEEN": 4, "IN": 4}
_NEGATABLE = ("CONTAINS", "STARTSWITH", "ENDSWITH", "BETWEEN", "IN")
_LITERALS = ("STRING", "INT", "FLOAT")
_BOOL_LITERALS = {"TRUE": True, "FALSE": False}


class _Op:
    __slots__ = ("kind", "negated", "prec", "token")

    def __init__(self, kind: str, prec: int, token: Token, negated: bool = False) -> None:
        self.kind = kind  # an operator, "prefix-", "prefixNOT", "(", "between", "between-hi"
        self.prec = prec
        self.token = token
        self.negated = negated


class _Parser:
    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.build = Builder(expression)
        self.operands: list[Node] = []
        self.ops: list[_Op] = []
        self.tokens: Iterator[Token] = tokenize(expression)
        self.previous: Token | None = None  # the token before the current one, for messages
        self.current: Token | None = None

    def next(self) -> Token:
        """Consume and return the next token."""
        if self.current is not None:
            self.previous = self.current
        token = self.current = next(self.tokens)
        return token

    def error(self, token: Token, message: str, hint: str | None = None) -> Exception:
        """An error pointing at ``token``."""
        return expression_error(self.expression, token.column, message, hint)

    # -- reductions -----------------------------------------------------------------------

    def apply(self, op: _Op) -> None:
        """Build the node of ``op`` from the operands on top of the stack."""
        b, operands, column = self.build, self.operands, op.token.column
        if op.kind == "prefix-":
            operands.append(b.make_neg(operands.pop(), column))
        elif op.kind == "prefixNOT":
            operands.append(b.make_not(operands.pop(), column))
        elif op.kind == "between-hi":
            high, low = operands.pop(), operands.pop()
            operands.append(b.make_between(operands.pop(), low, high, op.negated, column))
        else:
            right, left = operands.pop(), operands.pop()
            if op.kind in ("AND", "OR"):
                operands.append(b.make_logic(op.kind, left, right, column))
            else:
                operands.append(b.make_compare(op.kind, left, right, column))

    def reduce(self, prec: int) -> None:
        """Apply stacked operators that bind at least as tightly as ``prec``."""
        ops = self.ops
        while ops and ops[-1].prec >= prec:
            self.apply(ops.pop())

    def close_group(self, token: Token) -> None:
        """Reduce everything down to the nearest barrier and check that it is the right one."""
        self.reduce(1)
        top = self.ops[-1] if self.ops else None
        if top is not None and top.kind == "between":
            raise self.error(token, "expected AND after the lower bound of BETWEEN", found(token))
        if token.kind == ")":
            if top is None:
                raise self.error(token, "unmatched ')'")
            self.ops.pop()
        elif top is not None:
            raise self.error(top.token, "'(' is never closed", "add the missing ')'")

    # -- operands -------------------------------------------------------------------------

    def operand(self, token: Token) -> bool:
        """Handle ``token`` where a value is expected; True when an operand was completed."""
        kind = token.kind
        if kind == "+":
            return False  # unary plus changes nothing, in RocketMQ too
        if kind == "-":
            self.ops.append(_Op("prefix-", _PREFIX, token))
            return False
        if kind == "NOT":
            self.ops.append(_Op("prefixNOT", _PREFIX, token))
            return False
        if kind == "(":
            self.ops.append(_Op("(", 0, token))
            return False
        if kind in _LITERALS:
            self.operands.append(Const(token.value, token.jtype, token.column))
        elif kind in _BOOL_LITERALS:
            self.operands.append(Const(_BOOL_LITERALS[kind], "B", token.column))
        elif kind == "NULL":
            self.operands.append(Const(None, "N", token.column))
        elif kind == "ID":
            self.operands.append(Prop(token.value, token.column))
        elif self.previous is None:
            raise self.error(token, "expected a condition", found(token))
        else:
            after = describe(self.previous.text)
            raise self.error(token, f"expected a value after {after}", found(token))
        return True

    def string(self, after: Token) -> Token:
        """The string literal that must follow ``after``."""
        token = self.next()
        if token.kind != "STRING":
            raise self.error(
                token,
                f"expected a string in single quotes after {describe(after.text)}",
                found(token),
            )
        return token

    def in_list(self, op: Token) -> list[str]:
        """The parenthesised string list of IN."""
        token = self.next()
        if token.kind != "(":
            raise self.error(token, f"expected '(' after {describe(op.text)}", found(token))
        values: list[str] = []
        while True:
            values.append(self.string(token).value)
            token = self.next()
            if token.kind == ")":
                return values
            if token.kind != ",":
                raise self.error(token, "expected ',' or ')' in the IN list", found(token))

    # -- operators ------------------------------------------------------------------------

    def operator(self, token: Token) -> bool:
        """Handle ``token`` after a complete operand; True when an operand is expected next."""
        kind = token.kind
        prec = _PREC.get(kind) or _POSTFIX.get(kind) or (4 if kind == "NOT" else 0)
        if not prec:
            hint = "expected AND, OR, a comparison or the end of the expression here"
            if self.expression.startswith("--", token.column - 1):
                hint = "a -- comment ends only at a line break"
            raise self.error(token, f"unexpected {token.shown()}", hint)
        self.reduce(prec)
        if self.ops and self.ops[-1].kind == "between":
            if kind != "AND":
                raise self.error(
                    token, "expected AND after the lower bound of BETWEEN", found(token)
                )
            top = self.ops.pop()
            self.ops.append(_Op("between-hi", _BETWEEN_HI, top.token, top.negated))
            return True
        if kind in _PREC:
            self.ops.append(_Op(kind, prec, token))
            return True
        b, operands = self.build, self.operands
        negated = False
        op = token
        if kind == "NOT":
            op = self.next()
            if op.kind not in _NEGATABLE:
                raise self.error(
                    op,
                    "expected CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT",
                    found(op),
                )
            kind, negated = op.kind, True
        if kind == "IS":
            op = self.next()
            if op.kind == "NOT":
                op, negated = self.next(), True
            if op.kind != "NULL":
                raise self.error(op, "expected NULL or NOT NULL after IS", found(op))
            operands.append(b.make_is_null(operands.pop(), negated, token.column))
        elif kind == "BETWEEN":
            self.ops.append(_Op("between", 0, token, negated))
            return True
        elif kind == "IN":
            values = self.in_list(op)
            operands.append(b.make_in(operands.pop(), values, negated, token.column))
        else:
            search = self.string(op).value
            operands.append(b.make_str_match(kind, operands.pop(), search, negated, token.column))
        return False

    def run(self) -> Node:
        """Parse the whole expression."""
        expecting_operand = True
        while True:
            token = self.next()
            if token.kind == "EOF":
                if expecting_operand:
                    self.operand(token)  # raises: a value is missing
                self.close_group(token)
                break
            if expecting_operand:
                expecting_operand = not self.operand(token)
            elif token.kind == ")":
                self.close_group(token)
            else:
                expecting_operand = self.operator(token)
        return self.build.top(self.operands.pop())


def found(token: Token) -> str:
    """The "found ..." part of a message."""
    return f"found {token.shown()}"


def parse(expression: str) -> Node:
    """Parse ``expression`` into a checked tree; raises FilterExpressionError."""
    return _Parser(expression).run()
