"""Group commit: several single sends served by one store write.

The remoting server hands the broker the single sends one event-loop wake-up brought (from
one connection or several) as :class:`SendRequest` values; :func:`send_many` checks each as
:meth:`~mqcore.broker.Broker.send_message` does and stores the plain ones together, in one
``put_many`` when the store offers :class:`~mqcore.storecaps.MultiQueuePut` (one lock, one
flush wait for all), one ``put`` each otherwise. Each request is answered after the write
that holds it, so nothing is acknowledged before it is stored as a single send would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mqcore.broker.ha import HAMaster
from mqcore.broker.schedule import is_timer_message
from mqcore.errors import MQError
from mqcore.message import Message
from mqcore.protocol.transaction import is_transactional
from mqcore.store import PutResult
from mqcore.storecaps import MultiQueuePut, PutRequest

# The broker is typed Any here: mqcore.broker.broker imports this module, and the layers
# contract allows no import back, even for type checking.
Broker = Any

__all__ = ["SendRequest", "send_many", "send_one"]


@dataclass(frozen=True, slots=True)
class SendRequest:
    """One send as :meth:`~mqcore.broker.Broker.send_message` takes it."""

    topic: str
    queue_id: int
    messages: Sequence[Message]
    producer_group: str = ""
    born_timestamp: int | None = None
    born_host: str | None = None
    reconsume_times: int = 0
    sys_flag: int = 0


def _plain(request: SendRequest) -> bool:
    """Whether ``request`` is stored as sent, in its own queue (no half, no holding)."""
    if len(request.messages) != 1 or request.topic.startswith("%"):  # retry, DLQ, system
        return False
    m = request.messages[0]
    return not (m.delay_level > 0 or (m.properties and (is_transactional(m.properties)
                                                        or is_timer_message(m))))  # fmt: skip


def send_many(broker: Broker, requests: Sequence[SendRequest]) -> list[list[PutResult] | MQError]:
    """See :meth:`mqcore.broker.Broker.send_many`."""
    out: list[list[PutResult] | MQError] = [[] for _ in requests]
    ha = broker.ha
    if isinstance(ha, HAMaster) and broker.config.broker_role == "SYNC_MASTER":
        # Each send waits for a slave of its own and may be answered SLAVE_NOT_AVAILABLE with
        # its results: exactly send_message's semantics, one by one.
        for i, r in enumerate(requests):
            out[i] = _single(broker, r)
        return out
    pending: list[tuple[int, SendRequest]] = []
    for i, r in enumerate(requests):
        if not _plain(r):
            # In its place: what was gathered before it is stored first, so the order of
            # the stores is the order of the requests.
            _store(broker, pending, out)
            pending = []
            out[i] = _single(broker, r)
            continue
        try:
            broker._check_send(r.topic, r.queue_id, r.messages)
        except MQError as exc:
            out[i] = exc
            continue
        pending.append((i, r))
    _store(broker, pending, out)
    return out


def send_one(broker: Broker, r: SendRequest) -> list[PutResult]:
    """``r`` through :meth:`~mqcore.broker.Broker.send_message`: its results, or its error."""
    results: list[PutResult] = broker.send_message(
        r.topic,
        r.queue_id,
        r.messages,
        producer_group=r.producer_group,
        born_timestamp=r.born_timestamp,
        born_host=r.born_host,
        reconsume_times=r.reconsume_times,
        sys_flag=r.sys_flag,
    )
    return results


def _single(broker: Broker, r: SendRequest) -> list[PutResult] | MQError:
    try:
        return send_one(broker, r)
    except MQError as exc:
        return exc


def _store(
    broker: Broker,
    pending: list[tuple[int, SendRequest]],
    out: list[list[PutResult] | MQError],
) -> None:
    """Store the checked plain requests ``pending``; each slot of ``out`` gets its outcome."""
    if not pending:
        return
    store = broker.store
    if isinstance(store, MultiQueuePut):
        puts = [
            PutRequest(
                r.topic,
                r.queue_id,
                r.messages,
                born_timestamp=r.born_timestamp,
                born_host=r.born_host,
                reconsume_times=r.reconsume_times,
                sys_flag=r.sys_flag,
            )
            for _, r in pending
        ]
        try:
            outcomes: list[Any] = store.put_many(puts)
        except MQError as exc:  # nothing of the write is acknowledged
            outcomes = [exc] * len(pending)
    else:
        outcomes = []
        for _, r in pending:
            try:
                outcomes.append(
                    broker._store_put(
                        r.topic,
                        r.queue_id,
                        r.messages,
                        born_timestamp=r.born_timestamp,
                        born_host=r.born_host,
                        reconsume_times=r.reconsume_times,
                        sys_flag=r.sys_flag,
                    )
                )
            except MQError as exc:
                outcomes.append(exc)
    stored: list[PutResult] = []
    done: list[tuple[str, int, list[PutResult]]] = []
    for (i, r), outcome in zip(pending, outcomes, strict=True):
        out[i] = outcome
        if not isinstance(outcome, MQError):
            done.append((r.topic, r.queue_id, outcome))
            stored.extend(outcome)
    if done:
        broker._stored_group(done)
    ha = broker.ha
    if isinstance(ha, HAMaster) and stored:
        ha.after_put(stored)  # an ASYNC master: wakes the writers to the slaves once
