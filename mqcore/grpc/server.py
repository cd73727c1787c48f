"""The gRPC listener: a ``grpc.aio`` server on its own thread and event loop.

:class:`GrpcServer` is owned by :class:`mqcore.server.Server` (``mqcore serve
--grpc-listen``): started once the broker serves, stopped before it closes. Broker calls run
in a bounded thread pool; streams (Telemetry, ReceiveMessage) are coroutines, so a thousand
idle clients cost no thread.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mqcore.broker import Broker
from mqcore.errors import MQError
from mqcore.grpc.pb import grpc, service_grpc
from mqcore.grpc.service import CallAccess, MessagingService
from mqcore.hostport import split_host_port
from mqcore.logs import get_logger

__all__ = ["GrpcServer", "GrpcTls"]

log = get_logger(__name__)

#: How long close() lets calls in flight finish.
GRACE_S = 1.0
#: Room beyond the largest body a request may need (properties, framing, a batch's others).
REQUEST_OVERHEAD = 1024 * 1024


class GrpcTls:
    """TLS on the gRPC port: the server's certificate chain and key (PEM files) and, with
    ``ca``, mutual TLS (a client must show a certificate that CA signed).

    One gRPC port cannot tell TLS from plain connections as the remoting port does, so a
    listener with TLS takes TLS only.
    """

    def __init__(self, cert: str | Path, key: str | Path, ca: str | Path | None = None) -> None:
        self.cert = Path(cert)
        self.key = Path(key)
        self.ca = None if ca is None else Path(ca)

    def credentials(self) -> Any:
        """The ``grpc.ServerCredentials``.

        :raises MQError: a file cannot be read (named, never its content)."""
        try:
            chain = [(self.key.read_bytes(), self.cert.read_bytes())]
            ca = None if self.ca is None else self.ca.read_bytes()
        except OSError as exc:
            raise MQError(f"gRPC TLS: cannot read {exc.filename}: {exc.strerror}") from None
        return grpc.ssl_server_credentials(
            chain, root_certificates=ca, require_client_auth=ca is not None
        )


class GrpcServer:
    """``apache.rocketmq.v2.MessagingService`` for ``broker`` at ``listen`` (``HOST:PORT``,
    port 0: any free port).

    :param advertised_host: the host routes name when the client's own address is unknown
        (the listening host, or this machine's address when listening on every interface).
    :param workers: threads for broker calls.
    :param receivers: threads for held receives (long polls).
    :param tls: TLS on the port (TLS only), or None for plaintext.
    :param access: the ACL check of every call, or None for none.
    """

    def __init__(
        self,
        broker: Broker,
        listen: str,
        *,
        advertised_host: str | None = None,
        workers: int = 8,
        receivers: int = 32,
        tls: GrpcTls | None = None,
        access: CallAccess | None = None,
    ) -> None:
        self.tls = tls
        self._access = access
        host, port = split_host_port(listen, "--grpc-listen", any_port=True)
        self.broker = broker
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="mqcore-grpc-call")
        # Held receives wait in threads of their own, bounded: past these, receives queue.
        self._receivers = ThreadPoolExecutor(receivers, thread_name_prefix="mqcore-grpc-receive")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mqcore-grpc")
        self._server: Any = None
        self._thread.start()
        try:
            started = asyncio.run_coroutine_threadsafe(self._start(host, port), self._loop)
            bound = started.result()
        except BaseException:
            self._stop_loop()
            raise
        public = advertised_host or host
        #: ``host:port`` clients reach this listener at
        self.address = f"{public}:{bound}"
        self.port = bound
        self.service.router.address = self.address
        log.info(
            "grpc_listening", address=self.address, tls=tls is not None, acl=access is not None
        )

    async def _start(self, host: str, port: int) -> int:
        limit = self.broker.config.max_message_size + REQUEST_OVERHEAD
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ],
        )
        self.service = MessagingService(
            self.broker, f"{host}:{port}", self._executor, self._receivers
        )
        self.service.access = self._access
        service_grpc.add_MessagingServiceServicer_to_server(self.service, server)
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            if self.tls is None:
                bound = server.add_insecure_port(target)
            else:
                bound = server.add_secure_port(target, self.tls.credentials())
        except RuntimeError as exc:
            raise MQError(f"--grpc-listen {host}:{port} cannot be listened on: {exc}") from None
        if not bound:
            raise MQError(f"--grpc-listen {host}:{port} cannot be listened on (in use?)")
        await server.start()
        self._server = server
        return int(bound)

    async def _stop(self) -> None:
        if self._server is not None:
            await self._server.stop(GRACE_S)
            # grpc.aio polls its completion queue in a thread it ends only once its last
            # server is collected: drop the server here so that thread goes with it.
            self._server = None
            gc.collect()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()
        self._executor.shutdown(wait=True)
        self._receivers.shutdown(wait=True)

    def call_soon(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the server's loop (e.g. :meth:`MessagingService.push`)."""
        self._loop.call_soon_threadsafe(fn, *args)

    def close(self) -> None:
        """Stop listening, end every call and stream, and stop the thread."""
        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(GRACE_S + 10)
        finally:
            self._stop_loop()
        log.info("grpc_stopped", address=self.address)

    def __enter__(self) -> GrpcServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
