"""Helpers for the remoting tests: a processor with one code per way of answering."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from typing import Any

from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.server import ServerConnection

ECHO = 1000  # answers the body back
SLOW = 1001  # blocks its worker thread for ext_fields["ms"] milliseconds, then answers
FAIL = 1002  # raises
PARK = 1003  # answers through a future completed ext_fields["ms"] later (a long poll)
AWAIT = 1004  # answers through a coroutine sleeping ext_fields["ms"]
BIND = 1005  # binds ext_fields["clientId"] to the connection
SILENT = 1006  # answers nothing


class ScriptedProcessor:
    """What the tests serve: each code exercises one way a handler can answer."""

    inline_codes = (ECHO, AWAIT)

    def __init__(self) -> None:
        self.closed: list[ServerConnection] = []
        self.timers: list[threading.Timer] = []

    def process(self, cmd: RemotingCommand, conn: ServerConnection) -> Any:
        ms = int((cmd.ext_fields or {}).get("ms", 0))
        if cmd.code == ECHO:
            return RemotingCommand.response(0, body=cmd.body, remark=cmd.remark)
        if cmd.code == SLOW:
            time.sleep(ms / 1000)
            return RemotingCommand.response(0, remark=f"slept {ms}")
        if cmd.code == FAIL:
            raise RuntimeError("handler broke")
        if cmd.code == PARK:
            fut: concurrent.futures.Future[RemotingCommand] = concurrent.futures.Future()
            timer = threading.Timer(
                ms / 1000, lambda: fut.set_result(RemotingCommand.response(0, remark="parked"))
            )
            self.timers.append(timer)
            timer.start()
            return fut
        if cmd.code == AWAIT:
            return self._later(ms)
        if cmd.code == BIND:
            conn.bind_client_id(str((cmd.ext_fields or {})["clientId"]))
            return RemotingCommand.response(0)
        if cmd.code == SILENT:
            return None
        return NotImplemented

    async def _later(self, ms: int) -> RemotingCommand:
        await asyncio.sleep(ms / 1000)
        return RemotingCommand.response(0, remark="awaited")

    def connection_closed(self, conn: ServerConnection) -> None:
        self.closed.append(conn)

    def join(self) -> None:
        for t in self.timers:
            t.cancel()
            t.join(5)


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)
