"""The composition roots: a broker served over the network (:class:`Server`, what ``mqcore
serve`` runs) and a name server alone (:class:`NamesrvServer`, what ``mqcore namesrv`` runs).

Each owns a :class:`~mqcore.remoting.server.RemotingServer` and what answers behind it.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqcore.broker import Broker
from mqcore.broker.ha import HAMaster
from mqcore.client.common import client_ip
from mqcore.config import BrokerConfig
from mqcore.hostport import split_host_port
from mqcore.remoting.server import RemotingServer
from mqcore.server.access import AccessValidator
from mqcore.server.acl import AclFile
from mqcore.server.namesrv import NameServer
from mqcore.server.processor import BrokerProcessor
from mqcore.server.registration import NamesrvRegistrar

if TYPE_CHECKING:
    from mqcore.grpc.server import GrpcServer
    from mqcore.server.metrics import BrokerMetrics

__all__ = ["NamesrvServer", "Server", "split_listen"]


def split_listen(listen: str, option: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` as its host and port; ``option`` names the setting in the refusal."""
    return split_host_port(listen, option, any_port=True)


def _reachable(host: str, public: str) -> str:
    """Where a port bound to ``host`` is reached: ``public`` for every interface."""
    return public if host in ("0.0.0.0", "::", "") else host


def _bindable(host: str, port: int) -> bool:
    """Whether ``host:port`` can be listened on now (port 0 always can)."""
    if port == 0:
        return True
    try:
        with socket.create_server((host, port)):
            return True
    except OSError:
        return False


