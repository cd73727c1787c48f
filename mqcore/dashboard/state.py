"""What the dashboard's pages share: the admin clients and the producers of test messages
(one set per ACL account, cached until the dashboard closes), the sampler, the signed-in
sessions, and whether actions are allowed."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from mqcore.client.admin import MQAdmin
from mqcore.client.cluster_status import cluster_status
from mqcore.client.producer import Producer
from mqcore.dashboard.sampler import Sampler
from mqcore.dashboard.sessions import Account, Sessions
from mqcore.errors import MQClientError, RemotingError
from mqcore.logs import get_logger
from mqcore.remoting.signing import Credentials, credentials_from

__all__ = ["DASHBOARD_PRODUCER_GROUP", "DashboardState", "make_admin"]

log = get_logger(__name__)

T = TypeVar("T")

DASHBOARD_PRODUCER_GROUP = "mqcore_dashboard"  # sends the test messages of the topic pages


def make_admin(
    namesrv: str,
    credentials: Any = None,
    *,
    tls: bool | ssl.SSLContext | None = None,
    timeout: float = 5.0,
) -> MQAdmin:
    """An admin client to ``namesrv``, signing its requests with ``credentials`` (access key,
    secret key) when given, for brokers that check ACL, over TLS when ``tls`` says so."""
    return MQAdmin(namesrv, timeout=timeout, credentials=credentials, tls=tls)


class _Clients:
    """One account's admin client and test-message producer; requests run one at a time."""

    def __init__(self, namesrv: str, credentials: Credentials | None, tls: Any) -> None:
        self.namesrv = namesrv
        self.credentials = credentials
        self.tls = tls
        self.lock = threading.Lock()
        self.admin: MQAdmin | None = None
        self.producer: Producer | None = None

    def close(self) -> None:
        with self.lock:
            if self.producer is not None:
                self.producer.shutdown()
                self.producer = None
            if self.admin is not None:
                self.admin.close()
                self.admin = None


class DashboardState:
    """The dashboard's shared services; :meth:`close` stops them.

    :param namesrv: the name server (``host:port``; several separated by ``;``).
    :param read_only: refuse every action (create, delete, send, reset, resend).
    :param acl: the brokers check ACL: every browser signs in with an account, and each
        request is signed with that account's keys.
    :param credentials: the account the charts' sampler signs with (brokers with ACL on).
    :param tls: True or an :class:`ssl.SSLContext`: every client connects with TLS.
    :param sample_interval: seconds between two samples of the charts' history.
    """

    def __init__(
        self,
        namesrv: str,
        *,
        read_only: bool = False,
        acl: bool = False,
        credentials: Any = None,
        tls: bool | ssl.SSLContext | None = None,
        sample_interval: float = 10.0,
    ) -> None:
        self.namesrv = namesrv
        self.read_only = read_only
        self.acl = acl
        self.credentials = credentials_from(credentials)
        self.tls = tls
        self.sessions = Sessions()
        self.sampler = Sampler(
            lambda: make_admin(namesrv, self.credentials, tls=tls), interval=sample_interval
        )
        self._clients: dict[Credentials | None, _Clients] = {}
        self._clients_lock = threading.Lock()

    def _for(self, account: Account | None) -> _Clients:
        creds = account.credentials if account is not None else self.credentials
        with self._clients_lock:
            clients = self._clients.get(creds)
            if clients is None:
                clients = self._clients[creds] = _Clients(self.namesrv, creds, self.tls)
            return clients

    def call(self, work: Callable[[MQAdmin], T], account: Account | None = None) -> T:
        """``work(admin)`` with the admin client of ``account`` (None: the dashboard's own
        ``credentials``), one caller at a time per account."""
        clients = self._for(account)
        with clients.lock:
            if clients.admin is None:
                clients.admin = make_admin(self.namesrv, clients.credentials, tls=self.tls)
            return work(clients.admin)

    def producer(self, account: Account | None = None) -> Producer:
        """The producer of test messages of ``account`` (started on first use; call inside
        :meth:`call` for the same account)."""
        clients = self._for(account)
        if clients.producer is None:
            producer = Producer(
                DASHBOARD_PRODUCER_GROUP,
                namesrv_addr=self.namesrv,
                credentials=clients.credentials,
                tls=self.tls,
            )
            producer.start()
            clients.producer = producer
        return clients.producer

    def cluster_status(self, account: Account | None = None) -> list[dict[str, Any]]:
        """Every broker group's members, roles and replication state, asked through the admin
        client's connections (signed as its requests are). Of several name servers, the
        first that answers is asked."""

        def work(admin: MQAdmin) -> list[dict[str, Any]]:
            last: Exception = MQClientError("no name server address is configured")
            for addr in admin.transport.namesrv_addrs:
                try:
                    return cluster_status(addr, admin.transport.client)
                except (RemotingError, MQClientError) as exc:
                    last = exc  # that name server is down: the next one
            raise last

        return self.call(work, account)

    def sign_in(self, access_key: str, secret_key: str) -> tuple[Account, str]:
        """Check the keys against the brokers and open a session; returns the account and
        the session cookie's value.

        :raises NoPermissionError: the brokers refuse the keys (their message says why).
        """
        creds = Credentials(access_key, secret_key)
        admin = make_admin(self.namesrv, creds, tls=self.tls)
        try:
            admin.groups()  # every broker checks the signature of this one
            is_admin = admin.can_administer()
        finally:
            admin.close()
        account = Account(creds, is_admin)
        log.info("dashboard_signed_in", access_key=access_key, admin=is_admin)
        return account, self.sessions.open(account)

    def sign_out(self, cookie: str | None) -> None:
        """Close the cookie's session, and its account's clients when no session holds
        them any more."""
        account = self.sessions.close(cookie)
        if account is None:
            return
        log.info("dashboard_signed_out", access_key=account.access_key)
        if not self.sessions.in_use(account.credentials):
            with self._clients_lock:
                clients = self._clients.pop(account.credentials, None)
            if clients is not None:
                clients.close()

    def start(self) -> None:
        """Start sampling (not with ACL on and no account of its own: every sample would be
        refused)."""
        if self.acl and self.credentials is None:
            log.warning(
                "dashboard_charts_off",
                reason="the brokers check ACL and the charts have no account: "
                "give --access-key and --secret-key (or MQCORE_ACCESS_KEY, MQCORE_SECRET_KEY)",
            )
            return
        self.sampler.start()

    def close(self) -> None:
        """Stop the sampler, the producers and the admin clients."""
        self.sampler.stop()
        with self._clients_lock:
            every = list(self._clients.values())
            self._clients.clear()
        for clients in every:
            clients.close()
