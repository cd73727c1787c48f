"""The revive service: pop messages whose invisible time is over come back (RocketMQ 5's
``PopReviveService``).

Every ``revive_interval_ms`` it takes the checkpoints that are due (see
:mod:`mqcore.broker.pop`) and, for each message still unacked, stores a copy in the group's
pop retry topic ``%RETRY%<group>_<topic>`` with its reconsume times + 1 (its next delivery
attempt), or in ``%DLQ%<group>`` once it was delivered ``max_reconsume_times`` + 1 times; then
it appends an ack settling the checkpoint. An orderly checkpoint is only released: its queue
delivers the same messages again.

At start, :meth:`ReviveService.recover` reads the revive topic from the revive group's offset
(``CID_RMQ_SYS_REVIVE_GROUP``, committed as old checkpoints settle) and rebuilds the live
checkpoints, the acks against them and the pop offsets, so after a crash exactly the unacked
messages come back, after their invisible time.
"""

from __future__ import annotations

import json
import threading

from mqcore.broker.pop import ACKED, REVIVED, CheckPoint, PopHost, PopService, now_ms
from mqcore.logs import get_logger
from mqcore.message import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    MessageExt,
)
from mqcore.protocol import pop as wire
from mqcore.protocol.names import DLQ_GROUP_TOPIC_PREFIX

__all__ = ["ReviveService"]

log = get_logger(__name__)

_READ_BATCH = 256


