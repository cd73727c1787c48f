"""A push consumer's running information: its answer to GET_CONSUMER_RUNNING_INFO (307).

An operator asks the broker, the broker asks each member of the group over that member's
channel, and the member answers with what only it knows: the queues it owns right now (the
allocation is computed by the clients, never by the broker), what it holds of each, and its
settings. ``mqcore lag`` names each queue's owner from these answers.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import mqcore
from mqcore.protocol.admin_bodies import ConsumerRunningInfo, ProcessQueueInfo
from mqcore.protocol.bodies import SubscriptionData

if TYPE_CHECKING:
    from mqcore.client.process_queue import ProcessQueue
    from mqcore.client.push_consumer import PushConsumer
    from mqcore.message import MessageQueue

__all__ = ["consumer_running_info"]

_MIB = 1024 * 1024


def _epoch_ms(monotonic_s: float, now_ms: int, now_mono: float) -> int:
    # ProcessQueue keeps monotonic times; the wire wants wall-clock milliseconds.
    return int(now_ms - (now_mono - monotonic_s) * 1000)


def _queue_info(consumer: PushConsumer, mq: MessageQueue, pq: ProcessQueue) -> ProcessQueueInfo:
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


def consumer_running_info(consumer: PushConsumer) -> ConsumerRunningInfo:
    """What ``consumer`` owns and holds now, and its settings (RocketMQ's property names)."""
    with consumer._table_lock:
        owned = [(mq, pq) for mq, (pq, _) in consumer._table.items() if not pq.dropped]
    strategy = consumer.allocate_strategy
    properties = {
        "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
        "PROP_CONSUMEORDERLY": str(consumer._orderly).lower(),
        "PROP_THREADPOOL_CORE_SIZE": str(consumer.consume_thread_min),
        "PROP_CLIENT_VERSION": f"mqcore {mqcore.__version__}",
        "consumerGroup": consumer.group,
        "clientId": consumer.client_id,
        "messageModel": consumer.message_model.name,
        "consumeFromWhere": consumer.consume_from_where.name,
        "allocateMessageQueueStrategy": strategy if isinstance(strategy, str) else repr(strategy),
        "pullBatchSize": str(consumer.pull_batch_size),
        "consumeMessageBatchMaxSize": str(consumer.consume_message_batch_max_size),
    }
    subscriptions = [
        SubscriptionData(topic=s.topic, sub_string=s.sub_string, expression_type=s.expression_type)
        for s in consumer._subscriptions.values()
    ]
    return ConsumerRunningInfo(
        properties=properties,
        subscription_set=sorted(subscriptions, key=lambda s: s.topic),
        mq_table={mq: _queue_info(consumer, mq, pq) for mq, pq in owned},
    )
