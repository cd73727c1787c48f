"""mqcore: an embeddable, plugin-based message-queue kernel modelled on Apache RocketMQ 4.x."""

from __future__ import annotations

from mqcore import errors
from mqcore.broker import Broker
from mqcore.client import (
    FilterExpression,
    LocalTransactionState,
    Producer,
    PullConsumer,
    PushConsumer,
    SimpleConsumer,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from mqcore.errors import (
    FilterExpressionError,
    MQError,
    NotRegisteredError,
    PluginLoadError,
)
from mqcore.hookspecs import hookimpl
from mqcore.kernel import Kernel
from mqcore.message import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)
from mqcore.version import __version__

__all__ = [
    "Broker",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "FilterExpression",
    "FilterExpressionError",
    "Kernel",
    "LocalTransactionState",
    "MQError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "NotRegisteredError",
    "PluginLoadError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "__version__",
    "errors",
    "hookimpl",
]
