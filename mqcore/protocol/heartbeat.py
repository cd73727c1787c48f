"""What a client reports in its heartbeat: its consumer groups and their subscriptions."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from mqcore.message import ConsumeFromWhere, MessageModel

__all__ = ["ConsumerData", "SubscriptionData"]


@attrs.frozen(kw_only=True)
class SubscriptionData:
    """One topic a consumer subscribes to, with its filter expression."""

    topic: str
    sub_string: str = "*"
    expression_type: str = "TAG"


def _subs(items: Iterable[SubscriptionData]) -> tuple[SubscriptionData, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class ConsumerData:
    """What a consumer reports for one group in its heartbeat."""

    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"  # push; pull consumers say CONSUME_ACTIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscriptions: tuple[SubscriptionData, ...] = attrs.field(default=(), converter=_subs)
