"""Atomic replacement with a backup, and reading with fallback to the backup."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mqcore.atomicfile import (
    backup_path,
    read_json,
    read_with_backup,
    write_atomic,
    write_json_atomic,
)
from mqcore.errors import StoreCorruptedError


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_first_write_creates_file_and_parent_without_backup(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "f.json"
    write_atomic(target, b"one")
    assert target.read_bytes() == b"one"
    assert not backup_path(target).exists()
    assert _listing(target.parent) == ["f.json"]


def test_second_write_keeps_previous_as_backup(tmp_path: Path) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    write_atomic(target, b"three")
    assert target.read_bytes() == b"three"
    assert backup_path(target).read_bytes() == b"two"
    assert _listing(tmp_path) == ["f", "f.bak"]


def test_backup_is_independent_of_the_new_file(tmp_path: Path) -> None:
    """The backup is a link to the old inode, so the new file never shares it."""
    target = tmp_path / "f"
    write_atomic(target, b"old")
    write_atomic(target, b"new")
    assert os.stat(target).st_ino != os.stat(backup_path(target)).st_ino


def test_backup_copied_when_hard_links_are_unsupported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"old")

    def no_links(src: object, dst: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert backup_path(target).read_bytes() == b"old"
    assert _listing(tmp_path) == ["f", "f.bak"]


def test_file_mode_is_readable_by_others(tmp_path: Path) -> None:
    target = tmp_path / "f"
    old = os.umask(0o022)
    try:
        write_atomic(target, b"x")
    finally:
        os.umask(old)
    assert os.stat(target).st_mode & 0o777 == 0o644


def test_crash_before_rename_leaves_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between writing the temporary file and renaming it changes nothing visible."""
    target = tmp_path / "f.json"
    write_json_atomic(target, {"v": 1})
    real_replace = os.replace

    def crash_on_final_rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == target:
            raise OSError("simulated crash before rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_final_rename)
    with pytest.raises(OSError, match="simulated crash"):
        write_json_atomic(target, {"v": 2})
    monkeypatch.undo()
    assert read_json(target, None) == {"v": 1}
    # no temporary file is left behind
    assert _listing(tmp_path) == ["f.json", "f.json.bak"]


def test_crash_on_any_rename_leaves_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"one")
    write_atomic(target, b"two")

    def always_fail(src: object, dst: object) -> None:
        raise OSError("simulated crash")

    monkeypatch.setattr(os, "replace", always_fail)
    with pytest.raises(OSError):
        write_atomic(target, b"three")
    monkeypatch.undo()
    assert target.read_bytes() == b"two"
    assert backup_path(target).read_bytes() == b"one"
    assert _listing(tmp_path) == ["f", "f.bak"]


def test_crash_while_writing_temp_leaves_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"one")

    def fail_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail_fsync)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, b"two")
    monkeypatch.undo()
    assert target.read_bytes() == b"one"
    assert _listing(tmp_path) == ["f"]


def test_read_missing_gives_none(tmp_path: Path) -> None:
    assert read_with_backup(tmp_path / "nothing") is None
    assert read_json(tmp_path / "nothing", {"d": 0}) == {"d": 0}


def test_read_main_when_valid(tmp_path: Path) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    with capture_logs() as logs:
        assert read_with_backup(target) == b"two"
    assert logs == []


def test_truncated_main_falls_back_to_backup(tmp_path: Path) -> None:
    target = tmp_path / "offsets.json"
    write_json_atomic(target, {"offsets": list(range(50))})
    write_json_atomic(target, {"offsets": list(range(100))})
    full = target.read_bytes()
    target.write_bytes(full[: len(full) // 2])
    with capture_logs() as logs:
        assert read_json(target, None) == {"offsets": list(range(50))}
    events = [e["event"] for e in logs]
    assert "atomic_file_fallback_to_backup" in events
    fallback = next(e for e in logs if e["event"] == "atomic_file_fallback_to_backup")
    assert fallback["log_level"] == "warning"
    assert fallback["reason"] == "invalid"


@pytest.mark.parametrize("damage", ["empty", "missing"])
def test_empty_or_missing_main_falls_back(tmp_path: Path, damage: str) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    if damage == "empty":
        target.write_bytes(b"")
    else:
        target.unlink()
    with capture_logs() as logs:
        assert read_with_backup(target) == b"one"
    assert [e["reason"] for e in logs] == [damage]


def test_validator_returning_false_rejects(tmp_path: Path) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"good")
    write_atomic(target, b"bad")
    assert read_with_backup(target, lambda b: b == b"good") == b"good"


def test_both_invalid_raises_naming_both_files(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_bytes(b"{not json")
    backup_path(target).write_bytes(b"[1, 2")
    with pytest.raises(StoreCorruptedError, match=r"f\.json.*f\.json\.bak") as info:
        read_with_backup(target, json.loads)
    assert info.value.path == str(target)
    # read_json never crashes: it logs and returns the default
    with capture_logs() as logs:
        assert read_json(target, {"empty": True}) == {"empty": True}
    assert any(e["event"] == "atomic_file_unreadable" for e in logs)


def test_invalid_main_without_backup_raises(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_bytes(b"garbage")
    with pytest.raises(StoreCorruptedError, match="missing or empty"):
        read_with_backup(target, json.loads)


def test_empty_main_without_backup_is_nothing(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_bytes(b"")
    assert read_with_backup(target, json.loads) is None


def test_json_round_trip_unicode(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    value = {"topic@group": {"0": 12, "1": 2**40}, "name": "café ☕"}
    write_json_atomic(target, value)
    assert read_json(target, None) == value
    assert target.read_bytes().endswith(b"\n")
