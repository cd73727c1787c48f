"""Fixtures of the Spark tests: one local SparkSession for the whole run, and test data.

The tests need pyspark (extra ``mqcore[spark]``) and a Java runtime; without pyspark every
test module skips at import, without Java the Spark-backed tests skip saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# No pyspark import here: without the extra, this conftest must still load, and each test
# module then skips itself with importorskip.
from mqcore import Kernel, Message


def _java_missing() -> str | None:
    """Why Spark cannot start here, or None when a Java runtime is found."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        return "no Java runtime (java on PATH or JAVA_HOME): Spark needs Java 17 or later"
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"java -version failed ({exc}): Spark needs a working Java 17 or later"
    return None


def _is_spark_thread(thread: threading.Thread) -> bool:
    """py4j and pyspark keep pooled daemon threads alive for the session's lifetime."""
    target = getattr(thread, "_target", None)
    module = getattr(target, "__module__", "") or type(thread).__module__
    return thread.daemon and module.split(".")[0] in ("py4j", "pyspark")


@pytest.fixture(autouse=True)
def no_thread_leaks() -> Iterator[None]:
    """Every test must stop the threads it started (Spark's own pooled threads aside)."""
    before = set(threading.enumerate())
    yield
    leaked = []
    for t in set(threading.enumerate()) - before:
        if _is_spark_thread(t):
            continue
        t.join(timeout=5)
        if t.is_alive():
            leaked.append(t.name)
    assert not leaked, f"threads left running: {leaked}"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local[2] SparkSession with the mqcore source registered (skips without Java)."""
    reason = _java_missing()
    if reason:
        pytest.skip(reason)
    # Spark starts its Python workers with PYSPARK_PYTHON: this interpreter has mqcore.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from mqcore.contrib.spark import register

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("mqcore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def body_of(queue_id: int, offset: int) -> bytes:
    """The body the test data holds at (queue, offset): varied sizes, all byte values."""
    seed = (queue_id * 1_000_003 + offset) & 0xFFFFFFFF
    size = seed % 97
    return seed.to_bytes(4, "big") + bytes((seed + i) & 0xFF for i in range(size))


def message_of(topic: str, queue_id: int, offset: int) -> Message:
    """The message the test data holds at (queue, offset)."""
    return Message(
        topic=topic,
        body=body_of(queue_id, offset),
        tags=("TagA", "TagB", "TagC")[offset % 3],
        keys=f"k{queue_id}-{offset}",
        properties={"n": str(offset), "q": str(queue_id), "even": str(offset % 2 == 0).lower()},
    )


def fill(
    store_name: str, path: Path, topic: str, queues: int, per_queue: int, batch: int = 1000
) -> None:
    """Write ``per_queue`` test messages into each of ``queues`` queues of ``topic``."""
    with Kernel().open_store(store_name, path) as store:
        for start in range(0, per_queue, batch):
            for qid in range(queues):
                count = min(batch, per_queue - start)
                store.put(topic, qid, [message_of(topic, qid, start + i) for i in range(count)])


def has_filter(kind: str) -> bool:
    """Whether a filter plugin ``kind`` (TAG, SQL92) is registered."""
    return kind.upper() in {n.upper() for n in Kernel().names("filter")}


@pytest.fixture(scope="session")
def helpers() -> Any:
    """The data helpers above (test modules cannot import this conftest)."""
    import types

    return types.SimpleNamespace(
        body_of=body_of, message_of=message_of, fill=fill, has_filter=has_filter
    )
