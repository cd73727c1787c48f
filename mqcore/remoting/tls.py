"""TLS on the remoting port: the contexts both sides use, RocketMQ's server modes, and the
client side's TLS over a blocking socket.

Server modes (RocketMQ's ``tls.server.mode``):

- ``disabled``: plain TCP only;
- ``permissive``: TLS and plain TCP on one port; the server tells them apart by a
  connection's first byte (0x16 opens a TLS handshake, as RocketMQ's server sniffs it);
- ``enforcing``: TLS only; a plain client's bytes fail the handshake and it is disconnected.

With a CA file the server asks every client for a certificate signed by it (mutual TLS) and
refuses a client without one.

The remoting client reads and writes one connection from several threads at once, which an
``ssl.SSLSocket`` does not allow: :class:`ClientTls` keeps the TLS state in memory
(``ssl.SSLObject`` over two ``MemoryBIO``) under a lock of its own, and the client moves the
encrypted bytes over its plain socket as before.
"""

from __future__ import annotations

import enum
import socket
import ssl
import threading
import time
from pathlib import Path

from mqcore.errors import InvalidArgumentError, RemotingConnectError

__all__ = [
    "TLS_HANDSHAKE_BYTE",
    "ClientTls",
    "TlsMode",
    "client_context",
    "server_context",
]

#: The first byte of a TLS connection (a handshake record): RocketMQ's permissive sniffing.
TLS_HANDSHAKE_BYTE = 0x16

_READ_CHUNK = 256 * 1024


class TlsMode(str, enum.Enum):
    """RocketMQ's server TLS modes (see the module docstring)."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"

    @classmethod
    def of(cls, value: str | TlsMode) -> TlsMode:
        """The mode named ``value`` (any case).

        :raises InvalidArgumentError: not one of them."""
        try:
            return cls(str(getattr(value, "value", value)).lower())
        except ValueError:
            raise InvalidArgumentError(
                f"TLS mode {value!r} is not one of disabled, permissive, enforcing"
            ) from None


def _readable(path: str | Path, what: str) -> str:
    if not Path(path).is_file():
        raise InvalidArgumentError(f"{what} {path} is not a readable file")
    return str(path)


def server_context(
    cert: str | Path, key: str | Path, ca: str | Path | None = None
) -> ssl.SSLContext:
    """The server's TLS context: its certificate chain and key; with ``ca``, clients must
    show a certificate that CA signed (mutual TLS).

    :raises InvalidArgumentError: a file is missing, or the certificate and key do not load
        (the message names the file, never a key's content).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(_readable(cert, "TLS certificate"), _readable(key, "TLS key"))
    except ssl.SSLError as exc:
        raise InvalidArgumentError(
            f"cannot load TLS certificate {cert} with key {key}: {exc.reason or exc}"
        ) from None
    if ca is not None:
        try:
            ctx.load_verify_locations(cafile=_readable(ca, "TLS CA file"))
        except ssl.SSLError as exc:
            raise InvalidArgumentError(f"cannot load TLS CA file {ca}: {exc}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(
    tls: bool | ssl.SSLContext | None,
    ca: str | Path | None = None,
    cert: str | Path | None = None,
    key: str | Path | None = None,
) -> ssl.SSLContext | None:
    """A client's TLS context from ``tls=``: None/False (plain TCP), an
    :class:`ssl.SSLContext` (used as given), or True: the server's certificate is verified
    against ``ca`` (else the system's CAs), host name included; ``cert`` and ``key`` are the
    client's own certificate for mutual TLS."""
    if isinstance(tls, ssl.SSLContext):
        return tls
    if not tls and ca is None and cert is None:
        return None
    ctx = ssl.create_default_context(cafile=None if ca is None else _readable(ca, "TLS CA file"))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        try:
            ctx.load_cert_chain(_readable(cert, "TLS certificate"), key)
        except ssl.SSLError as exc:
            raise InvalidArgumentError(
                f"cannot load TLS certificate {cert}: {exc.reason or exc}"
            ) from None
    return ctx


class ClientTls:
    """One client connection's TLS, in memory: :meth:`handshake` over the socket at connect
    time, then :meth:`encrypt` and :meth:`decrypt` from any thread."""

    def __init__(self, context: ssl.SSLContext, server_hostname: str | None) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_hostname=server_hostname)
        self._lock = threading.Lock()
        #: True once the server closed the TLS session
        self.eof = False

    def handshake(self, sock: socket.socket, addr: str, timeout: float) -> None:
        """Run the handshake over the blocking ``sock`` within ``timeout`` seconds.

        :raises RemotingConnectError: it failed (a plain server, an untrusted certificate).
        """
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    self._obj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    pass
                self._send_pending(sock)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out")
                sock.settimeout(left)
                data = sock.recv(_READ_CHUNK)
                if not data:
                    raise ConnectionError("the server closed the connection")
                self._in.write(data)
            self._send_pending(sock)
        except (ssl.SSLError, OSError) as exc:
            raise RemotingConnectError(
                f"TLS handshake with {addr} failed: {exc}", addr=addr
            ) from None

    def _send_pending(self, sock: socket.socket) -> None:
        data = self._out.read()
        if data:
            sock.sendall(data)

    def encrypt(self, data: bytes | bytearray | memoryview) -> bytes:
        """``data`` as TLS records (with whatever else the session has to send first)."""
        with self._lock:
            self._obj.write(data)
            return self._out.read()

    def decrypt(self, data: bytes | bytearray | memoryview) -> bytes:
        """The plaintext that ``data`` (bytes read from the socket) completes.

        :raises ssl.SSLError: the bytes are not a valid TLS stream.
        """
        with self._lock:
            self._in.write(data)
            chunks = []
            while True:
                try:
                    chunk = self._obj.read(_READ_CHUNK)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:
                    self.eof = True
                    break
                if not chunk:
                    self.eof = True
                    break
                chunks.append(chunk)
            return b"".join(chunks)

    def pending_output(self) -> bytes:
        """Bytes the session must send that no :meth:`encrypt` carried (a key update's
        answer); empty almost always."""
        with self._lock:
            return self._out.read() if self._out.pending else b""
