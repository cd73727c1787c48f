"""Configuration values (attrs, keyword-only), with RocketMQ's defaults and names in snake case."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import attrs

__all__ = ["BROKER_ROLES", "KernelConfig"]

#: RocketMQ's BrokerRole names.
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


def _physical_memory() -> int:
    """The machine's physical memory in bytes (RocketMQ's TOTAL_PHYSICAL_MEMORY_SIZE)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # not POSIX: assume 8 GiB
        return 8 * 1024**3


def _role(value: str) -> str:
    role = str(value).strip().upper()
    if role not in BROKER_ROLES:
        from mqcore.errors import InvalidArgumentError

        raise InvalidArgumentError(f"broker_role {value!r} is not one of {', '.join(BROKER_ROLES)}")
    return role


def _tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class KernelConfig:
    """How a :class:`~mqcore.kernel.Kernel` loads plugins.

    :param plugins: extra plugins: module names to import, or objects with hook
        implementations; registered after bundled and entry-point plugins.
    :param disabled_plugins: plugin names to block (bundled or third-party), added to
        ``MQCORE_DISABLED_PLUGINS``.
    :param autoload: load entry points of group ``mqcore``; ``None`` follows
        ``MQCORE_DISABLE_PLUGIN_AUTOLOAD``.
    :param options: free-form settings handed to plugins through ``mqcore_configure``.
    """

    plugins: tuple[Any, ...] = attrs.field(default=(), converter=_tuple)
    disabled_plugins: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    autoload: bool | None = None
    options: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class BrokerConfig:
    """Settings of an embedded :class:`~mqcore.broker.Broker` (RocketMQ's names, snake case).

    :param broker_name: name clients see in :class:`~mqcore.MessageQueue` (``brokerName``).
    :param broker_ip: address written into records as the store host (``brokerIP1``).
    :param listen_port: port written with it (``listenPort``).
    :param auto_create_topic_enable: create an unknown topic when a producer first sends to
        it, with ``default_topic_queue_nums`` queues; the producer finds no route for it and
        takes the template topic ``TBW102``'s (RocketMQ's ``autoCreateTopicEnable``, true by
        default as there; a route lookup alone creates nothing). Each topic so created is logged
        once (``topic_auto_created``). Production deployments usually turn it off: a misspelt
        topic name then fails instead of quietly becoming a new topic.
    :param default_topic_queue_nums: queues of a topic created without a count (4: what a
        RocketMQ topic auto-created by a client's first send gets).
    :param max_message_size: largest body accepted, bytes (``maxMessageSize``, 4 MiB).
    :param suspend_max_time_ms: the longest a pull with nothing new is held (long polling),
        whatever the client asks (30 s: RocketMQ clients give up on a held pull after 30 s,
        ``CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND``; push consumers ask for 15 s).
    :param channel_expired_timeout_ms: a client silent this long is dropped (120 s).
    :param flush_consumer_offset_interval_ms: how often consumer offsets are persisted (5 s).
    :param rebalance_lock_max_live_time_ms: queue locks of orderly consumers expire (60 s).
    :param max_reconsume_times: sends back beyond this go to the DLQ (16).
    :param delay_scheduler: name of the registered delay scheduler holding delayed messages
        and retries (``delay_levels``, RocketMQ's levels).
    :param message_delay_level: the delay levels, RocketMQ's ``messageDelayLevel`` string.
    :param flush_delay_offset_interval_ms: how often the scheduler's progress is persisted
        (``flushDelayOffsetInterval``, 10 s).
    :param delay_scheduler_options: extra options for the scheduler (e.g. ``clock``).
    :param timer_scheduler: name of the registered scheduler holding timer messages
        (RocketMQ 5's ``TIMER_DELIVER_MS``...): ``timer``, the timing wheel, by default;
        ``None`` or ``""`` turns timer messages off (a send of one is then refused), as
        RocketMQ's ``timerWheelEnable=false``.
    :param timer_precision_ms: width of a wheel slot (``timerPrecisionMs``, 1 s).
    :param timer_max_delay_sec: the furthest ahead a timer may be set
        (``timerMaxDelaySec``, 3 days); a send beyond it is refused.
    :param timer_scheduler_options: extra options for the timer scheduler (e.g. ``clock``).
    :param store_options: extra options for the store plugin.
    :param broker_role: ``ASYNC_MASTER`` (default), ``SYNC_MASTER`` or ``SLAVE``
        (``brokerRole``); see ``docs/ha.md``. A slave needs a store that can replicate (mmap).
    :param broker_id: 0 for a master, 1 and up for slaves (``brokerId``).
    :param ha_listen_port: a master's port for its slaves (``haListenPort``); ``None``: no
        replication port (``mqcore serve`` defaults it to its port + 1), 0: any free port.
    :param ha_listen_host: the address that port is bound to (default: ``broker_ip``;
        ``mqcore serve`` binds it where ``--listen`` is bound, e.g. ``0.0.0.0``).
    :param ha_master_address: a slave's ``host:port`` of its master's replication port.
    :param ha_tls: replication over TLS: a master serves its replication port with TLS only
        (``ha_tls_cert``, ``ha_tls_key`` needed), a slave connects with TLS, checking the
        master against ``ha_tls_ca`` (else the system's CAs). ``mqcore serve --tls-mode
        enforcing`` turns it on with its own certificate files.
    :param ha_tls_cert: the certificate (PEM) a master shows its slaves, and a slave its master.
    :param ha_tls_key: that certificate's private key (PEM).
    :param ha_tls_ca: on a master, slaves must show a certificate this CA signed; on a slave,
        the CA the master's certificate is checked against.
    :param sync_flush_timeout_ms: how long a SYNC_MASTER waits for a slave to have a send's
        bytes before answering FLUSH_SLAVE_TIMEOUT (``syncFlushTimeout``, 5 s).
    :param ha_max_gap_bytes: a slave further behind than this counts as not available
        (``haSlaveFallbehindMax``, 256 MiB).
    :param ha_transfer_batch_size: bytes a master sends a slave at most per frame
        (``haTransferBatchSize``, 32 KiB).
    :param ha_send_heartbeat_interval_ms: a slave reports its offset at least this often
        (``haSendHeartbeatInterval``, 5 s).
    :param ha_housekeeping_interval_ms: a master drops a slave silent this long
        (``haHousekeepingInterval``, 20 s).
    :param slave_synchronize_interval_ms: how often a slave copies its master's topics,
        consumer offsets and delay progress (RocketMQ's SlaveSynchronize, 10 s).
    :param slave_read_enable: let a master (and a slave) suggest the slave to consumers that
        lag (``slaveReadEnable``, off). A slave serves pulls either way, as RocketMQ 4.x's
        does; without it, it suggests the master for the next pull.
    :param access_message_in_memory_max_ratio: percent of physical memory a consumer may lag
        behind before it is sent to the slave (``accessMessageInMemoryMaxRatio``, 40).
    :param total_physical_memory_bytes: the memory figure of that rule (default: the
        machine's).
    :param max_transfer_count_on_message_in_memory: the most messages one pull returns,
        whatever the client asks (``maxTransferCountOnMessageInMemory``); 0, the default,
        caps nothing but the bytes. Apache RocketMQ answers at most 32, so clients (and the
        Spark source) that read against it are tested with 32 here.
    :param namesrv_addr: name servers (``host:port``, ``;``-separated) a served broker
        registers with (``namesrvAddr``); ``None``: it is its own name server.
    :param register_name_server_period_ms: how often it registers (30 s; RocketMQ's
        ``registerNameServerPeriod``), and at once when its topics change.
    :param transaction_timeout: ms before an undecided transactional (half) message is first
        checked with its producer (``transactionTimeOut``, 6 s); a message's
        ``CHECK_IMMUNITY_TIME_IN_SECONDS`` property overrides it.
    :param transaction_check_interval: ms between check passes
        (``transactionCheckInterval``, 60 s as RocketMQ 4.x).
    :param transaction_check_max: checks of one half before it is given up and moved to
        ``TRANS_CHECK_MAX_TIME_TOPIC`` (``transactionCheckMax``, 15).
    :param revive_queue_num: queues of the revive topic, where pop checkpoints and acks are
        kept (``reviveQueueNum``, 8).
    :param revive_interval_ms: how often expired invisible pop messages are revived
        (``reviveInterval``, 1 s).
    """

    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    broker_ip: str = "127.0.0.1"
    listen_port: int = 10911
    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = 4
    max_message_size: int = 4 * 1024 * 1024
    suspend_max_time_ms: int = 30_000
    channel_expired_timeout_ms: int = 120_000
    client_scan_interval_ms: int = 10_000
    flush_consumer_offset_interval_ms: int = 5_000
    rebalance_lock_max_live_time_ms: int = 60_000
    max_reconsume_times: int = 16
    delay_scheduler: str = "delay_levels"
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    flush_delay_offset_interval_ms: int = 10_000
    delay_scheduler_options: dict[str, Any] = attrs.field(factory=dict)
    timer_scheduler: str | None = "timer"
    timer_precision_ms: int = 1000
    timer_max_delay_sec: int = 3 * 24 * 3600
    timer_scheduler_options: dict[str, Any] = attrs.field(factory=dict)
    store_options: dict[str, Any] = attrs.field(factory=dict)
    broker_role: str = attrs.field(default="ASYNC_MASTER", converter=_role)
    ha_listen_port: int | None = None
    ha_listen_host: str | None = None
    ha_master_address: str | None = None
    ha_tls: bool = False
    ha_tls_cert: str | None = None
    ha_tls_key: str | None = None
    ha_tls_ca: str | None = None
    sync_flush_timeout_ms: int = 5_000
    ha_max_gap_bytes: int = 256 * 1024 * 1024
    ha_transfer_batch_size: int = 32 * 1024
    ha_send_heartbeat_interval_ms: int = 5_000
    ha_housekeeping_interval_ms: int = 20_000
    slave_synchronize_interval_ms: int = 10_000
    slave_read_enable: bool = False
    access_message_in_memory_max_ratio: int = 40
    total_physical_memory_bytes: int = attrs.field(factory=_physical_memory)
    max_transfer_count_on_message_in_memory: int = 0
    namesrv_addr: str | None = None
    register_name_server_period_ms: int = 30_000
    transaction_timeout: int = 6_000
    transaction_check_interval: int = 60_000
    transaction_check_max: int = 15
    revive_queue_num: int = 8
    revive_interval_ms: int = 1_000

    @property
    def store_host(self) -> str:
        """``ip:port`` written into records and message ids."""
        return f"{self.broker_ip}:{self.listen_port}"
