"""The Spark source never reads or lists the broker's transaction topics as user data."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from mqcore import Broker, Kernel
from mqcore.contrib.spark.layout import resolve_read
from mqcore.contrib.spark.options import ReadOptions
from mqcore.contrib.spark.records import existing_topics, plan_slices
from mqcore.errors import InvalidArgumentError
from mqcore.message import system_message
from mqcore.protocol.transaction import HALF_TOPIC, OP_HALF_TOPIC


@pytest.mark.parametrize("store", ["mmap", "lmdb"])
def test_halves_are_not_topics_of_the_source(tmp_path: Path, store: str) -> None:
    data = tmp_path / "data"
    with Broker(data, store=store) as broker:
        broker.create_topic("T", queue_nums=1)
        props = {"x": "1", "TRAN_MSG": "true", "PGROUP": "txp"}
        sent = system_message(topic="T", body=b"undecided", properties=props)
        r = broker.send_message("T", 0, [sent])[0]
        broker.end_transaction("txp", r.queue_offset, r.commitlog_offset, 12)  # rolled back
        assert broker.store.max_offset(HALF_TOPIC, 0) == 1
        assert broker.store.max_offset(OP_HALF_TOPIC, 0) == 1
    location = resolve_read(data)
    with Kernel().open_store(location.store, location.store_dir, read_only=True) as reader:
        topics = existing_topics(reader, location)
        assert "T" in topics
        assert HALF_TOPIC not in topics and OP_HALF_TOPIC not in topics
        with pytest.raises(InvalidArgumentError, match="not found"):
            plan_slices(reader, location, ReadOptions.parse({"topic": HALF_TOPIC}))
