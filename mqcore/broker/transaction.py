"""Transactional messages on the broker: halves, their outcomes, and what is still undecided
(RocketMQ's ``TransactionalMessageServiceImpl`` and ``TransactionalMessageBridge``).

- A half message (``TRAN_MSG=true``) is stored in ``RMQ_SYS_TRANS_HALF_TOPIC``, queue 0, with
  its real topic and queue in ``REAL_TOPIC``/``REAL_QID``: no consumer of the real topic can
  see it (:meth:`TransactionService.prepare`).
- END_TRANSACTION commits it (a copy goes to the real topic, consumable from then on) or rolls
  it back; either way an op message (tag ``d``, body the half's queue offset) is appended to
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (:meth:`TransactionService.end`).
- A check pass (:meth:`TransactionService.check_pass`, run by
  :class:`~mqcore.broker.transaction_check.TransactionCheckService`) writes each half older
  than its immunity time again at the end of the half queue with ``TRANSACTION_CHECK_TIMES``
  + 1, and returns the check requests to send to the producer group; a half checked
  ``transaction_check_max`` times goes to ``TRANS_CHECK_MAX_TIME_TOPIC`` instead.

Every copy of a half keeps the queue offset of the first one in
``TRAN_PREPARED_QUEUE_OFFSET``: that offset (the *origin*) names the transaction. The undecided
halves are held in memory by origin and rebuilt at start from the two topics, read from the
progress kept in ``config/transaction.json`` (the lowest half offset still needed, and the
first op message not yet known to be superfluous), so a killed broker resumes checking where
it was, and a transaction is committed at most once: an END_TRANSACTION for a half no longer
undecided is refused, and a commit whose op message a crash lost is found again in the real
topic by its unique key when the broker starts.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from mqcore import codec
from mqcore.atomicfile import read_json, write_json_atomic
from mqcore.errors import BrokerError, MessageIllegalError
from mqcore.logs import get_logger
from mqcore.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    TIMER_REQUEST_PROPERTIES,
    Message,
    MessageExt,
    system_message,
)
from mqcore.protocol.codes import ResponseCode
from mqcore.protocol.transaction import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    REMOVE_TAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CheckTransactionStateRequestHeader,
    reset_transaction_value,
)
from mqcore.store import PutResult

__all__ = ["CheckRequest", "TransactionService"]

log = get_logger(__name__)

#: Called after each store put with (topic, queue id, results): wakes pulls, runs hooks.
Stored = Callable[[str, int, list[PutResult]], None]

_READ_BATCH = 256
_PROGRESS_FILE = "transaction.json"


@attrs.define
class _Half:
    """An undecided transaction: its live copy in the half queue and its check state."""

    origin: int  # half queue offset of the first copy: the transaction's name here
    offset: int  # half queue offset of the live (last written) copy
    commitlog_offset: int
    topic: str  # the real topic
    group: str
    born_timestamp: int
    immunity_ms: int
    check_times: int
    checked_pass: int = -1  # the check pass that wrote the live copy


@attrs.frozen
class CheckRequest:
    """A CHECK_TRANSACTION_STATE to send to a live producer of ``group``: ``message`` is the
    half as a record with its real topic and queue."""

    group: str
    header: CheckTransactionStateRequestHeader
    message: MessageExt


def _origin(msg: MessageExt) -> int:
    text = msg.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, "")
    return int(text) if text.isascii() and text.isdigit() else msg.queue_offset


def _int_property(props: dict[str, str], name: str) -> int | None:
    text = props.get(name, "").strip()
    return int(text) if text.isascii() and text.isdigit() else None


class TransactionService:
    """Half and op bookkeeping of one broker.

    :param store: the broker's store.
    :param config_dir: where ``transaction.json`` (the check progress) lives.
    :param stored: the broker's after-put callback.
    :param ensure_topic: ``(topic, queues)`` creates a topic in the broker's table (for
        ``TRANS_CHECK_MAX_TIME_TOPIC``, which operators read).
    :param timeout_ms: a half younger than this is not checked (``transaction_timeout``).
    :param check_max: checks before a half is given up (``transaction_check_max``).
    :param store_host: ``ip:port`` written as the store host of check records.
    :param broker_name: named in check requests (where the producer answers).
    :param clock: wall time in ms (tests inject one).
    """

    def __init__(
        self,
        store: Any,
        config_dir: Path,
        stored: Stored,
        ensure_topic: Callable[[str, int], object],
        *,
        timeout_ms: int = 6_000,
        check_max: int = 15,
        store_host: str = "127.0.0.1:10911",
        broker_name: str = "broker-a",
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.path = config_dir / _PROGRESS_FILE
        self._stored = stored
        self._ensure_topic = ensure_topic
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.store_host = store_host
        self.broker_name = broker_name
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.Lock()
        self._pending: dict[int, _Half] = {}
        # (op queue offset, half queue max offset when it was written): an op message is
        # needed while a copy of a half it names may lie at or after the half progress.
        self._ops: deque[tuple[int, int]] = deque()
        self._pass = 0
        self._progress: tuple[int, int] = (-1, -1)
        self._written: tuple[int, int] | None = None  # the progress in the file
        #: halves given up after transaction_check_max checks since the broker started
        self.discarded = 0

    # -- start and progress --------------------------------------------------------------

    def start(self) -> None:
        """Rebuild the undecided halves from the half and op topics (from the progress)."""
        saved: dict[str, Any] = read_json(self.path, {})
        store = self.store
        half = max(int(saved.get("halfOffset", 0)), store.min_offset(HALF_TOPIC, 0))
        op = max(int(saved.get("opOffset", 0)), store.min_offset(OP_HALF_TOPIC, 0))
        half_max = store.max_offset(HALF_TOPIC, 0)
        removed: set[int] = set()
        for m in self._read(OP_HALF_TOPIC, op):
            removed.update(self._op_offsets(m))
            self._ops.append((m.queue_offset, half_max))
        with self._lock:
            for m in self._read(HALF_TOPIC, half):
                origin = _origin(m)
                if origin not in removed:
                    self._pending[origin] = self._half(m, origin)  # a later copy replaces
            for h in list(self._pending.values()):
                if self._committed_before(h):
                    # Committed, but the op message was lost with a crash: record it now.
                    log.warning("transaction_commit_recovered", origin=h.origin, topic=h.topic)
                    self._remove(h)
            self._progress = (half, op)
            self._advance()
        if self._pending:
            log.info("transactions_pending", count=len(self._pending))

    def _read(self, topic: str, offset: int) -> Iterator[MessageExt]:
        high = self.store.max_offset(topic, 0)
        while offset < high:
            got = self.store.get(topic, 0, offset, max_count=_READ_BATCH)
            if not got.messages:
                if got.next_offset <= offset:
                    return
                offset = got.next_offset
                continue
            yield from got.messages
            offset = got.next_offset

    @staticmethod
    def _op_offsets(m: MessageExt) -> Iterator[int]:
        if m.tags != REMOVE_TAG:
            log.error("transaction_op_tag_unknown", tags=m.tags, offset=m.queue_offset)
            return
        for text in m.body.decode("utf-8", "replace").split(","):
            text = text.strip()
            if text.isascii() and text.isdigit():
                yield int(text)

    def _half(self, m: MessageExt, origin: int) -> _Half:
        props = m.properties
        immunity = _int_property(props, PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
        return _Half(
            origin=origin,
            offset=m.queue_offset,
            commitlog_offset=m.commitlog_offset,
            topic=props.get(PROPERTY_REAL_TOPIC, ""),
            group=props.get(PROPERTY_PRODUCER_GROUP, ""),
            born_timestamp=m.born_timestamp,
            immunity_ms=self.timeout_ms if immunity is None else immunity * 1000,
            check_times=_int_property(props, PROPERTY_TRANSACTION_CHECK_TIMES) or 0,
        )

    def _committed_before(self, h: _Half) -> bool:
        """Whether the real topic already holds the commit of ``h`` (by its unique key)."""
        msg = self.store.message_at(h.commitlog_offset)
        uniq = msg.properties.get(PROPERTY_UNIQ_KEY) if msg is not None else None
        if not uniq or not h.topic:
            return False
        for found in self.store.lookup(h.topic, uniq):
            if (
                found.properties.get(PROPERTY_UNIQ_KEY) == uniq
                and found.sys_flag & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_COMMIT_TYPE
                and found.born_timestamp == h.born_timestamp
            ):
                return True
        return False

    def _advance(self) -> None:
        """Move the progress past what a restart no longer needs to read (under the lock)."""
        store = self.store
        if self._pending:
            half = min(h.offset for h in self._pending.values())
        else:
            half = store.max_offset(HALF_TOPIC, 0)
        ops = self._ops
        while ops and ops[0][1] <= half:
            ops.popleft()
        op = ops[0][0] if ops else store.max_offset(OP_HALF_TOPIC, 0)
        self._progress = (half, op)

    def persist(self) -> None:
        """Write the progress (both offsets in one file, atomically) when it moved."""
        with self._lock:
            self._advance()
            progress = self._progress
            if progress == self._written:
                return
            half, op = progress
            write_json_atomic(self.path, {"halfOffset": half, "opOffset": op})
            self._written = progress

    # -- prepare and end -----------------------------------------------------------------

    def prepare(
        self,
        topic: str,
        queue_id: int,
        message: Message,
        *,
        born_timestamp: int | None = None,
        born_host: str | None = None,
        reconsume_times: int = 0,
        sys_flag: int = 0,
    ) -> PutResult:
        """Store ``message`` (for ``topic``/``queue_id``) as a half; where it was stored."""
        props = dict(message.properties)
        if message.delay_level > 0 or not TIMER_REQUEST_PROPERTIES.isdisjoint(props):
            raise MessageIllegalError(
                f"a transactional message to {topic} cannot be delayed (delay level "
                f"{message.delay_level}, timer properties "
                f"{sorted(TIMER_REQUEST_PROPERTIES & props.keys()) or 'none'}); send it "
                "without a delay: it is delivered when committed",
                code=ResponseCode.MESSAGE_ILLEGAL,
            )
        if not props.get(PROPERTY_PRODUCER_GROUP):
            raise MessageIllegalError(
                f"a transactional message to {topic} names no producer group (property "
                f"{PROPERTY_PRODUCER_GROUP}); the broker could not ask it about the transaction",
                code=ResponseCode.MESSAGE_ILLEGAL,
            )
        for name in (PROPERTY_TRANSACTION_CHECK_TIMES, PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET):
            props.pop(name, None)  # the broker's own bookkeeping, never a client's
        uniq = props.get(PROPERTY_UNIQ_KEY)
        if uniq:
            props[PROPERTY_TRANSACTION_ID] = uniq
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        half = system_message(
            topic=HALF_TOPIC,
            body=message.body,
            tags=message.tags,
            keys=message.keys,
            flag=message.flag,
            properties=props,
        )
        flag = reset_transaction_value(sys_flag, TRANSACTION_NOT_TYPE)
        extra = {"sys_flag": flag} if flag else {}
        with self._lock:
            results: list[PutResult] = self.store.put(
                HALF_TOPIC,
                0,
                [half],
                born_timestamp=born_timestamp,
                born_host=born_host,
                reconsume_times=reconsume_times,
                **extra,
            )
            r = results[0]
            immunity = _int_property(props, PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
            self._pending[r.queue_offset] = _Half(
                origin=r.queue_offset,
                offset=r.queue_offset,
                commitlog_offset=r.commitlog_offset,
                topic=topic,
                group=props[PROPERTY_PRODUCER_GROUP],
                born_timestamp=self._clock() if born_timestamp is None else born_timestamp,
                immunity_ms=self.timeout_ms if immunity is None else immunity * 1000,
                check_times=0,
            )
        self._stored(HALF_TOPIC, 0, results)
        return r

    def end(
        self,
        producer_group: str,
        tran_state_table_offset: int,
        commit_log_offset: int,
        commit_or_rollback: int,
        *,
        from_transaction_check: bool = False,
    ) -> PutResult | None:
        """Commit (the message stored in its real topic: where, returned) or roll back the
        half at ``commit_log_offset``; ``TRANSACTION_NOT_TYPE`` (unknown) changes nothing.

        :raises BrokerError: (SYSTEM_ERROR) no such half, another group's, an offset that does
            not match, or a transaction no longer undecided.
        """
        if commit_or_rollback == TRANSACTION_NOT_TYPE:
            log.info("transaction_state_unknown", offset=tran_state_table_offset,
                     group=producer_group, from_check=from_transaction_check)  # fmt: skip
            return None
        if commit_or_rollback not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            raise BrokerError(
                f"commitOrRollback {commit_or_rollback} is none of {TRANSACTION_NOT_TYPE} "
                f"(unknown), {TRANSACTION_COMMIT_TYPE} (commit), {TRANSACTION_ROLLBACK_TYPE} "
                "(rollback)",
                code=ResponseCode.INVALID_PARAMETER,
            )
        commit = commit_or_rollback == TRANSACTION_COMMIT_TYPE
        with self._lock:
            msg = self.store.message_at(commit_log_offset)
            if msg is None or msg.topic != HALF_TOPIC:
                raise BrokerError(
                    f"Find prepared transaction message failed: no half message at commit-log "
                    f"offset {commit_log_offset}",
                    code=ResponseCode.SYSTEM_ERROR,
                )
            if msg.properties.get(PROPERTY_PRODUCER_GROUP) != producer_group:
                raise BrokerError(
                    f"The producer group wrong: the half at {commit_log_offset} belongs to "
                    f"{msg.properties.get(PROPERTY_PRODUCER_GROUP)!r}, not {producer_group!r}",
                    code=ResponseCode.SYSTEM_ERROR,
                )
            if msg.queue_offset != tran_state_table_offset:
                raise BrokerError(
                    f"The transaction state table offset wrong: {tran_state_table_offset}, the "
                    f"half at {commit_log_offset} has {msg.queue_offset}",
                    code=ResponseCode.SYSTEM_ERROR,
                )
            h = self._pending.get(_origin(msg))
            if h is None:
                raise BrokerError(
                    f"the transaction of half {tran_state_table_offset} (commit-log offset "
                    f"{commit_log_offset}) is no longer undecided: committed, rolled back or "
                    "given up already",
                    code=ResponseCode.SYSTEM_ERROR,
                )
            result = self._commit(msg) if commit else None
            self._remove(h)
        log.info(
            "transaction_committed" if commit else "transaction_rolled_back",
            topic=h.topic, origin=h.origin, group=producer_group,
            from_check=from_transaction_check,
        )  # fmt: skip
        return result

    def _commit(self, msg: MessageExt) -> PutResult:
        """Store the half's message in its real topic and queue (under the lock)."""
        props = msg.properties
        topic = props.pop(PROPERTY_REAL_TOPIC, "")
        qid = props.pop(PROPERTY_REAL_QUEUE_ID, "")
        for name in (PROPERTY_TRANSACTION_PREPARED, PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET):
            props.pop(name, None)
        if not topic or not qid.isdigit():
            raise BrokerError(
                f"the half at {msg.commitlog_offset} names no real topic and queue",
                code=ResponseCode.SYSTEM_ERROR,
            )
        real = system_message(
            topic=topic,
            body=msg.stored_body,  # as stored: compressed still when the sender compressed it
            tags=msg.tags,
            keys=msg.keys,
            flag=msg.flag,
            properties=props,
        )
        results: list[PutResult] = self.store.put(
            topic,
            int(qid),
            [real],
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times,
            sys_flag=reset_transaction_value(msg.sys_flag, TRANSACTION_COMMIT_TYPE),
        )
        self._stored(topic, int(qid), results)
        return results[0]

    def _remove(self, h: _Half) -> None:
        """Record that ``h`` is decided (an op message) and forget it (under the lock)."""
        self._pending.pop(h.origin, None)
        op = system_message(topic=OP_HALF_TOPIC, body=str(h.origin).encode(), tags=REMOVE_TAG)
        try:
            results: list[PutResult] = self.store.put(OP_HALF_TOPIC, 0, [op])
        except Exception:
            # Decided all the same: a restart finds a commit again by its key, and checks
            # a rollback once more (the producer answers it the same way).
            log.exception("transaction_op_write_failed", origin=h.origin)
            return
        self._ops.append((results[0].queue_offset, self.store.max_offset(HALF_TOPIC, 0)))
        self._stored(OP_HALF_TOPIC, 0, results)

    # -- checking ------------------------------------------------------------------------

    def check_pass(self) -> list[CheckRequest]:
        """One pass over the undecided halves: each due for a check is written again with
        its check count + 1 and comes back as a request to send; one checked
        ``check_max`` times already is given up (moved to ``TRANS_CHECK_MAX_TIME_TOPIC``)."""
        now = self._clock()
        requests: list[CheckRequest] = []
        with self._lock:
            self._pass += 1
            due = [
                h
                for h in self._pending.values()
                if h.checked_pass < self._pass
                and (now - h.born_timestamp > h.immunity_ms or now < h.born_timestamp)
            ]
            for h in due:
                msg = self.store.message_at(h.commitlog_offset)
                if msg is None:  # aged out of the store: nothing left to commit
                    log.error("transaction_half_missing", origin=h.origin, topic=h.topic)
                    self._remove(h)
                    continue
                if h.check_times >= self.check_max:
                    self._give_up(h, msg)
                    continue
                requests.append(self._checked_again(h, msg))
            self._advance()
        return requests

    def _checked_again(self, h: _Half, msg: MessageExt) -> CheckRequest:
        """Write ``h`` at the end of the half queue with one more check (under the lock)."""
        props = msg.properties
        props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(h.check_times + 1)
        props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(h.origin)
        copy = system_message(
            topic=HALF_TOPIC,
            body=msg.stored_body,
            tags=msg.tags,
            keys=msg.keys,
            flag=msg.flag,
            properties=props,
        )
        extra = {"sys_flag": msg.sys_flag} if msg.sys_flag else {}
        results: list[PutResult] = self.store.put(
            HALF_TOPIC,
            0,
            [copy],
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times,
            **extra,
        )
        r = results[0]
        h.offset, h.commitlog_offset = r.queue_offset, r.commitlog_offset
        h.check_times += 1
        h.checked_pass = self._pass
        self._stored(HALF_TOPIC, 0, results)
        # What the producer is shown: the message under its real topic and queue.
        real_topic = props.get(PROPERTY_REAL_TOPIC, h.topic)
        qid = props.get(PROPERTY_REAL_QUEUE_ID, "0")
        shown = system_message(
            topic=real_topic,
            body=msg.body,
            tags=msg.tags,
            keys=msg.keys,
            flag=msg.flag,
            properties=props,
        )
        record = codec.encode(
            shown,
            queue_id=int(qid) if qid.isdigit() else 0,
            queue_offset=r.queue_offset,
            commitlog_offset=r.commitlog_offset,
            born_timestamp=msg.born_timestamp,
            store_timestamp=r.store_timestamp,
            store_host=self.store_host,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times,
        )
        uniq = props.get(PROPERTY_UNIQ_KEY)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=r.queue_offset,
            commit_log_offset=r.commitlog_offset,
            msg_id=uniq,
            transaction_id=uniq,
            offset_msg_id=r.msg_id,
            topic=real_topic,
            broker_name=self.broker_name,
        )
        return CheckRequest(h.group, header, MessageExt(record))

    def _give_up(self, h: _Half, msg: MessageExt) -> None:
        """Move ``h`` to ``TRANS_CHECK_MAX_TIME_TOPIC`` and forget it (under the lock)."""
        self._ensure_topic(CHECK_MAX_TIME_TOPIC, 1)
        copy = system_message(
            topic=CHECK_MAX_TIME_TOPIC,
            body=msg.stored_body,
            tags=msg.tags,
            keys=msg.keys,
            flag=msg.flag,
            properties=msg.properties,
        )
        extra = {"sys_flag": msg.sys_flag} if msg.sys_flag else {}
        results: list[PutResult] = self.store.put(
            CHECK_MAX_TIME_TOPIC,
            0,
            [copy],
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times,
            **extra,
        )
        self._stored(CHECK_MAX_TIME_TOPIC, 0, results)
        self._remove(h)
        self.discarded += 1
        log.error(
            "transaction_check_max_reached", topic=h.topic, group=h.group, origin=h.origin,
            checks=h.check_times, moved_to=CHECK_MAX_TIME_TOPIC,
            transaction_id=msg.properties.get(PROPERTY_UNIQ_KEY),
        )  # fmt: skip

    # -- what is pending -----------------------------------------------------------------

    def pending_count(self) -> int:
        """Undecided transactions now."""
        with self._lock:
            return len(self._pending)

    def pending_by_topic(self) -> dict[str, int]:
        """Undecided transactions now, by real topic."""
        out: dict[str, int] = {}
        with self._lock:
            for h in self._pending.values():
                out[h.topic] = out.get(h.topic, 0) + 1
        return out
