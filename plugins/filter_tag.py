"""The TAG message filter: ``*`` or ``TagA || TagB``, as RocketMQ subscribes by tag.

RocketMQ (``FilterAPI.buildSubscriptionData``) treats an empty expression and exactly
``*`` as "everything"; anything else is split on ``||``, each part trimmed, empty parts
dropped. It then filters twice:

- the broker compares the tags hash code kept in each consume-queue unit (Java's
  ``String.hashCode`` of the tag) with the hash codes of the subscribed tags
  (:meth:`TagFilter.matches_tags_code`); it never looks at the tag string again;
- the client keeps a message only when its tag is one of the subscribed tags, compared
  exactly and case-sensitively, so a hash collision cannot leak through
  (:meth:`TagFilter.matches`); a message without a tag never matches.

An expression that leaves no tag at all (``"||"``, blanks) matches nothing: the broker
finds no code to match and delivers nothing, so :meth:`TagFilter.matches` says the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mqcore.codec import string_hash_code
from mqcore.errors import FilterExpressionError
from mqcore.hookspecs import RegisterFilters, hookimpl

__all__ = ["SUB_ALL", "TagFilter", "mqcore_register_filters"]

SUB_ALL = "*"
_SEPARATOR = "||"


def _int32(code: int) -> int:
    """``Long.intValue()``: the consume queue holds 8 bytes, the codes compare as ints."""
    code &= 0xFFFFFFFF
    return code - (1 << 32) if code & 0x80000000 else code


class TagFilter:
    """A compiled TAG expression; build one with ``Kernel().filter("TAG", text)``."""

    expression_type = "TAG"
    uses_properties = False

    __slots__ = ("codes", "expression", "match_all", "tags")

    def __init__(self, expression: str | None) -> None:
        if expression is not None and not isinstance(expression, str):
            raise FilterExpressionError(
                f"a TAG filter needs a string such as 'TagA || TagB', "
                f"got a {type(expression).__name__}",
            )
        self.match_all = not expression or expression == SUB_ALL
        #: the expression as RocketMQ keeps it: "*" for "everything"
        self.expression: str = SUB_ALL if self.match_all else str(expression)
        tags: dict[str, None] = {}
        if not self.match_all:
            for part in self.expression.split(_SEPARATOR):
                tag = part.strip()
                if tag:
                    tags[tag] = None
        #: the subscribed tags
        self.tags: frozenset[str] = frozenset(tags)
        #: their hash codes, as the consume queue stores them
        self.codes: frozenset[int] = frozenset(string_hash_code(tag) for tag in tags)

    def matches(self, message: Any) -> bool:
        """Whether the tag of ``message`` (Message or MessageExt) is subscribed; never raises."""
        if self.match_all:
            return True
        try:
            return message.tags in self.tags
        except Exception:  # an unreadable record matches nothing, it does not raise
            return False

    def matches_tags_code(self, tags_code: int) -> bool:
        """Consume-queue stage: is ``tags_code`` the hash code of a subscribed tag?"""
        return self.match_all or _int32(tags_code) in self.codes

    def matches_properties(self, properties: Mapping[str, str]) -> bool:
        """Commit-log stage: RocketMQ's broker does not re-check tags there, so True."""
        return True

    def __repr__(self) -> str:
        return f"TagFilter({self.expression!r})"


@hookimpl(trylast=True)
def mqcore_register_filters(register: RegisterFilters) -> None:
    """Register the ``TAG`` filter."""
    register("TAG", TagFilter)
