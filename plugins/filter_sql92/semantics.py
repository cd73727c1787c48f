"""RocketMQ's construction-time rules: which operands each operator accepts.

RocketMQ checks operands while it builds the expression (``ComparisonExpression.create*``,
``SelectorParser.asBooleanExpression``); an expression that breaks a rule never compiles.
:class:`Builder` applies the same rules, node by node, and reports the column:

- ``=`` and ``<>`` refuse the NULL literal, and a TRUE/FALSE literal compared with another
  kind of literal;
- ``>``, ``>=``, ``<``, ``<=`` and BETWEEN take only numeric literals, properties and negated
  values: strings, booleans, NULL and conditions are refused;
- BETWEEN with two literal bounds needs the lower one first (NOT BETWEEN does not check);
- IN needs a property on its left;
- AND, OR, NOT and the whole expression need conditions; a property becomes one (it is
  FALSE, or NULL when missing), a string, a number or a negated value does not.
"""

from __future__ import annotations

from mqcore.errors import FilterEvaluationError
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
    is_boolean,
)
from mqcore.plugins.filter_sql92.source import MAX_DEPTH, describe, expression_error

__all__ = ["Builder"]

_NUMBER = ("I", "L", "D")


def _what(node: Node) -> str:
    """An operand as messages name it."""
    if isinstance(node, Const):
        if node.jtype == "S":
            return f"the string {node}"
        if node.jtype in _NUMBER:
            return f"the number {node}"
        return str(node)
    if isinstance(node, Prop):
        return f"the property {node.name}"
    if isinstance(node, Neg):
        return "a negated value"
    return "a condition"


