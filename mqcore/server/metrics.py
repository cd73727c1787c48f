"""Prometheus metrics of a served broker (``mqcore serve --metrics-listen HOST:PORT``).

:class:`BrokerMetrics` holds its own registry and an HTTP listener on its own thread that
answers ``/metrics`` (Prometheus text, through ``prometheus_client``), ``/healthz`` and
``/readyz``. Counting stays off the per-message path: puts are counted once per stored
batch (the ``mqcore_messages_stored`` hook), pulls once per answered pull, request
latency once per request. What is a state rather than an event (consumer lag, store size,
connections, pending timers, undecided transactions, replication lag, the store's flush and
dispatch lag) is read from the broker when scraped, by :class:`_StateCollector`. Nothing of
this module runs unless metrics are asked for.

``prometheus_client`` is the optional extra ``mqcore[metrics]``.
"""

from __future__ import annotations

import importlib
import inspect
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from mqcore.broker.ha import HAMaster
from mqcore.errors import InvalidArgumentError
from mqcore.hookspecs import hookimpl
from mqcore.logs import get_logger
from mqcore.remoting.command import RemotingCommand
from mqcore.store import PutResult
from mqcore.storecaps import CommitLogBounds, LogPositionReporter

if TYPE_CHECKING:
    from mqcore.broker.broker import Broker
    from mqcore.remoting.server import RemotingServer
    from mqcore.server.processor import BrokerProcessor

__all__ = ["INSTALL_HINT", "BrokerMetrics", "MeteredProcessor"]

log = get_logger(__name__)

INSTALL_HINT = "pip install 'mqcore[metrics]'"

# Offsets separate a group's topic from the group in the offset table's keys.
_TOPIC_GROUP_SEPARATOR = "@"


def _require_prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise InvalidArgumentError(
            f"--metrics-listen needs the prometheus_client package: {INSTALL_HINT}"
        ) from None
    return prometheus_client


