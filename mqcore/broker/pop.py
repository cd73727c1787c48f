"""Pop consumption in the broker: checkpoints, invisibility, acks (RocketMQ 5's
``PopMessageProcessor``, ``AckMessageProcessor``, ``ChangeInvisibleTimeProcessor``).

A pop reads messages of a topic's queues for a group and makes them *invisible*: the group's
offset moves past them at once, and a **checkpoint** (``PopCheckPoint``, tag ``ck``) naming
them is appended to the revive topic ``rmq_sys_REVIVE_LOG_<cluster>`` before the answer
leaves. An ack appends an ``AckMsg`` (tag ``ack``, ``bAck`` for a batch) there. What is still
unacked when the invisible time is over is revived by :mod:`mqcore.broker.pop_revive`: copied
to the group's pop retry topic ``%RETRY%<group>_<topic>`` with one more delivery attempt, or
to ``%DLQ%<group>`` past the group's maximum. All of it is on disk in the revive topic, so a
restarted broker rebuilds the same state (:meth:`PopService.recover`).

An **orderly** pop (reviveQid 999) never copies: a queue with invisible, unacked messages of
the group delivers nothing more; when their time is over, the same messages come again from
the first unacked one, with their attempt counted up.
"""

from __future__ import annotations

import heapq
import json
import random
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol

import attrs

from mqcore.errors import BrokerError, InvalidArgumentError
from mqcore.logs import get_logger
from mqcore.message import Message, MessageExt, system_message
from mqcore.protocol import pop as wire
from mqcore.protocol.codes import ResponseCode
from mqcore.protocol.names import RETRY_GROUP_TOPIC_PREFIX, validate_group
from mqcore.protocol.pop import PopResult
from mqcore.store import PutResult

__all__ = ["CheckPoint", "PopHost", "PopResult", "PopService"]

log = get_logger(__name__)

MAX_POP_NUMS = 32  # RocketMQ refuses a pop of more (INVALID_PARAMETER)
# A pop whose poll would end this long after the client gave up is refused (isTimeoutTooMuch).
POLL_LATE_MS = 500
# Ack kinds, kept in an AckMsg's "k" field (RocketMQ's readers ignore it): an application's
# ack, the old checkpoint's release by a change of invisible time, a revive's settlement.
ACKED, MOVED, REVIVED = "a", "m", "r"


class PopHost(Protocol):
    """What pop consumption uses of its broker (a :class:`~mqcore.broker.Broker`)."""

    config: Any
    store: Any
    topics: Any
    offsets: Any
    consumers: Any
    waiters: Any
    pop_revive: Any

    @property
    def closed(self) -> bool:
        """True once the broker is closed."""
        ...

    @property
    def is_slave(self) -> bool:
        """True for a slave (it takes no pops: they write)."""
        ...

    def _check_open(self) -> None: ...

    def _message_filter(self, sub_expression: str | None, expression_type: str) -> Any: ...

    def _put(
        self,
        topic: str,
        queue_id: int,
        messages: Sequence[Message],
        *,
        born_timestamp: int | None = None,
        born_host: str | None = None,
        reconsume_times: int = 0,
        sys_flag: int = 0,
    ) -> list[PutResult]: ...


def now_ms() -> int:
    """Wall-clock milliseconds (pop times are wall-clock, as in RocketMQ's handles)."""
    return int(time.time() * 1000)


