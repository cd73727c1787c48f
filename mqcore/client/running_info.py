"""A push consumer's running information: its answer to GET_CONSUMER_RUNNING_INFO (307).

An operator asks the broker, the broker asks each member of the group over that member's
channel, and the member answers with what only it knows: the queues it owns right now (the
allocation is computed by the clients, never by the broker), what it holds of each, and its
settings. ``mqcore lag`` names each queue's owner from these answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from mqcore.protocol import heartbeat
from mqcore.protocol.admin_bodies import ConsumerRunningInfo, ProcessQueueInfo
from mqcore.protocol.bodies import SubscriptionData
from mqcore.version import __version__

if TYPE_CHECKING:
    from mqcore.client.process_queue import ProcessQueue
    from mqcore.interfaces import OffsetStore
    from mqcore.message import ConsumeFromWhere, MessageModel, MessageQueue

__all__ = ["RunningInfoSource", "consumer_running_info"]

_MIB = 1024 * 1024


class RunningInfoSource(Protocol):
    """The settings of a consumer its running information reports (a push consumer's)."""

    @property
    def group(self) -> str:
        """The consumer group."""
        ...

    @property
    def client_id(self) -> str:
        """The member's client id."""
        ...

    @property
    def message_model(self) -> MessageModel:
        """Clustering or broadcasting."""
        ...

    @property
    def consume_from_where(self) -> ConsumeFromWhere:
        """Where a queue without a committed offset starts."""
        ...

    @property
    def allocate_strategy(self) -> Any:
        """The strategy's registered name, or the strategy object."""
        ...

    @property
    def consume_thread_min(self) -> int:
        """Core threads of the consume pool."""
        ...

    @property
    def pull_batch_size(self) -> int:
        """Messages asked for per pull."""
        ...

    @property
    def consume_message_batch_max_size(self) -> int:
        """Messages handed to the listener at once."""
        ...

    @property
    def offset_store(self) -> OffsetStore | None:
        """Where consumed offsets are recorded (None before start)."""
        ...


def _epoch_ms(monotonic_s: float, now_ms: int, now_mono: float) -> int:
    # ProcessQueue keeps monotonic times; the wire wants wall-clock milliseconds.
    return int(now_ms - (now_mono - monotonic_s) * 1000)


def _queue_info(
    consumer: RunningInfoSource, mq: MessageQueue, pq: ProcessQueue
) -> ProcessQueueInfo:
    now_ms, now_mono = int(time.time() * 1000), time.monotonic()
    store = consumer.offset_store
    commit = store.read_offset(mq) if store is not None else -1
    return ProcessQueueInfo(
        commit_offset=max(commit, 0),
        cached_msg_max_offset=max(pq.queue_offset_max, 0),
        cached_msg_count=pq.msg_count,
        cached_msg_size_in_mib=pq.msg_size // _MIB,
        locked=pq.locked,
        droped=pq.dropped,
        last_pull_timestamp=_epoch_ms(pq.last_pull_time, now_ms, now_mono),
        last_consume_timestamp=_epoch_ms(pq.last_consume_time, now_ms, now_mono),
    )


def consumer_running_info(
    consumer: RunningInfoSource,
    owned: Iterable[tuple[MessageQueue, ProcessQueue]],
    subscriptions: Iterable[heartbeat.SubscriptionData],
    *,
    orderly: bool,
) -> ConsumerRunningInfo:
    """What ``consumer`` holds now and its settings (RocketMQ's property names).

    :param owned: the queues it owns now, each with its process queue.
    :param subscriptions: what it subscribes to.
    :param orderly: whether its listener is orderly.
    """
    strategy = consumer.allocate_strategy
    properties = {
        "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
        "PROP_CONSUMEORDERLY": str(orderly).lower(),
        "PROP_THREADPOOL_CORE_SIZE": str(consumer.consume_thread_min),
        "PROP_CLIENT_VERSION": f"mqcore {__version__}",
        "consumerGroup": consumer.group,
        "clientId": consumer.client_id,
        "messageModel": consumer.message_model.name,
        "consumeFromWhere": consumer.consume_from_where.name,
        "allocateMessageQueueStrategy": strategy if isinstance(strategy, str) else repr(strategy),
        "pullBatchSize": str(consumer.pull_batch_size),
        "consumeMessageBatchMaxSize": str(consumer.consume_message_batch_max_size),
    }
    subscription_set = [
        SubscriptionData(topic=s.topic, sub_string=s.sub_string, expression_type=s.expression_type)
        for s in subscriptions
    ]
    return ConsumerRunningInfo(
        properties=properties,
        subscription_set=sorted(subscription_set, key=lambda s: s.topic),
        mq_table={mq: _queue_info(consumer, mq, pq) for mq, pq in owned},
    )
