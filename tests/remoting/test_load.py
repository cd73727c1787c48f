"""Load on a real ``mqcore serve`` process: 200 connections producing and long-polling for a
minute, with no error and no growth of the server's threads, fds or memory past a bound.

Bounds (the server's own, read from /proc): threads never above the count once the worker
pool is warm; open fds at most one per connection plus the store's files and a margin of 16;
resident memory grows by less than 64 MiB from the first ten seconds to the end (the store
maps its files: written pages count once, so the margin covers the data sent). After the
clients leave, the fds return to within 16 of the idle count.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from pathlib import Path

import pytest
from mqserve import ServeProcess

from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads the server's /proc"),
]

PRODUCERS = 100
POLLERS = 100
SECONDS = float(os.environ.get("MQCORE_LOAD_SECONDS", "60"))
QUEUES = 8


def _stats(pid: int) -> tuple[int, int, int]:
    """(threads, open fds, resident KiB) of process ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    threads = int(fields["Threads"].strip())
    rss = int(fields["VmRSS"].strip().split()[0])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return threads, fds, rss


async def _call(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cmd: RemotingCommand
) -> RemotingCommand:
    writer.write(cmd.encode())
    await writer.drain()
    (total,) = struct.unpack(">i", await reader.readexactly(4))
    return RemotingCommand.decode(await reader.readexactly(total))


async def _producer(host: str, port: int, n: int, stop: float, errors: list[str]) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    sent = 0
    try:
        while time.monotonic() < stop:
            header = headers.SendMessageRequestHeaderV2(
                producer_group="load-pg", topic="Load", default_topic="TBW102",
                default_topic_queue_nums=4, queue_id=(n + sent) % QUEUES, sys_flag=0,
                born_timestamp=int(time.time() * 1000), flag=0, properties="TAGS\x01t\x02",
            )  # fmt: skip
            cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, b"x" * 256)
            resp = await _call(reader, writer, cmd)
            if resp.code != ResponseCode.SUCCESS:
                errors.append(f"send: {resp.code} {resp.remark}")
                return sent
            sent += 1
            await asyncio.sleep(0.02)
    finally:
        writer.close()
        await writer.wait_closed()
    return sent


async def _poller(host: str, port: int, n: int, stop: float, errors: list[str]) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    offset, got = 0, 0
    try:
        while time.monotonic() < stop:
            header = headers.PullMessageRequestHeader(
                consumer_group=f"load-cg{n}", topic="Load", queue_id=n % QUEUES,
                queue_offset=offset, max_msg_nums=32, sys_flag=int(headers.PullSysFlag.SUSPEND),
                commit_offset=0, suspend_timeout_millis=2000, sub_version=0,
                subscription="*", expression_type="TAG",
            )  # fmt: skip
            resp = await _call(
                reader, writer, RemotingCommand.request(RequestCode.PULL_MESSAGE, header)
            )
            if resp.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND):
                errors.append(f"pull: {resp.code} {resp.remark}")
                return got
            h = resp.read_header(headers.PullMessageResponseHeader)
            if resp.code == ResponseCode.SUCCESS:
                got += h.next_begin_offset - offset
            offset = h.next_begin_offset
    finally:
        writer.close()
        await writer.wait_closed()
    return got


def test_200_connections_for_a_minute(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path / "data")
    addr = srv.start()
    host, port = addr.rsplit(":", 1)
    assert srv.proc is not None
    pid = srv.proc.pid
    try:
        from mqcore.client.transport_remote import RemoteTransport

        admin = RemoteTransport(addr)
        try:
            admin._call(
                addr,
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                headers.CreateTopicRequestHeader(
                    topic="Load",
                    default_topic="TBW102",
                    read_queue_nums=QUEUES,
                    write_queue_nums=QUEUES,
                    perm=6,
                    topic_filter_type="SINGLE_TAG",
                ),
            )
        finally:
            admin.close()
        idle = _stats(pid)
        samples: list[tuple[float, tuple[int, int, int]]] = []
        errors: list[str] = []

        async def run() -> tuple[list[int], list[int]]:
            stop = time.monotonic() + SECONDS

            async def sample() -> None:
                while time.monotonic() < stop:
                    await asyncio.sleep(2)
                    samples.append((time.monotonic(), _stats(pid)))

            sampler = asyncio.ensure_future(sample())
            prods = [_producer(host, int(port), i, stop, errors) for i in range(PRODUCERS)]
            polls = [_poller(host, int(port), i, stop, errors) for i in range(POLLERS)]
            results = await asyncio.gather(*prods, *polls)
            await sampler
            return list(results[:PRODUCERS]), list(results[PRODUCERS:])

        begin = time.monotonic()
        sent, got = asyncio.run(run())
        assert errors == []
        assert sum(sent) > PRODUCERS * 10 and sum(got) > 0
        warm = [s for t, s in samples if t - begin >= 10] or [s for _, s in samples]
        first = warm[0]
        threads = max(s[0] for s in warm)
        fds = max(s[1] for s in warm)
        rss_growth_kib = max(s[2] for s in warm) - first[2]
        assert threads <= first[0] + 2, f"threads grew: {[s[0] for s in warm]}"
        assert fds <= idle[1] + PRODUCERS + POLLERS + 16, f"fds: idle {idle[1]}, peak {fds}"
        assert rss_growth_kib < 64 * 1024, f"memory grew by {rss_growth_kib} KiB"
        time.sleep(1.0)  # the server sees the connections close
        assert _stats(pid)[1] <= idle[1] + 16
    finally:
        assert srv.stop() == 0
