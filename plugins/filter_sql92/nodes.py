"""The syntax tree of an SQL92 filter, shaped like RocketMQ's expression classes.

RocketMQ decides what is legal from the *class* of each operand (a constant, a property,
a boolean expression...), so the nodes keep those distinctions: :class:`Const` is
``ConstantExpression`` (TRUE, FALSE and NULL are boolean constants), :class:`Prop` is
``PropertyExpression``, :class:`Neg` is unary minus (never a constant, even on a literal),
and every other node is a ``BooleanExpression``. Parentheses leave no node.

``BETWEEN`` is kept as AND/OR of two comparisons and ``<>``/``IS NOT NULL`` as NOT of ``=``
and ``IS NULL``, exactly as RocketMQ builds them. Each node records ``depth``, the nesting
that evaluation needs once chains of the same AND/OR are flattened (see
:data:`~mqcore.plugins.filter_sql92.source.MAX_DEPTH`).
"""

from __future__ import annotations

from typing import Any

import attrs

from mqcore.plugins.filter_sql92.javatypes import literal_text

__all__ = [
    "BoolCast",
    "Compare",
    "Const",
    "In",
    "IsNull",
    "Logic",
    "Neg",
    "Node",
    "Not",
    "Prop",
    "StrMatch",
    "is_boolean",
    "logic_children",
]


@attrs.frozen(slots=True)
class Const:
    """A literal; ``jtype`` is S, I, L, D, B or N (NULL)."""

    value: Any
    jtype: str
    column: int
    depth: int = 1

    def __str__(self) -> str:
        return literal_text(self.value, self.jtype)


@attrs.frozen(slots=True)
class Prop:
    """A message property (the tag is the property ``TAGS``)."""

    name: str
    column: int
    depth: int = 1

    def __str__(self) -> str:
        return self.name


@attrs.frozen(slots=True)
class Neg:
    """Unary minus, folded: ``value`` is the negated number, or None (``jtype`` N) when the
    operand is not a number, which RocketMQ evaluates to NULL. A condition under the minus
    is kept as ``effect``: RocketMQ still evaluates it, and its evaluation may fail."""

    value: Any
    jtype: str
    column: int
    effect: Node | None = None
    depth: int = 1

    def __str__(self) -> str:
        return literal_text(self.value, self.jtype) if self.jtype != "N" else "-(NULL)"


@attrs.frozen(slots=True)
class BoolCast:
    """A property used as a condition: NULL when missing, else FALSE (it is no Boolean)."""

    prop: Prop
    column: int
    depth: int = 2


@attrs.frozen(slots=True)
class Not:
    """Three-valued NOT."""

    operand: Node
    column: int
    depth: int


@attrs.frozen(slots=True)
class Logic:
    """AND or OR (``op``), evaluated left to right with short-circuit."""

    op: str
    left: Node
    right: Node
    column: int
    depth: int


@attrs.frozen(slots=True)
class Compare:
    """``=``, ``>``, ``>=``, ``<`` or ``<=`` (``op``)."""

    op: str
    left: Node
    right: Node
    column: int
    depth: int


@attrs.frozen(slots=True)
class IsNull:
    """``IS NULL`` (``IS NOT NULL`` is NOT of it)."""

    operand: Node
    column: int
    depth: int


@attrs.frozen(slots=True)
class In:
    """``IN``/``NOT IN`` over string literals; the left side is always a property."""

    prop: Prop
    values: frozenset[str]
    negated: bool
    column: int
    depth: int = 2


@attrs.frozen(slots=True)
class StrMatch:
    """``CONTAINS``, ``STARTSWITH`` or ``ENDSWITH`` (``op``), maybe ``negated``."""

    op: str
    operand: Node
    search: str
    negated: bool
    column: int
    depth: int


Node = Const | Prop | Neg | BoolCast | Not | Logic | Compare | IsNull | In | StrMatch


def is_boolean(node: Node) -> bool:
    """Whether RocketMQ sees ``node`` as a BooleanExpression (TRUE/FALSE/NULL included)."""
    if isinstance(node, Const):
        return node.jtype in ("B", "N")
    return not isinstance(node, (Prop, Neg))


def logic_children(node: Logic) -> list[Node]:
    """The operands of a chain of one operator, left to right, without recursion."""
    out: list[Node] = []
    stack: list[Node] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Logic) and item.op == node.op:
            stack.append(item.right)
            stack.append(item.left)
        else:
            out.append(item)
    return out
