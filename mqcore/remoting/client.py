"""The remoting client: a thread-safe, synchronous RocketMQ remoting client.

One TCP connection per address, opened on first use and reopened on the next call after it
fails. The calling thread encodes and writes its own request (no hop to an I/O thread).
Answers are matched to requests by opaque, so they may arrive in any order and many requests
may be in flight on one connection.

Who reads the socket (one reader at a time, the connection's *leader*):

- a synchronous caller that finds nobody reading takes the lead before it writes, writes its
  request and blocks in ``recv_into`` straight after (the direct call: no future, no poll
  while its deadline is far, the answer kept in a slot of the connection). The kernel wakes
  it directly, with no hand-off from another thread (on a small machine that hand-off costs
  as much as a quarter of a round trip);
- a synchronous caller that finds somebody reading writes its request and waits for its
  future, reading itself when the reader stops before its answer came;
- otherwise the connection's reader thread reads, and completes callers' futures. It steps
  aside while synchronous calls keep coming (for ``_LINGER`` seconds after the latest one
  began) and takes over at once when a caller waits for an answer nobody is reading or an
  asynchronous request is in flight. While a caller leads it looks again only every
  ``_ASIDE_LOOK`` seconds (each look takes the GIL from the caller), so a request the
  server sends between two synchronous calls waits at most that long.

Whoever leads completes every answer it reads, its own or another's. Requests the server
sends (NOTIFY_CONSUMER_IDS_CHANGED 40, RESET_CONSUMER_CLIENT_OFFSET 220) go to the
``handler`` on a thread of the client's own, never on a reading thread.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from mqcore.errors import (
    InvalidArgumentError,
    ProtocolError,
    RemotingConnectError,
    RemotingTimeoutError,
)
from mqcore.hostport import split_host_port
from mqcore.logs import get_logger
from mqcore.protocol.codes import ResponseCode
from mqcore.remoting.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    AnswerPlan,
    PreparedRequest,
    RemotingCommand,
    decode_answer,
    next_opaque,
)
from mqcore.remoting.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from mqcore.remoting.futures import settle
from mqcore.remoting.signing import Credentials, sign
from mqcore.remoting.tls import ClientTls

__all__ = ["RemotingClient", "RequestHandler", "parse_address"]

log = get_logger(__name__)

RequestHandler = Callable[[RemotingCommand, str], "RemotingCommand | None"]

Answer = tuple[int, int, int, "str | None", tuple[Any, ...], "bytes | None"]
"""An answer read with a plan: (code, opaque, flag, remark, the plan's values, body)."""
"""``handler(request, addr)``: serve a request the server sent; return the answer or None."""

_LENGTH = struct.Struct(">i")  # a frame's first word: the length of what follows
_TICK = 0.1  # how often the sweeper expires async requests past their deadline
_RECV_SIZE = 256 * 1024
# The longest a blocking read waits before the reader looks at its deadline again (the
# socket's SO_RCVTIMEO): a direct call blocks in recv_into while its deadline is further
# away than this, and polls with the time left only for the last stretch.
_RECV_TICK = 0.05
# How long the reader thread's wait for something to read lasts before it looks again.
_IDLE_POLL_MS = 1000
_RCVTIMEO = struct.pack("ll", 0, int(_RECV_TICK * 1e6))
# How long the reader thread stays aside after a synchronous call began. Longer than a
# caller's own work between two calls, so that a run of calls keeps reading its own
# answers; short, since answers to asynchronous requests wait for it when nobody else reads.
_LINGER = 0.002
# How often the reader thread, standing aside while a leader reads, looks again: a request
# the server sends between two synchronous calls waits at most this long for a reader.
_ASIDE_LOOK = 0.05
_HANDLER_THREAD = "mqcore-remoting-client-handler"
# The pauses between sends of a request the server answered SYSTEM_BUSY: short at first (a
# server that is finishing its start-up, or a momentary overload), then longer.
_BUSY_FIRST_PAUSE = 0.01
_BUSY_MAX_PAUSE = 0.5
_BUSY_LAST_TRY = 0.05  # the least time a send is given to be answered


def _poll_ms(seconds: float) -> int:
    """A poll timeout in whole milliseconds that does not end before ``seconds`` have passed."""
    return max(1, int(seconds * 1000 + 1))


def parse_address(addr: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) as a (host, port) pair.

    :raises RemotingConnectError: not of that form (nothing can be connected to).
    """
    try:
        return split_host_port(addr, "remote address")
    except InvalidArgumentError as exc:
        raise RemotingConnectError(str(exc), addr=addr) from None


class _Pending(NamedTuple):
    future: concurrent.futures.Future[RemotingCommand]
    deadline: float
    code: int
    timeout: float


class _Connection:
    """One socket to ``addr``, its write lock, and its reading (see the module docstring)."""

    def __init__(
        self, client: RemotingClient, addr: str, sock: socket.socket, tls: ClientTls | None = None
    ) -> None:
        self.client = client
        self.addr = addr
        self.sock = sock
        self.tls = tls
        self.pending: dict[int, _Pending] = {}
        self.closed = False
        self._send_lock = threading.Lock()
        self._outq: collections.deque[bytes | bytearray | memoryview] = collections.deque()
        self._decoder = FrameDecoder(client.max_frame_size)
        # Reading: who leads, who waits for an answer somebody else reads, and until when the
        # reader thread stays aside. All under ``_turn``.
        self._turn_lock = threading.Lock()
        self._turn = threading.Condition(self._turn_lock)
        self._leading = False
        self._followers: list[concurrent.futures.Future[RemotingCommand]] = []
        self._quiet_until = 0.0
        self._torn_down = False
        # One buffer for every read: recv(n) would allocate (and then shrink) n bytes per
        # call, which for a large n costs more than the rest of a small round trip. Only the
        # leader touches it.
        self._buffer = bytearray(_RECV_SIZE)
        self._view = memoryview(self._buffer)
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        # A blocking read returns after _RECV_TICK at the latest (BlockingIOError), so a
        # direct call can block in recv_into and still give up at its deadline.
        # Where the system refuses the option, every read of a direct call polls first.
        self._timed_reads = True
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _RCVTIMEO)
        except OSError:
            self._timed_reads = False
        # The direct call's answer: the opaque it waits for, the plan it is read with (a
        # prepared request's), and the answer once read.
        self._own: int | None = None
        self._own_plan: AnswerPlan | None = None
        self._own_answer: RemotingCommand | Answer | None = None
        self.reader = threading.Thread(
            target=self._read_loop, name=f"mqcore-remoting-client-{addr}", daemon=True
        )

    def send(self, cmd: RemotingCommand | PreparedRequest, deadline: float) -> None:
        head, body = cmd.encode_parts()
        small = len(body) < 65536
        lock = self._send_lock
        if lock.acquire(False):
            # Nobody is writing: ours goes out at once, after whatever was queued before
            # it (the usual case of a synchronous call; no queue to pass it through).
            try:
                if self.closed:
                    raise RemotingConnectError(
                        f"connection to {self.addr} is closed", addr=self.addr
                    )
                data: bytes | bytearray | memoryview = head + bytes(body) if small else head
                if self._outq:
                    self._outq.append(data)
                    data = self._drain()
                self._write(data, deadline, cmd.code)
                if not small:
                    self._write(body, deadline, cmd.code)
            finally:
                lock.release()
            return
        self._outq.append(head + bytes(body) if small else head)
        if not small:
            self._outq.append(body)  # a large body is written from its own buffer, uncopied
        # Combining: whoever holds the lock writes every frame queued so far in one go, so
        # threads sending at once share a syscall instead of queueing for one each.
        with lock:
            if self.closed:
                raise RemotingConnectError(f"connection to {self.addr} is closed", addr=self.addr)
            if not self._outq:
                return  # another thread already wrote ours
            self._write(self._drain(), deadline, cmd.code)

    def _drain(self) -> bytes | bytearray | memoryview:
        """Under the send lock: every frame queued, as one buffer."""
        outq = self._outq
        parts = []
        while outq:
            parts.append(outq.popleft())
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _write(self, data: bytes | bytearray | memoryview, deadline: float, code: int) -> None:
        """Under the send lock: write all of ``data`` (encrypted first with TLS)."""
        if self.tls is not None:  # encrypted in the order written, under the send lock
            data = self.tls.encrypt(data)
        try:
            sent = self.sock.send(data, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            sent = 0  # the loop below waits for room, or words the error
        except OSError as exc:
            self.close()
            raise RemotingConnectError(
                f"write to {self.addr} failed: {exc}", addr=self.addr
            ) from exc
        if sent == len(data):
            return  # the usual case: all of it in one syscall
        view = memoryview(data)[sent:]
        while view:
            try:
                # The socket is blocking (one syscall per read or write, no poll first);
                # MSG_DONTWAIT keeps a stalled server from blocking a writer past its deadline.
                view = view[self.sock.send(view, socket.MSG_DONTWAIT) :]
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not self._writable(left):
                    self.close()
                    raise RemotingTimeoutError(
                        f"could not write request code {code} to {self.addr} "
                        f"in time (the server is not reading)",
                        addr=self.addr,
                        code=code,
                    ) from None
            except OSError as exc:
                self.close()
                raise RemotingConnectError(
                    f"write to {self.addr} failed: {exc}", addr=self.addr
                ) from exc

    def _send_raw(self, data: bytes) -> None:
        """Bytes the TLS session owes the server, in order with the frames written."""
        with self._send_lock, contextlib.suppress(OSError):
            self.sock.sendall(data)

    def _writable(self, timeout: float) -> bool:
        # poll, not select: select refuses descriptors past 1023 (a client with many files).
        poller = select.poll()
        poller.register(self.sock, select.POLLOUT)
        return bool(poller.poll(_poll_ms(timeout)))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with self._turn:
            self._turn.notify_all()  # a reader thread standing aside ends

    def wake_reader(self) -> None:
        """An asynchronous request is in flight: a reader thread standing aside while
        nobody leads looks again now (rather than at its next look, see ``_ASIDE_LOOK``)."""
        with self._turn_lock:
            if not self._leading:
                self._turn.notify_all()

    # --- the direct call -------------------------------------------------------------------

    def lead_now(self) -> bool:
        """Take the reading if nobody reads (no other caller, not the reader thread)."""
        # The condition's bare lock: a direct call takes it twice, and ``with`` on the
        # Condition costs a Python call each time; waiting and waking still go through it.
        with self._turn_lock:
            if self._leading or self.closed:
                return False
            self._leading = True
            return True

    def end_lead(self) -> None:
        """Give the reading up (after :meth:`lead_now`): the reader thread stays aside a
        little longer, and is woken at once when somebody waits for an answer."""
        with self._turn_lock:
            self._leading = False
            self._quiet_until = time.monotonic() + _LINGER
            if (
                self.closed
                or self.pending
                or (self._followers and any(not f.done() for f in self._followers))
            ):
                self._turn.notify_all()  # somebody must read on for them

    def call(
        self, cmd: RemotingCommand | PreparedRequest, deadline: float
    ) -> RemotingCommand | Answer | None:
        """As the leader (:meth:`lead_now`): write ``cmd`` and read until its answer; None
        at the deadline. Answers to others and the server's requests read meanwhile are
        served as the reader thread serves them. The answer to a prepared request is read
        with its plan (an :data:`Answer`) when it has the plan's fields, else as a command.

        :raises RemotingConnectError: the connection ended first.
        """
        self._own = cmd.opaque
        self._own_plan = cmd.plan if cmd.__class__ is PreparedRequest else None
        self._own_answer = None
        try:
            self.send(cmd, deadline)
            poll = self._poll.poll
            while self._own_answer is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if self.closed:
                    raise self._lost(cmd.code, "the connection was closed")
                # Far from the deadline: block in recv_into (SO_RCVTIMEO bounds the wait).
                # Near it: poll for the time left first, so the call ends at its deadline.
                if (left < _RECV_TICK or not self._timed_reads) and not poll(_poll_ms(left)):
                    continue
                ended = self._read_own()
                if ended is not None:
                    self._tear_down(ended)
                    raise self._lost(cmd.code, ended)
            return self._own_answer
        finally:
            self._own = None
            self._own_plan = None
            self._own_answer = None  # (the return value was taken before this runs)

    def _lost(self, code: int, reason: str) -> RemotingConnectError:
        return RemotingConnectError(
            f"connection to {self.addr} lost before the answer to request code {code}: {reason}",
            addr=self.addr,
        )

    # --- reading ---------------------------------------------------------------------------

    def wait(self, fut: concurrent.futures.Future[RemotingCommand], deadline: float) -> None:
        """Until ``fut`` is done or ``deadline``: read the answers when nobody else is
        reading, else wait for whoever is. A synchronous caller's way to its answer (its
        request set the quiet time when it was written: ``RemotingClient._send``)."""
        if fut.done():  # read meanwhile (the reader thread was reading when it was sent)
            return
        turn = self._turn
        with turn:
            lead = not self._leading and not self.closed
            if lead:
                self._leading = True
            else:
                self._followers.append(fut)
        if not lead:
            try:
                concurrent.futures.wait((fut,), max(0.0, deadline - time.monotonic()))
            finally:
                with turn:
                    self._followers.remove(fut)
            return
        try:
            self._lead(fut, deadline)
        finally:
            with turn:
                self._leading = False
                self._quiet_until = time.monotonic() + _LINGER
                if self.closed or self.pending or any(not f.done() for f in self._followers):
                    turn.notify_all()  # somebody must read on for them

    def _lead(self, fut: concurrent.futures.Future[RemotingCommand], deadline: float) -> None:
        poll = self._poll.poll
        while not fut.done():
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return
            # Poll, then read: a blocking read could not give up at the deadline.
            if poll(_poll_ms(left)):
                ended = self._read_once()
                if ended is not None:
                    self._tear_down(ended)
                    return

    def _read_own(self) -> str | None:
        """The direct call's read (:meth:`_read_once`): when what arrived is one whole
        frame, nothing was buffered before it and the call has a plan (the usual answer to
        a prepared request), it is read with the plan where it lies, without the frame
        decoder; anything else goes the general way."""
        plan = self._own_plan
        if plan is None or self.tls is not None or self._decoder.buffered:
            return self._read_once()
        try:
            n = self.sock.recv_into(self._buffer)
        except BlockingIOError:
            return None
        except OSError as exc:
            return str(exc)
        if not n:
            return "closed by the server"
        if 8 <= n <= self.client.max_frame_size and _LENGTH.unpack_from(self._buffer)[0] == n - 4:
            try:
                answer = decode_answer(self._view[4:n], plan)
            except ProtocolError:
                pass  # read as a command below, which words the error
            else:
                if answer[1] == self._own and answer[2] & FLAG_RESPONSE:
                    self._own_answer = answer
                    return None
        return self._serve(self._view[:n])

    def _read_once(self, flags: int = 0) -> str | None:
        """The leader's read: serve the frames of what arrived. Returns why the connection
        ended, or None while it lasts."""
        try:
            n = self.sock.recv_into(self._buffer, 0, flags)
        except BlockingIOError:
            return None
        except OSError as exc:
            return str(exc)
        if not n:
            return "closed by the server"
        return self._serve(self._view[:n])

    def _serve(self, data: bytes | memoryview) -> str | None:
        """Serve the frames of ``data`` as read from the socket (see :meth:`_read_once`)."""
        if self.tls is not None:
            try:
                data = self.tls.decrypt(data)
            except ssl.SSLError as exc:
                return f"TLS error: {exc}"
            extra = self.tls.pending_output()
            if extra:
                self._send_raw(extra)
            if self.tls.eof:
                return "closed by the server (TLS)"
        try:
            for frame in self._decoder.feed(data):
                self._frame(frame)
        except ProtocolError as exc:
            log.warning("remoting_client_bad_frame", addr=self.addr, error=str(exc))
            return f"bad frame from the server: {exc}"
        return None

    def _stand_aside(self) -> bool:
        """Under ``_turn``: whether the reader thread should not read now."""
        if self.closed:
            return False
        if self._leading:
            return True
        if any(not f.done() for f in self._followers):
            return False
        return time.monotonic() < self._quiet_until

    def _read_loop(self) -> None:
        reason = "the connection was closed"
        turn = self._turn
        # The reader's own poll object (a poll object serves one thread at a time).
        watch = select.poll()
        watch.register(self.sock, select.POLLIN)
        try:
            while True:
                with turn:
                    while self._stand_aside():
                        # A timed wait: a leader that ends wakes nobody unless somebody
                        # waits for an answer or an asynchronous request is in flight
                        # (waking this thread would cost what a leader saves), so this
                        # thread looks again when the quiet time is over; while a leader
                        # reads, only now and then (each look takes the GIL from it).
                        left = self._quiet_until - time.monotonic()
                        turn.wait(max(left, _ASIDE_LOOK) if self._leading else max(left, 0.0))
                    if self.closed:
                        break
                # Wait for something to read without holding the reading: a synchronous
                # call that comes meanwhile takes the lead and reads its own answer (the
                # direct call) rather than waiting for this thread to hand it over.
                if not watch.poll(_IDLE_POLL_MS):
                    continue
                with turn:
                    if self._leading or self.closed:
                        continue  # somebody reads it (or the connection ends): look again
                    self._leading = True
                try:
                    ended = self._read_once(socket.MSG_DONTWAIT)  # a leader may have read it
                finally:
                    with turn:
                        self._leading = False
                if ended is not None:
                    reason = ended
                    break
        finally:
            self._tear_down(reason)

    def _tear_down(self, reason: str) -> None:
        """The connection is gone: close it and fail every request still waiting (once)."""
        with self._turn:
            if self._torn_down:
                return
            self._torn_down = True
            self.closed = True
            self._turn.notify_all()
        with contextlib.suppress(OSError):
            self.sock.close()
        self.client._forget(self)
        pending, self.pending = self.pending, {}
        for p in pending.values():
            settle(
                p.future,
                error=RemotingConnectError(
                    f"connection to {self.addr} lost before the answer to request "
                    f"code {p.code}: {reason}",
                    addr=self.addr,
                ),
            )

    def _frame(self, frame: bytes) -> None:
        plan = self._own_plan
        if plan is not None:
            # The direct call of a prepared request: its answer read with the plan in one
            # call. Anything else (another's answer, a request, an answer without the
            # plan's fields, such as a refusal) is read as a command below.
            try:
                answer = decode_answer(frame, plan)
            except ProtocolError:
                pass
            else:
                if answer[1] == self._own and answer[2] & FLAG_RESPONSE:
                    self._own_answer = answer
                    return
        cmd = RemotingCommand.decode(frame)
        if cmd.is_response:
            if cmd.opaque == self._own:  # the direct call's answer (the leader reads this)
                self._own_answer = cmd
                return
            p = self.pending.pop(cmd.opaque, None)
            if p is not None:
                settle(p.future, cmd)
            return
        self.client._server_request(self, cmd)

    def _expire(self, now: float) -> None:
        late = [op for op, p in list(self.pending.items()) if p.deadline <= now]
        for opaque in late:
            p = self.pending.pop(opaque, None)
            if p is not None:
                settle(p.future, error=self.client._timeout(self.addr, p.code, p.timeout))


class RemotingClient:
    """A thread-safe synchronous RocketMQ remoting client (RocketMQ's ``NettyRemotingClient``).

    :param handler: serves requests the server sends (codes 40, 220); without one they are
        answered REQUEST_CODE_NOT_SUPPORTED (oneway ones are dropped).
    :param connect_timeout: seconds to open a connection.
    :param max_frame_size: the largest frame accepted from a server.
    :param credentials: an ACL account's keys: every request is signed with them
        (:mod:`mqcore.remoting.signing`); None: requests go unsigned.
    :param ssl_context: TLS for every connection (:func:`mqcore.remoting.tls.client_context`
        makes one); None: plain TCP.
    """

    def __init__(
        self,
        handler: RequestHandler | None = None,
        *,
        connect_timeout: float = 3.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.handler = handler
        self.credentials = credentials
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self._conns: dict[str, _Connection] = {}
        self._addr_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._handler_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._readers: list[threading.Thread] = []
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    # --- calls -----------------------------------------------------------------------------

    def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and wait for its answer.

        :raises RemotingTimeoutError: no answer within ``timeout`` seconds (names address
            and code).
        :raises RemotingConnectError: cannot connect, or the connection was lost.
        """
        deadline = time.monotonic() + timeout
        self._prepare(cmd)
        answer = self._call(addr, cmd, deadline, timeout)
        assert answer.__class__ is RemotingCommand  # a command's answer is a command
        return answer

    def _call(
        self, addr: str, cmd: RemotingCommand | PreparedRequest, deadline: float, timeout: float
    ) -> RemotingCommand | Answer:
        """The answer to ``cmd`` (prepared for sending): the direct call when nobody reads
        ``addr``'s connection, else the request's future (:meth:`_invoke_waiting`)."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            conn = self._connection(addr)
        if conn.lead_now():  # nobody reads: the direct call
            try:
                answer = conn.call(cmd, deadline)
            finally:
                conn.end_lead()
            if answer is None:
                raise self._timeout(addr, cmd.code, timeout)
            return answer
        return self._invoke_waiting(conn, addr, cmd, deadline, timeout)

    def _invoke_waiting(
        self,
        conn: _Connection,
        addr: str,
        cmd: RemotingCommand | PreparedRequest,
        deadline: float,
        timeout: float,
    ) -> RemotingCommand:
        """A synchronous call while somebody else reads: the request's future, read by
        whoever leads (or by this caller once nobody does)."""
        conn, fut = self._send(addr, cmd, deadline, timeout, sync=True, prepared=True)
        conn.wait(fut, deadline)
        if fut.done():
            return fut.result()
        conn.pending.pop(cmd.opaque, None)
        raise self._timeout(addr, cmd.code, timeout) from None

    def invoke_prepared(
        self, addr: str, request: PreparedRequest, timeout: float
    ) -> RemotingCommand | Answer:
        """Send an encoded ``request`` to ``addr`` and wait for its answer: an
        :data:`Answer` read with the request's plan when the answer has the plan's fields
        and came to the direct call, else the answer as a command (a refusal, say).

        The request is written as it is: a client with credentials signs each request, so
        it must send commands (:meth:`invoke`) instead. SYSTEM_BUSY answers are returned
        as they come.

        :raises RemotingTimeoutError: no answer within ``timeout`` seconds.
        :raises RemotingConnectError: cannot connect, or the connection was lost.
        """
        if self.credentials is not None:
            raise InvalidArgumentError(
                "a prepared request cannot be signed: this client has credentials, so send "
                "a RemotingCommand with invoke()"
            )
        return self._call(addr, request, time.monotonic() + timeout, timeout)

    def invoke_retry_busy(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """:meth:`invoke`, sending ``cmd`` again while the server answers SYSTEM_BUSY.

        A busy server (one still starting, or over its limit of requests in progress) did
        not serve the request, so sending it again is safe; the pause between sends grows
        from 10 ms to 0.5 s. Once ``timeout`` seconds have passed since the first send, the
        last busy answer is returned as it came.

        :raises RemotingTimeoutError: no answer within ``timeout`` (after a busy answer, a
            try that runs out of time returns that busy answer instead).
        :raises RemotingConnectError: cannot connect, or the connection was lost.
        """
        deadline = time.monotonic() + timeout
        pause = _BUSY_FIRST_PAUSE
        busy: RemotingCommand | None = None
        while True:
            try:
                resp = self.invoke(addr, cmd, max(deadline - time.monotonic(), _BUSY_LAST_TRY))
            except RemotingTimeoutError:
                if busy is None:
                    raise
                # The server said busy and the last try ran out of time: the busy answer says
                # more than the timeout does (the server is there, and not serving yet).
                return busy
            left = deadline - time.monotonic() - _BUSY_LAST_TRY  # kept for the next answer
            if resp.code != ResponseCode.SYSTEM_BUSY or left <= 0:
                return resp
            busy = resp
            log.debug("remoting_busy_retry", addr=addr, code=cmd.code, remark=resp.remark)
            time.sleep(min(pause, left))
            pause = min(pause * 2, _BUSY_MAX_PAUSE)
            cmd.opaque = next_opaque()  # a new request: the busy answer settled the old one

    def invoke_async(
        self, addr: str, cmd: RemotingCommand, timeout: float
    ) -> concurrent.futures.Future[RemotingCommand]:
        """Send ``cmd``; the future gets the answer or a Remoting*Error (its timeout is
        enforced by a sweeper thread, to within 0.1 s). Connecting and writing happen in the
        calling thread, so this raises :class:`RemotingConnectError` at once when the
        server cannot be reached."""
        if self._sweeper is None:
            self._start_sweeper()
        return self._send(addr, cmd, time.monotonic() + timeout, timeout)[1]

    def _start_sweeper(self) -> None:
        with self._lock:
            if self._sweeper is not None or self._closed:
                return
            self._sweeper = threading.Thread(
                target=self._sweep, name="mqcore-remoting-client-sweeper", daemon=True
            )
            self._sweeper.start()

    def _sweep(self) -> None:
        while not self._stop.wait(_TICK):
            now = time.monotonic()
            for conn in list(self._conns.values()):
                conn._expire(now)

    def invoke_oneway(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> None:
        """Send ``cmd`` marked oneway: no answer is expected (``timeout`` bounds the write)."""
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        if self.credentials is not None:
            sign(cmd, self.credentials)
        conn = self._connection(addr)
        conn.send(cmd, time.monotonic() + timeout)

    def _send(
        self,
        addr: str,
        cmd: Any,
        deadline: float,
        timeout: float,
        sync: bool = False,
        prepared: bool = False,
    ) -> tuple[_Connection, concurrent.futures.Future[RemotingCommand]]:
        if not prepared:
            self._prepare(cmd)
        conn = self._connection(addr)
        if sync:
            # Before the write: the reader thread must not go back to reading the answer
            # that is on its way to a caller about to read it itself.
            conn._quiet_until = time.monotonic() + _LINGER
        fut: concurrent.futures.Future[RemotingCommand] = concurrent.futures.Future()
        conn.pending[cmd.opaque] = _Pending(fut, deadline, cmd.code, timeout)
        try:
            conn.send(cmd, deadline)
        except BaseException:
            conn.pending.pop(cmd.opaque, None)
            raise
        if not sync:
            conn.wake_reader()
        return conn, fut

    def _prepare(self, cmd: RemotingCommand) -> None:
        """Mark ``cmd`` a request expecting an answer, and sign it."""
        cmd.flag &= ~(FLAG_ONEWAY | FLAG_RESPONSE)
        if self.credentials is not None:
            sign(cmd, self.credentials)

    @staticmethod
    def _timeout(addr: str, code: int, timeout: float) -> RemotingTimeoutError:
        return RemotingTimeoutError(
            f"no answer from {addr} to request code {code} within {timeout} s",
            addr=addr,
            code=code,
        )

    # --- connections -----------------------------------------------------------------------

    def _connection(self, addr: str) -> _Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        with self._lock:
            if self._closed:
                raise RemotingConnectError("the remoting client is closed", addr=addr)
            lock = self._addr_locks.setdefault(addr, threading.Lock())
        with lock:  # one connect per address at a time; other addresses are not held up
            conn = self._conns.get(addr)
            if conn is not None and not conn.closed:
                return conn
            host, port = parse_address(addr)
            try:
                sock = socket.create_connection((host, port), timeout=self.connect_timeout)
            except OSError as exc:
                raise RemotingConnectError(f"cannot connect to {addr}: {exc}", addr=addr) from exc
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = None
            if self.ssl_context is not None:
                tls = ClientTls(self.ssl_context, host)
                try:
                    tls.handshake(sock, addr, self.connect_timeout)
                except BaseException:
                    sock.close()
                    raise
            sock.settimeout(None)
            conn = _Connection(self, addr, sock, tls)
            with self._lock:
                if self._closed:
                    sock.close()
                    raise RemotingConnectError("the remoting client is closed", addr=addr)
                self._conns[addr] = conn
                self._readers = [t for t in self._readers if t.is_alive()]
                self._readers.append(conn.reader)
            conn.reader.start()
            log.debug("remoting_connected", addr=addr)
            return conn

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            if self._conns.get(conn.addr) is conn:
                del self._conns[conn.addr]

    def close_connection(self, addr: str) -> None:
        """Close the connection to ``addr``, if open (the next call reconnects)."""
        conn = self._conns.get(addr)
        if conn is not None:
            conn.close()

    def close(self, timeout: float = 5.0) -> None:
        """Close every connection and join every thread this client started."""
        with self._lock:
            self._closed = True
            conns = list(self._conns.values())
            readers = list(self._readers)
        self._stop.set()
        if self._sweeper is not None:
            readers.append(self._sweeper)
        for conn in conns:
            conn.close()
        for thread in readers:
            if thread is not threading.current_thread():
                thread.join(timeout)
        if self._handler_pool is not None:
            # From the handler itself (a handler that closes its client), do not join ourselves.
            in_handler = threading.current_thread().name.startswith(_HANDLER_THREAD)
            self._handler_pool.shutdown(wait=not in_handler, cancel_futures=True)

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- requests from the server ----------------------------------------------------------

    def _server_request(self, conn: _Connection, cmd: RemotingCommand) -> None:
        with self._lock:
            if self._closed:
                return
            if self._handler_pool is None:
                self._handler_pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=_HANDLER_THREAD
                )
            pool = self._handler_pool
        with contextlib.suppress(RuntimeError):  # closing
            pool.submit(self._handle, conn, cmd)

    def _handle(self, conn: _Connection, cmd: RemotingCommand) -> None:
        try:
            if self.handler is None:
                answer: RemotingCommand | None = RemotingCommand.response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f" request type {cmd.code} not supported",
                )
            else:
                answer = self.handler(cmd, conn.addr)
        except Exception as exc:
            log.exception("remoting_client_handler_failed", code=cmd.code)
            answer = RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
            )
        if answer is None or cmd.is_oneway:
            return
        answer.opaque = cmd.opaque
        answer.flag |= FLAG_RESPONSE
        answer.serialize_type = cmd.serialize_type
        with contextlib.suppress(RemotingConnectError, RemotingTimeoutError):
            conn.send(answer, time.monotonic() + 3.0)
