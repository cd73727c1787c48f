"""``mqcore serve`` as a child process, for tests that need a real server process
(importable as ``mqserve``: pytest puts this folder on the path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


class ServeProcess:
    """``mqcore serve`` in a child process on a free port, restartable on its data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""

    def start(self, listen: str = "127.0.0.1:0") -> str:
        cmd = [
            sys.executable, "-c", "from mqcore.cli import main; main()", "serve",
            "--listen", listen, "--data-dir", str(self.data_dir),
            "--set", "auto_create_topic_enable=true",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on" in line, f"mqcore serve did not start: {line!r}"
        self.address = line.split("listening on ")[1].split()[0]
        return self.address

    def kill(self) -> None:
        """SIGKILL: no chance to persist anything."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def stop(self) -> int:
        """SIGTERM, and the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return self.proc.returncode


def run_client(script: str, *args: str, timeout: float = 120) -> str:
    """Run a script that uses the official client in a child process (its C++ core keeps
    threads and state of its own); returns its stdout, failing on a non-zero exit."""
    env = dict(os.environ)
    env.setdefault("HOME", str(Path.cwd()))  # the C++ core writes its logs under $HOME
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, f"client script failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout
