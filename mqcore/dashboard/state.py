"""What the dashboard's pages share: the admin client, the producer for test messages, the
sampler, and whether actions are allowed."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from mqcore.client.admin import MQAdmin
from mqcore.client.cluster_status import cluster_status
from mqcore.client.producer import Producer
from mqcore.dashboard.sampler import Sampler
from mqcore.errors import InvalidArgumentError, MQClientError, RemotingError

__all__ = ["DASHBOARD_PRODUCER_GROUP", "DashboardState", "make_admin"]

T = TypeVar("T")

DASHBOARD_PRODUCER_GROUP = "mqcore_dashboard"  # sends the test messages of the topic pages


def _with_credentials(cls: Callable[..., T], credentials: tuple[str, str] | None) -> dict[str, Any]:
    """``credentials=`` for ``cls`` when there are any; refused when ``cls`` cannot sign."""
    if credentials is None:
        return {}
    if "credentials" not in inspect.signature(cls).parameters:
        raise InvalidArgumentError(
            f"{cls.__name__} of this mqcore takes no credentials (it signs no request): "
            f"run the dashboard without --access-key, or upgrade mqcore"
        )
    return {"credentials": credentials}


def make_admin(
    namesrv: str, credentials: tuple[str, str] | None = None, *, timeout: float = 5.0
) -> MQAdmin:
    """An admin client to ``namesrv``, signing its requests with ``credentials`` (access key,
    secret key) when given, for brokers that check ACL."""
    return MQAdmin(namesrv, timeout=timeout, **_with_credentials(MQAdmin, credentials))


class DashboardState:
    """The dashboard's shared services; :meth:`close` stops them.

    :param namesrv: the name server (``host:port``; several separated by ``;``).
    :param read_only: refuse every action (create, delete, send, reset, resend).
    :param credentials: access key and secret key for brokers with ACL on.
    :param sample_interval: seconds between two samples of the charts' history.
    """

    def __init__(
        self,
        namesrv: str,
        *,
        read_only: bool = False,
        credentials: tuple[str, str] | None = None,
        sample_interval: float = 10.0,
    ) -> None:
        self.namesrv = namesrv
        self.read_only = read_only
        self.credentials = credentials
        _with_credentials(MQAdmin, credentials)  # refused now, not at the first page
        self.sampler = Sampler(lambda: make_admin(namesrv, credentials), interval=sample_interval)
        self._admin: MQAdmin | None = None
        self._producer: Producer | None = None
        # One admin client for every page: requests run one at a time through it.
        self._lock = threading.Lock()

    def cluster_status(self) -> list[dict[str, Any]]:
        """Every broker group's members, roles and replication state, asked through the admin
        client's connections (signed as its requests are). Of several name servers, the
        first that answers is asked."""

        def work(admin: MQAdmin) -> list[dict[str, Any]]:
            addrs = admin.transport.namesrv_addrs
            for addr in addrs[:-1]:
                try:
                    return cluster_status(addr, admin.transport.client)
                except (RemotingError, MQClientError):
                    continue  # that name server is down: the next one
            return cluster_status(addrs[-1], admin.transport.client)

        return self.call(work)

    def call(self, work: Callable[[MQAdmin], T]) -> T:
        """``work(admin)`` with the shared admin client, one caller at a time."""
        with self._lock:
            if self._admin is None:
                self._admin = make_admin(self.namesrv, self.credentials)
            return work(self._admin)

    def producer(self) -> Producer:
        """The producer of test messages (started on first use; call inside :meth:`call`)."""
        if self._producer is None:
            producer = Producer(
                DASHBOARD_PRODUCER_GROUP,
                namesrv_addr=self.namesrv,
                **_with_credentials(Producer, self.credentials),
            )
            producer.start()
            self._producer = producer
        return self._producer

    def start(self) -> None:
        """Start sampling."""
        self.sampler.start()

    def close(self) -> None:
        """Stop the sampler, the producer and the admin client."""
        self.sampler.stop()
        with self._lock:
            if self._producer is not None:
                self._producer.shutdown()
                self._producer = None
            if self._admin is not None:
                self._admin.close()
                self._admin = None
