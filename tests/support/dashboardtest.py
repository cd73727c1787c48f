"""Helpers of the dashboard tests (tests/dashboard): waiting, the cluster they run against,
and where the browser is."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

from mqcore.client.transport_remote import RemoteTransport
from mqcore.errors import TopicNotExistError
from mqcore.server import Server

#: The tox env dashboard sets it: there a missing browser or web stack fails, never skips.
REQUIRED = bool(os.environ.get("MQCORE_REQUIRE_DASHBOARD"))
FAST = {"register_name_server_period_ms": 300}


def wait_for(cond: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    """Until ``cond()`` is true; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not met in {timeout} s"
        time.sleep(0.05)


def chromium_path() -> str | None:
    """The Chromium to drive: ``MQCORE_CHROMIUM``, else Debian's ``chromium`` on the PATH."""
    return (
        os.environ.get("MQCORE_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )


class Cluster:
    """A name server (``address``) and its broker groups."""

    def __init__(self, address: str, brokers: dict[str, Server]) -> None:
        self.address = address
        self.brokers = brokers

    def routed(self, topic: str) -> bool:
        """Whether the name server routes ``topic`` to every broker group."""
        transport = RemoteTransport(self.address)
        try:
            return len(transport.get_route_info_by_topic(topic).broker_datas) == len(self.brokers)
        except TopicNotExistError:
            return False
        finally:
            transport.close()
