"""The remoting server: asyncio TCP, RocketMQ frames, requests dispatched to a processor.

Concurrency model. One event loop (uvloop when installed, unless told otherwise) owns every
socket: it reads, cuts frames, decodes headers and writes answers. A request's work runs in
a bounded pool of worker threads (``dispatch="thread"``, the default), so a handler that
blocks (a disk flush, a lock) stalls neither the loop nor other connections; codes listed in
the processor's ``inline_codes`` run on the loop itself and must never block. A handler that
has to wait (a long poll) returns a future or an awaitable instead of holding a thread: the
answer goes out when it completes, so one connection's answers may leave out of order. A
client that stops reading has its socket paused for reading once its send buffer is full,
and the limit ``max_pending`` on requests in progress answers SYSTEM_BUSY beyond it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import inspect
import socket
import ssl
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast, runtime_checkable

from mqcore.errors import (
    InvalidArgumentError,
    ProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from mqcore.logs import get_logger
from mqcore.protocol.codes import ResponseCode
from mqcore.remoting.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    salvage_opaque,
)
from mqcore.remoting.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from mqcore.remoting.futures import settle
from mqcore.remoting.tls import TLS_HANDSHAKE_BYTE, TlsMode
from mqcore.remoting.workers import WorkerPool

__all__ = ["RemotingProcessor", "RemotingServer", "ServerConnection", "event_loop_factory"]

log = get_logger(__name__)

_READ_BUFFER = 256 * 1024  # what one read of a connection takes at most
_LANGUAGES = tuple(LanguageCode)  # by value, as FrameDecoder.feed_decoded gives the language

ProcessResult = (
    RemotingCommand
    | None
    | Awaitable[RemotingCommand | None]
    | concurrent.futures.Future[RemotingCommand | None]
)


@runtime_checkable
class RemotingProcessor(Protocol):
    """What the server dispatches requests to.

    ``process`` returns the response (its opaque, response flag and serialisation are set
    by the server), None for no answer (oneway requests, or an answer sent otherwise), an
    awaitable or a ``concurrent.futures.Future`` of either (long polls), or
    ``NotImplemented`` for a code it does not serve (answered REQUEST_CODE_NOT_SUPPORTED).
    An exception is answered SYSTEM_ERROR with the message as remark.

    Optional attributes the server looks for: ``inline_codes`` (codes whose ``process``
    never blocks, run on the event loop without a thread hop) and
    ``connection_closed(connection)`` (called in a worker thread when a connection ends),
    ``process_frame(cmd, connection)`` (``process`` for the inline codes, which may also
    answer a whole encoded frame as bytes, opaque included), and ``group_codes`` with
    ``process_group([(cmd, connection), ...])`` (requests of those codes that one wake-up of
    the loop brings are served in one call, which answers each in order).
    """

    def process(self, cmd: RemotingCommand, connection: ServerConnection) -> Any:
        """Serve one request (see the class docstring for what it may return)."""


def event_loop_factory(use_uvloop: bool | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """A new-event-loop function: uvloop's when ``use_uvloop`` (None: when it is installed)."""
    if use_uvloop is not False:
        try:
            import uvloop  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            if use_uvloop:
                raise
        else:
            return uvloop.new_event_loop  # type: ignore[no-any-return, unused-ignore]
    return asyncio.new_event_loop


def _not_supported(cmd: RemotingCommand) -> RemotingCommand:
    # RocketMQ's wording, so tools that match on it keep working.
    return RemotingCommand.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
    )


