"""Which member of its group a reader is sent to next: the broker's pull policy (seed 001).

A consumer far behind reads old messages the master no longer holds in memory; serving it
from the master would evict what every up-to-date consumer needs, so the master suggests the
slave for its next pulls, and the slave suggests the master again once the reader is close
to the end. Replication copies the log; this policy is the broker's, applied to each pull.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from mqcore.config import BrokerConfig
from mqcore.record.layout import POS_PHYSICAL_OFFSET
from mqcore.storecaps import CommitLogBounds

__all__ = ["SLAVE_READ_BROKER_ID", "read_from_slave"]

_OFFSET = struct.Struct(">q")

#: the member a lagging consumer is sent to (RocketMQ's whichBrokerWhenConsumeSlowly)
SLAVE_READ_BROKER_ID = 1


def read_from_slave(
    store: object, config: BrokerConfig, records: Sequence[bytes | bytearray | memoryview]
) -> bool:
    """Whether the reader of ``records`` (a pull's answer, not empty) lags so far behind the
    end of the commit log (more than ``access_message_in_memory_max_ratio`` percent of
    ``total_physical_memory_bytes``) that its next pulls should go to the slave.

    The lag is measured from the last record pulled, as RocketMQ's getMessage measures it
    from the last consume-queue unit it read. A store without one commit log
    (:class:`~mqcore.storecaps.CommitLogBounds`) never sends a reader away.
    """
    if not isinstance(store, CommitLogBounds):
        return False
    pulled = _OFFSET.unpack_from(records[-1], POS_PHYSICAL_OFFSET)[0]
    memory = config.total_physical_memory_bytes * config.access_message_in_memory_max_ratio / 100
    return bool(store.commitlog_max_offset() - pulled > memory)
