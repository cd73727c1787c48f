"""Producer groups on the broker: who heartbeats for which group, and how to reach them.

The broker needs a live producer of a group to ask it about an undecided transaction
(RocketMQ's ``ProducerManager.getAvailableChannel``). Members heartbeat; one silent for
``channel_expired_timeout_ms`` is dropped, as is every member of a closed connection.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from mqcore.logs import get_logger

__all__ = ["ProducerManager"]

log = get_logger(__name__)


class ProducerManager:
    """The live members of each producer group, with the channel each left."""

    def __init__(self, channel_expired_timeout_ms: int = 120_000) -> None:
        self.channel_expired_timeout_ms = channel_expired_timeout_ms
        self._lock = threading.Lock()
        # group -> client id -> (last heartbeat ms, channel or None)
        self._groups: dict[str, dict[str, tuple[int, Any]]] = {}

    def register(self, client_id: str, group: str, channel: Any = None) -> None:
        """Record a heartbeat of ``client_id`` for ``group`` (keeping its last channel)."""
        now = int(time.time() * 1000)
        with self._lock:
            members = self._groups.setdefault(group, {})
            known = members.get(client_id)
            if channel is None and known is not None:
                channel = known[1]
            members[client_id] = (now, channel)
        if known is None:
            log.info("producer_registered", group=group, client_id=client_id)

    def unregister(self, client_id: str, group: str) -> bool:
        """Remove a member; True when it was one."""
        with self._lock:
            members = self._groups.get(group)
            removed = members is not None and members.pop(client_id, None) is not None
            if members is not None and not members:
                del self._groups[group]
        if removed:
            log.info("producer_unregistered", group=group, client_id=client_id)
        return removed

    def unregister_connection(self, client_id: str, connection: object) -> list[str]:
        """Remove ``client_id`` from the groups it heartbeats for over ``connection``."""
        with self._lock:
            names = [
                name
                for name, members in self._groups.items()
                if (m := members.get(client_id)) is not None
                and getattr(m[1], "connection", None) is connection
            ]
        return [name for name in names if self.unregister(client_id, name)]

    def scan_expired(self, now_ms: int | None = None) -> list[tuple[str, str]]:
        """Drop members silent for longer than the expiry; (group, client id) pairs."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        dropped: list[tuple[str, str]] = []
        with self._lock:
            for name, members in list(self._groups.items()):
                for cid, (seen, _) in list(members.items()):
                    if now - seen > self.channel_expired_timeout_ms:
                        del members[cid]
                        dropped.append((name, cid))
                if not members:
                    del self._groups[name]
        for name, cid in dropped:
            # Info, not a warning: a plain mqcore Producer heartbeats only when it starts.
            log.info("producer_expired", group=name, client_id=cid)
        return dropped

    def groups(self) -> list[str]:
        """Producer groups with at least one live member."""
        with self._lock:
            return sorted(self._groups)

    def client_ids(self, group: str) -> list[str]:
        """The group's live client ids, sorted."""
        with self._lock:
            return sorted(self._groups.get(group, {}))

    def channel(self, group: str, method: str) -> tuple[str, Any] | None:
        """(client id, channel) of a random live member of ``group`` whose channel has
        ``method``; None when no member can be asked."""
        with self._lock:
            members = [
                (cid, ch)
                for cid, (_, ch) in self._groups.get(group, {}).items()
                if ch is not None and callable(getattr(ch, method, None))
            ]
        return random.choice(members) if members else None
