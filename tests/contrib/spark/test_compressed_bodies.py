"""Bodies a remote producer sent compressed come back from the Spark source as they were sent."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mqserve import ServeProcess

from mqcore import Kernel, Message, Producer
from mqcore.record.sysflag import COMPRESSED_FLAG

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _stores() -> list[str]:
    wanted = [s for s in os.environ.get("MQCORE_TEST_STORES", "").split(",") if s]
    return [s for s in Kernel(autoload=False).names("store") if not wanted or s in wanted]


@pytest.fixture(params=_stores())
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServeProcess]:
    """``mqcore serve`` on each store, stopped after the test."""
    srv = ServeProcess(tmp_path / "data", store=request.param)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_bodies_sent_compressed_read_back_inflated(spark: Any, server: ServeProcess) -> None:
    """10 KiB bodies (one compressible, one not) sent one at a time over the network are
    stored zlib-compressed; spark.read gives back the bytes that were sent, beside a small
    body stored as it is."""
    rng = random.Random(29)
    bodies = [
        b"small body",
        bytes(range(256)) * 40,  # 10 KiB that deflates to a few hundred bytes
        rng.randbytes(10 * 1024),  # 10 KiB that does not deflate at all
        b"x" * 4097,  # just over the threshold
    ]
    with Producer("pg", namesrv_addr=server.address) as producer:
        for i, body in enumerate(bodies):
            producer.send(Message(topic="Big", body=body, keys=f"k{i}"))
    store_dir = server.data_dir / "store"
    with Kernel().open_store(server.store, store_dir, read_only=True) as store:
        stored = [m for qid in range(16) for m in store.get("Big", qid, 0, max_count=32).messages]
    # The test only means something if the large bodies really are stored compressed.
    flagged = {m.keys: bool(m.sys_flag & COMPRESSED_FLAG) for m in stored}
    assert flagged == {"k0": False, "k1": True, "k2": True, "k3": True}
    assert all(m.stored_body != m.body for m in stored if m.keys != "k0")

    df = spark.read.format("mqcore").option("path", str(server.data_dir)).option("topic", "Big")
    rows = df.load().select("keys", "body").collect()
    got = {row["keys"]: bytes(row["body"]) for row in rows}
    assert got == {f"k{i}": body for i, body in enumerate(bodies)}
