"""How a broker reaches a client: the broker-to-client requests of RocketMQ's remoting."""

from __future__ import annotations

from typing import Protocol

from mqcore.message import MessageQueue
from mqcore.protocol.admin_bodies import ConsumerRunningInfo

__all__ = ["ClientChannel"]


class ClientChannel(Protocol):
    """How a broker reaches one client: RocketMQ's broker-to-client requests.

    In-process these are plain calls; over the network the remoting client turns the
    requests NOTIFY_CONSUMER_IDS_CHANGED (40), RESET_CONSUMER_CLIENT_OFFSET (220) and
    GET_CONSUMER_RUNNING_INFO (307) into them.
    """

    def consumer_ids_changed(self, group: str) -> None:
        """The membership of ``group`` changed: rebalance soon."""

    def reset_offset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """An operator moved ``group``'s offsets in ``topic``: drop in-flight work and pull
        from ``offsets``."""

    def consumer_running_info(self, group: str) -> ConsumerRunningInfo:
        """The client's settings, subscriptions and the queues it owns now in ``group``
        (GET_CONSUMER_RUNNING_INFO, 307, answered by the client)."""
