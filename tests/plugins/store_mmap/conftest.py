"""Fixtures shared by the mmap store's building-block tests."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def kill_writer() -> Callable[[str, Path, random.Random, int, int], int]:
    """Run ``script`` (given the path) in a subprocess, read between ``low`` and ``high``
    acknowledgement lines (one integer each), then SIGKILL it; returns the last one read."""

    def run(script: str, path: Path, rnd: random.Random, low: int, high: int) -> int:
        acked = 0
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            for _ in range(rnd.randrange(low, high)):
                line = proc.stdout.readline()
                assert line, "the writer died on its own"
                acked = int(line)
        finally:
            proc.kill()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
        return acked

    return run
