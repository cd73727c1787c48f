"""``mqcore serve`` as a child process, for tests that need a real server process
(importable as ``mqserve``: pytest puts this folder on the path)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    """A port nothing listens on now (for a server that must be started on a known port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_accepting(
    addr: str, proc: subprocess.Popen[str] | None = None, timeout: float = 120.0
) -> float:
    """Poll ``addr`` every 2 ms until a connection is accepted, as a client started beside
    its server would; the seconds it took. Fails when ``proc`` exits first."""
    host, _, port = addr.rpartition(":")
    begin = time.monotonic()
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return time.monotonic() - begin
        except OSError:
            pass
        assert proc is None or proc.poll() is None, f"the server exited ({proc.returncode})"
        assert time.monotonic() - begin < timeout, f"nothing accepted on {addr} in {timeout} s"
        time.sleep(0.002)


class ServeProcess:
    """``mqcore serve`` in a child process on a free port, restartable on its data dir."""

    def __init__(
        self,
        data_dir: Path,
        store: str = "mmap",
        options: tuple[str, ...] = (),
        log: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.store = store
        self.options = options  # more serve options (--acl FILE, --tls-cert FILE...)
        #: Where the server's stderr (its log events) goes, appended; None: inherited.
        self.log = log
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""

    def launch(
        self, listen: str, *settings: str, options: tuple[str, ...] = ()
    ) -> subprocess.Popen[str]:
        """Start the process and return at once (``settings``: ``NAME=VALUE`` for --set;
        ``options``: more command-line options, e.g. ``("--grpc-listen", "127.0.0.1:0")``)."""
        cmd = [
            sys.executable, "-c", "from mqcore.cli import main; main()", "serve",
            "--listen", listen, "--data-dir", str(self.data_dir), "--store", self.store,
            *options,
        ]  # fmt: skip
        cmd += self.options
        for pair in settings:
            cmd += ["--set", pair]
        if self.log is None:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        else:
            with self.log.open("a") as err:  # the child keeps its own copy of the descriptor
                self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        self.address = listen
        return self.proc

    def start(
        self, listen: str = "127.0.0.1:0", *settings: str, options: tuple[str, ...] = ()
    ) -> str:
        """Start the process and wait for its "listening on" line; the address it gives."""
        self.launch(listen, *settings, options=options)
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on" in line, f"mqcore serve did not start: {line!r}"
        self.address = line.split("listening on ")[1].split()[0]
        return self.address

    def read_until(self, text: str) -> str:
        """The first line of the process's output that holds ``text`` (the lines before it
        are skipped)."""
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            assert line, f"mqcore serve ended before printing {text!r}"
            if text in line:
                return line

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


def run_client(script: str, *args: str, timeout: float = 120, home: Path | None = None) -> str:
    """Run a script that uses the official client in a child process (its C++ core keeps
    threads and state of its own); returns its stdout, failing on a non-zero exit.
    ``home``: the child's $HOME, where the C++ core writes its logs (logs/rocketmq-cpp)."""
    env = dict(os.environ)
    if home is not None:
        env["HOME"] = str(home)
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


_FILL = r"""
import os, sys
from mqcore import Broker, Message
data_dir, total, topic = sys.argv[1], int(sys.argv[2]), sys.argv[3]
broker = Broker(data_dir)
broker.create_topic(topic, queue_nums=4)
body = os.urandom(1_000_000)  # incompressible; four to a batch stay under 4 MiB
batch = [Message(topic=topic, body=body) for _ in range(4)]
sent = 0
while sent * len(body) < total:
    broker.send_message(topic, (sent // 4) % 4, batch)
    sent += len(batch)
print(sent, flush=True)
sys.stdin.read()  # held open, unflushed, until killed
"""


def fill_and_kill(data_dir: Path, total_bytes: int, topic: str) -> int:
    """Store ``total_bytes`` of bodies in ``topic`` of a broker in a child process, then
    SIGKILL it, leaving a store for the next start to recover; the messages stored."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _FILL, str(data_dir), str(total_bytes), topic],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip().isdigit(), f"the store was not filled: {line!r}"
        return int(line)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
