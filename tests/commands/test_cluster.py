"""``mqcore cluster status``: groups, members, roles and replication lag."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mqcore import Message
from mqcore.cli import main
from mqcore.commands.cluster import cluster_status
from mqcore.server import NamesrvServer, Server

pytestmark = pytest.mark.timeout(120)


def _wait(check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {check}"
        time.sleep(0.05)


def test_status_from_a_name_server_and_from_one_server(tmp_path: Path) -> None:
    fast = {"register_name_server_period_ms": 300, "slave_synchronize_interval_ms": 200}
    with NamesrvServer("127.0.0.1:0") as ns:
        common = {**fast, "namesrv_addr": ns.address}
        with Server(tmp_path / "m", "127.0.0.1:0", settings=common) as master:
            slave_settings = {
                **common,
                "broker_role": "SLAVE",
                "broker_id": 1,
                "ha_master_address": master.ha_address,
            }
            with Server(tmp_path / "s", "127.0.0.1:0", settings=slave_settings) as slave:
                master.broker.create_topic("T", queue_nums=1)
                master.broker.send_message("T", 0, [Message(topic="T", body=b"x" * 100)] * 10)
                end = master.broker.store.commitlog_max_offset()

                def both() -> bool:
                    rows = cluster_status(ns.address)
                    return [r["replication_lag_bytes"] for r in rows] == [None, 0]

                _wait(both)
                rows = cluster_status(ns.address)
                assert [(r["broker_id"], r["address"], r["role"]) for r in rows] == [
                    (0, master.address, "ASYNC_MASTER"),
                    (1, slave.address, "SLAVE"),
                ]
                assert rows[1]["commitlog_max_offset"] == end
                # Replication state: the master counts its slave, the slave is connected.
                assert [(r["ha_slaves_connected"], r["ha_connected"]) for r in rows] == [
                    (1, None),
                    (None, True),
                ]
                # One server alone: itself and the slave registered with it.
                _wait(lambda: len(cluster_status(master.address)) == 2)
                assert cluster_status(master.address) == rows
                out = CliRunner().invoke(
                    main, ["cluster", "status", "--server", ns.address, "--json"]
                )
                assert out.exit_code == 0, out.output
                assert json.loads(out.output) == rows
                table = CliRunner().invoke(main, ["cluster", "status", "--server", ns.address])
                assert "SLAVE" in table.output and slave.address in table.output
                assert "1 slave connected" in table.output and "connected" in table.output


def test_a_group_whose_master_is_gone_keeps_a_no_master_row(tmp_path: Path) -> None:
    """Through a name server: the master leaves, its slave stays; the group is listed with a
    "no master" row and the slave disconnected, in the table and in --json."""
    fast = {"register_name_server_period_ms": 300, "slave_synchronize_interval_ms": 200}
    with NamesrvServer("127.0.0.1:0") as ns:
        common = {**fast, "namesrv_addr": ns.address}
        master = Server(tmp_path / "m", "127.0.0.1:0", settings=common)
        try:
            slave_settings = {
                **common,
                "broker_role": "SLAVE",
                "broker_id": 1,
                "ha_master_address": master.ha_address,
            }
            with Server(tmp_path / "s", "127.0.0.1:0", settings=slave_settings) as slave:
                _wait(
                    lambda: [r["ha_connected"] for r in cluster_status(ns.address)] == [None, True]
                )
                master.close()

                def masterless() -> bool:
                    rows = cluster_status(ns.address)
                    return [(r["broker_id"], r["address"], r["ha_connected"]) for r in rows] == [
                        (0, None, None),
                        (1, slave.address, False),
                    ]

                _wait(masterless)
                rows = cluster_status(ns.address)
                assert rows[0]["role"] is None and "no master" in rows[0]["error"]
                assert rows[1]["ha_error"] and rows[1]["replication_lag_bytes"] is None
                out = CliRunner().invoke(
                    main, ["cluster", "status", "--server", ns.address, "--json"]
                )
                assert out.exit_code == 0 and json.loads(out.output)[0]["address"] is None
                table = CliRunner().invoke(main, ["cluster", "status", "--server", ns.address])
                assert "no master" in table.output and "disconnected" in table.output
        finally:
            master.close()
