"""The store contract suite runs against every registered store, in several variants.

``MQCORE_TEST_STORES`` (comma-separated store names) restricts the suite to some backends,
e.g. one tox env per backend; unset, every store registered in a fresh ``Kernel()`` is
tested. Each backend runs with option variants chosen to stress it: tiny commit-log
segments and consume-queue files for mmap (rolls on almost every batch), a 1 MiB initial
map for LMDB (the map grows many times, each growth reserved on disk) and LMDB without
``writemap``. A store named in ``MQCORE_TEST_STORES`` that is
not registered fails loudly instead of silently testing nothing.

Fixtures:

- ``harness``: a :class:`StoreHarness` for one backend variant and one fresh directory
  (open, reopen, read everything back, spawn the helper process).
- ``store``: a store opened by the harness.
- ``reopen_mode``: ``"live"`` or ``"reopened"``; tests taking it read back either from the
  store that wrote or after "close, reopen, read again" (``harness.readback``).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mqcore import Kernel, MessageExt
from mqcore.store import GetStatus

ENV_STORES = "MQCORE_TEST_STORES"
WORKER = Path(__file__).with_name("store_worker.py")

#: Per-backend option variants: (variant id, options). Unknown backends get ("default", {}).
VARIANTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "mmap": [
        (
            "seg4k-cq8",
            {
                "segment_size": 4096,
                "consume_queue_units": 8,
                "index_hash_slots": 16,
                "index_max_entries": 64,
            },
        ),
        ("seg64k-cq64", {"segment_size": 64 * 1024, "consume_queue_units": 64}),
        # The page warmer is off by default; this variant keeps it under the contract.
        (
            "seg1m-warm",
            {"segment_size": 1024 * 1024, "consume_queue_units": 1024, "warm_mapped_file": True},
        ),
    ],
    "lmdb": [
        ("map1m", {"map_size": 1024 * 1024}),
        # writemap (the default) off: LMDB copies dirty pages and writes them with pwrite.
        ("pwrite", {"writemap": False}),
    ],
}


def _requested_stores() -> list[str]:
    raw = os.environ.get(ENV_STORES, "").strip()
    if raw:
        return [name.strip().lower() for name in raw.split(",") if name.strip()]
    return [name.lower() for name in Kernel().names("store")]


def _params() -> list[Any]:
    params = []
    for name in _requested_stores():
        for variant, options in VARIANTS.get(name, [("default", {})]):
            params.append(pytest.param((name, options), id=f"{name}-{variant}"))
    return params


class StoreHarness:
    """One backend variant on one directory: open, reopen and inspect stores."""

    def __init__(self, name: str, options: dict[str, Any], path: Path, reopen: bool) -> None:
        self.name = name
        self.options = options
        self.path = path
        self.reopen_on_readback = reopen
        self.kernel = Kernel()
        self._opened: list[Any] = []

    def open(self, **extra: Any) -> Any:
        """Open the store of this variant (``extra`` options override the variant's)."""
        store = self.kernel.open_store(self.name, self.path, **{**self.options, **extra})
        self._opened.append(store)
        return store

    def reopen(self, store: Any, **extra: Any) -> Any:
        """Close ``store`` and open the directory again."""
        store.close()
        return self.open(**extra)

    def readback(self, store: Any) -> Any:
        """The store to read from: ``store`` itself, or a fresh one in the reopened variant."""
        return self.reopen(store) if self.reopen_on_readback else store

    def close_all(self) -> None:
        """Close every store this harness opened (closing twice is allowed by the contract)."""
        for store in self._opened:
            store.close()
        self._opened.clear()

    @property
    def segment_size(self) -> int | None:
        """The commit-log segment size of segmented stores (``None`` for others)."""
        return self.options.get("segment_size") if self.name == "mmap" else None

    def read_queue(self, store: Any, topic: str, queue_id: int) -> list[MessageExt]:
        """Every message of a queue, from min to max offset, checking the pull protocol."""
        out: list[MessageExt] = []
        offset = store.min_offset(topic, queue_id)
        end = store.max_offset(topic, queue_id)
        while offset < end:
            result = store.get(topic, queue_id, offset, max_count=32)
            assert result.status is GetStatus.FOUND, (topic, queue_id, offset, result)
            assert result.messages, result
            assert result.next_offset == offset + len(result.messages), result
            for i, msg in enumerate(result.messages):
                assert msg.queue_offset == offset + i, (msg, offset + i)
            out.extend(result.messages)
            offset = result.next_offset
        return out

    def assert_log_contiguous(self, messages: list[MessageExt]) -> None:
        """Commit-log offsets: each record starts where the previous ended (or, in a segmented
        log, at the start of the next segment)."""
        ordered = sorted(messages, key=lambda m: m.commitlog_offset)
        seg = self.segment_size
        for prev, cur in itertools.pairwise(ordered):
            end = prev.commitlog_offset + prev.store_size
            if cur.commitlog_offset == end:
                continue
            assert seg is not None and cur.commitlog_offset > end, (
                f"record at {cur.commitlog_offset} does not follow the one at "
                f"{prev.commitlog_offset} (size {prev.store_size})"
            )
            # A roll: the rest of the segment is blank and the record opens the next one.
            assert cur.commitlog_offset % seg == 0, (prev.commitlog_offset, cur.commitlog_offset)
            assert cur.commitlog_offset - end < seg, (prev.commitlog_offset, cur.commitlog_offset)

    def worker(self, mode: str, **params: Any) -> subprocess.Popen[str]:
        """Start ``store_worker.py`` in ``mode`` on this directory (stdout: one JSON per line)."""
        spec = {"store": self.name, "path": str(self.path), "options": self.options, **params}
        return subprocess.Popen(
            [sys.executable, str(WORKER), mode, json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture(params=_params())
def backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """(store name, options) of one variant; fails when a requested store is missing."""
    name, options = request.param
    if name not in [n.lower() for n in Kernel().names("store")]:
        pytest.fail(f"store {name!r} (from {ENV_STORES}) is not registered")
    return name, options


@pytest.fixture(params=["live", "reopened"])
def reopen_mode(request: pytest.FixtureRequest) -> str:
    """Read back from the writing store, or close, reopen and read again."""
    return str(request.param)


@pytest.fixture
def harness(
    backend: tuple[str, dict[str, Any]], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[StoreHarness]:
    """A :class:`StoreHarness` on a fresh directory; closes what it opened."""
    reopen = "reopen_mode" in request.fixturenames and (
        request.getfixturevalue("reopen_mode") == "reopened"
    )
    h = StoreHarness(backend[0], backend[1], tmp_path / "store", reopen)
    yield h
    h.close_all()


@pytest.fixture
def store(harness: StoreHarness) -> Any:
    """A writable store of the variant under test, closed after the test."""
    return harness.open()


@pytest.fixture(scope="session")
def worker_module() -> ModuleType:
    """``store_worker.py`` loaded as a module (for ``make_message`` and ``body_hash``)."""
    spec = importlib.util.spec_from_file_location("mqcore_contract_store_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
