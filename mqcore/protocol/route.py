"""Topic routes: which broker groups serve a topic, their members, and the queues on each.

The shape is RocketMQ's ``TopicRouteData``: a list of broker groups (``BrokerData``: a name
and its members by broker id, 0 being the master) and a list of queue settings per group
(``QueueData``). One embedded broker is a route with one group of one member; replication and
several broker groups use the same shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from mqcore.message import MessageQueue

__all__ = [
    "MASTER_ID",
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_RW",
    "PERM_WRITE",
    "BrokerData",
    "QueueData",
    "TopicRoute",
]

MASTER_ID = 0

# PermName bits, as RocketMQ.
PERM_INHERIT = 0x1
PERM_WRITE = 0x2
PERM_READ = 0x4
PERM_RW = PERM_READ | PERM_WRITE


def _addrs(value: Mapping[Any, str] | Iterable[tuple[Any, str]]) -> tuple[tuple[int, str], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((int(k), str(v)) for k, v in items))


@attrs.frozen
class BrokerData:
    """One broker group: its name, cluster and members (broker id -> address)."""

    broker_name: str
    broker_addrs: tuple[tuple[int, str], ...] = attrs.field(converter=_addrs)
    cluster: str = "DefaultCluster"

    def address(self, broker_id: int = MASTER_ID) -> str | None:
        """The address of member ``broker_id``, or None when the group has none."""
        for bid, addr in self.broker_addrs:
            if bid == broker_id:
                return addr
        return None

    @property
    def master_addr(self) -> str | None:
        """The master's address (None while the group has no master)."""
        return self.address(MASTER_ID)

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON form (``brokerAddrs`` keyed by the id as a string)."""
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(bid): addr for bid, addr in self.broker_addrs},
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BrokerData:
        """Parse RocketMQ's JSON form."""
        return cls(
            broker_name=str(obj["brokerName"]),
            broker_addrs=obj.get("brokerAddrs") or {},
            cluster=str(obj.get("cluster", "DefaultCluster")),
        )


@attrs.frozen
class QueueData:
    """A topic's queues on one broker group."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_RW
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON form."""
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicSysFlag": self.topic_sys_flag,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> QueueData:
        """Parse RocketMQ's JSON form."""
        return cls(
            broker_name=str(obj["brokerName"]),
            read_queue_nums=int(obj["readQueueNums"]),
            write_queue_nums=int(obj["writeQueueNums"]),
            perm=int(obj.get("perm", PERM_RW)),
            topic_sys_flag=int(obj.get("topicSysFlag", 0)),
        )


def _tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(items)


@attrs.frozen
class TopicRoute:
    """Where a topic's queues live: every broker group that serves it, with member ids."""

    topic: str
    broker_datas: tuple[BrokerData, ...] = attrs.field(converter=_tuple)
    queue_datas: tuple[QueueData, ...] = attrs.field(converter=_tuple)
    order_topic_conf: str | None = None

    _write: tuple[MessageQueue, ...] = attrs.field(init=False, eq=False, repr=False)
    _read: tuple[MessageQueue, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        # Built once per route: producers ask for the queues on every send. As RocketMQ's
        # topicRouteData2TopicPublishInfo: groups in name order, writable ones with a master.
        masters = {b.broker_name for b in self.broker_datas if b.master_addr}
        write: list[MessageQueue] = []
        read: list[MessageQueue] = []
        for qd in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if qd.perm & PERM_WRITE and qd.broker_name in masters:
                write.extend(
                    MessageQueue(self.topic, qd.broker_name, i) for i in range(qd.write_queue_nums)
                )
            if qd.perm & PERM_READ:
                read.extend(
                    MessageQueue(self.topic, qd.broker_name, i) for i in range(qd.read_queue_nums)
                )
        object.__setattr__(self, "_write", tuple(write))
        object.__setattr__(self, "_read", tuple(read))

    @classmethod
    def single(
        cls,
        topic: str,
        broker_name: str,
        broker_addr: str,
        read_queue_nums: int,
        write_queue_nums: int,
        perm: int = PERM_RW,
        cluster: str = "DefaultCluster",
    ) -> TopicRoute:
        """The route of a topic served by one broker group of one member (its master)."""
        return cls(
            topic,
            [BrokerData(broker_name, {MASTER_ID: broker_addr}, cluster)],
            [QueueData(broker_name, read_queue_nums, write_queue_nums, perm)],
        )

    def write_queues(self) -> list[MessageQueue]:
        """Queues producers send to (over every writable group with a master)."""
        return list(self._write)

    def read_queues(self) -> list[MessageQueue]:
        """Queues consumers pull from."""
        return list(self._read)

    def broker(self, broker_name: str) -> BrokerData | None:
        """The group named ``broker_name``, if it serves this topic."""
        for b in self.broker_datas:
            if b.broker_name == broker_name:
                return b
        return None

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's ``TopicRouteData`` JSON object."""
        out: dict[str, Any] = {
            "queueDatas": [q.to_json() for q in self.queue_datas],
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": {},
        }
        if self.order_topic_conf is not None:
            out["orderTopicConf"] = self.order_topic_conf
        return out

    def encode(self) -> bytes:
        """The JSON body of a GET_ROUTEINFO_BY_TOPIC response."""
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, topic: str, obj: Mapping[str, Any]) -> TopicRoute:
        """Parse RocketMQ's ``TopicRouteData`` JSON object."""
        return cls(
            topic,
            [BrokerData.from_json(b) for b in obj.get("brokerDatas") or ()],
            [QueueData.from_json(q) for q in obj.get("queueDatas") or ()],
            obj.get("orderTopicConf"),
        )
