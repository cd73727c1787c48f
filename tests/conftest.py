"""Shared fixtures for the whole suite."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest


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
