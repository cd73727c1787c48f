"""Group commit: several single sends served by one store write.

The remoting server hands the broker the single sends one event-loop wake-up brought (from
one connection or several) as :class:`SendRequest` values, or as :class:`PreparedSend`
values for the plain ones it already made records of; :func:`send_many` checks each as
:meth:`~mqcore.broker.Broker.send_message` does and stores the plain ones together, in one
``put_many`` when the store offers :class:`~mqcore.storecaps.MultiQueuePut` (one
``put_many_prepared`` for prepared ones, :class:`~mqcore.storecaps.PreparedMultiPut`: one
lock, one flush wait for all), one ``put`` (``put_prepared``) each otherwise. Each request is
answered after the write that holds it, so nothing is acknowledged before it is stored as a
single send would be.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from mqcore.broker.ha import HAMaster
from mqcore.broker.schedule import is_timer_message
from mqcore.codec import prepare
from mqcore.errors import CodecError, InvalidArgumentError, MQError
from mqcore.message import Message
from mqcore.protocol.transaction import is_transactional
from mqcore.store import PutResult
from mqcore.storecaps import MultiQueuePut, PreparedPutRequest, PutRequest
from mqcore.uniqkey import uniq_ids

_new_tuple = tuple.__new__

# The broker is typed Any here: mqcore.broker.broker imports this module, and the layers
# contract allows no import back, even for type checking.
Broker = Any

__all__ = ["PreparedSend", "SendRequest", "send_many", "send_one"]


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


class PreparedSend(NamedTuple):
    """A plain single send as one record prepared ahead (the tuple
    :func:`mqcore.codec.prepare` makes of its message) and its ``UNIQ_KEY``, as
    :meth:`~mqcore.broker.Broker.send_prepared` takes it. Whoever makes one vouches that the
    message passes :meth:`~mqcore.broker.Broker.send_message`'s checks of a message and is
    stored as sent (no delay, timer or transaction); its topic and queue are checked here."""

    topic: str
    queue_id: int
    record: Any
    uniq: str | None
    born_host: str | None = None


def _plain(request: SendRequest) -> bool:
    """Whether ``request`` is stored as sent, in its own queue (no half, no holding)."""
    if len(request.messages) != 1 or request.topic.startswith("%"):  # retry, DLQ, system
        return False
    m = request.messages[0]
    return not (m.delay_level > 0 or (m.properties and (is_transactional(m.properties)
                                                        or is_timer_message(m))))  # fmt: skip


def send_many(
    broker: Broker, requests: Sequence[SendRequest | PreparedSend]
) -> list[list[PutResult] | MQError]:
    """See :meth:`mqcore.broker.Broker.send_many`."""
    out: list[list[PutResult] | MQError] = [[] for _ in requests]
    ha = broker.ha
    if isinstance(ha, HAMaster) and broker.config.broker_role == "SYNC_MASTER":
        # Each send waits for a slave of its own and may be answered SLAVE_NOT_AVAILABLE with
        # its results: exactly send_message's semantics, one by one.
        for i, r in enumerate(requests):
            out[i] = _single(broker, r)
        return out
    # The checked plain requests not stored yet, and whether one of them is prepared. A store
    # that takes prepared requests to several queues takes them all in one write (the
    # messages prepared here); for another, a change of kind stores what was gathered
    # first, so the stores keep the requests' order.
    pending: list[tuple[int, Any]] = []
    with_prepared = False
    mixes = broker.takes_prepared_many()
    # The destinations checked in this call: one write serves them all, so a queue that
    # passed for one send passes for the next (a refused one is asked again, for its error).
    passed: set[tuple[str, int]] = set()
    for i, r in enumerate(requests):
        if type(r) is PreparedSend:
            where = (r.topic, r.queue_id)
            if where not in passed:
                try:
                    broker._check_destination(r.topic, r.queue_id)
                except MQError as exc:
                    out[i] = exc
                    continue
                passed.add(where)
            if not (with_prepared or mixes):
                _store(broker, pending, out, False)
                pending = []
            with_prepared = True
            pending.append((i, r))
            continue
        assert isinstance(r, SendRequest)
        if not _plain(r):
            # In its place: what was gathered before it is stored first, so the order of
            # the stores is the order of the requests.
            _store(broker, pending, out, with_prepared)
            pending, with_prepared = [], False
            out[i] = _single(broker, r)
            continue
        try:
            broker._check_send(r.topic, r.queue_id, r.messages)
        except MQError as exc:
            out[i] = exc
            continue
        if with_prepared and not mixes:
            _store(broker, pending, out, True)
            pending, with_prepared = [], False
        pending.append((i, r))
    _store(broker, pending, out, with_prepared)
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


def _single(broker: Broker, r: SendRequest | PreparedSend) -> list[PutResult] | MQError:
    try:
        if type(r) is PreparedSend:
            results: list[PutResult] = broker.send_prepared(
                r.topic, r.queue_id, [r.record], [r.uniq], born_host=r.born_host
            )
            return results
        assert isinstance(r, SendRequest)
        return send_one(broker, r)
    except MQError as exc:
        return exc


def _store(
    broker: Broker,
    pending: list[tuple[int, Any]],
    out: list[list[PutResult] | MQError],
    prepared: bool,
) -> None:
    """Store the checked plain requests ``pending`` (some of them :class:`PreparedSend`
    values when ``prepared``: then all of them, unless the store is a
    :class:`~mqcore.storecaps.PreparedMultiPut`); each slot of ``out`` gets its outcome."""
    if not pending:
        return
    store = broker.store
    outcomes: list[Any]
    if prepared:
        outcomes = _store_prepared(broker, pending)
    elif isinstance(store, MultiQueuePut):
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
            outcomes = store.put_many(puts)
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
    _answered(broker, pending, outcomes, out)


def _store_prepared(broker: Broker, pending: list[tuple[int, Any]]) -> list[Any]:
    """The outcomes of storing the checked plain requests ``pending``, prepared ones among
    them: one ``put_many_prepared`` when the store offers it (a message's record made here as
    the store's ``put_many`` makes it), one ``put_prepared`` each otherwise (all prepared)."""
    store = broker.store
    if not broker.takes_prepared_many():
        outcomes: list[Any] = []
        for _, r in pending:
            try:
                if not broker.takes_prepared():
                    raise InvalidArgumentError(
                        f"store {broker.store_name!r} has no put_prepared(); send the "
                        "messages with send_message()"
                    )
                outcomes.append(
                    store.put_prepared(
                        r.topic, r.queue_id, [r.record], [r.uniq], born_host=r.born_host
                    )
                )
            except MQError as exc:
                outcomes.append(exc)
        return outcomes
    outcomes = [None] * len(pending)
    puts: list[PreparedPutRequest] = []
    into: list[int] = []  # the pending index of each of puts
    for n, (_, r) in enumerate(pending):
        if type(r) is PreparedSend:
            # What PreparedPutRequest(...) makes, without its Python-level __new__ per send.
            puts.append(
                _new_tuple(PreparedPutRequest, (r.topic, r.queue_id, [r.record], [r.uniq],
                                                r.born_host))
            )  # fmt: skip
        else:
            try:
                puts.append(_prepared_request(r))
            except MQError as exc:
                outcomes[n] = exc
                continue
        into.append(n)
    try:
        slots: list[Any] = store.put_many_prepared(puts)
    except MQError as exc:  # nothing of the write is acknowledged
        slots = [exc] * len(puts)
    for n, slot in zip(into, slots, strict=True):
        outcomes[n] = slot
    return outcomes


def _prepared_request(r: SendRequest) -> PreparedPutRequest:
    """``r``'s put as records prepared ahead, as a store's ``put_many`` prepares it."""
    born = r.born_timestamp
    try:
        records = prepare(
            r.messages,
            time.time_ns() // 1_000_000 if born is None else born,
            topic=r.topic,
            reconsume_times=r.reconsume_times,
            sys_flag=r.sys_flag,
        )
    except CodecError as exc:
        raise InvalidArgumentError(str(exc)) from exc
    return PreparedPutRequest(r.topic, r.queue_id, records, uniq_ids(r.messages), r.born_host)


def _answered(
    broker: Broker,
    pending: list[tuple[int, Any]],
    outcomes: list[Any],
    out: list[list[PutResult] | MQError],
) -> None:
    """Each stored request's outcome in its slot of ``out``, and what follows a put: the
    queues' pulls woken, the stored hook, the slaves."""
    done: list[tuple[str, int, list[PutResult]]] = []
    for (i, r), outcome in zip(pending, outcomes, strict=True):
        out[i] = outcome
        if not isinstance(outcome, MQError):
            done.append((r.topic, r.queue_id, outcome))
    if done:
        broker._stored_group(done)
    ha = broker.ha
    if isinstance(ha, HAMaster) and done:
        stored = [result for _, _, results in done for result in results]
        if stored:
            ha.after_put(stored)  # an ASYNC master: wakes the writers to the slaves once
