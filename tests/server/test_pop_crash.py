"""SIGKILL ``mqcore serve`` with 1,000 popped messages unacked and 1,000 acked: after the
restart exactly the unacked ones come back, after their invisible time, and the acked ones
never (criterion 4 of pop consumption). Checkpoints and acks are in the revive topic."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mqserve import ServeProcess

from mqcore import Message, Producer, SimpleConsumer

pytestmark = pytest.mark.timeout(240)

INVISIBLE_S = 15.0  # room for a loaded machine between the pops and the kill


def test_unacked_pops_come_back_after_sigkill_acked_ones_never(
    tmp_path: Path, store_name: str
) -> None:
    server = ServeProcess(tmp_path / "data", store_name)
    addr = server.start("127.0.0.1:0", "revive_interval_ms=200")
    try:
        with Producer("pg", broker=addr) as p:
            for i in range(0, 2000, 50):
                batch = [Message(topic="PT", body=b"x", keys=f"k{j}") for j in range(i, i + 50)]
                p.send_batch(batch)
        received: dict[str, float] = {}
        with SimpleConsumer("sg", broker=addr, subscriptions={"PT": "*"},
                            await_duration=0.5) as c:  # fmt: skip
            got = []
            while len(got) < 2000:
                batch = c.receive(32, INVISIBLE_S)
                assert batch, f"only {len(got)} of 2000 received"
                now = time.monotonic()
                for m in batch:
                    received[m.keys or ""] = now
                got += batch
            assert len(received) == 2000
            acked = {m.keys for m in got[::2]}
            for m in got[::2]:
                c.ack(m)
        unacked = set(received) - acked
        assert len(acked) == len(unacked) == 1000
        latest_pop = max(received.values())
        server.kill()
        assert time.monotonic() - latest_pop < INVISIBLE_S, "the kill came after the time"

        addr = server.start("127.0.0.1:0", "revive_interval_ms=200")
        back: dict[str, int] = {}
        with SimpleConsumer("sg", broker=addr, subscriptions={"PT": "*"},
                            await_duration=1.0) as c:  # fmt: skip
            early = c.receive(32, 30.0)
            if time.monotonic() - latest_pop < INVISIBLE_S - 1:
                assert early == [], "a message came back before its invisible time"
            for m in early:
                back[m.keys or ""] = m.delivery_attempt
                c.ack(m)
            deadline = time.monotonic() + 60
            idle = 0
            # Until every unacked one is back, then a few more empty receives.
            while time.monotonic() < deadline and (len(back) < len(unacked) or idle < 3):
                batch = c.receive(32, 30.0)
                idle = 0 if batch else idle + 1
                for m in batch:
                    assert time.monotonic() - received[m.keys or ""] >= INVISIBLE_S - 0.5
                    assert m.keys not in back, f"{m.keys} came back twice"
                    back[m.keys or ""] = m.delivery_attempt
                    c.ack(m)
        assert set(back) == unacked
        assert set(back.values()) == {2}
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
