"""Clients of the broker: Producer, PullConsumer, PushConsumer."""

from __future__ import annotations

from mqcore.client.consume_service import ConsumeConcurrentlyContext, ConsumeOrderlyContext
from mqcore.client.producer import MessageQueueSelector, Producer
from mqcore.client.pull_consumer import PullConsumer
from mqcore.client.push_consumer import PushConsumer

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "MessageQueueSelector",
    "Producer",
    "PullConsumer",
    "PushConsumer",
]
