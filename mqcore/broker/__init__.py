"""The embedded broker: topics, send, long-polling pull, groups, offsets, send-back, locks."""

from __future__ import annotations

from mqcore.broker.broker import Broker, PullResponse, TopicRoute
from mqcore.broker.clients import ConsumerData, SubscriptionData
from mqcore.broker.codes import RequestCode, ResponseCode
from mqcore.broker.topics import TopicConfig

__all__ = [
    "Broker",
    "ConsumerData",
    "PullResponse",
    "RequestCode",
    "ResponseCode",
    "SubscriptionData",
    "TopicConfig",
    "TopicRoute",
]
