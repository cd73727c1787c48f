"""The Settings the endpoint answers a client's own with (``GrpcClientSettingsManager``).

A producer is told the proxy's retry policy (3 attempts, exponential backoff from 10 ms to
1 s), the largest body the broker takes, and that message types are checked. A consumer is
told the receive batch size (32), the long-polling timeout (20 s), whether its group is FIFO
and its retry policy: ``max_reconsume_times`` + 1 attempts, spaced as RocketMQ's delay levels.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import duration_pb2

from mqcore.broker import Broker
from mqcore.grpc.pb import definition

__all__ = ["LONG_POLLING_TIMEOUT_MS", "RECEIVE_BATCH_SIZE", "merged_settings"]

#: The proxy's grpcClientConsumerLongPollingBatchSize and MaxLongPollingTimeoutMillis.
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_MS = 20_000
#: grpcClientProducerMaxAttempts and its backoff (initial, max in ms; multiplier).
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF = (10, 1000, 2)
#: RocketMQ's customized retry policy: the 18 delay levels (ms), from the second on.
RETRY_DELAYS_MS = tuple(
    s * 1000
    for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
)


def _duration(ms: int) -> Any:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def merged_settings(raw: Any, broker: Broker, fifo: bool = False) -> Any:
    """``raw`` (a client's Settings) completed with the broker's side, as the proxy does."""
    out = definition.Settings()
    out.CopyFrom(raw)
    if raw.HasField("publishing"):
        initial, most, multiplier = PRODUCER_BACKOFF
        out.backoff_policy.Clear()
        out.backoff_policy.max_attempts = PRODUCER_MAX_ATTEMPTS
        out.backoff_policy.exponential_backoff.CopyFrom(
            definition.ExponentialBackoff(
                initial=_duration(initial), max=_duration(most), multiplier=multiplier
            )
        )
        out.publishing.validate_message_type = True
        out.publishing.max_body_size = broker.config.max_message_size
    elif raw.HasField("subscription"):
        out.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
        out.subscription.long_polling_timeout.CopyFrom(_duration(LONG_POLLING_TIMEOUT_MS))
        out.subscription.fifo = fifo
        out.backoff_policy.Clear()
        out.backoff_policy.max_attempts = broker.config.max_reconsume_times + 1
        out.backoff_policy.customized_backoff.CopyFrom(
            definition.CustomizedBackoff(next=[_duration(ms) for ms in RETRY_DELAYS_MS])
        )
    out.metric.CopyFrom(definition.Metric(on=False))
    return out