class Server:
    """A :class:`~mqcore.broker.Broker` behind a remoting server; owns both.

    The constructor returns once the server can serve: its port accepts connections only
    after the store has recovered, topics and offsets are loaded and (with ``namesrv_addr``)
    the first registration with the name servers is done.

    :param data_dir: the broker's data directory.
    :param listen: ``HOST:PORT`` to listen on (port 0: any free port).
    :param store: the store plugin's name.
    :param settings: :class:`~mqcore.config.BrokerConfig` settings by name.
    :param acl: a RocketMQ ``plain_acl.yml``: every request is then checked against it
        (:mod:`mqcore.server.access`), and the file is reloaded when it changes
        (:mod:`mqcore.server.acl`); None: no ACL, every request is served.
    :param metrics_listen: ``HOST:PORT`` of a Prometheus ``/metrics`` (and ``/healthz``,
        ``/readyz``) listener, or None for no metrics (nothing is counted then); needs the
        ``mqcore[metrics]`` extra. See :mod:`mqcore.server.metrics`.
    :param grpc_listen: ``HOST:PORT`` of RocketMQ 5's gRPC messaging service on the same
        broker (the 5.x clients' endpoint), or None for none; needs the ``mqcore[grpc]``
        extra. See :mod:`mqcore.grpc`. With ``acl`` its calls are checked against the same
        file (:mod:`mqcore.server.grpc_access`).
    :param grpc_tls: ``(cert, key, ca)`` PEM files: the gRPC port takes TLS only (mutual
        with a CA), or None for plaintext.
    """

    def __init__(
        self,
        data_dir: str | Path,
        listen: str = "127.0.0.1:9876",
        store: str = "mmap",
        settings: dict[str, Any] | None = None,
        metrics_listen: str | None = None,
        grpc_listen: str | None = None,
        acl: str | Path | None = None,
        grpc_tls: tuple[str | Path, str | Path, str | Path | None] | None = None,
        **server_options: Any,
    ) -> None:
        host, port = split_listen(listen)
        if grpc_listen is not None:
            split_listen(grpc_listen, "--grpc-listen")  # refused before anything starts
        #: the gRPC listener (``grpc_listen``), or None
        self.grpc: GrpcServer | None = None
        #: the ACL file in force (``acl``), or None
        self.acl: AclFile | None = AclFile(acl) if acl is not None else None
        metrics_at = (
            None if metrics_listen is None else split_listen(metrics_listen, "--metrics-listen")
        )
        #: the metrics listener (``metrics_listen``), or None
        self.metrics: BrokerMetrics | None = None
        self._serving = False
        settings = dict(settings or {})
        # The port is taken first (the broker records it, and port 0 picks one), but listened
        # on only once the broker can serve: until then a client's connection is refused, so
        # one that connects as soon as the port accepts is answered, never told to wait.
        self.remoting = RemotingServer(None, host, port, **server_options)
        bound_host, bound_port = self.remoting.bind()
        self.registrar: NamesrvRegistrar | None = None
        broker: Broker | None = None
        try:
            # Records name the broker by where clients reach it (their offset message ids).
            public = client_ip() if bound_host in ("0.0.0.0", "::", "") else bound_host
            settings.setdefault("broker_ip", public)
            settings.setdefault("listen_port", bound_port)
            role = str(settings.get("broker_role", "ASYNC_MASTER")).upper()
            if role != "SLAVE" and store == "mmap" and "ha_listen_port" not in settings:
                # RocketMQ's haListenPort: the port + 1 (any free port when the port is, or
                # when the port + 1 is taken and no replication port was asked for).
                wanted = bound_port + 1 if port else 0
                settings["ha_listen_port"] = wanted if _bindable(bound_host, wanted) else 0
            settings.setdefault("ha_listen_host", bound_host)
            self.broker = broker = Broker(data_dir, store=store, config=BrokerConfig(**settings))
            self.address = f"{public}:{bound_port}"
            ha = self.broker.ha
            #: ``host:port`` of the replication port slaves connect to (None: no slaves)
            self.ha_address = (
                f"{_reachable(str(ha.host), public)}:{ha.port}"
                if isinstance(ha, HAMaster)
                else None
            )
            self.processor = BrokerProcessor(self.broker, self.address)
            acl_file = self.acl
            if acl_file is not None:
                self.processor.access = AccessValidator(lambda: acl_file.config)
            self.remoting.processor = self.processor
            self.remoting.inline_codes = self.processor.inline_codes
            self.remoting.group_codes = self.processor.group_codes
            if metrics_at is not None:
                # Imported only when asked for: prometheus_client is an optional extra.
                from mqcore.server.metrics import BrokerMetrics

                self.metrics = BrokerMetrics(
                    self.broker, self.remoting, self.processor, metrics_at, self._ready
                )
                self.remoting.processor = self.metrics.processor
            if grpc_listen is not None:
                # Imported only when asked for: grpcio is an optional extra.
                from mqcore.grpc.server import GrpcServer, GrpcTls
                from mqcore.server.grpc_access import GrpcAccess

                grpc_access = None
                if acl_file is not None:
                    grpc_access = GrpcAccess(lambda: acl_file.config)
                self.grpc = GrpcServer(
                    self.broker,
                    grpc_listen,
                    advertised_host=public,
                    tls=GrpcTls(*grpc_tls) if grpc_tls is not None else None,
                    access=grpc_access,
                )
            self.remoting.start()
            if self.broker.config.namesrv_addr:
                # Registered before start-up ends: a client that asks the name servers once
                # this server reports it listens finds the route.
                self.registrar = NamesrvRegistrar(self.broker, self.address, self.ha_address)
                self.processor.registrar = self.registrar  # topics it creates: registered first
            self._serving = True
        except BaseException:
            if self.acl is not None:
                self.acl.close()
            try:
                self._close_metrics()
                self._close_grpc()
            finally:
                try:
                    self.remoting.close()
                finally:
                    if broker is not None:
                        broker.close()
            raise

    def _ready(self) -> bool:
        """Whether this server serves now (``/readyz``)."""
        return self._serving and not self.broker.closed

    def _close_grpc(self) -> None:
        if self.grpc is not None:
            self.grpc.close()

    def _close_metrics(self) -> None:
        if self.metrics is not None:
            self.metrics.close()

    def close(self) -> None:
        """Close every connection, then the broker (offsets and delay progress persisted),
        and the metrics and gRPC listeners."""
        self._serving = False
        if self.acl is not None:
            self.acl.close()
        try:
            self._close_grpc()
            self._close_metrics()
            if self.registrar is not None:
                self.registrar.close()
        finally:
            try:
                self.remoting.close()
            finally:
                self.broker.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NamesrvServer:
    """A :class:`~mqcore.server.namesrv.NameServer` behind a remoting server; owns both.

    :param listen: ``HOST:PORT`` (port 0: any free port).
    """

    def __init__(self, listen: str = "127.0.0.1:9876") -> None:
        host, port = split_listen(listen)
        self.tables = NameServer()
        self.remoting = RemotingServer(self.tables, host, port)
        bound_host, bound_port = self.remoting.start()
        self.address = f"{bound_host}:{bound_port}"

    def close(self) -> None:
        """Close every connection."""
        self.remoting.close()

    def __enter__(self) -> NamesrvServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