def _tree_bytes(path: Path) -> int:
    """Bytes the files under ``path`` take on disk (allocated blocks, not apparent size)."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


class _StoredCounter:
    """The plugin that counts puts: one call per stored batch, whatever its size."""

    def __init__(self, messages: Any, size: Any) -> None:
        self._messages = messages
        self._bytes = size
        # Each topic's two counters, looked up once: labels() takes a lock and builds a key.
        self._children: dict[str, tuple[Any, Any]] = {}

    @hookimpl
    def mqcore_messages_stored(self, topic: str, queue_id: int, results: list[PutResult]) -> None:
        children = self._children.get(topic)
        if children is None:
            children = self._children[topic] = (
                self._messages.labels(topic),
                self._bytes.labels(topic),
            )
        children[0].inc(len(results))
        children[1].inc(sum(r.size for r in results))


class _StateCollector:
    """Reads what the broker holds now, at each scrape (a custom collector)."""

    def __init__(self, broker: Broker, remoting: RemotingServer, gauge: Any) -> None:
        self.broker = broker
        self.remoting = remoting
        self.gauge = gauge  # prometheus_client's GaugeMetricFamily

    def describe(self) -> Iterable[Any]:
        return []  # collected lazily: a broker must not be read at registration

    def collect(self) -> Iterator[Any]:
        gauge = self.gauge
        broker = self.broker
        if broker.closed:
            return
        lag = gauge(
            "rocketmq_group_diff",
            "Messages of a queue the group has not consumed yet (max offset - committed offset)",
            labels=["group", "topic", "queue_id"],
        )
        store = broker.store
        for key, queues in broker.offsets.offset_table().items():
            topic, _, group = key.partition(_TOPIC_GROUP_SEPARATOR)
            for queue_id, offset in queues.items():
                high = store.max_offset(topic, queue_id)
                lag.add_metric([group, topic, str(queue_id)], max(0, high - offset))
        yield lag

        data = Path(broker.data_dir) / "store"
        yield gauge(
            "mqcore_store_disk_bytes",
            "Bytes the store's files take on disk",
            value=_tree_bytes(data),
        )
        if isinstance(store, CommitLogBounds):
            yield gauge(
                "mqcore_store_commitlog_bytes",
                "Bytes of commit log held (max physical offset - min physical offset)",
                value=store.commitlog_max_offset() - store.commitlog_min_offset(),
            )
        if isinstance(store, LogPositionReporter):
            # RocketMQ 5's broker names (its storage metrics); labelled by the store kind.
            at = store.log_positions()
            flush = gauge(
                "rocketmq_storage_flush_behind_bytes",
                "Bytes written to the store but not flushed to disk yet (what a power loss "
                "could take)",
                labels=["store"],
            )
            flush.add_metric([broker.store_name], at.written - at.flushed)
            yield flush
            dispatch = gauge(
                "rocketmq_storage_dispatch_behind_bytes",
                "Bytes in the commit log not yet in the consume queues and index (not "
                "visible to consumers yet)",
                labels=["store"],
            )
            dispatch.add_metric([broker.store_name], at.written - at.dispatched)
            yield dispatch
        usage = shutil.disk_usage(data if data.exists() else broker.data_dir)
        disk = gauge(
            "mqcore_disk_bytes",
            "The store's file system: total and used bytes",
            labels=["state"],
        )
        disk.add_metric(["total"], usage.total)
        disk.add_metric(["used"], usage.used)
        yield disk

        yield gauge(
            "mqcore_connections",
            "Remoting connections open now",
            value=len(self.remoting.connections()),
        )
        clients = gauge(
            "rocketmq_group_count_of_online_consumers",
            "Consumer clients of a group known to the broker now",
            labels=["group"],
        )
        for group in broker.consumers.groups():
            clients.add_metric([group], len(broker.consumers.client_ids(group)))
        yield clients

        invisible = gauge(
            "mqcore_pop_invisible_messages",
            "Popped messages invisible now: not acked, their invisible time not over",
            labels=["group", "topic"],
        )
        for (group, topic), count in sorted(broker.pop.invisible_counts().items()):
            invisible.add_metric([group, topic], count)
        yield invisible

        timer = broker.timer_scheduler
        if timer is not None:
            stats = timer.stats()
            yield gauge(
                "mqcore_timer_pending_messages",
                "Timer messages held and not delivered yet",
                value=stats.pending,
            )
            yield gauge(
                "mqcore_timer_lag_seconds",
                "How far timer delivery is behind",
                value=stats.lag_ms / 1000,
            )

        halves = gauge(
            "rocketmq_half_messages",
            "Transactional (half) messages neither committed nor rolled back yet",
            labels=["topic"],
        )
        for topic, count in sorted(broker.transactions.pending_by_topic().items()):
            halves.add_metric([topic], count)
        yield halves

        ha = broker.ha
        if isinstance(ha, HAMaster):
            slaves = ha.slaves()
            replication = gauge(
                "mqcore_replication_lag_bytes",
                "Commit-log bytes the slaves are behind the master (the furthest slave)",
                labels=["slave"],
            )
            behind = ha.lag()
            for broker_id, address in sorted(slaves.items()):
                replication.add_metric([f"{broker_id}@{address}"], behind)
            yield replication
            yield gauge(
                "mqcore_replication_connections",
                "Slaves connected for replication now",
                value=ha.connection_count,
            )


class MeteredProcessor:
    """A :class:`~mqcore.server.processor.BrokerProcessor` seen by the remoting server with
    each request timed; everything else is the processor's own."""

    def __init__(self, inner: BrokerProcessor, latency: Any) -> None:
        self.inner = inner
        self.inline_codes = inner.inline_codes
        self._latency = latency
        self._children: dict[int, Any] = {}

    def connection_closed(self, connection: Any) -> None:
        """The processor's own handling of a closed connection."""
        self.inner.connection_closed(connection)

    @property
    def group_codes(self) -> frozenset[int]:
        """The processor's own (see BrokerProcessor.group_codes)."""
        return self.inner.group_codes

    def process_frame(self, req: RemotingCommand, connection: Any) -> Any:
        """The processor's direct answer, its time observed as :meth:`process`'s."""
        start = time.perf_counter()
        result = self.inner.process_frame(req, connection)
        observe = self._observer(req.code)
        if inspect.isawaitable(result):
            return self._timed(result, start, observe)
        observe(time.perf_counter() - start)
        return result

    def process_group(self, items: Sequence[tuple[RemotingCommand, Any]]) -> list[Any]:
        """The processor's answers to a group; each request's time is the group's (each
        waited for the one write that stored them all)."""
        start = time.perf_counter()
        results = self.inner.process_group(items)
        elapsed = time.perf_counter() - start
        for i, ((req, _), result) in enumerate(zip(items, results, strict=True)):
            observe = self._observer(req.code)
            if inspect.isawaitable(result):
                results[i] = self._timed(result, start, observe)
            else:
                observe(elapsed)
        return results

    def _observer(self, code: int) -> Callable[[float], None]:
        child = self._children.get(code)
        if child is None:
            child = self._children[code] = self._latency.labels(str(code))
        observe: Callable[[float], None] = child.observe
        return observe

    def process(self, req: RemotingCommand, connection: Any) -> Any:
        """The processor's answer, its time observed (a held pull's when it is answered)."""
        start = time.perf_counter()
        result = self.inner.process(req, connection)
        observe = self._observer(req.code)
        if inspect.isawaitable(result):
            return self._timed(result, start, observe)
        observe(time.perf_counter() - start)
        return result

    @staticmethod
    async def _timed(result: Awaitable[Any], start: float, observe: Callable[[float], None]) -> Any:
        try:
            return await result
        finally:
            observe(time.perf_counter() - start)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a library prints nothing


