"""StoreCheckpoint: RocketMQ's layout, atomic saves; the abort marker."""

from __future__ import annotations

import os
import struct

import pytest

from mqcore.errors import StoreCorruptedError
from mqcore.plugins.store_mmap import checkpoint
from mqcore.plugins.store_mmap.checkpoint import (
    StoreCheckpoint,
    create_abort_marker,
    had_abnormal_shutdown,
    remove_abort_marker,
)


def test_missing_checkpoint_loads_as_zeros(tmp_path):
    cp = StoreCheckpoint.load(tmp_path)
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (0, 0, 0)
    assert cp.min_timestamp == 0 and cp.min_timestamp_index == 0


def test_save_and_load_round_trip_in_rocketmqs_layout(tmp_path):
    cp = StoreCheckpoint.load(tmp_path)
    cp.physic_msg_timestamp = 1_700_000_010_000
    cp.logics_msg_timestamp = 1_700_000_005_000
    cp.index_msg_timestamp = 1_700_000_001_000
    cp.confirm_phy_offset = 4242
    cp.save()
    raw = (tmp_path / "checkpoint").read_bytes()
    assert len(raw) == 4096
    assert struct.unpack_from(">qqq", raw) == (
        1_700_000_010_000,
        1_700_000_005_000,
        1_700_000_001_000,
    )
    again = StoreCheckpoint.load(tmp_path)
    assert again == cp
    assert again.min_timestamp == 1_700_000_002_000  # the older of the two, less 3 s
    assert again.min_timestamp_index == 1_700_000_001_000
    assert os.listdir(tmp_path) == ["checkpoint"]  # no temporary file left behind


def test_a_short_file_with_three_timestamps_is_read(tmp_path):
    (tmp_path / "checkpoint").write_bytes(struct.pack(">qqq", 3, 2, 1))
    cp = StoreCheckpoint.load(tmp_path)
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (3, 2, 1)
    assert cp.confirm_phy_offset == 0


def test_a_truncated_file_is_reported(tmp_path):
    (tmp_path / "checkpoint").write_bytes(b"\0" * 10)
    with pytest.raises(StoreCorruptedError, match="invalid") as info:
        StoreCheckpoint.load(tmp_path)
    assert info.value.path == str(tmp_path / "checkpoint")


def test_a_damaged_checkpoint_falls_back_to_its_backup(tmp_path):
    cp = StoreCheckpoint.load(tmp_path)
    cp.physic_msg_timestamp = 1
    cp.save()
    cp.physic_msg_timestamp = 2
    cp.save()
    (tmp_path / "checkpoint").write_bytes(b"")
    assert StoreCheckpoint.load(tmp_path).physic_msg_timestamp == 1


def test_a_failed_save_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    cp = StoreCheckpoint.load(tmp_path)
    cp.physic_msg_timestamp = 111
    cp.save()
    cp.physic_msg_timestamp = 222

    def crash(src, dst):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(checkpoint.os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        cp.save()
    monkeypatch.undo()
    assert StoreCheckpoint.load(tmp_path).physic_msg_timestamp == 111
    cp.save()  # a stale temporary file does not get in the way
    assert StoreCheckpoint.load(tmp_path).physic_msg_timestamp == 222


def test_abort_marker_lifecycle(tmp_path):
    root = tmp_path / "store"
    assert not had_abnormal_shutdown(root)
    create_abort_marker(root)
    assert (root / "abort").exists()
    assert had_abnormal_shutdown(root)  # a crash leaves it behind
    create_abort_marker(root)  # opening again after a crash keeps it
    remove_abort_marker(root)
    assert not had_abnormal_shutdown(root)
    remove_abort_marker(root)  # removing twice is harmless
    assert os.listdir(root) == []