@attrs.define(eq=False)
class CheckPoint:
    """The messages one pop took from one queue, invisible until ``deadline``."""

    group: str
    topic: str  # where the messages are stored (the topic, or its pop retry topic)
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    broker_name: str
    offsets: list[int]
    pending: set[int] = attrs.field(factory=set)
    moved: set[int] = attrs.field(factory=set)
    revive_offset: int = -1
    revive_queue: int = 0  # the revive queue it is written in (an orderly one's too)

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        """What an ack names: group, stored topic, queue, start offset, pop time."""
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def deadline(self) -> int:
        """When its messages become visible again (ms)."""
        return self.pop_time + self.invisible_time

    @property
    def order(self) -> bool:
        """True for an orderly pop's checkpoint."""
        return self.revive_qid == wire.POP_ORDER_REVIVE_QUEUE

    def to_json(self) -> bytes:
        """RocketMQ's PopCheckPoint JSON (``d``: each offset's distance from ``so``)."""
        return json.dumps(
            {
                "so": self.start_offset,
                "pt": self.pop_time,
                "it": self.invisible_time,
                "n": len(self.offsets),
                "q": self.queue_id,
                "t": self.topic,
                "c": self.group,
                "bn": self.broker_name,
                "d": [o - self.start_offset for o in self.offsets],
                "rq": self.revive_qid,
            }
        ).encode()

    @classmethod
    def from_json(cls, body: bytes, revive_queue: int, revive_offset: int) -> CheckPoint:
        """A checkpoint read back from the revive topic."""
        d = json.loads(body)
        so = int(d["so"])
        offsets = [so + int(x) for x in d.get("d") or range(int(d.get("n", 0)))]
        ck = cls(
            str(d["c"]),
            str(d["t"]),
            int(d["q"]),
            so,
            int(d["pt"]),
            int(d["it"]),
            int(d.get("rq", revive_queue)),
            str(d.get("bn", "")),
            offsets,
            set(offsets),
            revive_offset=revive_offset,
            revive_queue=revive_queue,
        )
        return ck


def _handle_error(text: str, code: int = ResponseCode.NO_MESSAGE) -> wire.ReceiptHandleError:
    return wire.ReceiptHandleError(text, code=code)


