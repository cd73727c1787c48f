"""Clients of the broker: Producer, TransactionProducer, PullConsumer, PushConsumer,
SimpleConsumer."""

from __future__ import annotations

from mqcore.client.consume_service import ConsumeConcurrentlyContext, ConsumeOrderlyContext
from mqcore.client.producer import MessageQueueSelector, Producer
from mqcore.client.pull_consumer import PullConsumer
from mqcore.client.push_consumer import PushConsumer
from mqcore.client.simple_consumer import FilterExpression, ReceivedMessage, SimpleConsumer
from mqcore.client.transaction_producer import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "FilterExpression",
    "LocalTransactionState",
    "MessageQueueSelector",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "ReceivedMessage",
    "SimpleConsumer",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
]
