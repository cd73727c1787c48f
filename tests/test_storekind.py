"""A data directory records the store that wrote it; the other store refuses it by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore import Broker, Kernel, Message
from mqcore.errors import StoreError
from mqcore.storekind import KIND_FILE_NAME, check_store_kind, detect_store_kind

OTHER = {"mmap": "lmdb", "lmdb": "mmap"}


def _write_one(kind: str, path: Path) -> None:
    with Kernel().open_store(kind, path) as store:
        store.put("T", 0, [Message(topic="T", body=b"x")])


@pytest.mark.parametrize("kind", ["mmap", "lmdb"])
def test_a_new_store_records_its_kind(kind: str, tmp_path: Path) -> None:
    """The first writer leaves STORE_KIND holding its name."""
    _write_one(kind, tmp_path / "s")
    assert (tmp_path / "s" / KIND_FILE_NAME).read_text().strip() == kind
    assert detect_store_kind(tmp_path / "s") == kind


@pytest.mark.parametrize("kind", ["mmap", "lmdb"])
@pytest.mark.parametrize("read_only", [False, True])
def test_the_other_store_is_refused_naming_the_writer(
    kind: str, read_only: bool, tmp_path: Path
) -> None:
    """Opening with the other store fails naming the one that wrote it, and adds no file."""
    path = tmp_path / "s"
    _write_one(kind, path)
    before = sorted(p.name for p in path.iterdir())
    with pytest.raises(StoreError, match=rf"holds a '{kind}' store.*store='{kind}'"):
        Kernel().open_store(OTHER[kind], path, read_only=read_only)
    assert sorted(p.name for p in path.iterdir()) == before
    with Kernel().open_store(kind, path, read_only=True) as store:  # still readable
        assert store.max_offset("T", 0) == 1


@pytest.mark.parametrize("kind", ["mmap", "lmdb"])
def test_a_directory_without_the_file_is_known_by_its_files(kind: str, tmp_path: Path) -> None:
    """Stores written before STORE_KIND existed still open, and the other store is refused."""
    path = tmp_path / "s"
    _write_one(kind, path)
    (path / KIND_FILE_NAME).unlink()
    assert detect_store_kind(path) == kind
    with pytest.raises(StoreError, match=f"holds a '{kind}' store"):
        Kernel().open_store(OTHER[kind], path)
    with Kernel().open_store(kind, path) as store:
        assert store.max_offset("T", 0) == 1
    assert (path / KIND_FILE_NAME).read_text().strip() == kind  # added by the writer


def test_broker_refuses_a_data_directory_of_the_other_store(tmp_path: Path) -> None:
    """Broker(store="lmdb") on an mmap broker's data directory names mmap."""
    with Broker(tmp_path / "data", store="mmap") as broker:
        broker.create_topic("T", queue_nums=1)
    with pytest.raises(StoreError, match="holds a 'mmap' store"):
        Broker(tmp_path / "data", store="lmdb")
    assert not (tmp_path / "data" / "store" / "data.mdb").exists()


def test_check_in_an_empty_directory(tmp_path: Path) -> None:
    """A read-only check records nothing; a writer's check records its kind once."""
    check_store_kind(tmp_path, "mmap", read_only=True)
    assert detect_store_kind(tmp_path) is None
    check_store_kind(tmp_path, "mmap", read_only=False)
    assert detect_store_kind(tmp_path) == "mmap"
    with pytest.raises(StoreError, match="holds a 'mmap' store"):
        check_store_kind(tmp_path, "lmdb", read_only=False)
