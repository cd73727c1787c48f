"""Master/slave replication of the commit log (RocketMQ's HAService and HAConnection).

A master listens on its HA port. A slave connects and writes its commit-log max offset as
8 big-endian bytes; the master answers with frames of its commit log from that offset on:
``offset`` (8 bytes) + ``size`` (4 bytes) + ``size`` bytes of the log, a frame of size 0
being a heartbeat. The slave appends the bytes unchanged at the same offsets, dispatches
them into its own consume queues and index, and reports its new max offset after each frame
and at least every ``ha_send_heartbeat_interval_ms``. The master keeps, per slave, the offset
it acknowledged; a SYNC_MASTER send waits on it.

Metadata travels on a second connection to the same port (RocketMQ's SlaveSynchronize,
which uses the remoting port): it starts with the 8 bytes :data:`SYNC_MAGIC` (an offset no
log reaches), then both sides exchange JSON documents, each preceded by its length (4
bytes). The slave sends ``{"broker_id", "address"}`` every
``slave_synchronize_interval_ms``; the master answers with its address and the broker's
metadata snapshot, and lists the slave in its routes while that connection is open.

With ``ha_tls`` both connections run over TLS (:func:`ha_contexts`): a master accepts TLS
only, a slave checks the master's certificate. TLS 1.2 at most: a master's reader and writer
threads share one connection, and TLS 1.3's messages after the handshake (tickets, key
updates) would let a read write on the socket under the writer.

Replication sees neither the broker nor its plugins: it reads and appends the commit log
through the store's commit-log capabilities (:mod:`mqcore.storecaps`), and moves the
metadata the broker hands it (``snapshot`` on a master, ``apply`` on a slave, see
:mod:`mqcore.broker.metadata`) without looking inside.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from mqcore.config import BrokerConfig
from mqcore.errors import (
    InvalidArgumentError,
    MQError,
    ProtocolError,
    SlaveNotAcknowledgedError,
)
from mqcore.hostport import split_host_port
from mqcore.logs import get_logger
from mqcore.protocol.codes import ResponseCode
from mqcore.remoting.tls import client_context, server_context
from mqcore.store import PutResult
from mqcore.storecaps import CommitLogReplica, CommitLogSource

__all__ = [
    "SYNC_MAGIC",
    "HAMaster",
    "HASlave",
    "ha_contexts",
    "start_replication",
]

log = get_logger(__name__)

SYNC_MAGIC = b"MQCSYNC1"
_OFFSET = struct.Struct(">q")
_HEADER = struct.Struct(">qi")
_LENGTH = struct.Struct(">i")
_MAX_SYNC_DOC = 64 * 1024 * 1024
_POLL_S = 0.5  # longest a thread blocks before it looks at its stop flag
_TLS_HANDSHAKE_S = 5.0

#: The broker's metadata for slaves (a JSON object), on a master.
Snapshot = Callable[[], dict[str, Any]]
#: Takes a master's metadata, on a slave.
Apply = Callable[[dict[str, Any]], None]
#: Called on a slave with the ``(topic, queue_id)`` pairs that got messages.
Appended = Callable[[set[tuple[str, int]]], None]


def _recv_exact(sock: socket.socket, n: int, stop: threading.Event) -> bytes | None:
    """``n`` bytes from ``sock`` (None once the peer closed or ``stop`` is set)."""
    buf = bytearray()
    while len(buf) < n:
        if stop.is_set():
            return None
        try:
            chunk = sock.recv(n - len(buf))
        except TimeoutError:
            continue
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _send_doc(sock: socket.socket, doc: Any) -> None:
    data = json.dumps(doc, separators=(",", ":")).encode()
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _recv_doc(sock: socket.socket, stop: threading.Event) -> Any:
    head = _recv_exact(sock, 4, stop)
    if head is None:
        return None
    (size,) = _LENGTH.unpack(head)
    if not 0 <= size <= _MAX_SYNC_DOC:
        return None
    body = _recv_exact(sock, size, stop)
    return None if body is None else json.loads(body)


def ha_contexts(config: BrokerConfig) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """The (master, slave) TLS contexts of replication, or (None, None) without ``ha_tls``.

    :raises InvalidArgumentError: a master without a certificate and key, or a file that
        does not load.
    """
    if not config.ha_tls:
        return None, None
    master: ssl.SSLContext | None = None
    if config.broker_role != "SLAVE":
        if not (config.ha_tls_cert and config.ha_tls_key):
            raise InvalidArgumentError(
                "ha_tls needs ha_tls_cert and ha_tls_key on a master (its certificate and key)"
            )
        master = server_context(config.ha_tls_cert, config.ha_tls_key, config.ha_tls_ca)
        master.maximum_version = ssl.TLSVersion.TLSv1_2
    slave = client_context(
        True,
        ca=config.ha_tls_ca,
        cert=config.ha_tls_cert if config.ha_tls_key else None,
        key=config.ha_tls_key,
    )
    assert slave is not None
    slave.maximum_version = ssl.TLSVersion.TLSv1_2
    return master, slave


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


# --- master ------------------------------------------------------------------------------


class _SlaveConnection:
    """One slave's replication connection on the master: a reader and a writer thread."""

    def __init__(self, master: HAMaster, sock: socket.socket, first_offset: int) -> None:
        self.master = master
        self.sock = sock
        host, port = sock.getpeername()[:2]
        self.peer = f"{host}:{port}"
        self.acked = first_offset  # the slave's max offset, as it last reported
        self.last_report = time.monotonic()
        self.next_offset = first_offset
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.reader = threading.Thread(target=self._read, name="mqcore-ha-read", daemon=True)
        self.writer = threading.Thread(target=self._write, name="mqcore-ha-write", daemon=True)

    def start(self) -> None:
        self.reader.start()
        self.writer.start()

    def close(self) -> None:
        self.stop.set()
        self.wake.set()
        _close(self.sock)

    def join(self) -> None:
        for t in (self.reader, self.writer):
            if t.is_alive() and t is not threading.current_thread():
                t.join(timeout=5)

    def _read(self) -> None:
        """The slave's offset reports (8 bytes each)."""
        while not self.stop.is_set():
            data = _recv_exact(self.sock, 8, self.stop)
            if data is None:
                break
            (offset,) = _OFFSET.unpack(data)
            self.last_report = time.monotonic()
            if offset > self.acked:
                self.acked = offset
                self.master._acked(offset)
        self.master._drop(self)

    def _write(self) -> None:
        """Push the commit log from the slave's offset on; heartbeats while idle."""
        store = self.master.store
        cfg = self.master.config
        batch = max(1, cfg.ha_transfer_batch_size)
        beat = cfg.ha_send_heartbeat_interval_ms / 1000
        last_sent = float("-inf")  # the first frame (data or heartbeat) goes at once
        min_offset = store.commitlog_min_offset()
        if self.next_offset < min_offset or self.next_offset > store.commitlog_max_offset():
            log.error(
                "ha_slave_offset_unusable",
                slave=self.peer,
                slave_offset=self.next_offset,
                master_min=min_offset,
                master_max=store.commitlog_max_offset(),
            )
            self.close()
            return
        try:
            while not self.stop.is_set():
                self.wake.clear()
                data = store.read_commitlog(self.next_offset, batch)
                if data:
                    self.sock.sendall(_HEADER.pack(self.next_offset, len(data)) + data)
                    self.next_offset += len(data)
                    last_sent = time.monotonic()
                    continue
                if data is None:  # below the oldest segment now (retention)
                    log.error("ha_offset_deleted", slave=self.peer, offset=self.next_offset)
                    break
                if time.monotonic() - last_sent >= beat:
                    self.sock.sendall(_HEADER.pack(self.next_offset, 0))
                    last_sent = time.monotonic()
                if time.monotonic() - self.last_report > cfg.ha_housekeeping_interval_ms / 1000:
                    log.warning("ha_slave_expired", slave=self.peer)
                    break
                self.wake.wait(min(beat, _POLL_S))
        except OSError as exc:
            if not self.stop.is_set():
                log.info("ha_slave_connection_lost", slave=self.peer, error=str(exc))
        except MQError as exc:  # the store closed or failed under us: the slave reconnects
            log.warning("ha_transfer_failed", slave=self.peer, error=str(exc))
        self.close()