class ServerConnection(asyncio.BufferedProtocol):
    """One client connection. Its public methods may be called from any thread.

    ``client_id`` is None until the processor binds one (:meth:`bind_client_id`, on
    heartbeat); ``language``, ``version`` and ``serialize_type`` are those of the client's
    latest request, so requests the broker pushes use the client's own serialisation.
    """

    def __init__(self, server: RemotingServer) -> None:
        self._server = server
        self._loop = server._loop_or_raise()
        self._decoder = FrameDecoder(server.max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, concurrent.futures.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._closed = False
        self._out: list[bytes | bytearray | memoryview] = []
        self._flush_scheduled = False
        self.remote_address = "?"
        self.client_id: str | None = None
        self.language = LanguageCode.OTHER
        self.version = 0
        self.serialize_type = SerializeType.JSON
        self.last_active = time.monotonic()

    def __repr__(self) -> str:
        return f"<ServerConnection {self.remote_address} client_id={self.client_id!r}>"

    # --- asyncio.BufferedProtocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.remote_address = f"{peer[0]}:{peer[1]}"
        self._server._connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        # Every connection reads into the server's one buffer: the loop calls get_buffer, the
        # read and buffer_updated in a row, and the decoder copies what it keeps. (A
        # ``recv`` of a fresh buffer per read costs more than serving a small request.)
        return self._server._read_view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self._server._read_view[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        self.last_active = time.monotonic()
        try:
            # Frames cut and their headers decoded in one pass (C); a frame left as bytes is
            # decoded by the reference in _frame_received.
            items = self._decoder.feed_decoded(data)
        except ProtocolError as exc:
            log.info("remoting_bad_frame", peer=self.remote_address, error=str(exc))
            self._abort()
            return
        if not items:
            return
        # Answers made while these frames are served leave in one write at the end, without
        # waiting for the loop's next turn (a flush scheduled meanwhile then finds nothing).
        self._flush_scheduled = True
        dispatch = self._server._dispatch
        try:
            for item in items:
                if self._closed:
                    return
                if item.__class__ is not tuple:
                    self._frame_received(item)
                    continue
                # _command_received, inlined: this is the path of every request a client of
                # the usual shape sends.
                code, language, version, opaque, flag, remark, ext, body = item
                cmd = RemotingCommand(
                    code, _LANGUAGES[language], version, opaque, flag, remark, ext, body
                )
                if flag & FLAG_RESPONSE:
                    self._answer_received(cmd)
                    continue
                self.language, self.version = cmd.language, version
                self.serialize_type = SerializeType.JSON
                dispatch(cmd, self)
        finally:
            if self._out:
                self._flush()
            else:  # every answer is still to come (a gathered group's, a worker's)
                self._flush_scheduled = False

    def pause_writing(self) -> None:
        # The client reads slower than it asks: stop reading its requests until it catches up.
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server._forget(self)
        for fut in self._pending.values():
            settle(
                fut,
                error=RemotingConnectError(
                    f"connection to {self.remote_address} closed before the answer",
                    addr=self.remote_address,
                ),
            )
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        self._server._connection_closed(self)

    # --- frames ----------------------------------------------------------------------------

    def _frame_received(self, frame: bytes) -> None:
        try:
            cmd = RemotingCommand.decode(frame)
        except ProtocolError as exc:
            opaque = salvage_opaque(frame)
            log.info("remoting_bad_header", peer=self.remote_address, error=str(exc), opaque=opaque)
            if opaque is None:
                self._abort()
                return
            kind = frame[0]
            answer = RemotingCommand.response(ResponseCode.SYSTEM_ERROR, f"bad request: {exc}")
            answer.opaque = opaque
            answer.serialize_type = SerializeType(kind) if kind in (0, 1) else SerializeType.JSON
            self._write(answer)
            return
        self._command_received(cmd)

    def _command_received(self, cmd: RemotingCommand) -> None:
        if cmd.flag & FLAG_RESPONSE:
            self._answer_received(cmd)
            return
        self.language, self.version, self.serialize_type = (
            cmd.language,
            cmd.version,
            cmd.serialize_type,
        )
        self._server._dispatch(cmd, self)

    def _answer_received(self, cmd: RemotingCommand) -> None:
        """A client's answer to a request of the server's (request_future)."""
        fut = self._pending.pop(cmd.opaque, None)
        if fut is not None:
            settle(fut, cmd)

    def _reply(self, request: RemotingCommand, result: Any) -> None:
        """On the loop: send ``result`` (whatever ``process`` gave) as the answer."""
        if result.__class__ is bytes:  # a whole answer frame, opaque included (process_frame)
            self._server._in_flight -= 1
            if not (self._closed or request.flag & FLAG_ONEWAY or self._transport is None):
                self.last_active = time.monotonic()
                self._out.append(result)
                if not self._flush_scheduled:
                    self._flush_scheduled = True
                    self._loop.call_soon(self._flush)
            return
        if result.__class__ is RemotingCommand:  # the usual answer: straight to the write
            self._server._in_flight -= 1
            if not (self._closed or request.flag & FLAG_ONEWAY):
                result.opaque = request.opaque
                result.flag |= FLAG_RESPONSE
                result.serialize_type = request.serialize_type
                self._write(result)
            return
        if isinstance(result, concurrent.futures.Future):
            result.add_done_callback(
                lambda f: self._server._call_soon(self._reply_done, request, f)
            )
            return
        if inspect.isawaitable(result):
            if self._closed:
                if inspect.iscoroutine(result):
                    result.close()
                self._server._release()
                return
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._reply_done(request, t))
            return
        self._server._release()
        if result is None or self._closed or request.is_oneway:
            return
        if result is NotImplemented:
            result = _not_supported(request)
        elif not isinstance(result, RemotingCommand):
            result = RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                f"processor returned {type(result).__name__} for code {request.code}",
            )
        result.opaque = request.opaque
        result.flag |= FLAG_RESPONSE
        result.serialize_type = request.serialize_type
        self._write(result)

    def _reply_done(
        self, request: RemotingCommand, fut: asyncio.Future[Any] | concurrent.futures.Future[Any]
    ) -> None:
        if isinstance(fut, asyncio.Future):
            self._tasks.discard(fut)
        if fut.cancelled():
            self._server._release()
            return
        exc = fut.exception()
        if exc is not None:
            self._reply(request, self._server._error_answer(request, exc))
        else:
            self._reply(request, fut.result())

    def _write(self, cmd: RemotingCommand) -> None:
        if self._closed or self._transport is None:
            return
        try:
            head, body = cmd.encode_parts()
        except (ProtocolError, ValueError, OverflowError, TypeError, struct.error) as exc:
            log.warning("remoting_encode_failed", code=cmd.code, error=str(exc))
            if not cmd.is_response:
                return
            fallback = RemotingCommand.response(ResponseCode.SYSTEM_ERROR, f"encode failed: {exc}")
            fallback.opaque, fallback.serialize_type = cmd.opaque, cmd.serialize_type
            head, body = fallback.encode_parts()
        self.last_active = time.monotonic()
        # Answers produced in one loop iteration leave in one write: a syscall per answer
        # costs more than the rest of serving a small request.
        out = self._out
        out.append(head)
        if body:
            out.append(body)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and not self._closed and self._transport is not None:
            self._transport.write(b"".join(out) if len(out) > 1 else out[0])

    def _abort(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    # --- public, any thread ----------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        """True once the connection is gone (or being closed)."""
        return self._closed

    def bind_client_id(self, client_id: str) -> None:
        """Record which client this is, so :meth:`RemotingServer.find_connection` finds it."""
        self._server._bind(client_id, self)

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that expects no answer (NOTIFY_CONSUMER_IDS_CHANGED, reset offset).

        Marks it oneway and gives it the client's serialisation; silently dropped when the
        connection is already closed, as RocketMQ's ``invokeOneway`` to a dead channel.
        """
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        cmd.serialize_type = self.serialize_type
        self._server._call_soon(self._write, cmd)

    def request_future(
        self, cmd: RemotingCommand, timeout: float
    ) -> concurrent.futures.Future[RemotingCommand]:
        """Send a request to the client; the future gets its answer, or
        :class:`RemotingTimeoutError` after ``timeout`` seconds, or
        :class:`RemotingConnectError` if the connection closes first."""
        fut: concurrent.futures.Future[RemotingCommand] = concurrent.futures.Future()
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        cmd.serialize_type = self.serialize_type

        def send() -> None:
            if self._closed:
                settle(
                    fut,
                    error=RemotingConnectError(
                        f"connection to {self.remote_address} is closed", addr=self.remote_address
                    ),
                )
                return
            self._pending[cmd.opaque] = fut
            self._write(cmd)
            self._loop.call_later(timeout, expire)

        def expire() -> None:
            if self._pending.pop(cmd.opaque, None) is fut:
                settle(
                    fut,
                    error=RemotingTimeoutError(
                        f"no answer from {self.remote_address} to request code {cmd.code} "
                        f"within {timeout} s",
                        addr=self.remote_address,
                        code=cmd.code,
                    ),
                )

        self._server._call_soon(send)
        return fut

    def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request to the client and wait for its answer (not from the loop thread).

        :raises RemotingTimeoutError: no answer within ``timeout`` seconds.
        :raises RemotingConnectError: the connection closed first.
        """
        if self._server._on_loop_thread():
            raise RemotingError("ServerConnection.request would block the event loop")
        # The loop enforces the timeout; the extra second only guards against a stopped loop.
        return self.request_future(cmd, timeout).result(timeout + 1.0)

    def close(self) -> None:
        """Close this connection (from any thread)."""
        self._server._call_soon(self._abort)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _SniffingListener:
    """TLS and plain TCP on one port (permissive mode): each accepted connection is served
    with TLS when its first byte opens a TLS handshake, in plain TCP otherwise."""

    def __init__(self, server: RemotingServer, sock: socket.socket) -> None:
        self._server = server
        self._sock = sock
        self.sockets = [sock]
        self._task: asyncio.Future[Any] | None = None

    def start(self) -> None:
        self._sock.listen(1024)
        self._sock.setblocking(False)
        self._task = asyncio.ensure_future(self._accept())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:  # out of descriptors, a reset before accept
                log.warning("remoting_accept_failed", error=str(exc))
                await asyncio.sleep(0.05)
                continue
            task = asyncio.ensure_future(self._sniff(conn))
            self._server._sniffing.add(task)
            task.add_done_callback(self._server._sniffing.discard)

    async def _sniff(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        readable = loop.create_future()
        fd = conn.fileno()
        loop.add_reader(fd, _resolve, readable)
        try:
            # A client that sends nothing within the idle timeout is dropped unserved.
            await asyncio.wait_for(readable, self._server.idle_timeout)
            first = conn.recv(1, socket.MSG_PEEK)
        except (asyncio.TimeoutError, OSError):
            first = b""
        finally:
            loop.remove_reader(fd)
        if not first:
            conn.close()
            return
        tls = first[0] == TLS_HANDSHAKE_BYTE
        try:
            await loop.connect_accepted_socket(
                lambda: ServerConnection(self._server),
                conn,
                ssl=self._server.ssl_context if tls else None,
            )
        except (OSError, ssl.SSLError) as exc:
            log.info("remoting_tls_handshake_failed", error=str(exc))
            conn.close()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in list(self._server._sniffing):
            task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class RemotingServer:
    """A RocketMQ remoting server around a :class:`RemotingProcessor`.

    Use :meth:`start` / :meth:`close` (the server runs its loop on a thread it owns), or
    ``await server.serve()`` on an existing loop (``asyncio.run`` in the CLI) and
    :meth:`close` from a signal handler or another thread.
    """

    def __init__(
        self,
        processor: RemotingProcessor | None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_timeout: float = 120.0,
        workers: int = 16,
        max_pending: int = 10_000,
        dispatch: str = "thread",
        use_uvloop: bool | None = None,
        ssl_context: ssl.SSLContext | None = None,
        tls_mode: str | TlsMode | None = None,
    ) -> None:
        mode = TlsMode.of(tls_mode) if tls_mode is not None else None
        if mode is None:
            mode = TlsMode.DISABLED if ssl_context is None else TlsMode.ENFORCING
        if mode is not TlsMode.DISABLED and ssl_context is None:
            raise InvalidArgumentError(
                f"TLS mode {mode.value} needs a certificate and key (ssl_context)"
            )
        #: TLS: the server's context and mode (see mqcore.remoting.tls)
        self.ssl_context = ssl_context if mode is not TlsMode.DISABLED else None
        self.tls_mode = mode
        self._sniffing: set[asyncio.Future[Any]] = set()
        if dispatch not in ("thread", "inline"):
            raise InvalidArgumentError(f"dispatch must be 'thread' or 'inline', got {dispatch!r}")
        self.processor = processor
        self.host, self.port = host, port
        self.max_frame_size = max_frame_size
        self.idle_timeout = idle_timeout
        self.workers = workers
        self.max_pending = max_pending
        self.dispatch = dispatch
        self.use_uvloop = use_uvloop
        self.inline_codes: frozenset[int] = frozenset(getattr(processor, "inline_codes", ()) or ())
        #: codes gathered per wake-up of the loop and served together by the processor's
        #: ``process_group`` (group commit of single sends); empty: each served alone
        self.group_codes: frozenset[int] = (
            frozenset(getattr(processor, "group_codes", ()) or ())
            if hasattr(processor, "process_group")
            else frozenset()
        )
        self._group: list[tuple[RemotingCommand, ServerConnection]] = []
        self._group_scheduled = False
        self._connections: set[ServerConnection] = set()
        self._by_client: dict[str, ServerConnection] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._stop: asyncio.Event | None = None
        self._executor: WorkerPool | None = None
        self._results: collections.deque[tuple[ServerConnection, RemotingCommand, Any]] = (
            collections.deque()
        )
        self._drain_scheduled = False
        self._thread: threading.Thread | None = None
        self._bound = threading.Event()
        self._done = threading.Event()
        self._closing = False
        self._error: BaseException | None = None
        self._in_flight = 0
        self._read_view = memoryview(bytearray(_READ_BUFFER))
        self._sock: socket.socket | None = None  # bound by bind(), listening from serve()
        self.address: tuple[str, int] | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def bind(self) -> tuple[str, int]:
        """Take the address without listening yet; return the bound (host, port).

        Until :meth:`start` (or :meth:`serve`), a client's connection is refused rather than
        accepted, so whoever composes the server can learn the port (port 0) and finish
        what it needs before anyone is served: a client that connects as soon as the port
        accepts then finds a server ready to answer.

        :raises RemotingConnectError: the address cannot be bound (in use, unknown host).
        """
        if self._sock is not None or self._thread is not None or self._loop is not None:
            raise RemotingError("RemotingServer.bind() called twice, or after start()")
        return self._open_socket()

    def _open_socket(self) -> tuple[str, int]:
        where = f"{self.host}:{self.port}"
        try:
            infos = socket.getaddrinfo(
                self.host or None, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            # One socket: IPv4 first when the name has both ("localhost"), as routes name it.
            infos.sort(key=lambda info: info[0] != socket.AF_INET)
            family, kind, proto, _, sockaddr = infos[0]
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            raise RemotingConnectError(f"cannot listen on {where}: {exc}", addr=where) from exc
        try:
            # As asyncio's create_server: a restart may bind while old connections linger.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
        except OSError as exc:
            sock.close()
            raise RemotingConnectError(f"cannot listen on {where}: {exc}", addr=where) from exc
        self._sock = sock
        name = sock.getsockname()
        self.address = (str(name[0]), int(name[1]))
        return self.address

    def start(self, timeout: float = 10.0) -> tuple[str, int]:
        """Listen (binding first unless :meth:`bind` did) and serve on a thread this server
        owns; return the bound (host, port) once connections are accepted."""
        if self._thread is not None:
            raise RemotingError("RemotingServer.start() called twice")
        factory = event_loop_factory(self.use_uvloop)

        def run() -> None:
            loop = factory()
            try:
                loop.run_until_complete(self.serve())
            except BaseException as exc:  # reported by start(); the thread must not die silently
                self._error = exc
                self._bound.set()
            finally:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="mqcore-remoting-server", daemon=True)
        self._thread.start()
        if not self._bound.wait(timeout) or self._error is not None or self.address is None:
            self.close()
            raise RemotingConnectError(
                f"remoting server could not listen on {self.host}:{self.port}: {self._error}",
                addr=f"{self.host}:{self.port}",
            ) from self._error
        return self.address

    async def serve(self, ready: Callable[[tuple[str, int]], None] | None = None) -> None:
        """Listen and serve until :meth:`close`; ``ready`` gets the bound address."""
        loop = asyncio.get_running_loop()
        self._loop, self._loop_thread_id = loop, threading.get_ident()
        self._stop = asyncio.Event()
        self._executor = WorkerPool(self.workers, "mqcore-remoting-worker")
        if self.tls_mode is TlsMode.PERMISSIVE:
            if self._sock is None:  # the sniffing listener accepts from a socket of its own
                self._open_socket()
            assert self._sock is not None
            listener: Any = _SniffingListener(self, self._sock)
            self._sock = None  # the listener owns (and closes) it now
            listener.start()
        elif self._sock is not None:  # bound beforehand: listening starts now
            listener = await loop.create_server(
                lambda: ServerConnection(self), sock=self._sock, ssl=self.ssl_context
            )
            self._sock = None  # the listener owns (and closes) it now
        else:
            listener = await loop.create_server(
                lambda: ServerConnection(self),
                self.host,
                self.port,
                reuse_address=True,
                ssl=self.ssl_context,
            )
        sockname = listener.sockets[0].getsockname()
        self.address = (str(sockname[0]), int(sockname[1]))
        log.info(
            "remoting_listening",
            host=self.address[0],
            port=self.address[1],
            tls=self.tls_mode.value,
        )
        self._bound.set()
        if ready is not None:
            ready(self.address)
        idle = asyncio.ensure_future(self._close_idle())
        try:
            if not self._closing:
                await self._stop.wait()
        finally:
            idle.cancel()
            listener.close()
            for conn in list(self._connections):
                conn._abort()
            await asyncio.sleep(0)  # let connection_lost callbacks run
            await listener.wait_closed()
            self._done.set()

    def close(self, timeout: float = 10.0) -> None:
        """Stop listening, close every connection, join the threads this server owns."""
        self._closing = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        if self._on_loop_thread():
            return  # from a signal handler on the loop: serve() finishes the job
        if self._thread is not None:
            self._thread.join(timeout)
        elif self._bound.is_set():
            self._done.wait(timeout)
        if self._executor is not None:
            self._executor.shutdown(timeout)
        if self._sock is not None:  # bound, never listened on
            self._sock.close()
            self._sock = None

    def __enter__(self) -> RemotingServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- connections -----------------------------------------------------------------------

    def connections(self) -> list[ServerConnection]:
        """The open connections (a snapshot)."""
        return [c for c in list(self._connections) if not c.is_closed]

    def find_connection(self, client_id: str) -> ServerConnection | None:
        """The open connection bound to ``client_id`` (see ServerConnection.bind_client_id)."""
        with self._lock:
            conn = self._by_client.get(client_id)
        return conn if conn is not None and not conn.is_closed else None

    def _bind(self, client_id: str, conn: ServerConnection) -> None:
        with self._lock:
            old = conn.client_id
            if old is not None and self._by_client.get(old) is conn:
                del self._by_client[old]
            conn.client_id = client_id
            self._by_client[client_id] = conn

    def _forget(self, conn: ServerConnection) -> None:
        self._connections.discard(conn)
        with self._lock:
            if conn.client_id is not None and self._by_client.get(conn.client_id) is conn:
                del self._by_client[conn.client_id]

    def _connection_closed(self, conn: ServerConnection) -> None:
        hook = getattr(self.processor, "connection_closed", None)
        if hook is not None and self._executor is not None and not self._closing:
            with contextlib.suppress(RuntimeError):  # pool shut down
                self._executor.submit(hook, conn)

    async def _close_idle(self) -> None:
        period = max(0.01, min(self.idle_timeout / 4, 5.0))
        while True:
            await asyncio.sleep(period)
            limit = time.monotonic() - self.idle_timeout
            for conn in list(self._connections):
                if conn.last_active < limit and not conn._tasks:
                    log.info("remoting_idle_close", peer=conn.remote_address)
                    conn._abort()

    # --- dispatch --------------------------------------------------------------------------

    def _loop_or_raise(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RemotingError("the server is not running")
        return self._loop

    def _on_loop_thread(self) -> bool:
        return self._loop_thread_id == threading.get_ident()

    def _call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._on_loop_thread():
            fn(*args)
            return
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to send to
            loop.call_soon_threadsafe(fn, *args)

    def _release(self) -> None:
        self._in_flight -= 1

    def _error_answer(self, cmd: RemotingCommand, exc: BaseException) -> RemotingCommand:
        log.warning("remoting_handler_failed", code=cmd.code, error=repr(exc))
        return RemotingCommand.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def _dispatch(self, cmd: RemotingCommand, conn: ServerConnection) -> None:
        processor = self.processor
        if processor is None:
            self._in_flight += 1
            conn._reply(cmd, NotImplemented)
            return
        if self._in_flight >= self.max_pending:
            if not cmd.is_oneway:
                busy = RemotingCommand.response(
                    ResponseCode.SYSTEM_BUSY,
                    f"[OVERLOAD]{self.max_pending} requests in progress, try later",
                )
                busy.opaque, busy.serialize_type = cmd.opaque, cmd.serialize_type
                conn._write(busy)
            return
        self._in_flight += 1
        code = cmd.code
        # Group codes run on the loop like inline ones: a code taken off inline_codes (a
        # processor that may block on it, or one swapped in without process_group) is not
        # gathered either.
        if code in self.group_codes and code in self.inline_codes:
            # Gathered with the other single sends this wake-up of the loop brings (from any
            # connection), stored in one write and answered after it (_commit_group).
            self._group.append((cmd, conn))
            if not self._group_scheduled:
                self._group_scheduled = True
                self._loop_or_raise().call_soon(self._commit_group)
            return
        if self._group:  # the sends before this request are stored before it is served
            self._commit_group()
        if self.dispatch == "inline" or code in self.inline_codes:
            process = getattr(processor, "process_frame", processor.process)
            try:
                result = process(cmd, conn)
            except Exception as exc:
                result = self._error_answer(cmd, exc)
            conn._reply(cmd, result)
            return
        assert self._executor is not None
        try:
            self._executor.submit(self._work, processor, cmd, conn)
        except RuntimeError:  # shutting down
            self._in_flight -= 1

    def _commit_group(self) -> None:
        """On the loop: serve the gathered single sends together and send their answers."""
        self._group_scheduled = False
        group, self._group = self._group, []
        if not group:
            return
        conns = {id(conn): conn for _, conn in group}
        for conn in conns.values():
            conn._flush_scheduled = True  # the answers leave in one write each, below
        try:
            serve_group = getattr(self.processor, "process_group", None)
            try:
                if serve_group is not None:
                    results: list[Any] = serve_group(group)
                else:  # the processor was replaced by one that serves requests one by one
                    results = [self._serve_alone(cmd, conn) for cmd, conn in group]
            except Exception as exc:
                results = [self._error_answer(cmd, exc) for cmd, _ in group]
            now = time.monotonic()
            done = 0
            for (cmd, conn), result in zip(group, results, strict=True):
                if result.__class__ is not bytes:
                    conn._reply(cmd, result)
                    continue
                # _reply of a whole answer frame, inlined (every conn's flush is below).
                done += 1
                if not (conn._closed or cmd.flag & FLAG_ONEWAY or conn._transport is None):
                    conn.last_active = now
                    conn._out.append(result)
            self._in_flight -= done
        finally:
            for conn in conns.values():
                conn._flush()

    def _serve_alone(self, cmd: RemotingCommand, conn: ServerConnection) -> Any:
        processor = self.processor
        if processor is None:
            return NotImplemented
        try:
            return getattr(processor, "process_frame", processor.process)(cmd, conn)
        except Exception as exc:
            return self._error_answer(cmd, exc)

    def _work(
        self, processor: RemotingProcessor, cmd: RemotingCommand, conn: ServerConnection
    ) -> None:
        """In a worker thread: run the handler, hand its result back to the loop."""
        try:
            result = processor.process(cmd, conn)
        except Exception as exc:
            result = self._error_answer(cmd, exc)
        # Results queue up and the loop is woken once per batch, not once per result (each
        # wake-up is a write to the loop's self-pipe).
        self._results.append((conn, cmd, result))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            loop = self._loop
            if loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed
                    loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        """On the loop: send the results the workers produced."""
        self._drain_scheduled = False  # before draining, so a later append schedules anew
        results = self._results
        while results:
            conn, cmd, result = results.popleft()
            conn._reply(cmd, result)
