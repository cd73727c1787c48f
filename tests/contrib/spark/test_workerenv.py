"""What register() hands Spark's workers: the driver's log level, and the pushdown switch."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mqcore.contrib.spark import MqcoreDataSource, register
from mqcore.contrib.spark.workerenv import LOG_LEVEL_ENV, PUSHDOWN_ENV


class _FakeSession:
    """Records what register() sets, and the workers' environment at registration."""

    def __init__(self) -> None:
        self.conf_set: dict[str, str] = {}
        self.sparkContext = SimpleNamespace(environment={"PYTHONHASHSEED": "0"})
        self.registered: list[tuple[Any, dict[str, str]]] = []
        self.conf = SimpleNamespace(set=self.conf_set.__setitem__)
        self.dataSource = SimpleNamespace(register=self._register)

    def _register(self, source: Any) -> None:
        self.registered.append((source, dict(self.sparkContext.environment)))


def test_register_passes_the_driver_level_for_registration_only() -> None:
    """The workers' environment holds the mqcore logger's level; the session's is restored."""
    session = _FakeSession()
    logger = logging.getLogger("mqcore")
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        register(session)
    finally:
        logger.setLevel(old)
    [(source, env)] = session.registered
    assert source is MqcoreDataSource
    assert env[LOG_LEVEL_ENV] == "INFO" and PUSHDOWN_ENV not in env
    assert session.sparkContext.environment == {"PYTHONHASHSEED": "0"}
    assert session.conf_set == {}  # pushdown stays as the session has it (off by default)


def test_register_with_pushdown_and_an_explicit_level() -> None:
    session = _FakeSession()
    register(session, filter_pushdown=True, log_level=logging.DEBUG)
    [(_, env)] = session.registered
    assert env[LOG_LEVEL_ENV] == "DEBUG" and env[PUSHDOWN_ENV] == "1"
    assert session.conf_set == {"spark.sql.python.filterPushdown.enabled": "true"}


_WORKER = """
import logging
import mqcore.contrib.spark  # what a Spark worker of the source imports first
logging.getLogger("mqcore.plugins.store_mmap").debug("a debug event")
logging.getLogger("mqcore.x").warning("a warning")
"""


@pytest.mark.parametrize(("level", "shown"), [("DEBUG", 2), ("WARNING", 1), (None, 1)])
def test_a_worker_logs_at_the_level_it_was_given(level: str | None, shown: int) -> None:
    """In a process started with the variable, mqcore's logger follows it (stderr, with pid)."""
    env = {k: v for k, v in os.environ.items() if k != LOG_LEVEL_ENV}
    if level:
        env[LOG_LEVEL_ENV] = level
    out = subprocess.run(
        [sys.executable, "-c", _WORKER], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if "a debug event" in ln or "warning" in ln]
    assert len(lines) == shown, out.stderr
    if level == "DEBUG":
        assert lines[0].startswith("DEBUG mqcore.plugins.store_mmap [spark worker ")