class HAMaster:
    """A master's replication port: accepts slaves, pushes the log, tracks what they have.

    :param store: the master's store.
    :param config: the master's settings.
    :param snapshot: the broker's metadata for slaves, asked at each of their requests.
    :param host: address to listen on.
    :param port: port (0: any free one; :attr:`port` tells which).
    """

    def __init__(
        self,
        store: CommitLogSource,
        config: BrokerConfig,
        snapshot: Snapshot,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self._ssl = ssl_context
        self._snapshot = snapshot
        self._lock = threading.Condition()
        self._connections: list[_SlaveConnection] = []
        self._syncs: dict[socket.socket, tuple[int, str]] = {}
        self._sync_threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.acked_offset = 0  # the furthest offset any slave reported (push2SlaveMaxOffset)
        self._server = socket.create_server((host, port), reuse_port=False)
        self._server.settimeout(_POLL_S)
        self.host, self.port = self._server.getsockname()[:2]
        self._acceptor = threading.Thread(
            target=self._accept, name=f"mqcore-ha-{config.broker_name}", daemon=True
        )
        self._acceptor.start()
        log.info("ha_master_listening", host=self.host, port=self.port, tls=self._ssl is not None)

    # -- connections ---------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            sock.settimeout(_POLL_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = threading.Thread(target=self._handshake, args=(sock,), daemon=True)
            t.start()
            with self._lock:
                self._sync_threads = [x for x in self._sync_threads if x.is_alive()] + [t]

    def _handshake(self, sock: socket.socket) -> None:
        if self._ssl is not None:
            try:
                sock.settimeout(_TLS_HANDSHAKE_S)
                sock = self._ssl.wrap_socket(sock, server_side=True)
                sock.settimeout(_POLL_S)
            except (OSError, ssl.SSLError) as exc:
                log.warning("ha_tls_handshake_failed", error=str(exc))
                _close(sock)
                return
        first = _recv_exact(sock, 8, self._stop)
        if first is None:
            _close(sock)
            return
        if first == SYNC_MAGIC:
            self._serve_sync(sock)
            return
        (offset,) = _OFFSET.unpack(first)
        try:
            conn = _SlaveConnection(self, sock, offset)
        except OSError:
            _close(sock)
            return
        with self._lock:
            if self._stop.is_set():
                _close(sock)
                return
            self._connections.append(conn)
            if offset > self.acked_offset:
                self.acked_offset = offset
            self._lock.notify_all()
        log.info("ha_slave_connected", slave=conn.peer, offset=offset)
        conn.start()

    def _drop(self, conn: _SlaveConnection) -> None:
        conn.close()
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
                log.info("ha_slave_disconnected", slave=conn.peer, acked=conn.acked)
            self._lock.notify_all()

    def _serve_sync(self, sock: socket.socket) -> None:
        """A slave's sync connection: answer each request with the master's metadata."""
        try:
            while not self._stop.is_set():
                req = _recv_doc(sock, self._stop)
                if not isinstance(req, dict):
                    break
                with self._lock:
                    self._syncs[sock] = (int(req.get("broker_id", 1)), str(req.get("address")))
                _send_doc(sock, self._metadata())
        except (OSError, ValueError, MQError) as exc:
            log.info("ha_sync_connection_lost", error=str(exc))
        finally:
            with self._lock:
                self._syncs.pop(sock, None)
            _close(sock)

    def _metadata(self) -> dict[str, Any]:
        return {**self._snapshot(), "address": self.config.store_host}

    # -- what the broker asks ------------------------------------------------------------

    def slaves(self) -> dict[int, str]:
        """Slaves registered over their sync connection: broker id -> remoting address."""
        with self._lock:
            return {bid: addr for bid, addr in self._syncs.values() if addr}

    @property
    def connection_count(self) -> int:
        """Slaves connected for replication now."""
        return len(self._connections)

    def lag(self) -> int:
        """Bytes the furthest slave is behind (the whole log when none is connected)."""
        return max(0, int(self.store.commitlog_max_offset()) - self.acked_offset)

    def notify(self) -> None:
        """New data was appended: wake the writers."""
        for conn in self._connections:
            conn.wake.set()

    def _acked(self, offset: int) -> None:
        with self._lock:
            if offset > self.acked_offset:
                self.acked_offset = offset
                self._lock.notify_all()

    def slave_ok(self, end: int) -> bool:
        """RocketMQ's isSlaveOK: a slave is connected and within ``ha_max_gap_bytes``."""
        return bool(self._connections) and end - self.acked_offset < self.config.ha_max_gap_bytes

    def wait_acked(self, end: int, timeout: float) -> bool:
        """Whether a slave reported ``end`` (or beyond) within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.acked_offset < end:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._lock.wait(left)
        return True

    def after_put(self, results: list[PutResult]) -> None:
        """Wake the writers; as a SYNC_MASTER, wait for a slave to have the records."""
        self.notify()
        if self.config.broker_role != "SYNC_MASTER" or not results:
            return
        end = max(r.commitlog_offset + r.size for r in results)
        if not self.slave_ok(end):
            raise SlaveNotAcknowledgedError(
                f"no slave of {self.config.broker_name} has the message: none is connected or "
                f"the nearest is more than ha_max_gap_bytes={self.config.ha_max_gap_bytes} "
                "behind; it is stored on the master only",
                code=ResponseCode.SLAVE_NOT_AVAILABLE,
                results=results,
            )
        if not self.wait_acked(end, self.config.sync_flush_timeout_ms / 1000):
            raise SlaveNotAcknowledgedError(
                f"no slave of {self.config.broker_name} confirmed the message within "
                f"sync_flush_timeout_ms={self.config.sync_flush_timeout_ms}; it is stored on "
                "the master and may reach the slave later",
                code=ResponseCode.FLUSH_SLAVE_TIMEOUT,
                results=results,
            )

    def close(self) -> None:
        """Stop accepting, close every connection, join the threads."""
        self._stop.set()
        _close(self._server)
        self._acceptor.join(timeout=5)
        with self._lock:
            conns = list(self._connections)
            syncs = list(self._syncs)
            threads = list(self._sync_threads)
            self._lock.notify_all()
        for conn in conns:
            conn.close()
        for sock in syncs:
            _close(sock)
        for conn in conns:
            conn.join()
        for t in threads:
            t.join(timeout=5)


# --- slave -------------------------------------------------------------------------------


class HASlave:
    """A slave's side: copies the master's log and, periodically, its metadata.

    :param store: the slave's store.
    :param config: the slave's settings.
    :param master: ``host:port`` of the master's HA port.
    :param apply: takes the master's metadata (every ``slave_synchronize_interval_ms``).
    :param appended: called with the ``(topic, queue_id)`` pairs that got messages.
    """

    def __init__(
        self,
        store: CommitLogReplica,
        config: BrokerConfig,
        master: str,
        apply: Apply,
        appended: Appended,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self._ssl = ssl_context
        self.master = split_host_port(master, "ha_master_address", example="127.0.0.1:10912")
        self.master_address: str | None = None  # the master's remoting address, once synced
        self._apply = apply
        self._appended = appended
        self._stop = threading.Event()
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.connected = threading.Event()
        self.synced = threading.Event()
        # Whether the master was reachable at the last attempt (None: not tried yet); the
        # replication thread logs each change once, not each retry.
        self._reachable: bool | None = None
        #: why the master is unreachable now (None while connected)
        self.last_error: str | None = None
        self._threads = [
            threading.Thread(target=self._replicate, name="mqcore-ha-slave", daemon=True),
            threading.Thread(target=self._synchronize, name="mqcore-ha-sync", daemon=True),
        ]
        for t in self._threads:
            t.start()

    @property
    def master_ha_address(self) -> str:
        """``host:port`` of the master's replication port."""
        return f"{self.master[0]}:{self.master[1]}"

    def _connect(self) -> tuple[socket.socket | None, str]:
        """A connection to the master's HA port, or None and why not."""
        try:
            sock = socket.create_connection(self.master, timeout=3)
        except OSError as exc:
            return None, str(exc) or type(exc).__name__
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl is not None:
            try:
                sock.settimeout(_TLS_HANDSHAKE_S)
                sock = self._ssl.wrap_socket(sock, server_hostname=self.master[0])
            except (OSError, ssl.SSLError) as exc:
                _close(sock)
                return None, f"TLS handshake failed: {exc}"
        sock.settimeout(_POLL_S)
        with self._lock:
            if self._stop.is_set():
                _close(sock)
                return None, "stopped"
            self._socks.add(sock)
        return sock, ""

    def _unreachable(self, error: str) -> None:
        """The master cannot be reached (or the connection ended): logged once per outage."""
        self.last_error = error
        if self._stop.is_set() or self._reachable is False:
            return
        event = "ha_master_connection_lost" if self._reachable else "ha_master_unreachable"
        self._reachable = False
        log.warning(
            event,
            broker=self.config.broker_name,
            master=self.master_ha_address,
            error=error,
            retry_every_s=1.0,
        )

    def _forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.discard(sock)
        _close(sock)

    def _replicate(self) -> None:
        while not self._stop.is_set():
            sock, error = self._connect()
            if sock is None:
                self._unreachable(error)
                self._stop.wait(1.0)
                continue
            error = "the master closed the connection"
            self.last_error = None
            try:
                self._transfer(sock)
            except OSError as exc:
                error = str(exc) or type(exc).__name__
            except Exception as exc:  # a bad frame or a store error: reconnect from our own offset
                log.exception("ha_replication_failed")
                error = str(exc) or type(exc).__name__
            finally:
                self.connected.clear()
                self._forget(sock)
            self._unreachable(self.last_error or error)
            self._stop.wait(1.0)

    def _transfer(self, sock: socket.socket) -> None:
        store = self.store
        beat = self.config.ha_send_heartbeat_interval_ms / 1000
        reported = store.commitlog_max_offset()
        sock.sendall(_OFFSET.pack(reported))
        last_report = time.monotonic()
        while not self._stop.is_set():
            head = _recv_exact(sock, _HEADER.size, self._stop)
            if head is None:
                if not self.connected.is_set():
                    self.last_error = (
                        "the master closed the connection before its first frame (it refused "
                        "this slave's offset: see the master's log)"
                    )
                return
            if not self.connected.is_set():
                # Connected once the master answers (its first frame comes at once): a master
                # that accepts and then refuses the slave's offset is not a connection.
                self._connected(reported)
            offset, size = _HEADER.unpack(head)
            if size < 0:
                raise ProtocolError(f"the master sent a replication frame of size {size}")
            if size:
                body = _recv_exact(sock, size, self._stop)
                if body is None:
                    return
                mine = store.commitlog_max_offset()
                if offset != mine:
                    log.error("ha_offset_mismatch", master_offset=offset, slave_offset=mine)
                    return  # reconnect: the master starts again from our offset
                self._appended(store.append_commitlog(offset, body))
            now_max = store.commitlog_max_offset()
            if now_max != reported or time.monotonic() - last_report >= beat:
                sock.sendall(_OFFSET.pack(now_max))
                reported = now_max
                last_report = time.monotonic()

    def _connected(self, offset: int) -> None:
        self.connected.set()
        self.last_error = None
        # Info when it first connects; after an outage, the warning's counterpart.
        level = log.warning if self._reachable is False else log.info
        self._reachable = True
        level(
            "ha_slave_connected_to_master",
            broker=self.config.broker_name,
            master=self.master_ha_address,
            offset=offset,
        )

    def _synchronize(self) -> None:
        every = self.config.slave_synchronize_interval_ms / 1000
        while not self._stop.is_set():
            sock, _ = self._connect()  # the replication thread reports the master's state
            if sock is None:
                self._stop.wait(1.0)
                continue
            try:
                sock.sendall(SYNC_MAGIC)
                while not self._stop.is_set():
                    _send_doc(
                        sock,
                        {"broker_id": self.config.broker_id, "address": self.config.store_host},
                    )
                    doc = _recv_doc(sock, self._stop)
                    if not isinstance(doc, dict):
                        break
                    self.master_address = doc.get("address") or None
                    self._apply(doc)
                    self.synced.set()
                    if self._stop.wait(every):
                        break
            except (OSError, ValueError, MQError) as exc:
                log.info("ha_sync_failed", error=str(exc))
            finally:
                self._forget(sock)
            self._stop.wait(1.0)

    def close(self) -> None:
        """Disconnect and join the threads."""
        self._stop.set()
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            _close(sock)
        for t in self._threads:
            t.join(timeout=5)


def start_replication(
    config: BrokerConfig,
    store: object,
    store_name: str,
    *,
    snapshot: Snapshot,
    apply: Apply,
    appended: Appended,
) -> HAMaster | HASlave | None:
    """The replication side ``config``'s role asks for (None: nothing to replicate).

    :param store: the broker's store: a :class:`~mqcore.storecaps.CommitLogSource` for a
        master with slaves, a :class:`~mqcore.storecaps.CommitLogReplica` for a slave.
    :param store_name: its registered name, for errors.
    :param snapshot: on a master, the broker's metadata for slaves.
    :param apply: on a slave, takes the master's metadata.
    :param appended: on a slave, called with the queues that got messages.
    """
    if config.broker_role == "SLAVE":
        if not isinstance(store, CommitLogReplica):
            raise InvalidArgumentError(
                f"store {store_name!r} cannot be a slave: it has no commit log to "
                "replicate into (no append_commitlog, see mqcore.storecaps.CommitLogReplica); "
                "run slaves on the mmap store"
            )
        if not config.ha_master_address:
            raise InvalidArgumentError(
                "a SLAVE needs ha_master_address (HOST:PORT of its master's HA port)"
            )
        slave_tls = ha_contexts(config)[1]
        return HASlave(store, config, config.ha_master_address, apply, appended, slave_tls)
    if config.ha_listen_port is None:
        if config.broker_role == "SYNC_MASTER":
            raise InvalidArgumentError(
                "a SYNC_MASTER needs ha_listen_port (its slaves' port; 0: any free port)"
            )
        return None
    if not isinstance(store, CommitLogSource):
        raise InvalidArgumentError(
            f"store {store_name!r} cannot replicate to slaves (no read_commitlog, see "
            "mqcore.storecaps.CommitLogSource); use the mmap store for a master with slaves"
        )
    host = config.ha_listen_host or config.broker_ip
    master_tls = ha_contexts(config)[0]
    return HAMaster(store, config, snapshot, host, config.ha_listen_port, master_tls)