class ReviveService:
    """Turns expired invisible pop messages into retries or dead letters."""

    def __init__(self, broker: PopHost, pop: PopService) -> None:
        self.broker = broker
        self.pop = pop
        self.interval_s = broker.config.revive_interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Recover from the revive topic, then revive on a thread of its own."""
        self.recover()
        self._thread = threading.Thread(
            target=self._run, name=f"mqcore-pop-revive-{self.broker.config.broker_name}",
            daemon=True,
        )  # fmt: skip
        self._thread.start()

    def close(self) -> None:
        """Stop reviving and commit the revive progress."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.commit_progress()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.revive_due()
                self.commit_progress()
            except Exception:  # keep reviving; the next round retries
                log.exception("pop_revive_failed")

    # -- revive -----------------------------------------------------------------------------------

    def revive_due(self, now: int | None = None) -> int:
        """Revive every due checkpoint; returns how many messages came back."""
        count = 0
        pop = self.pop
        for ck in pop.due(now_ms() if now is None else now):
            with pop._lock:
                if not ck.pending or pop._cks.get(ck.key) is not ck:
                    continue  # acked meanwhile
                if ck.order:
                    # Released: the queue delivers them again, from the first unacked one.
                    pop._settle(ck, sorted(ck.pending), REVIVED)
                    continue
                for offset in sorted(ck.pending):
                    got = self.broker.store.get(ck.topic, ck.queue_id, offset, max_count=1)
                    msg = next((m for m in got.messages if m.queue_offset == offset), None)
                    if msg is None:
                        log.warning(
                            "pop_revive_message_gone", group=ck.group, topic=ck.topic,
                            queue_id=ck.queue_id, offset=offset,
                        )  # fmt: skip
                    else:
                        self._copy(ck, msg)
                        count += 1
                pop._settle(ck, sorted(ck.pending), REVIVED)
        return count

    def _copy(self, ck: CheckPoint, msg: MessageExt) -> None:
        """Store ``msg`` again as the group's next attempt, or dead-letter it."""
        times = msg.reconsume_times
        if times >= self.broker.config.max_reconsume_times:
            self.dead_letter(ck.group, msg)
            return
        origin = msg.get_property(PROPERTY_RETRY_TOPIC) or msg.topic
        retry = wire.pop_retry_topic(origin, ck.group)
        self._put(retry, msg, origin, times + 1)
        log.debug("pop_message_revived", group=ck.group, topic=origin, reconsume_times=times + 1)

    def dead_letter(self, group: str, msg: MessageExt) -> None:
        """Store ``msg`` in ``%DLQ%<group>`` (it was delivered its maximum times)."""
        origin = msg.get_property(PROPERTY_RETRY_TOPIC) or msg.topic
        dlq = DLQ_GROUP_TOPIC_PREFIX + group
        self._put(dlq, msg, origin, msg.reconsume_times)
        log.info("pop_message_dead_lettered", group=group, topic=origin, msg_id=msg.msg_id)

    def _put(self, topic: str, msg: MessageExt, origin: str, times: int) -> None:
        broker = self.broker
        broker.topics.ensure(topic, 1)
        props = msg.properties
        props.setdefault(PROPERTY_RETRY_TOPIC, origin)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.offset_msg_id)
        copy = msg.to_message(topic=topic, properties=props, delay_level=0)
        broker._put(
            topic, 0, [copy], born_timestamp=msg.born_timestamp, born_host=msg.born_host,
            reconsume_times=times,
        )  # fmt: skip

    # -- progress and recovery --------------------------------------------------------------------

    def commit_progress(self) -> None:
        """Commit, per revive queue, the offset a replay must start from."""
        broker, pop = self.broker, self.pop
        cfg = broker.topics.get(pop.revive_topic)
        if cfg is None:
            return
        # Under the pop lock: a checkpoint appended between reading the live ones and the
        # queue's end would otherwise be committed past, and lost to a replay.
        with pop._lock:
            low = pop.revive_commit_offsets()
            for q in range(cfg.read_queue_nums):
                at = low.get(q, int(broker.store.max_offset(pop.revive_topic, q)))
                broker.offsets.commit_offset("", wire.REVIVE_GROUP, pop.revive_topic, q, at)

    def recover(self) -> None:
        """Rebuild the pop state from the revive topic (after a restart, or a crash)."""
        broker, pop = self.broker, self.pop
        cfg = broker.topics.get(pop.revive_topic)
        if cfg is None:
            return
        cks = 0
        with pop._lock:
            for q in range(cfg.read_queue_nums):
                start = broker.offsets.query_offset(wire.REVIVE_GROUP, pop.revive_topic, q)
                offset = max(start, int(broker.store.min_offset(pop.revive_topic, q)))
                while True:
                    got = broker.store.get(pop.revive_topic, q, offset, max_count=_READ_BATCH)
                    for m in got.messages:
                        cks += self._replay(q, m)
                    if got.next_offset <= offset or not got.messages:
                        break
                    offset = got.next_offset
            for key, ck in list(pop._cks.items()):
                if not ck.pending:
                    del pop._cks[key]
        if cks:
            log.info("pop_state_recovered", checkpoints=cks, live=len(pop._cks))

    def _replay(self, queue: int, m: MessageExt) -> int:
        pop = self.pop
        try:
            body = json.loads(m.body)
        except ValueError:
            log.warning("pop_revive_record_unreadable", queue=queue, offset=m.queue_offset)
            return 0
        if m.tags == wire.CK_TAG:
            ck = CheckPoint.from_json(m.body, queue, m.queue_offset)
            pop._track(ck)
            pop._pop_groups.add(ck.group)
            if ck.order:
                for o in ck.offsets:
                    k = (ck.group, ck.topic, ck.queue_id, o)
                    pop._order_counts[k] = pop._order_counts.get(k, 0) + 1
            else:
                key = (ck.group, ck.topic, ck.queue_id)
                committed = self.broker.offsets.query_offset(*key)
                nxt = max(pop._offsets.get(key, committed), committed, max(ck.offsets) + 1)
                pop._offsets[key] = nxt
                self.broker.offsets.commit_offset("", ck.group, ck.topic, ck.queue_id, nxt)
            return 1
        if m.tags in (wire.ACK_TAG, wire.BATCH_ACK_TAG):
            ck_key = (str(body["c"]), str(body["t"]), int(body["q"]), int(body["so"]),
                      int(body["pt"]))  # fmt: skip
            acked = pop._cks.get(ck_key)
            if acked is None:
                return 0
            offs = body.get("aol") or [body.get("ao")]
            kind = str(body.get("k", ACKED))
            pop._apply(acked, [int(o) for o in offs if o is not None], kind)
        return 0
