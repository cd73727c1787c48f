"""A store directory this process may not write: a writer open says so and what to do."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mqcore import Kernel, Message
from mqcore.errors import StoreError

NOBODY = 65534


def _open_as_nobody(store_name: str, path: Path, read_only: bool) -> str:
    """Open the store in a child running as ``nobody``; prints the outcome."""
    script = textwrap.dedent(f"""
        import os
        from mqcore import Kernel, errors
        import mqcore.plugins.store_lmdb.store, mqcore.plugins.store_mmap.store
        kernel = Kernel()  # everything imported first: nobody may not read this Python
        os.setgid({NOBODY}); os.setuid({NOBODY})
        try:
            with kernel.open_store({store_name!r}, {str(path)!r}, read_only={read_only}) as s:
                print("opened", s.max_offset("T", 0))
        except Exception as exc:
            print(type(exc).__name__ + ":", exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip()


@pytest.fixture
def written(tmp_path: Path, store_name: str) -> Path:
    """A store holding one message, in a directory others may enter but not write."""
    path = tmp_path / "store"
    with Kernel().open_store(store_name, path) as store:
        store.put("T", 0, [Message(topic="T", body=b"x")])
    os.chmod(path, 0o755)
    return path


def test_opening_for_writing_without_permission_is_a_store_error(
    written: Path, store_name: str, tmp_path: Path
) -> None:
    if os.geteuid() == 0:
        # Root writes anywhere: ask as an unprivileged user, who must be able to walk there.
        changed = []
        for parent in [*reversed(written.parents), written]:
            if str(parent).startswith(str(tmp_path.parents[1])):
                mode = parent.stat().st_mode & 0o777
                changed.append((parent, mode))
                os.chmod(parent, mode | 0o005 if parent == written else mode | 0o001)
        try:
            out = _open_as_nobody(store_name, written, read_only=False)
            assert out.startswith("StoreError:"), out
            assert f"cannot open the store at {str(written)!r} for writing" in out
            assert "Permission denied" in out and "read_only=True" in out
            if store_name == "mmap":  # LMDB's readers need to write its lock.mdb
                assert _open_as_nobody(store_name, written, read_only=True) == "opened 1"
        finally:
            for parent, mode in changed:
                os.chmod(parent, mode)
    else:
        os.chmod(written, 0o555)
        try:
            with pytest.raises(StoreError, match=r"for writing: .*read_only=True"):
                Kernel().open_store(store_name, written)
            with Kernel().open_store(store_name, written, read_only=True) as store:
                assert store.max_offset("T", 0) == 1
        finally:
            os.chmod(written, 0o755)
