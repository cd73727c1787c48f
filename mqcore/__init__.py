"""mqcore: an embeddable, plugin-based message-queue kernel modelled on Apache RocketMQ 4.x."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from mqcore import errors
from mqcore.broker import Broker
from mqcore.client import Producer, PullConsumer, PushConsumer
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

try:
    __version__ = version("mqcore")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "Broker",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "FilterExpressionError",
    "Kernel",
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
    "__version__",
    "errors",
    "hookimpl",
]
