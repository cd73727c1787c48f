"""Fixtures for the remoting tests: a running server around a scripted processor, a client,
and a check that a test leaves no thread or file descriptor behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from remotingtest import ScriptedProcessor, fd_count

from mqcore.remoting.client import RemotingClient
from mqcore.remoting.server import RemotingServer, event_loop_factory


@pytest.fixture(scope="session", autouse=True)
def _event_loop_warmed_up() -> None:
    """uvloop opens a pipe once per process on its first loop: not a leak of any test's."""
    event_loop_factory()().close()


@pytest.fixture
def leak_check() -> Iterator[None]:
    """Fail if the test leaves threads or file descriptors behind."""
    threads = set(threading.enumerate())
    fds = fd_count()
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        extra = set(threading.enumerate()) - threads
        if not extra and fd_count() <= fds:
            break
        time.sleep(0.05)
    assert set(threading.enumerate()) - threads == set()
    assert fd_count() <= fds


@pytest.fixture
def processor() -> Iterator[ScriptedProcessor]:
    proc = ScriptedProcessor()
    yield proc
    proc.join()


@pytest.fixture
def server(leak_check: None, processor: ScriptedProcessor) -> Iterator[RemotingServer]:
    srv = RemotingServer(processor, workers=4, idle_timeout=60.0)
    srv.start()
    yield srv
    srv.close()


@pytest.fixture
def addr(server: RemotingServer) -> str:
    assert server.address is not None
    return f"{server.address[0]}:{server.address[1]}"


@pytest.fixture
def client(server: RemotingServer) -> Iterator[RemotingClient]:
    cli = RemotingClient()
    yield cli
    cli.close()
