"""``mqcore serve`` replication options: how they become broker settings, and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from mqcore.cli import main
from mqcore.commands.serve import _role_settings
from mqcore.errors import InvalidArgumentError
from mqcore.server import Server

pytestmark = pytest.mark.timeout(60)


def test_options_become_settings() -> None:
    got = _role_settings("slave", "broker-x", 2, "127.0.0.1:10912", None)
    assert got == {
        "broker_role": "SLAVE",
        "broker_name": "broker-x",
        "broker_id": 2,
        "ha_master_address": "127.0.0.1:10912",
    }
    assert _role_settings(None, None, None, None, "0.0.0.0:7001") == {
        "ha_listen_port": 7001,
        "ha_listen_host": "0.0.0.0",
    }
    assert _role_settings(None, None, None, None, "7001") == {"ha_listen_port": 7001}


@pytest.mark.parametrize(
    ("master_ha", "ha_listen", "message"),
    [
        ("nohost", None, "--master-ha 'nohost' is not HOST:PORT"),
        (None, "x:y", r"--ha-listen 'x:y' is not \[HOST:\]PORT"),
    ],
)
def test_bad_addresses_are_refused(master_ha, ha_listen, message) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        _role_settings(None, None, None, master_ha, ha_listen)


def test_a_slave_without_its_master_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--role", "SLAVE"]
    )
    assert result.exit_code != 0
    assert "ha_master_address" in result.output and "Traceback" not in result.output


def test_a_master_gets_a_replication_port_and_lmdb_none(tmp_path: Path) -> None:
    with Server(tmp_path / "m", "127.0.0.1:0") as server:
        assert server.ha_address is not None
        assert server.broker.ha.port == int(server.ha_address.rsplit(":", 1)[1])
    pytest.importorskip("lmdb")
    with Server(tmp_path / "l", "127.0.0.1:0", store="lmdb") as server:
        assert server.ha_address is None
