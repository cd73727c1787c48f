"""Shared fixtures for the whole suite."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from mqcore import Broker

try:
    from hypothesis import settings
except ImportError:  # an env without the test group: no property test runs there
    pass
else:
    # No deadline on any property test: a deadline measures the machine, not the code. On a
    # loaded CI machine (two cores, JVMs beside) an example that once took 200 ms failed a
    # correct test (DeadlineExceeded), and a rerun passed. Speed goals live in bench/.
    settings.register_profile("mqcore", deadline=None)
    settings.load_profile("mqcore")


@pytest.fixture(autouse=True)
def structlog_defaults() -> Iterator[None]:
    """The CLI configures logging for itself; later tests must see the library defaults."""
    import logging

    import structlog

    logger = logging.getLogger("mqcore")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    yield
    structlog.reset_defaults()
    logger.setLevel(saved[0])
    logger.propagate = saved[1]
    logger.handlers[:] = saved[2]


@pytest.fixture(autouse=True)
def no_thread_leaks() -> Iterator[None]:
    """Every test must stop the threads it started."""
    before = set(threading.enumerate())
    yield
    leaked = []
    for t in set(threading.enumerate()) - before:
        t.join(timeout=5)
        if t.is_alive():
            leaked.append(t.name)
    assert not leaked, f"threads left running: {leaked}"


def _test_stores() -> list[str]:
    """Store backends to run store-dependent tests on (``MQCORE_TEST_STORES`` narrows them)."""
    import os

    from mqcore import Kernel

    registered = Kernel(autoload=False).names("store")
    wanted = [s.strip() for s in os.environ.get("MQCORE_TEST_STORES", "").split(",") if s.strip()]
    return [s for s in registered if not wanted or s in wanted]


@pytest.fixture(params=_test_stores())
def store_name(request: pytest.FixtureRequest) -> str:
    """Each store backend under test, by name."""
    return str(request.param)


@pytest.fixture
def broker_topics() -> dict[str, int]:
    """Topics the ``broker`` fixture creates, name -> queue count (a module overrides this
    fixture to change them)."""
    return {"T": 4}


@pytest.fixture
def broker_options() -> dict[str, Any]:
    """Keyword arguments the ``broker`` fixture gives :class:`~mqcore.Broker` (a module
    overrides this fixture to change them)."""
    return {}


@pytest.fixture
def broker(
    tmp_path: Path, store_name: str, broker_topics: dict[str, int], broker_options: dict[str, Any]
) -> Iterator[Broker]:
    """An embedded broker on each store under test, with ``broker_topics``, closed after."""
    from mqcore import Broker

    with Broker(tmp_path / "broker", store=store_name, **broker_options) as b:
        for topic, queues in broker_topics.items():
            b.create_topic(topic, queue_nums=queues)
        yield b


class TagsCodeRecorder:
    """A MessageFilter that passes everything and records the tags codes a store shows it
    (the only public window on the consume-queue units' tags codes)."""

    expression_type = "TEST"
    expression = "*"
    uses_properties = False

    def __init__(self) -> None:
        self.codes: list[int] = []

    def matches(self, message: object) -> bool:
        return True

    def matches_tags_code(self, tags_code: int) -> bool:
        self.codes.append(tags_code)
        return True

    def matches_properties(self, properties: object) -> bool:
        return True


@pytest.fixture
def tags_codes() -> TagsCodeRecorder:
    """A fresh :class:`TagsCodeRecorder` to pass as ``message_filter``."""
    return TagsCodeRecorder()
