"""The embedded broker: topics, send, long-polling pull, groups, offsets, send-back, locks.

Every public operation corresponds to a RocketMQ request code, so the server
(:mod:`mqcore.server`, whose request table maps each code to its handler) is a thin layer
that decodes a frame and calls the same method.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import attrs

from mqcore.batch import plain_prefix
from mqcore.broker.clients import ConsumerData, ConsumerManager
from mqcore.broker.codes import ResponseCode
from mqcore.broker.groupcommit import PreparedSend, SendRequest, send_many
from mqcore.broker.ha import HAMaster, HASlave, start_replication
from mqcore.broker.locks import RebalanceLockManager
from mqcore.broker.longpoll import PullWaiters
from mqcore.broker.metadata import MetadataSync
from mqcore.broker.offsets import ConsumerOffsetManager
from mqcore.broker.pop import PopResult, PopService, check_poll
from mqcore.broker.pop_revive import ReviveService
from mqcore.broker.producers import ProducerManager
from mqcore.broker.readpolicy import SLAVE_READ_BROKER_ID, read_from_slave
from mqcore.broker.schedule import DelayService, is_timer_message
from mqcore.broker.topics import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    PERM_INHERIT,
    PERM_RW,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfig,
    TopicManager,
    validate_group,
    validate_topic,
)
from mqcore.broker.transaction import TransactionService
from mqcore.broker.transaction_check import TransactionCheckService
from mqcore.codec import decode_message_id
from mqcore.config import BrokerConfig
from mqcore.errors import (
    BrokerClosedError,
    BrokerError,
    InvalidArgumentError,
    MessageFieldError,
    MessageIllegalError,
    MQError,
)
from mqcore.interfaces import DelayScheduler, TimerScheduler
from mqcore.kernel import Kernel
from mqcore.logs import get_logger
from mqcore.message import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
)
from mqcore.protocol import pop as pop_wire
from mqcore.protocol.channel import ClientChannel
from mqcore.protocol.pull import PullResponse
from mqcore.protocol.route import BrokerData, QueueData, TopicRoute
from mqcore.protocol.transaction import TRANSACTION_TOPICS, is_transactional
from mqcore.store import DEFAULT_MESSAGE_DELAY_LEVEL, GetStatus, PutResult
from mqcore.storecaps import CommitLogBounds, PreparedMultiPut, PreparedWriter
from mqcore.validation import check_sent_message, check_text

__all__ = ["Broker", "PullResponse", "TopicRoute"]

log = get_logger(__name__)

# GetStatus -> response code, as RocketMQ's PullMessageProcessor maps GetMessageStatus.
_PULL_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MSG: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.NO_NEW_MSG: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def _broker_config(config: BrokerConfig | None, options: dict[str, Any]) -> BrokerConfig:
    """The settings of ``Broker(config=..., **options)``; an option it does not know, or
    options beside a config, are refused (never silently dropped)."""
    if config is not None:
        if options:
            raise InvalidArgumentError(
                f"Broker got config= and the keyword settings {', '.join(sorted(options))}; "
                "pass either a BrokerConfig or keywords (attrs.evolve(config, ...) merges them)"
            )
        return config
    known = {a.name for a in attrs.fields(BrokerConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidArgumentError(
            f"unknown broker setting(s) {', '.join(unknown)}; the settings are "
            f"{', '.join(sorted(known))} (see mqcore.config.BrokerConfig)"
        )
    return BrokerConfig(**options)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _not_there(data_dir: Path, *inside: Path) -> list[Path]:
    """The directories a broker would make: the outermost missing one up to ``data_dir``
    when that is missing, else those of ``inside`` that are."""
    missing = None
    for candidate in (data_dir, *data_dir.parents):
        if candidate.exists():
            break
        missing = candidate
    return [missing] if missing is not None else [p for p in inside if not p.exists()]


class Broker:
    """A RocketMQ-style broker running in-process on a store plugin.

    >>> with Broker("data", store="mmap") as broker:        # doctest: +SKIP
    ...     broker.create_topic("T", queue_nums=8)

    :param data_dir: directory holding ``store/`` (messages) and ``config/`` (topics, offsets).
    :param store: name of a registered store plugin (``mmap``, ``lmdb``...).
    :param kernel: the :class:`~mqcore.Kernel` whose plugins to use (a new one by default).
    :param config: settings; or pass :class:`~mqcore.config.BrokerConfig` fields as keywords.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        store: str = "mmap",
        *,
        kernel: Kernel | None = None,
        config: BrokerConfig | None = None,
        **options: Any,
    ) -> None:
        self.config = _broker_config(config, options)
        self.kernel = kernel or Kernel()
        PopService.check_settings(self.config)
        # First, so that an unknown scheduler name fails before any file is opened.
        self.delay_scheduler = self._delay_scheduler()
        self.timer_scheduler = self._timer_scheduler()
        self.kernel.registries["store"].get(store)  # an unknown name: before any file too
        self.data_dir = Path(data_dir)
        # What is refused further on (a slave without its master, a store's own options)
        # leaves nothing behind: the directories made here are removed again.
        made = _not_there(self.data_dir, self.data_dir / "store", self.data_dir / "config")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._open(store)
        except BaseException:
            for path in made:
                shutil.rmtree(path, ignore_errors=True)
            raise
        self._housekeeper = threading.Thread(
            target=self._housekeeping, name=f"mqcore-broker-{self.config.broker_name}", daemon=True
        )
        self._housekeeper.start()
        log.info(
            "broker_started", broker=self.config.broker_name, store=store, data_dir=str(data_dir)
        )

    def _open(self, store: str) -> None:
        # __init__'s part that makes files: the store, the tables, replication.
        store_options = {"store_host": self.config.store_host, **self.config.store_options}
        if self.config.message_delay_level != DEFAULT_MESSAGE_DELAY_LEVEL:
            # The store stamps held messages with their deliver time by the same table (only
            # passed when changed: a third-party store need not know the option).
            store_options.setdefault("message_delay_level", self.config.message_delay_level)
        self.store = self.kernel.open_store(store, self.data_dir / "store", **store_options)
        self.store_name = store
        try:
            self.topics = TopicManager(self.data_dir / "config" / "topics.json")
            # topic -> (topic table version, write queue count) of a topic that passed the
            # destination checks at that version (see _check_destination)
            self._destinations: dict[str, tuple[int, int]] = {}
            # The store last asked about and its answers, per capability (_store_is).
            self._capabilities: tuple[Any, dict[type, bool]] = (None, {})
            self.offsets = ConsumerOffsetManager(self.data_dir / "config" / "consumerOffset.json")
            self.offsets.load()
            self.delay = DelayService(
                self.store,
                self.delay_scheduler,
                self.data_dir / "config",
                self._stored,
                flush_interval_ms=self.config.flush_delay_offset_interval_ms,
                name=self.config.broker_name,
                timer=self.timer_scheduler,
                data_dir=self.data_dir,
            )
        except BaseException:
            self.store.close()
            raise
        self.consumers = ConsumerManager(self.config.channel_expired_timeout_ms)
        #: producer groups and their channels (transaction checks ask one of them)
        self.producers = ProducerManager(self.config.channel_expired_timeout_ms)
        #: transactional messages: halves, commits, rollbacks (see mqcore.broker.transaction)
        self.transactions = TransactionService(
            self.store,
            self.data_dir / "config",
            self._stored,
            self.topics.ensure,
            timeout_ms=self.config.transaction_timeout,
            check_max=self.config.transaction_check_max,
            store_host=self.config.store_host,
            broker_name=self.config.broker_name,
        )
        self.transaction_check = TransactionCheckService(
            self.transactions,
            self.producers,
            self.config.transaction_check_interval,
            name=self.config.broker_name,
        )
        self.locks = RebalanceLockManager(self.config.rebalance_lock_max_live_time_ms)
        self.waiters = PullWaiters()
        self._routes: dict[str, tuple[TopicConfig, TopicRoute, tuple[tuple[int, str], ...]]] = {}
        n = self.config.default_topic_queue_nums
        #: RocketMQ's ``TBW102`` while auto-creation is on (else None): the topic whose route a
        #: producer takes for a topic its name servers do not know yet; its send then creates
        #: the topic here. Registered with name servers and routed, never stored in the table.
        self.auto_create_template: TopicConfig | None = (
            TopicConfig(
                topic_name=AUTO_CREATE_TOPIC_KEY_TOPIC,
                read_queue_nums=n,
                write_queue_nums=n,
                perm=PERM_RW | PERM_INHERIT,
            )
            if self.config.auto_create_topic_enable
            else None
        )
        self._closed = False
        self._stop = threading.Event()
        store_bounds = self.store if isinstance(self.store, CommitLogBounds) else None
        #: what replication moves besides the log: topics, offsets, scheduler progress
        self.metadata = MetadataSync(
            self.topics,
            self.offsets,
            self.delay,
            store_bounds.commitlog_max_offset if store_bounds is not None else lambda: 0,
        )
        #: the replication side (see mqcore.broker.ha), or None
        self.ha: HAMaster | HASlave | None = None
        try:
            self.ha = start_replication(
                self.config,
                self.store,
                store,
                snapshot=self.metadata.snapshot,
                apply=self.metadata.apply,
                appended=self._appended,
            )
            #: pop consumption: checkpoints, acks, invisibility (see mqcore.broker.pop)
            self.pop = PopService(self)
            self.pop_revive = ReviveService(self, self.pop)
            if not self.is_slave:  # a slave's delayed messages are delivered by its master
                # Last: their threads deliver through everything set up above.
                self.delay.start()
                # A slave's halves and pop state are its master's to decide.
                self.transactions.start()
                self.transaction_check.start()
                self.pop_revive.start()
        except BaseException:
            if self.ha is not None:
                self.ha.close()
            self.store.close()
            raise

    def _appended(self, queues: set[tuple[str, int]]) -> None:
        """A slave's replication appended records: wake the pulls held on their queues."""
        for key in queues:
            self.waiters.notify(key)
        self.metadata.log_advanced()

    def _check_kind(self, kind: str, name: str) -> None:
        """Refuse a scheduler named in the wrong setting (registered as the other kind)."""
        other = "timer_scheduler" if kind == "delay_scheduler" else "delay_scheduler"
        names = self.kernel.names
        wanted = str(name).lower()
        if wanted in (n.lower() for n in names(kind)):
            return
        if wanted in (n.lower() for n in names(other)):
            raise InvalidArgumentError(
                f"{kind} {name!r} is a {other.replace('_', ' ')} (registered with "
                f"mqcore_register_{other}s), which does not hold "
                f"{'delay levels' if kind == 'delay_scheduler' else 'timer messages'}; "
                f"set it as {other}, and {kind} to one of: {', '.join(names(kind))}"
            )

    def _delay_scheduler(self) -> DelayScheduler:
        """The scheduler of messages sent with a delay level (and of retries)."""
        cfg = self.config
        self._check_kind("delay_scheduler", cfg.delay_scheduler)
        scheduler = self.kernel.delay_scheduler(
            cfg.delay_scheduler,
            message_delay_level=cfg.message_delay_level,
            **cfg.delay_scheduler_options,
        )
        if not isinstance(scheduler, DelayScheduler):
            raise InvalidArgumentError(
                f"delay_scheduler {cfg.delay_scheduler!r} does not hold delay levels (it "
                "needs schedule_queue and deliver_at, see mqcore.interfaces.DelayScheduler)"
            )
        return scheduler

    def _timer_scheduler(self) -> TimerScheduler | None:
        """The scheduler of timer messages, or None when they are turned off."""
        cfg = self.config
        if not cfg.timer_scheduler:
            return None
        self._check_kind("timer_scheduler", cfg.timer_scheduler)
        timer = self.kernel.timer_scheduler(
            cfg.timer_scheduler,
            precision_ms=cfg.timer_precision_ms,
            max_delay_sec=cfg.timer_max_delay_sec,
            **cfg.timer_scheduler_options,
        )
        if not isinstance(timer, TimerScheduler):
            raise InvalidArgumentError(
                f"timer_scheduler {cfg.timer_scheduler!r} is not a timer scheduler (it needs "
                "max_delay_ms and stats, see mqcore.interfaces.TimerScheduler)"
            )
        return timer

    def timer_stats(self) -> Any:
        """Pending timer messages, the next deliver time and the delivery lag (a
        :class:`~mqcore.plugins.delay_timer_wheel.TimerStats` for the ``timer`` scheduler).

        :raises InvalidArgumentError: when timer messages are turned off.
        """
        self._check_open()
        if self.timer_scheduler is None:
            raise InvalidArgumentError(
                "timer messages are turned off on this broker (timer_scheduler is not set)"
            )
        return self.timer_scheduler.stats()

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._closed

    def close(self) -> None:
        """Wake held pulls, persist offsets, stop background work and close the store."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self.waiters.close()
        self._housekeeper.join(timeout=10)
        try:
            try:
                if self.ha is not None:
                    self.ha.close()
                if not self.is_slave:
                    self.transaction_check.close()
                    self.pop_revive.close()
                    self.delay.close()
            finally:
                self.offsets.persist()
        finally:
            self.store.close()
        log.info("broker_stopped", broker=self.config.broker_name)

    @property
    def is_slave(self) -> bool:
        """True when this broker replicates a master (``broker_role`` SLAVE)."""
        return self.config.broker_role == "SLAVE"

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerClosedError(
                f"broker {self.config.broker_name} is closed",
                code=ResponseCode.SERVICE_NOT_AVAILABLE,
            )

    def _housekeeping(self) -> None:
        offsets_every = self.config.flush_consumer_offset_interval_ms / 1000
        scan_every = self.config.client_scan_interval_ms / 1000
        next_offsets = time.monotonic() + offsets_every
        next_scan = time.monotonic() + scan_every
        while not self._stop.wait(min(offsets_every, scan_every, 1.0)):
            now = time.monotonic()
            try:
                if now >= next_offsets:
                    next_offsets = now + offsets_every
                    self.offsets.persist()
                if now >= next_scan:
                    next_scan = now + scan_every
                    self.consumers.scan_expired()
                    self.producers.scan_expired()
            except Exception:  # keep housekeeping alive; the next round retries
                log.exception("broker_housekeeping_failed")

    # -- topics ------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        queue_nums: int | None = None,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int = PERM_RW,
        order: bool = False,
        attributes: dict[str, str] | None = None,
    ) -> TopicConfig:
        """Create or update a topic (``queue_nums`` sets both read and write queue counts).

        ``attributes`` are RocketMQ 5's topic attributes (``{"message.type": "FIFO"}``); an
        update without them keeps the topic's."""
        self._check_open()
        if name in TRANSACTION_TOPICS:
            raise MessageIllegalError(
                f"The topic[{name}] is conflict with system topic: it holds the broker's "
                "transactional halves and their outcomes; choose another name",
                code=ResponseCode.INVALID_PARAMETER,
            )
        if attributes is None:
            old = self.topics.get(name)
            attributes = dict(old.attributes) if old is not None else {}
        n = queue_nums if queue_nums is not None else self.config.default_topic_queue_nums
        cfg = TopicConfig(
            topic_name=name,
            read_queue_nums=read_queue_nums if read_queue_nums is not None else n,
            write_queue_nums=write_queue_nums if write_queue_nums is not None else n,
            perm=perm,
            order=order,
            attributes=dict(attributes),
        )
        return self.topics.put(cfg)

    update_topic = create_topic

    def delete_topic(self, name: str) -> bool:
        """Remove a topic and its consumer offsets; stored messages age out with retention."""
        self._check_open()
        found = self.topics.delete(name)
        self.offsets.remove_topic(name)
        return found

    def list_topics(self) -> list[TopicConfig]:
        """Every topic's config."""
        self._check_open()
        return self.topics.all()

    def get_route_info_by_topic(self, topic: str, address: str | None = None) -> TopicRoute:
        """Queues of ``topic`` (creating it first when auto-creation is on).

        The route names this broker at ``address`` (a server's listening address), else at
        its ``store_host``.
        """
        self._check_open()
        cfg = self.topics.get(topic)
        if cfg is None and topic == AUTO_CREATE_TOPIC_KEY_TOPIC:
            # Auto-creation as RocketMQ's: a lookup creates nothing (a consumer's or an admin
            # tool's misspelt topic stays unknown); a producer takes this template's route
            # and its first send creates the topic.
            cfg = self.auto_create_template
        if cfg is None:
            cfg = self.topics.require(topic)  # raises TOPIC_NOT_EXIST
        addr = address or self.config.store_host
        members = self._members(addr)
        cached = self._routes.get(topic)
        if cached is not None and cached[0] is cfg and cached[2] == members:
            return cached[1]
        route = TopicRoute(
            topic,
            [BrokerData(self.config.broker_name, members, self.config.broker_cluster_name)],
            [
                QueueData(
                    self.config.broker_name, cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm
                )
            ],
        )
        # Keyed by the config object: an update or delete makes a new one, so never stale.
        self._routes[topic] = (cfg, route, members)
        return route

    def cluster_info(self, address: str | None = None) -> dict[str, Any]:
        """RocketMQ's ``ClusterInfo`` as a name server answers GET_BROKER_CLUSTER_INFO (106):
        this broker's group, its members by id (this broker at ``address``), in its cluster.
        ``mqcore serve`` is its own name server, and RocketMQ's admin tools ask it this first."""
        self._check_open()
        name, cluster = self.config.broker_name, self.config.broker_cluster_name
        addrs = {str(i): a for i, a in self._members(address or self.config.store_host)}
        return {
            "brokerAddrTable": {
                name: {"cluster": cluster, "brokerName": name, "brokerAddrs": addrs}
            },
            "clusterAddrTable": {cluster: [name]},
        }

    def _members(self, addr: str) -> tuple[tuple[int, str], ...]:
        """This broker group's members by id: this broker at ``addr``, with its master or
        its registered slaves (see :mod:`mqcore.broker.ha`)."""
        ha = self.ha
        if ha is None:  # no replication: this broker alone (every embedded send asks)
            return ((self.config.broker_id, addr),)
        found = {self.config.broker_id: addr}
        if isinstance(ha, HAMaster):
            found.update(ha.slaves())
            found[self.config.broker_id] = addr
        elif isinstance(ha, HASlave) and ha.master_address and ha.connected.is_set():
            # Only while the master is reachable: a route naming a dead master would keep
            # clients sending to it and pulling from it.
            found.setdefault(0, ha.master_address)
        return tuple(sorted(found.items()))

    # -- send --------------------------------------------------------------------------------

    def _check_messages(self, topic: str, messages: Sequence[Message]) -> None:
        if not messages:
            raise MessageIllegalError("no message to send", code=ResponseCode.MESSAGE_ILLEGAL)
        limit = self.config.max_message_size
        # The leading messages that pass on the plain rules alone are told apart in one C
        # call (validation.sent_fast_ok is its reference); the rest are checked here.
        start = plain_prefix(messages, topic, limit)
        for m in messages if start == 0 else messages[start:]:
            if m.topic != topic:
                raise MessageIllegalError(
                    f"a batch goes to one topic: {m.topic!r} differs from {topic!r}",
                    code=ResponseCode.MESSAGE_ILLEGAL,
                )
            # A remote client need not be mqcore's: every field is checked again here.
            try:
                check_sent_message(m, topic)
            except InvalidArgumentError as exc:
                raise MessageFieldError(str(exc), code=ResponseCode.MESSAGE_ILLEGAL) from None
            if len(m.body) > limit:
                raise MessageIllegalError(
                    f"the message body size {len(m.body)} is over the max value {limit}",
                    code=ResponseCode.MESSAGE_ILLEGAL,
                )

    def send_message(
        self,
        topic: str,
        queue_id: int,
        messages: Sequence[Message],
        *,
        producer_group: str = "",
        born_timestamp: int | None = None,
        born_host: str | None = None,
        reconsume_times: int = 0,
        sys_flag: int = 0,
    ) -> list[PutResult]:
        """Store a batch in one queue of ``topic``; returns where each message was stored.

        ``sys_flag`` keeps what the sender said of the bodies (bit 0: zlib-compressed, as a
        RocketMQ client sends bodies over 4 KiB); they are stored exactly as sent.
        """
        self._check_send(topic, queue_id, messages)
        if len(messages) == 1 and is_transactional(messages[0].properties):
            # A half: held in the half topic until its producer commits it (RocketMQ reads
            # TRAN_MSG on single sends only).
            results = [
                self.transactions.prepare(
                    topic,
                    queue_id,
                    messages[0],
                    born_timestamp=born_timestamp,
                    born_host=born_host,
                    reconsume_times=reconsume_times,
                    sys_flag=sys_flag,
                )
            ]
            if isinstance(self.ha, HAMaster):
                self.ha.after_put(results)
            return results
        results = self._put(
            topic,
            queue_id,
            messages,
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
            sys_flag=sys_flag,
        )
        if isinstance(self.ha, HAMaster):
            # A SYNC_MASTER raises SlaveNotAcknowledgedError (with the results) here.
            self.ha.after_put(results)
        return results

    def _check_send(self, topic: str, queue_id: int, messages: Sequence[Message]) -> None:
        """What :meth:`send_message` checks before it stores anything (raises its errors)."""
        self._check_destination(topic, queue_id)
        self._check_messages(topic, messages)

    def send_many(
        self, requests: Sequence[SendRequest | PreparedSend]
    ) -> list[list[PutResult] | MQError]:
        """Serve several sends at once (group commit): each request gets what
        :meth:`send_message` would give it, its results or the error it would raise, in order.

        Each is checked as :meth:`send_message` checks it; the plain single messages are
        stored together (one ``put_many`` when the store is a
        :class:`~mqcore.storecaps.MultiQueuePut`, one ``put`` each otherwise). A
        :class:`~mqcore.broker.groupcommit.PreparedSend` is a plain single send already made
        a record (its topic and queue checked as :meth:`send_prepared` checks them); a run of
        them is stored by one ``put_many_prepared`` when the store is a
        :class:`~mqcore.storecaps.PreparedMultiPut`, one ``put_prepared`` each otherwise (the
        store must then be a :class:`~mqcore.storecaps.PreparedWriter`). The rest
        (transactional halves, delayed and timer messages, retry topics, batches) take
        :meth:`send_message` itself, in their place in the order. A refused request gets its
        error and the others are served.
        """
        return send_many(self, requests)

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
    ) -> list[PutResult]:
        for m in messages:
            # Held in the schedule topic (a delay level) or the timer topic until due.
            if m.delay_level > 0 or (m.properties and is_timer_message(m)):
                return self.delay.put(
                    topic,
                    queue_id,
                    messages,
                    born_timestamp=born_timestamp,
                    born_host=born_host,
                    reconsume_times=reconsume_times,
                )
        results = self._store_put(
            topic,
            queue_id,
            messages,
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
            sys_flag=sys_flag,
        )
        self._stored(topic, queue_id, results)
        return results

    def _store_put(
        self,
        topic: str,
        queue_id: int,
        messages: Sequence[Message],
        *,
        born_timestamp: int | None,
        born_host: str | None,
        reconsume_times: int,
        sys_flag: int,
    ) -> list[PutResult]:
        """The store's ``put`` of plain messages (what follows a put is :meth:`_stored`)."""
        # Passed only when set: a store written before the option need not know it.
        extra = {"sys_flag": sys_flag} if sys_flag else {}
        results: list[PutResult] = self.store.put(
            topic,
            queue_id,
            messages,
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
            **extra,
        )
        return results

    def _stored(self, topic: str, queue_id: int, results: list[PutResult]) -> None:
        self.waiters.notify((topic, queue_id))
        ha = self.ha
        if isinstance(ha, HAMaster):
            ha.notify()  # every put, delayed deliveries and send-backs too, reaches the slaves
        hook = self.kernel.hook.mqcore_messages_stored
        if hook.get_hookimpls():
            hook(topic=topic, queue_id=queue_id, results=results)

    def _stored_group(self, puts: Sequence[tuple[str, int, list[PutResult]]]) -> None:
        """:meth:`_stored` of several puts of one write (group commit): each queue's pulls
        woken once, the slaves once, the stored hook once per put."""
        notify = self.waiters.notify
        for key in dict.fromkeys((topic, queue_id) for topic, queue_id, _ in puts):
            notify(key)
        ha = self.ha
        if isinstance(ha, HAMaster):
            ha.notify()
        hook = self.kernel.hook.mqcore_messages_stored
        if hook.get_hookimpls():
            for topic, queue_id, results in puts:
                hook(topic=topic, queue_id=queue_id, results=results)

    def _store_is(self, capability: type) -> bool:
        """Whether the store is a ``capability`` (a :mod:`mqcore.storecaps` protocol); asked
        once per store object, as a runtime protocol check costs more than the send it
        decides."""
        cache = self._capabilities
        if cache[0] is not self.store:
            cache = self._capabilities = (self.store, {})
        known = cache[1].get(capability)
        if known is None:
            known = cache[1][capability] = isinstance(self.store, capability)
        return known

    def takes_prepared(self) -> bool:
        """Whether the store is a :class:`~mqcore.storecaps.PreparedWriter` (for
        :meth:`send_prepared`)."""
        return self._store_is(PreparedWriter)

    def takes_prepared_many(self) -> bool:
        """Whether the store is a :class:`~mqcore.storecaps.PreparedMultiPut` (for
        :meth:`send_many`'s prepared sends)."""
        return self._store_is(PreparedMultiPut)

    def send_prepared(
        self,
        topic: str,
        queue_id: int,
        prepared: list[Any],
        uniqs: list[str | None] | None,
        *,
        born_host: str | None = None,
    ) -> list[PutResult]:
        """Store records prepared ahead (:func:`mqcore.batch.prepare_sent_batch`'s of a
        sent batch) as :meth:`send_message` stores the messages they stand for.

        The caller vouches that those messages pass :meth:`send_message`'s checks of a
        message and are stored plainly (no delay level, timer or transaction); the topic
        and queue are checked here as :meth:`send_message` checks them, with the same
        errors. The store must be a :class:`~mqcore.storecaps.PreparedWriter`.
        """
        self._check_destination(topic, queue_id)
        if not self.takes_prepared():
            raise InvalidArgumentError(
                f"store {self.store_name!r} has no put_prepared(); send the messages with "
                "send_message()"
            )
        store = cast(PreparedWriter, self.store)
        results = store.put_prepared(topic, queue_id, prepared, uniqs, born_host=born_host)
        self._stored(topic, queue_id, results)
        if isinstance(self.ha, HAMaster):
            # A SYNC_MASTER raises SlaveNotAcknowledgedError (with the results) here.
            self.ha.after_put(results)
        return results

    def _check_destination(self, topic: str, queue_id: int) -> None:
        """What :meth:`send_message` checks of where a send goes (a master, a topic that
        takes sends, created when allowed, a queue in range); raises its errors."""
        self._check_open()
        if self.is_slave:
            raise BrokerError(
                f"broker {self.config.broker_name} (id {self.config.broker_id}) is a SLAVE and "
                "takes no writes; send to its master",
                code=ResponseCode.SERVICE_NOT_AVAILABLE,
            )
        # The checks of the topic itself are asked once per version of the topic table: any
        # change to it (a topic created, updated, its permission changed, deleted) bumps the
        # version, and an entry of an older version is asked again. The version is read
        # before the table, so an entry never outlives the change it raced with.
        version = self.topics.version
        known = self._destinations.get(topic)
        if known is not None and known[0] == version:
            writable = known[1]
        else:
            writable = self._topic_writable(topic)
            if self.topics.version == version:
                self._destinations[topic] = (version, writable)
        if not 0 <= queue_id < writable:
            raise BrokerError(
                f"request queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"writeQueueNums:[{writable}]",
                code=ResponseCode.SYSTEM_ERROR,
            )

    def _topic_writable(self, topic: str) -> int:
        """The write queue count of ``topic`` once it passed :meth:`_check_destination`'s
        checks of a topic (created when allowed); raises their errors."""
        validate_topic(topic)
        if topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith(pop_wire.REVIVE_TOPIC_PREFIX):
            raise MessageIllegalError(
                f"Sending message to topic[{topic}] is forbidden.", code=ResponseCode.NO_PERMISSION
            )
        cfg = self.topics.get(topic)
        if cfg is None and (
            self.config.auto_create_topic_enable or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        ):
            retry = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            cfg = self.topics.ensure(
                topic,
                1 if topic.startswith("%") else self.config.default_topic_queue_nums,
                auto=not retry,
            )
        if cfg is None or not cfg.writable:
            cfg = self.topics.require(topic, write=True)
        return cfg.write_queue_nums

    # -- pull --------------------------------------------------------------------------------

    def _message_filter(self, sub_expression: str | None, expression_type: str) -> Any:
        if expression_type.upper() == "TAG" and (sub_expression or "*").strip() in ("", "*"):
            return None
        return self.kernel.filter(expression_type, sub_expression)

    def _get(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_msg_nums: int,
        flt: Any,
        raw: bool,
    ) -> PullResponse:
        got = self.store.get_raw(
            topic, queue_id, queue_offset, max_count=max_msg_nums, message_filter=flt
        )
        # Raw records view the store's maps: only a caller that writes them out at once (the
        # remoting server) may hold them; everyone else gets copies that outlive the store.
        records = got.records if raw else [bytes(r) for r in got.records]
        if got.status is GetStatus.NO_MESSAGE_IN_QUEUE:
            code = (
                ResponseCode.PULL_OFFSET_MOVED if queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
            )
        else:
            code = _PULL_CODES[got.status]
        return PullResponse(code, got.next_offset, got.min_offset, got.max_offset, records)

    def pull_message(
        self,
        consumer_group: str,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_msg_nums: int = 32,
        *,
        sub_expression: str | None = "*",
        expression_type: str = "TAG",
        suspend_timeout_ms: int | None = None,
        commit_offset: int | None = None,
        client_host: str = "",
        raw: bool = False,
        cancelled: Callable[[], bool] | None = None,
    ) -> PullResponse:
        """Read up to ``max_msg_nums`` messages from one queue.

        With ``suspend_timeout_ms``, a pull that finds nothing new is held until a message
        arrives for the queue (it returns at once) or the timeout passes (long polling), at
        most ``suspend_max_time_ms``. ``commit_offset`` also commits the group's offset, as
        RocketMQ's pull does. ``cancelled`` (in-process callers only) ends a held pull early
        once it returns true; it is checked when the queue's waiters are woken
        (``broker.waiters.notify((topic, queue_id))``), so a client that shuts down need not
        wait for its own long poll.
        """
        self._check_open()
        cfg = self.topics.require(topic, read=True)
        if not 0 <= queue_id < cfg.read_queue_nums:
            raise BrokerError(
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"readQueueNums:[{cfg.read_queue_nums}] consumer:[{client_host}]",
                code=ResponseCode.SYSTEM_ERROR,
            )
        # A slave answers every pull, and without slave_read_enable suggests the master for
        # the next one (suggest_which_broker_id 0), as RocketMQ 4.x's does: its
        # PULL_RETRY_IMMEDIATELY for a slave that may not serve reads is overwritten by the
        # status of the read. A consumer pulls from a slave only when its master is gone
        # from the route (or when slave_read_enable sends a lagging reader there), so the
        # messages of a group whose master is down stay readable.
        if consumer_group in self.pop.pop_groups:
            raise BrokerError(
                f"group {consumer_group} consumes by popping; a group uses pop or classic "
                "consumption, not both: pull with another group",
                code=ResponseCode.NO_PERMISSION,
            )
        flt = self._message_filter(sub_expression, expression_type)
        cap = self.config.max_transfer_count_on_message_in_memory
        if cap > 0:
            max_msg_nums = min(max_msg_nums, cap)
        if commit_offset is not None and commit_offset >= 0 and not self.is_slave:
            # A slave's offsets are its master's (synchronised): commits go to the master.
            self.offsets.commit_offset(client_host, consumer_group, topic, queue_id, commit_offset)
        resp = self._get(topic, queue_id, queue_offset, max_msg_nums, flt, raw)
        if resp.code is ResponseCode.PULL_NOT_FOUND and suspend_timeout_ms:
            store = self.store
            hold_ms = min(suspend_timeout_ms, self.config.suspend_max_time_ms)
            arrived = self.waiters.wait_for(
                (topic, queue_id),
                lambda: (
                    self._closed
                    or (cancelled is not None and cancelled())
                    or store.max_offset(topic, queue_id) > queue_offset
                ),
                hold_ms / 1000,
            )
            if arrived and not self._closed:
                resp = self._get(topic, queue_id, queue_offset, max_msg_nums, flt, raw)
        if (
            resp.records
            and self.config.slave_read_enable
            and read_from_slave(self.store, self.config, resp.records)
        ):
            resp = attrs.evolve(resp, suggest_which_broker_id=SLAVE_READ_BROKER_ID)
        return resp

    # -- offsets -----------------------------------------------------------------------------

    def query_consumer_offset(self, consumer_group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset, or -1 (QUERY_NOT_FOUND).

        As RocketMQ: with nothing committed and the queue's first message still stored
        (min offset 0), the answer is 0, so a new group reads the queue from its start.
        """
        self._check_open()
        offset = self.offsets.query_offset(consumer_group, topic, queue_id)
        if offset >= 0:
            return int(offset)
        return 0 if self.store.min_offset(topic, queue_id) <= 0 else -1

    def update_consumer_offset(
        self,
        consumer_group: str,
        topic: str,
        queue_id: int,
        commit_offset: int,
        client_host: str = "",
        *,
        reset_clients: bool = True,
    ) -> None:
        """Set the group's next offset to consume in the queue.

        Called by an application or an operator (``reset_clients``, the default), the group's
        running members are told to drop what they hold of the queue and pull from the new
        offset (RESET_CONSUMER_CLIENT_OFFSET), so that their next offset commit does not
        undo it. Consumers committing their own progress pass ``reset_clients=False``.
        """
        self._check_open()
        self.offsets.commit_offset(
            client_host, consumer_group, topic, queue_id, commit_offset, reset=reset_clients
        )
        if reset_clients:
            mq = MessageQueue(topic, self.config.broker_name, queue_id)
            self.consumers.notify_reset(consumer_group, topic, {mq: commit_offset})
            log.info(
                "consumer_offset_reset", group=consumer_group, topic=topic, queue_id=queue_id,
                offset=commit_offset,
            )  # fmt: skip

    def reset_offset_by_timestamp(
        self, consumer_group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move the group's offset in every queue of ``topic`` to the first message stored at
        or after ``timestamp_ms`` (``-1``: the end of each queue), and tell the group's running
        members to follow (RocketMQ's ``resetOffsetByTimestamp``). Without ``force`` an offset
        only moves back. Returns the new offset of each queue.
        """
        self._check_open()
        validate_group(consumer_group)
        cfg = self.topics.require(topic, read=True)
        table: dict[MessageQueue, int] = {}
        for queue_id in range(cfg.read_queue_nums):
            if timestamp_ms < 0:
                target = int(self.store.max_offset(topic, queue_id))
            else:
                target = int(self.store.offset_for_timestamp(topic, queue_id, timestamp_ms))
            current = self.offsets.query_offset(consumer_group, topic, queue_id)
            if not force and 0 <= current < target:
                target = current
            self.offsets.commit_offset("", consumer_group, topic, queue_id, target, reset=True)
            table[MessageQueue(topic, self.config.broker_name, queue_id)] = target
        told = self.consumers.notify_reset(consumer_group, topic, table)
        log.info(
            "consumer_offsets_reset", group=consumer_group, topic=topic,
            timestamp_ms=timestamp_ms, clients=told,
        )  # fmt: skip
        return table

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        """Smallest offset stored in the queue."""
        self._check_open()
        return int(self.store.min_offset(topic, queue_id))

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last offset of the queue."""
        self._check_open()
        return int(self.store.max_offset(topic, queue_id))

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """First offset stored at or after ``timestamp`` (ms)."""
        self._check_open()
        return int(self.store.offset_for_timestamp(topic, queue_id, timestamp))

    def get_earliest_msg_storetime(self, topic: str, queue_id: int) -> int:
        """Store time of the oldest message of the queue, or -1 when it is empty."""
        self._check_open()
        got = self.store.get(topic, queue_id, self.store.min_offset(topic, queue_id), max_count=1)
        return got.messages[0].store_timestamp if got.messages else -1

    # -- queries -----------------------------------------------------------------------------

    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int = 2**63 - 1,
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose keys include ``key``, or whose unique id (``UNIQ_KEY``)
        is ``key``, stored within the time range (stores index both, as RocketMQ's index)."""
        self._check_open()
        found = self.store.lookup(topic, key, max_num)
        return [m for m in found if begin_timestamp <= m.store_timestamp <= end_timestamp]

    def query_message_by_uniq_key(self, topic: str, uniq_key: str) -> MessageExt:
        """The first message of ``topic`` stored with unique id ``uniq_key`` (the ``msg_id`` a
        producer's send returned), through the key index (RocketMQ's ``queryMessageByUniqKey``).

        Retries and dead letters keep the id but live in their own topics
        (``%RETRY%<group>``, ``%DLQ%<group>``): ask those topics for those copies.
        """
        for msg in self.query_message(topic, uniq_key):
            if msg.get_property(PROPERTY_UNIQ_KEY) == uniq_key:
                return msg
        raise BrokerError(
            f"no message of topic {topic} with unique id {uniq_key}",
            code=ResponseCode.QUERY_NOT_FOUND,
        )

    def view_message_by_id(self, msg_id: str) -> MessageExt:
        """The message with offset id ``msg_id`` (store host + commit-log offset); a unique id
        is looked up with :meth:`query_message_by_uniq_key`."""
        self._check_open()
        _, offset = decode_message_id(msg_id)
        msg: MessageExt | None = self.store.message_at(offset)
        if msg is None or msg.offset_msg_id != msg_id.upper():
            # An id of another store host, or a unique id read as an offset id.
            raise BrokerError(f"no message with id {msg_id}", code=ResponseCode.QUERY_NOT_FOUND)
        return msg

    def record_at(self, commitlog_offset: int) -> bytes | None:
        """The stored bytes of the record at ``commitlog_offset`` (None: no record there)."""
        self._check_open()
        msg: MessageExt | None = self.store.message_at(commitlog_offset)
        return None if msg is None else msg.record_bytes()

    # -- consumer groups ---------------------------------------------------------------------

    def heartbeat(
        self,
        client_id: str,
        consumer_data: Iterable[ConsumerData] = (),
        producer_groups: Iterable[str] = (),
        channel: ClientChannel | None = None,
    ) -> None:
        """Register (or refresh) a client and its subscriptions.

        ``channel`` is how the broker reaches the client: it is told when the membership of
        one of its groups changes (RocketMQ's NOTIFY_CONSUMER_IDS_CHANGED) and when an operator
        resets its group's offsets (RESET_CONSUMER_CLIENT_OFFSET).
        """
        self._check_open()
        for group in producer_groups:
            validate_group(group)
            self.producers.register(client_id, group, channel)
        for data in consumer_data:
            validate_group(data.group_name)
            if data.message_model is MessageModel.CLUSTERING:
                # As RocketMQ: each clustering group gets its retry topic on first heartbeat.
                self.topics.ensure(RETRY_GROUP_TOPIC_PREFIX + data.group_name, 1)
            self.consumers.register(client_id, data, channel)

    def unregister_client(
        self,
        client_id: str,
        consumer_group: str | None = None,
        producer_group: str | None = None,
    ) -> None:
        """Remove a client from its group (it shut down)."""
        self._check_open()
        if consumer_group:
            self.consumers.unregister(client_id, consumer_group)
        if producer_group:
            self.producers.unregister(client_id, producer_group)

    def get_consumer_list_by_group(self, consumer_group: str) -> list[str]:
        """Client ids of the group's live members, sorted."""
        self._check_open()
        return self.consumers.client_ids(consumer_group)

    # -- retry -------------------------------------------------------------------------------

    def consumer_send_msg_back(
        self,
        group: str,
        offset: int,
        delay_level: int = 0,
        origin_msg_id: str | None = None,
        origin_topic: str | None = None,
        max_reconsume_times: int | None = None,
    ) -> PutResult:
        """Send a message a consumer failed to process back for a later retry.

        It goes to ``%RETRY%<group>`` with delay level ``3 + reconsume_times`` (unless one is
        given), or to ``%DLQ%<group>`` once it was retried ``max_reconsume_times`` times or
        ``delay_level`` is negative. A retry is held by the delay scheduler (in the schedule
        topic, so the result names that record) until its level's delay has passed.
        """
        self._check_open()
        validate_group(group)
        msg = self.store.message_at(offset)
        if msg is None:
            raise BrokerError(
                f"look message by offset failed, {offset}", code=ResponseCode.SYSTEM_ERROR
            )
        limit = (
            self.config.max_reconsume_times if max_reconsume_times is None else max_reconsume_times
        )
        # The request's fields come from the client: checked before they enter a record.
        if origin_topic:
            validate_topic(origin_topic)
        if origin_msg_id:
            try:
                check_text("origin message id", origin_msg_id)
            except InvalidArgumentError as exc:
                raise MessageFieldError(str(exc), code=ResponseCode.MESSAGE_ILLEGAL) from None
        props = msg.properties
        props.setdefault(PROPERTY_RETRY_TOPIC, origin_topic or msg.topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, origin_msg_id or msg.offset_msg_id)
        times = msg.reconsume_times
        if times >= limit or delay_level < 0:
            topic = DLQ_GROUP_TOPIC_PREFIX + group
            delay_level = 0
        else:
            topic = RETRY_GROUP_TOPIC_PREFIX + group
            delay_level = delay_level or 3 + times
        self.topics.ensure(topic, 1)
        retry = msg.to_message(topic=topic, properties=props, delay_level=delay_level)
        # As RocketMQ: the copy keeps its producer's born host and time, not this broker's.
        result = self._put(
            topic,
            0,
            [retry],
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=times + 1,
        )[0]
        log.info("message_sent_back", group=group, topic=topic, reconsume_times=times + 1)
        return result

    # -- transactions ------------------------------------------------------------------------

    def end_transaction(
        self,
        producer_group: str,
        tran_state_table_offset: int,
        commit_log_offset: int,
        commit_or_rollback: int,
        *,
        from_transaction_check: bool = False,
        msg_id: str = "",
        remark: str | None = None,
    ) -> PutResult | None:
        """END_TRANSACTION: commit (``TRANSACTION_COMMIT_TYPE``: the message is stored in its
        real topic, returned), roll back (``TRANSACTION_ROLLBACK_TYPE``) or leave undecided
        (``TRANSACTION_NOT_TYPE``) the half a transactional send stored at
        ``commit_log_offset`` (its half queue offset: ``tran_state_table_offset``).

        :raises BrokerError: SLAVE_NOT_AVAILABLE on a slave; SYSTEM_ERROR for no such half,
            another group's, or a transaction decided already.
        """
        self._check_open()
        if self.is_slave:
            raise BrokerError(
                f"broker {self.config.broker_name} is a SLAVE: end transaction is forbidden; "
                "send it to its master",
                code=ResponseCode.SLAVE_NOT_AVAILABLE,
            )
        if remark:
            log.warning("transaction_end_remark", group=producer_group, msg_id=msg_id,
                        remark=remark)  # fmt: skip
        return self.transactions.end(
            producer_group,
            tran_state_table_offset,
            commit_log_offset,
            commit_or_rollback,
            from_transaction_check=from_transaction_check,
        )

    # -- orderly consumption -----------------------------------------------------------------

    def lock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """Lock queues for ``client_id``; returns the ones it now holds."""
        self._check_open()
        return self.locks.try_lock_batch(consumer_group, mqs, client_id)

    def unlock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> None:
        """Release queue locks held by ``client_id``."""
        self._check_open()
        self.locks.unlock_batch(consumer_group, mqs, client_id)

    # -- pop consumption ---------------------------------------------------------------------

    def pop_message(
        self,
        consumer_group: str,
        topic: str,
        queue_id: int,
        max_msg_nums: int,
        invisible_time_ms: int,
        *,
        poll_time_ms: int = 0,
        born_time: int = 0,
        expression: str | None = "*",
        expression_type: str = "TAG",
        order: bool = False,
        init_mode: int = pop_wire.INIT_MODE_MAX,
        cancelled: Callable[[], bool] | None = None,
    ) -> PopResult:
        """Receive up to ``max_msg_nums`` messages of ``topic`` (every queue with
        ``queue_id`` -1), invisible to the group for ``invisible_time_ms`` (POP_MESSAGE).

        With nothing to pop, the call is held up to ``poll_time_ms`` (at most
        ``suspend_max_time_ms``) for a message to arrive; the answer is then
        POLLING_TIMEOUT. ``order`` pops orderly: a queue with unacked invisible messages of
        the group gives nothing more until they are acked or their time is over.
        """
        self._check_open()
        check_poll(born_time, poll_time_ms)
        hold_s = min(max(poll_time_ms, 0), self.config.suspend_max_time_ms) / 1000
        deadline = time.monotonic() + hold_s
        keys = self.pop.watch_keys(consumer_group, topic, queue_id)
        while True:
            seqs = [self.waiters.sequence(k) for k in keys]
            result = self.pop.pop(
                consumer_group, topic, queue_id, max_msg_nums, invisible_time_ms,
                expression=expression, expression_type=expression_type, order=order,
                init_mode=init_mode,
            )  # fmt: skip
            remaining = deadline - time.monotonic()
            if (
                result.records
                or remaining <= 0
                or self._closed
                or (cancelled is not None and cancelled())
            ):
                return result
            self._wait_any(keys, seqs, remaining)

    def _wait_any(self, keys: list[Any], seqs: list[int], timeout_s: float) -> None:
        """Block until one of ``keys`` is notified (after the ``seqs`` read), or time out."""
        event = threading.Event()
        wake = event.set
        parked = [k for k, seq in zip(keys, seqs, strict=True) if self.waiters.park(k, seq, wake)]
        try:
            if len(parked) == len(keys):  # else one was notified already: look again
                event.wait(timeout_s)
        finally:
            for k in parked:
                self.waiters.unpark(k, wake)

    def ack_message(
        self, consumer_group: str, topic: str, queue_id: int, extra_info: str, offset: int
    ) -> None:
        """Ack a popped message by its receipt handle (ACK_MESSAGE).

        :raises ReceiptHandleError: the handle is malformed (INVALID_PARAMETER), or names no
            invisible message of the group: expired, settled, forged (NO_MESSAGE).
        """
        self.pop.ack(consumer_group, topic, queue_id, extra_info, offset)

    def batch_ack_message(self, acks: Iterable[pop_wire.BatchAck]) -> int:
        """Ack many popped messages (BATCH_ACK_MESSAGE); returns how many were acked."""
        return self.pop.batch_ack(acks)

    def change_invisible_time(
        self,
        consumer_group: str,
        topic: str,
        queue_id: int,
        extra_info: str,
        offset: int,
        invisible_time_ms: int,
    ) -> tuple[int, int, int]:
        """Make a popped message invisible for ``invisible_time_ms`` from now
        (CHANGE_MESSAGE_INVISIBLETIME); returns the new handle's popTime, invisibleTime and
        reviveQid. The old handle is dead from then on."""
        return self.pop.change_invisible_time(
            consumer_group, topic, queue_id, extra_info, offset, invisible_time_ms
        )

    def notification(
        self, consumer_group: str, topic: str, queue_id: int, poll_time_ms: int = 0
    ) -> bool:
        """True when ``topic`` has messages the group could pop now (NOTIFICATION), held up
        to ``poll_time_ms`` for one to arrive."""
        self._check_open()
        self.topics.require(topic, read=True)
        keys = self.pop.watch_keys(consumer_group, topic, queue_id)
        deadline = time.monotonic() + min(poll_time_ms, self.config.suspend_max_time_ms) / 1000
        while True:
            seqs = [self.waiters.sequence(k) for k in keys]
            if self.pop.has_message(consumer_group, topic, queue_id):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                return False
            self._wait_any(keys, seqs, remaining)