class Builder:
    """Creates nodes for one expression, applying RocketMQ's rules with positions."""

    def __init__(self, expression: str) -> None:
        self.expression = expression

    def _error(self, column: int, message: str, hint: str | None = None) -> Exception:
        return expression_error(self.expression, column, message, hint)

    def _deep(self, node: Node) -> Node:
        if node.depth > MAX_DEPTH:
            raise self._error(
                node.column,
                f"the expression nests more than {MAX_DEPTH} levels deep",
                "split it or remove redundant nesting",
            )
        return node

    # -- conditions ---------------------------------------------------------------------

    def as_boolean(self, node: Node, context: str) -> Node:
        """``asBooleanExpression``: a condition as it is, a property cast, else an error."""
        if isinstance(node, Prop):
            return BoolCast(node, node.column)
        if is_boolean(node):
            return node
        raise self._error(
            node.column,
            f"{context} needs a condition, found {_what(node)}",
            "compare it with something, e.g. a = 5",
        )

    def top(self, node: Node) -> Node:
        """The whole expression, which must be a condition."""
        return self.as_boolean(node, "the expression")

    def make_not(self, operand: Node, column: int) -> Node:
        """``NOT operand``; NOT NOT x is x (three-valued logic keeps it exact)."""
        operand = self.as_boolean(operand, "NOT")
        if isinstance(operand, Not):
            return operand.operand
        return self._deep(Not(operand, column, operand.depth + 1))

    def make_logic(self, op: str, left: Node, right: Node, column: int) -> Node:
        """``left AND right`` or ``left OR right``."""
        left = self.as_boolean(left, op)
        right = self.as_boolean(right, op)

        def cost(child: Node) -> int:
            """Nesting added by ``child``: none for a chain of the same operator."""
            same = isinstance(child, Logic) and child.op == op
            return child.depth if same else child.depth + 1

        return self._deep(Logic(op, left, right, column, max(cost(left), cost(right))))

    # -- values -------------------------------------------------------------------------

    def make_neg(self, operand: Node, column: int) -> Node:
        """Unary minus, folded at once: only numbers negate, anything else gives NULL."""
        if isinstance(operand, (Const, Neg)) and operand.jtype in _NUMBER:
            return Neg(-operand.value, operand.jtype, column)
        if isinstance(operand, Neg):
            effect = operand.effect
        elif isinstance(operand, (Const, Prop)):
            effect = None  # reading a literal or a property cannot fail
        else:
            effect = operand
        if effect is None:
            return Neg(None, "N", column)
        return self._deep(Neg(None, "N", column, effect, effect.depth + 1))

    # -- comparisons --------------------------------------------------------------------

    def _check_equal(self, left: Node, right: Node, op: str, column: int) -> None:
        for side in (left, right):
            if isinstance(side, Const) and side.jtype == "N":
                use = "IS NOT NULL" if op == "<>" else "IS NULL"
                raise self._error(
                    side.column, f"NULL cannot be compared with {describe(op)}", f"use {use}"
                )
        if (
            isinstance(left, Const)
            and isinstance(right, Const)
            and left.jtype == "B"
            and right.jtype != "B"
        ):
            raise self._error(column, f"{left} cannot be compared with {_what(right)}")

    def _check_ordering(self, node: Node, op: str, side: str) -> None:
        if isinstance(node, Const):
            if node.jtype in _NUMBER:
                return
        elif not is_boolean(node):
            return
        raise self._error(
            node.column,
            f"{describe(op)} compares numbers, but its {side} is {_what(node)}",
            "only = and <> compare strings and booleans",
        )

    def make_compare(self, op: str, left: Node, right: Node, column: int) -> Node:
        """``=``, ``<>``, ``>``, ``>=``, ``<`` or ``<=``."""
        if op in ("=", "<>"):
            self._check_equal(left, right, op, column)
            node = self._deep(Compare("=", left, right, column, max(left.depth, right.depth) + 1))
            return self.make_not(node, column) if op == "<>" else node
        self._check_ordering(left, op, "left operand")
        self._check_ordering(right, op, "right operand")
        return self._deep(Compare(op, left, right, column, max(left.depth, right.depth) + 1))

    def make_is_null(self, operand: Node, negated: bool, column: int) -> Node:
        """``IS NULL`` / ``IS NOT NULL``: any operand, never an error."""
        node = self._deep(IsNull(operand, column, operand.depth + 1))
        return self.make_not(node, column) if negated else node

    def make_between(self, value: Node, low: Node, high: Node, negated: bool, column: int) -> Node:
        """``BETWEEN``: two comparisons joined by AND (NOT BETWEEN: the opposite, by OR)."""
        op = "NOT BETWEEN" if negated else "BETWEEN"
        self._check_ordering(value, op, "left operand")
        self._check_ordering(low, op, "lower bound")
        self._check_ordering(high, op, "upper bound")
        if negated:
            return self.make_logic(
                "OR",
                self.make_compare("<", value, low, column),
                self.make_compare(">", value, high, column),
                column,
            )
        if isinstance(low, Const) and isinstance(high, Const):
            try:
                wrong = javatypes.compare(high.value, high.jtype, low.value, low.jtype) < 0
            except FilterEvaluationError:  # cannot happen for two numbers; kept for safety
                wrong = True
            if wrong:
                raise self._error(
                    low.column,
                    f"BETWEEN bounds are in the wrong order: {low} is greater than {high}",
                    "write the lower bound first",
                )
        return self.make_logic(
            "AND",
            self.make_compare(">=", value, low, column),
            self.make_compare("<=", value, high, column),
            column,
        )

    def make_in(self, left: Node, values: list[str], negated: bool, column: int) -> Node:
        """``IN``/``NOT IN``: the left side must be a property."""
        if not isinstance(left, Prop):
            op = "NOT IN" if negated else "IN"
            raise self._error(
                left.column, f"{op} needs a property on its left, found {_what(left)}"
            )
        return In(left, frozenset(values), negated, column)

    def make_str_match(
        self, op: str, operand: Node, search: str, negated: bool, column: int
    ) -> Node:
        """``CONTAINS``, ``STARTSWITH``, ``ENDSWITH`` and their NOT forms: any operand."""
        return self._deep(StrMatch(op, operand, search, negated, column, operand.depth + 1))