class PopService:
    """A broker's pop state: live checkpoints, pop offsets, orderly queues.

    Thread-safe; one lock guards the tables (a pop, an ack and a revive each hold it for one
    read or append of the store).
    """

    def __init__(self, broker: PopHost) -> None:
        self.broker = broker
        cfg = broker.config
        self.revive_topic = wire.revive_topic(cfg.broker_cluster_name)
        self.check_settings(cfg)
        self.revive_queue_num = cfg.revive_queue_num
        self._lock = threading.RLock()
        self._cks: dict[tuple[str, str, int, int, int], CheckPoint] = {}
        self._due: list[tuple[int, int, tuple[str, str, int, int, int]]] = []
        self._seq = 0
        # (group, stored topic, queue) -> the next offset to pop (unordered pops)
        self._offsets: dict[tuple[str, str, int], int] = {}
        # orderly: acked offsets above the group's committed offset, deliveries per offset
        self._order_acked: dict[tuple[str, str, int], set[int]] = {}
        self._order_counts: dict[tuple[str, str, int, int], int] = {}
        self._pop_groups: set[str] = set()

    @staticmethod
    def check_settings(cfg: Any) -> None:
        """Refuse revive settings below 1 (before the broker opens anything)."""
        if cfg.revive_queue_num < 1 or cfg.revive_interval_ms < 1:
            raise InvalidArgumentError(
                f"revive_queue_num={cfg.revive_queue_num} and revive_interval_ms="
                f"{cfg.revive_interval_ms} must be at least 1 (RocketMQ: 8 queues, 1000 ms)"
            )

    # -- names and keys ---------------------------------------------------------------------------

    @staticmethod
    def unblock_key(group: str, topic: str) -> Hashable:
        """The waiters key an orderly queue's release is notified on."""
        return ("%POP_ORDER%", group, topic)

    def watch_keys(self, group: str, topic: str, queue_id: int) -> list[Hashable]:
        """The waiters keys a held pop of ``topic`` waits on."""
        cfg = self.broker.topics.get(topic)
        n = cfg.read_queue_nums if cfg is not None else 0
        queues = range(n) if queue_id < 0 else [queue_id]
        keys: list[Hashable] = [(topic, q) for q in queues]
        keys.append((wire.pop_retry_topic(topic, group), 0))
        keys.append(self.unblock_key(group, topic))
        return keys

    @property
    def pop_groups(self) -> frozenset[str] | set[str]:
        """The groups that pop on this broker (read-only: a pull of one is refused)."""
        return self._pop_groups

    # -- checks -----------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        self.broker._check_open()
        if self.broker.is_slave:
            raise BrokerError(
                f"broker {self.broker.config.broker_name} is a SLAVE: pops, acks and changes "
                "of invisible time write checkpoints; send them to its master",
                code=ResponseCode.SERVICE_NOT_AVAILABLE,
            )

    def _check_group(self, group: str) -> None:
        validate_group(group)
        data = self.broker.consumers.group_data(group)
        if data is not None and group not in self._pop_groups:
            raise BrokerError(
                f"group {group} consumes by pulling (it has registered consumers); a group "
                "uses pop or classic consumption, not both: pop with another group",
                code=ResponseCode.NO_PERMISSION,
            )

    @staticmethod
    def check_invisible_time(invisible_time: int) -> None:
        """Refuse an invisible time outside 1 s .. 12 h (INVALID_PARAMETER)."""
        if not wire.MIN_INVISIBLE_TIME_MS <= invisible_time <= wire.MAX_INVISIBLE_TIME_MS:
            raise BrokerError(
                f"invisible time {invisible_time} ms is out of range: give "
                f"{wire.MIN_INVISIBLE_TIME_MS} ms to {wire.MAX_INVISIBLE_TIME_MS} ms (12 h)",
                code=ResponseCode.INVALID_PARAMETER,
            )

    # -- pop --------------------------------------------------------------------------------------

    def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_msg_nums: int,
        invisible_time: int,
        *,
        expression: str | None = "*",
        expression_type: str = "TAG",
        order: bool = False,
        init_mode: int = wire.INIT_MODE_MAX,
    ) -> PopResult:
        """Take up to ``max_msg_nums`` visible messages of ``topic`` for ``group`` (every
        queue when ``queue_id`` is -1, the pop retry topic first) and make them invisible
        for ``invisible_time`` ms. Answers at once: POLLING_TIMEOUT when nothing is there.
        """
        broker = self.broker
        self._check_writable()
        self._check_group(group)
        cfg = broker.topics.require(topic, read=True)
        if not -1 <= queue_id < cfg.read_queue_nums:
            raise BrokerError(
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{cfg.read_queue_nums}]",
                code=ResponseCode.INVALID_PARAMETER,
            )
        if not 0 < max_msg_nums <= MAX_POP_NUMS:
            raise BrokerError(
                f"pop of {max_msg_nums} messages: ask for 1 to {MAX_POP_NUMS}",
                code=ResponseCode.INVALID_PARAMETER,
            )
        self.check_invisible_time(invisible_time)
        flt = broker._message_filter(expression, expression_type)
        queues = list(range(cfg.read_queue_nums)) if queue_id < 0 else [queue_id]
        if len(queues) > 1:
            start = random.randrange(len(queues))
            queues = queues[start:] + queues[:start]
        sources: list[tuple[str, int]] = []
        retry = wire.pop_retry_topic(topic, group)
        if not order and broker.topics.get(retry) is not None:
            sources.append((retry, 0))
        sources.extend((topic, q) for q in queues)
        revive_qid = (
            wire.POP_ORDER_REVIVE_QUEUE if order else random.randrange(self.revive_queue_num)
        )
        with self._lock:
            self._pop_groups.add(group)
            pop_time = now_ms()
            records: list[bytes] = []
            starts: list[tuple[str, int, int]] = []
            offsets_info: list[tuple[str, int, list[int]]] = []
            counts_info: list[tuple[str, object, int]] = []
            rest = 0
            for src_topic, q in sources:
                want = max_msg_nums - len(records)
                if want <= 0:
                    rest += self._rest(group, src_topic, q, init_mode)
                    continue
                got, counts = (
                    self._read_orderly(group, src_topic, q, want, flt, pop_time, init_mode)
                    if order
                    else (self._read(group, src_topic, q, want, flt, init_mode), [])
                )
                rest += self._rest(group, src_topic, q, init_mode)
                if not got:
                    continue
                offs = [MessageExt(r).queue_offset for r in got]
                ck = CheckPoint(
                    group, src_topic, q, offs[0], pop_time, invisible_time, revive_qid,
                    broker.config.broker_name, offs, set(offs),
                )  # fmt: skip
                self._append_ck(ck)
                records.extend(got)
                starts.append((src_topic, q, offs[0]))
                offsets_info.append((src_topic, q, offs))
                if order:
                    # Per message, as RocketMQ's buildQueueOffsetOrderCountInfo: "qo<q>%<offset>".
                    counts_info.extend(
                        (src_topic, f"qo{q}%{o}", n) for o, n in zip(offs, counts, strict=True)
                    )
        if not records:
            return PopResult(ResponseCode.POLLING_TIMEOUT, pop_time, invisible_time, revive_qid,
                             rest)  # fmt: skip
        return PopResult(
            ResponseCode.SUCCESS,
            pop_time,
            invisible_time,
            revive_qid,
            rest,
            wire.format_offset_info(starts),
            wire.format_offset_info(offsets_info),
            wire.format_offset_info(counts_info) if order else "",
            records,
        )

    def _init_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        store = self.broker.store
        committed = self.broker.offsets.query_offset(group, topic, queue_id)
        if committed >= 0:
            return int(committed)
        low = int(store.min_offset(topic, queue_id))
        if init_mode == wire.INIT_MODE_MIN or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return low
        # As a classic group's first offset: the queue's start while its first message is
        # still stored, else its end (RocketMQ's initPopOffsetByCheckMsgInMem).
        return 0 if low <= 0 else int(store.max_offset(topic, queue_id))

    def _next_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        key = (group, topic, queue_id)
        offset = self._offsets.get(key)
        if offset is None:
            offset = self._offsets[key] = self._init_offset(group, topic, queue_id, init_mode)
        return offset

    def _rest(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        store = self.broker.store
        if self.broker.topics.get(topic) is None:
            return 0
        return max(
            0, int(store.max_offset(topic, queue_id))
            - self._next_offset(group, topic, queue_id, init_mode),
        )  # fmt: skip

    def _read(
        self, group: str, topic: str, queue_id: int, want: int, flt: Any, init_mode: int
    ) -> list[bytes]:
        offset = self._next_offset(group, topic, queue_id, init_mode)
        got = self.broker.store.get_raw(topic, queue_id, offset, max_count=want, message_filter=flt)
        if got.next_offset != offset:
            self._offsets[(group, topic, queue_id)] = got.next_offset
            # The group's offset is the next one to pop, as RocketMQ commits it on pop.
            self.broker.offsets.commit_offset("", group, topic, queue_id, got.next_offset)
        return [bytes(r) for r in got.records]

    def _order_blocked(self, group: str, topic: str, queue_id: int, now: int) -> bool:
        return any(
            ck.order and ck.group == group and ck.topic == topic and ck.queue_id == queue_id
            and ck.deadline > now and ck.pending
            for ck in self._cks.values()
        )  # fmt: skip

    def _read_orderly(
        self,
        group: str,
        topic: str,
        queue_id: int,
        want: int,
        flt: Any,
        pop_time: int,
        init_mode: int,
    ) -> tuple[list[bytes], list[int]]:
        if self._order_blocked(group, topic, queue_id, pop_time):
            return [], []
        qkey = (group, topic, queue_id)
        offset = self._init_offset(group, topic, queue_id, init_mode)
        if self.broker.offsets.query_offset(group, topic, queue_id) < 0:
            # The queue's head from now on: an ack of a later message first must not move it.
            self.broker.offsets.commit_offset("", group, topic, queue_id, offset)
        acked = self._order_acked.get(qkey, set())
        out: list[bytes] = []
        counts: list[int] = []
        limit = self.broker.config.max_reconsume_times
        while len(out) < want:
            got = self.broker.store.get_raw(
                topic, queue_id, offset, max_count=want - len(out) + len(acked),
                message_filter=flt,
            )  # fmt: skip
            if not got.records:
                if got.next_offset > offset and not acked:
                    # Nothing of the group's between: its offset moves on as after an ack.
                    self.broker.offsets.commit_offset("", group, topic, queue_id, got.next_offset)
                break
            for r in got.records:
                msg = MessageExt(r)
                off = msg.queue_offset
                if off in acked:
                    continue
                ckey = (group, topic, queue_id, off)
                attempt = self._order_counts.get(ckey, 0)
                if msg.reconsume_times + attempt > limit:
                    # Delivered its maximum: dead-lettered, and the queue moves on.
                    self.broker.pop_revive.dead_letter(group, msg)
                    self._order_ack(group, topic, queue_id, off)
                    acked = self._order_acked.get(qkey, set())
                    continue
                self._order_counts[ckey] = attempt + 1
                out.append(bytes(r))
                counts.append(attempt)
                if len(out) >= want:
                    break
            if got.next_offset <= offset:
                break
            offset = got.next_offset
        return out, counts

    def _order_ack(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Count ``offset`` acked in an orderly queue; move the group's offset over every
        acked one at its head (RocketMQ's ackOrderly: commitAndNext)."""
        qkey = (group, topic, queue_id)
        acked = self._order_acked.setdefault(qkey, set())
        acked.add(offset)
        floor = self.broker.offsets.query_offset(group, topic, queue_id)
        if floor < 0:
            floor = min(acked)
        moved = floor
        while moved in acked:
            acked.discard(moved)
            self._order_counts.pop((group, topic, queue_id, moved), None)
            moved += 1
        acked.difference_update({o for o in acked if o < moved})
        if moved != floor:
            self.broker.offsets.commit_offset("", group, topic, queue_id, moved)

    # -- the revive log ---------------------------------------------------------------------------

    def _append(self, queue: int, tags: str, body: bytes) -> int:
        broker = self.broker
        broker.topics.ensure(self.revive_topic, self.revive_queue_num)
        msg = system_message(topic=self.revive_topic, body=body, tags=tags)
        return int(broker._put(self.revive_topic, queue, [msg])[0].queue_offset)

    def _append_ck(self, ck: CheckPoint) -> None:
        ck.revive_queue = ck.revive_qid % self.revive_queue_num
        ck.revive_offset = self._append(ck.revive_queue, wire.CK_TAG, ck.to_json())
        self._track(ck)

    def _track(self, ck: CheckPoint) -> None:
        self._cks[ck.key] = ck
        self._seq += 1
        heapq.heappush(self._due, (ck.deadline, self._seq, ck.key))

    def _append_ack(self, ck: CheckPoint, offsets: list[int], kind: str) -> None:
        body: dict[str, Any] = {
            "so": ck.start_offset,
            "c": ck.group,
            "t": ck.topic,
            "q": ck.queue_id,
            "pt": ck.pop_time,
            "bn": ck.broker_name,
            "k": kind,
        }
        if len(offsets) == 1:
            body["ao"] = offsets[0]
            tag = wire.ACK_TAG
        else:
            body["ao"] = -1
            body["aol"] = offsets
            tag = wire.BATCH_ACK_TAG
        self._append(ck.revive_queue, tag, json.dumps(body).encode())

    def _settle(self, ck: CheckPoint, offsets: Iterable[int], kind: str) -> None:
        """Take ``offsets`` out of ``ck``'s pending set (they are written first)."""
        offs = [o for o in offsets if o in ck.pending]
        if not offs:
            return
        self._append_ack(ck, offs, kind)
        self._apply(ck, offs, kind)

    def _apply(self, ck: CheckPoint, offs: Iterable[int], kind: str) -> None:
        for o in offs:
            ck.pending.discard(o)
            if kind == MOVED:
                ck.moved.add(o)
            elif ck.order and kind == ACKED:
                self._order_ack(ck.group, ck.topic, ck.queue_id, o)
        if not ck.pending:
            self._cks.pop(ck.key, None)
            if ck.order:
                self.broker.waiters.notify(self.unblock_key(ck.group, _origin(ck)))

    # -- ack and change of invisible time ---------------------------------------------------------

    def _find(
        self, group: str, topic: str, queue_id: int, handle: str, offset: int
    ) -> tuple[CheckPoint, wire.ExtraInfo]:
        """The live checkpoint holding ``offset`` as ``handle`` names it, or the error."""
        return self._find_info(group, topic, queue_id, wire.ExtraInfo.parse(handle), offset)

    def _find_info(
        self, group: str, topic: str, queue_id: int, info: wire.ExtraInfo, offset: int
    ) -> tuple[CheckPoint, wire.ExtraInfo]:
        broker = self.broker
        validate_group(group)
        if info.broker_name != broker.config.broker_name:
            raise _handle_error(
                f"receipt handle {str(info)!r} names broker {info.broker_name}, this is "
                f"{broker.config.broker_name}: ack a message on the broker it came from",
                ResponseCode.INVALID_PARAMETER,
            )
        if info.queue_offset != offset:
            raise _handle_error(
                f"receipt handle {str(info)!r} is of queue offset {info.queue_offset}, the request "
                f"names {offset}", ResponseCode.INVALID_PARAMETER,
            )  # fmt: skip
        broker.topics.require(topic)
        real = info.real_topic(topic, group)
        cfg = broker.topics.get(real)
        if cfg is None or not 0 <= queue_id < cfg.read_queue_nums:
            raise BrokerError(
                f"queueId[{queue_id}] is illegal, topic:[{real}] "
                f"readQueueNums:[{cfg.read_queue_nums if cfg else 0}]",
                code=ResponseCode.MESSAGE_ILLEGAL,
            )
        low, high = broker.store.min_offset(real, queue_id), broker.store.max_offset(real, queue_id)
        if not low <= offset < high:
            raise _handle_error(
                f"offset is illegal, key:{real}@{queue_id}, commit:{offset}, store:{low}~{high}"
            )
        ck = self._cks.get((group, real, queue_id, info.ck_queue_offset, info.pop_time))
        now = now_ms()
        if ck is None or ck.invisible_time != info.invisible_time or offset not in ck.offsets:
            if now >= info.pop_time + info.invisible_time:
                raise _handle_error(
                    f"receipt handle {str(info)!r} is expired (its invisible time ended at "
                    f"{info.pop_time + info.invisible_time}): the message is delivered again"
                )
            raise _handle_error(
                f"no message of group {group} is invisible under receipt handle {str(info)!r}: "
                "it was acked, its invisible time was changed (use the new handle), it is of "
                "another group, or the handle is forged"
            )
        if offset in ck.moved:
            raise _handle_error(
                f"receipt handle {str(info)!r} was replaced when the message's invisible time "
                "was changed: use the handle change_invisible_duration returned"
            )
        if offset in ck.pending and now >= ck.deadline:
            raise _handle_error(
                f"receipt handle {str(info)!r} is expired (its invisible time ended at "
                f"{ck.deadline}): the message is delivered again"
            )
        return ck, info

    def ack(self, group: str, topic: str, queue_id: int, handle: str, offset: int) -> None:
        """Ack one message (ACK_MESSAGE). Acking it twice is harmless while its checkpoint
        lives; a handle that names no invisible message raises :class:`ReceiptHandleError`."""
        self._check_writable()
        with self._lock:
            ck, _ = self._find(group, topic, queue_id, handle, offset)
            self._settle(ck, [offset], ACKED)

    def batch_ack(self, acks: Iterable[wire.BatchAck]) -> int:
        """Ack every offset of ``acks`` (BATCH_ACK_MESSAGE); returns how many were acked.
        The valid ones are acked even when one is not; then the first refusal is raised."""
        self._check_writable()
        done = 0
        first: BrokerError | None = None
        with self._lock:
            for a in acks:
                # One BatchAck is one checkpoint's: its offsets settle in one bAck record.
                found: dict[int, tuple[CheckPoint, list[int]]] = {}
                for offset in a.offsets():
                    info = wire.ExtraInfo(
                        a.start_offset, a.pop_time, a.invisible_time, a.revive_queue_id,
                        a.retry, self.broker.config.broker_name, a.queue_id, offset,
                    )  # fmt: skip
                    try:
                        ck, _ = self._find_info(a.consumer_group, a.topic, a.queue_id, info, offset)
                    except BrokerError as exc:
                        first = first or exc
                        continue
                    found.setdefault(id(ck), (ck, []))[1].append(offset)
                for ck, offsets in found.values():
                    self._settle(ck, offsets, ACKED)
                    done += len(offsets)
        if first is not None:
            raise first
        return done

    def change_invisible_time(
        self,
        group: str,
        topic: str,
        queue_id: int,
        handle: str,
        offset: int,
        invisible_time: int,
    ) -> tuple[int, int, int]:
        """Make the message invisible for ``invisible_time`` ms from now: a new checkpoint
        holds it, the old one lets it go. Returns the new handle's (popTime, invisibleTime,
        reviveQid); the old handle is dead from then on."""
        self._check_writable()
        self.check_invisible_time(invisible_time)
        with self._lock:
            old, _ = self._find(group, topic, queue_id, handle, offset)
            pop_time = max(now_ms(), old.pop_time + 1)
            ck = CheckPoint(
                group, old.topic, queue_id, offset, pop_time, invisible_time, old.revive_qid,
                old.broker_name, [offset], {offset},
            )  # fmt: skip
            while ck.key in self._cks:  # two changes of one message in the same millisecond
                ck.pop_time += 1
            self._append_ck(ck)
            self._settle(old, [offset], MOVED)
            return ck.pop_time, invisible_time, ck.revive_qid

    def has_message(self, group: str, topic: str, queue_id: int) -> bool:
        """True when a pop of ``topic`` by ``group`` would find a message (unfiltered)."""
        cfg = self.broker.topics.get(topic)
        if cfg is None:
            return False
        queues = range(cfg.read_queue_nums) if queue_id < 0 else [queue_id]
        sources = [(topic, q) for q in queues]
        retry = wire.pop_retry_topic(topic, group)
        if self.broker.topics.get(retry) is not None:
            sources.append((retry, 0))
        with self._lock:
            return any(self._rest(group, t, q, wire.INIT_MODE_MAX) > 0 for t, q in sources)

    # -- what the revive service and metrics read -------------------------------------------------

    def due(self, now: int) -> list[CheckPoint]:
        """Checkpoints whose invisible time is over with messages still pending."""
        out = []
        with self._lock:
            while self._due and self._due[0][0] <= now:
                _, _, key = heapq.heappop(self._due)
                ck = self._cks.get(key)
                if ck is not None and ck.pending and ck.deadline <= now:
                    out.append(ck)
        return out

    def invisible_counts(self) -> dict[tuple[str, str], int]:
        """Messages invisible now, by (group, topic): popped, not acked, time not over."""
        now = now_ms()
        out: dict[tuple[str, str], int] = {}
        with self._lock:
            for ck in self._cks.values():
                if ck.pending and ck.deadline > now:
                    k = (ck.group, _origin(ck))
                    out[k] = out.get(k, 0) + len(ck.pending)
        return out

    def revive_commit_offsets(self) -> dict[int, int]:
        """Per revive queue: where a replay must start (its oldest live checkpoint)."""
        with self._lock:
            low: dict[int, int] = {}
            for ck in self._cks.values():
                if ck.revive_offset >= 0:
                    q = ck.revive_queue
                    low[q] = min(low.get(q, ck.revive_offset), ck.revive_offset)
            return low


def _origin(ck: CheckPoint) -> str:
    """The topic a checkpoint's messages were sent to (its pop retry topic's topic)."""
    prefix = f"{RETRY_GROUP_TOPIC_PREFIX}{ck.group}_"
    return ck.topic[len(prefix) :] if ck.topic.startswith(prefix) else ck.topic


def check_poll(born_time: int, poll_time: int) -> None:
    """Refuse a pop that arrives after its client stopped waiting (POLLING_TIMEOUT)."""
    if born_time > 0 and now_ms() - born_time - poll_time > POLL_LATE_MS:
        raise BrokerError(
            "the pop message is timeout too much: it arrived after its poll time was over",
            code=ResponseCode.POLLING_TIMEOUT,
        )
