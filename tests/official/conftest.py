"""Fixtures for the official RocketMQ client tests: a real ``mqcore serve`` process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mqserve import ServeProcess


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    """A running ``mqcore serve`` (stopped at the end)."""
    srv = ServeProcess(tmp_path / "data")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