class BrokerMetrics:
    """The metrics of one served broker and the HTTP listener that exposes them.

    :param broker: the broker.
    :param remoting: its remoting server (connections are counted there).
    :param processor: the broker's request processor; :attr:`processor` is it, timed.
    :param listen: ``HOST:PORT`` of the HTTP listener (port 0: any free port).
    :param ready: answers ``/readyz``: whether the server serves now.
    :raises InvalidArgumentError: ``prometheus_client`` is not installed, or the address
        cannot be listened on.
    """

    def __init__(
        self,
        broker: Broker,
        remoting: RemotingServer,
        processor: BrokerProcessor,
        listen: tuple[str, int],
        ready: Callable[[], bool],
    ) -> None:
        prom = _require_prometheus()
        self.registry = registry = prom.CollectorRegistry(auto_describe=False)
        put = prom.Counter(
            "rocketmq_producer_messages",
            "Messages stored, per topic (sends, retries and delayed deliveries)",
            ["topic"],
            registry=registry,
        )
        put_bytes = prom.Counter(
            "rocketmq_producer_message_size_bytes",
            "Bytes of the messages stored (commit-log records), per topic",
            ["topic"],
            registry=registry,
        )
        pulled = prom.Counter(
            "rocketmq_consumer_messages",
            "Messages answered to pulls, per topic and consumer group",
            ["topic", "group"],
            registry=registry,
        )
        latency = prom.Histogram(
            "mqcore_request_duration_seconds",
            "Time to answer a remoting request, per request code (held pulls included)",
            ["code"],
            registry=registry,
        )
        prom.ProcessCollector(registry=registry)

        gauge = importlib.import_module("prometheus_client.core").GaugeMetricFamily
        registry.register(_StateCollector(broker, remoting, gauge))

        self._broker = broker
        self._pulled = pulled
        self._pulled_children: dict[tuple[str, str], Any] = {}
        self._plugin = _StoredCounter(put, put_bytes)
        self._ready = ready
        self.processor = MeteredProcessor(processor, latency)
        processor.pulled = self._count_pulled
        self._app = prom.make_wsgi_app(registry)
        host, port = listen
        try:
            self._http = make_server(
                host,
                port,
                self._wsgi,
                server_class=prom.exposition.ThreadingWSGIServer,
                handler_class=_QuietHandler,
            )
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot listen for metrics on {host}:{port}: {exc}; "
                "give a free HOST:PORT to --metrics-listen"
            ) from exc
        bound = self._http.server_address
        #: ``host:port`` the metrics listener is bound to
        self.address = f"{bound[0]}:{bound[1]}"
        broker.kernel.pm.register(self._plugin, name="mqcore-metrics")
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="mqcore-metrics",
            daemon=True,
        )
        self._thread.start()
        log.info("metrics_listening", address=self.address)

    def _count_pulled(self, group: str, topic: str, count: int) -> None:
        child = self._pulled_children.get((topic, group))
        if child is None:
            child = self._pulled_children[(topic, group)] = self._pulled.labels(topic, group)
        child.inc(count)

    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            good = path == "/healthz" or self._ready()
            status = "200 OK" if good else "503 Service Unavailable"
            body = b"ok\n" if good else b"not ready\n"
            start_response(
                status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
            )
            return [body]
        return self._app(environ, start_response)

    def close(self) -> None:
        """Stop the listener and its thread; the broker's puts are no longer counted."""
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()
        try:
            self._broker.kernel.pm.unregister(self._plugin)
        except ValueError:
            pass
        self.processor.inner.pulled = None
