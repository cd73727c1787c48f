"""FileMaps: bounded LRU of maps, the pinned writer file, dirty tracking; zeroed file creation."""

from __future__ import annotations

import os

import pytest

from mqcore.plugins.store_mmap.filemaps import FileMaps, create_zeroed_file

SIZE = 8192


@pytest.fixture
def maps(tmp_path):
    """Maps of files ``<tmp_path>/<n>``, at most 2 read maps, closed after the test."""
    family: FileMaps[int] = FileMaps(
        lambda n: tmp_path / str(n), SIZE, read_only=False, max_mapped=2
    )
    yield family
    family.close()


def test_create_zeroed_file_sparse_or_preallocated(tmp_path):
    for name, preallocate in (("sparse", False), ("full", True)):
        fd = create_zeroed_file(tmp_path / name, SIZE, preallocate)
        os.close(fd)
        assert (tmp_path / name).read_bytes() == bytes(SIZE)
    assert os.stat(tmp_path / "sparse").st_blocks < os.stat(tmp_path / "full").st_blocks
    assert os.stat(tmp_path / "full").st_blocks * 512 >= SIZE
    assert sorted(os.listdir(tmp_path)) == ["full", "sparse"]  # no temporary file left


def test_lru_keeps_at_most_max_mapped_and_the_pinned_file(maps):
    for n in range(5):
        maps.create(n, preallocate=False)
    assert len(maps) == 2
    tail = maps.pin(4)
    assert maps.tail == (4, tail) and len(maps) <= 2
    for n in range(4):
        assert maps.get(n) is not None
        assert len(maps) <= 2
    assert maps.get(4) is tail  # the pinned file is never evicted
    assert maps.get(99) is None  # no such file


def test_written_files_are_flushed_even_when_no_longer_mapped(maps, tmp_path):
    maps.create(0, preallocate=False)
    mm = maps.pin(0)
    mm[:3] = b"abc"
    maps.mark_dirty(0)
    del mm
    maps.forget(0)  # e.g. evicted: the flush falls back to fdatasync of the file
    maps.mark_dirty(0)
    maps.flush()
    assert (tmp_path / "0").read_bytes()[:3] == b"abc"
    maps.flush()  # nothing dirty any more


def test_close_with_a_live_view_then_no_more_maps(tmp_path):
    family: FileMaps[int] = FileMaps(
        lambda n: tmp_path / str(n), SIZE, read_only=False, max_mapped=2
    )
    family.create(0, preallocate=False)
    view = memoryview(family.get(0))[:4]
    family.close()
    assert bytes(view) == bytes(4)  # still readable: the map goes with its last view
    del view
    assert family.get(0) is None and family.tail is None
    family.close()
