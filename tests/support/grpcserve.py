"""The gRPC endpoint's test helpers: ``mqcore serve --grpc-listen`` in a child process, the
official RocketMQ 5 client's scripts in child processes, and the ``mqcore`` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mqserve import ServeProcess

__all__ = ["GrpcServe", "mqcore_cli", "run_script"]


class GrpcServe(ServeProcess):
    """``mqcore serve --grpc-listen`` in a child process; ``grpc_address`` is where the 5.x
    clients connect, ``address`` the remoting (4.x) address of the same broker."""

    grpc_address = ""

    def start_grpc(self, grpc_listen: str = "127.0.0.1:0", *settings: str) -> str:
        """Start and wait for the gRPC line; the gRPC address."""
        self.start("127.0.0.1:0", *settings, options=("--grpc-listen", grpc_listen))
        line = self.read_until("gRPC")
        self.grpc_address = line.rsplit(" on ", 1)[1].strip()
        return self.grpc_address


def run_script(script: str, *args: str, home: Path, timeout: float = 120) -> str:
    """Run a 5.x client script in a child process (the client keeps threads, an event loop
    and log files of its own, under ``home``); its stdout, failing on a non-zero exit."""
    env = dict(os.environ, HOME=str(home))
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, f"client script failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def mqcore_cli(*args: str) -> str:
    """``mqcore ARGS`` in a child process; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", "from mqcore.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"mqcore {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout
