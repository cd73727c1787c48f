"""The dashboard as a running service: its web server on a thread of its own (uvicorn), its
sampler, and one :meth:`Dashboard.close` that stops both."""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Any

from mqcore.errors import MQError
from mqcore.hostport import split_host_port

__all__ = ["Dashboard"]


class Dashboard:
    """``mqcore dashboard``: pages about the cluster behind a name server, on ``listen``.

    Importing this module needs the ``mqcore[dashboard]`` extra (Starlette, Jinja2, uvicorn).

    :param namesrv: the name server (``mqcore namesrv``, a single ``mqcore serve``, or an
        Apache RocketMQ name server).
    :param listen: ``host:port`` to serve the pages on (port 0: any free port).
    :param read_only: hide every action and refuse its requests.
    :param acl: the brokers check ACL: each browser signs in with an account, whose keys
        sign its requests and whose permissions decide what it sees.
    :param credentials: access key and secret key the charts' sampler signs with, for
        brokers with ACL on.
    :param tls: True or an :class:`ssl.SSLContext`: the dashboard's clients use TLS.
    :param sample_interval: seconds between two samples of the charts' history.
    """

    def __init__(
        self,
        namesrv: str,
        listen: str = "127.0.0.1:8080",
        *,
        read_only: bool = False,
        acl: bool = False,
        credentials: Any = None,
        tls: bool | ssl.SSLContext | None = None,
        sample_interval: float = 10.0,
    ) -> None:
        import uvicorn

        from mqcore.dashboard.app import create_app
        from mqcore.dashboard.state import DashboardState

        host, port = split_host_port(listen, "--listen", example="127.0.0.1:8080", any_port=True)
        self.state = DashboardState(
            namesrv,
            read_only=read_only,
            acl=acl,
            credentials=credentials,
            tls=tls,
            sample_interval=sample_interval,
        )
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise MQError(f"the dashboard cannot listen on {listen}: {exc}") from exc
        self._sock.listen(128)
        bound = self._sock.getsockname()
        self.address = f"{host}:{bound[1]}"
        config = uvicorn.Config(
            create_app(self.state), log_level="warning", access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The pages' address, ``http://host:port``."""
        host, port = self.address.rsplit(":", 1)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> Dashboard:
        """Start sampling and serving; returns once the pages are served."""
        self.state.start()
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="dashboard-http"
        )
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                self.close()
                raise MQError(f"the dashboard's web server on {self.address} did not start")
            self._thread.join(0.02)
        return self

    def close(self) -> None:
        """Stop serving and sampling; close the clients."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sock.close()
        self.state.close()

    def __enter__(self) -> Dashboard:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()
