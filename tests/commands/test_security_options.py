"""Every command that talks to a server takes the ACL and TLS options, and their values
become the clients' credentials= and tls= without a secret ever printed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
from click.testing import CliRunner

from mqcore.cli import main
from mqcore.commands.security import client_security, security_options
from mqcore.remoting.signing import Credentials

SECURITY = {"--access-key", "--secret-key", "--tls", "--tls-ca"}


def _commands(group: click.Command, path: str = "mqcore") -> Iterator[tuple[str, click.Command]]:
    if isinstance(group, click.Group):
        for name, cmd in group.commands.items():
            yield from _commands(cmd, f"{path} {name}")
    else:
        yield path, group


def test_every_command_with_a_server_takes_the_security_options() -> None:
    with_server = {
        path: {o for p in cmd.params for o in p.opts}
        for path, cmd in _commands(main)
        if any("--server" in p.opts for p in cmd.params)
    }
    assert {"mqcore topic create", "mqcore offset reset", "mqcore send", "mqcore consume",
            "mqcore cluster status", "mqcore timer stats"} <= set(with_server)  # fmt: skip
    missing = {path: SECURITY - opts for path, opts in with_server.items() if SECURITY - opts}
    assert missing == {}


@click.command()
@security_options
def _probe() -> None:
    security = client_security()
    click.echo(f"{security['credentials']!r} tls={security['tls'] is not None}")


def test_options_and_environment_become_client_keywords(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(_probe, ["--access-key", "ak-1234567", "--secret-key", "sk-very-secret"])
    assert out.exit_code == 0, out.output
    assert repr(Credentials("ak-1234567", "x")) in out.output and "tls=False" in out.output
    assert "sk-very-secret" not in out.output
    env = {"MQCORE_ACCESS_KEY": "ak-1234567", "MQCORE_SECRET_KEY": "sk-very-secret"}
    assert "ak-1234567" in runner.invoke(_probe, [], env=env).output
    assert "tls=True" in runner.invoke(_probe, ["--tls"]).output
    half = runner.invoke(_probe, [], env={"MQCORE_SECRET_KEY": "sk-very-secret"})
    assert half.exit_code == 2 and "--access-key is missing" in half.output
    assert "sk-very-secret" not in half.output
    helped = runner.invoke(main, ["topic", "list", "--help"], env=env)
    assert "--secret-key" in helped.output and "sk-very-secret" not in helped.output


def test_a_missing_ca_file_is_a_usage_error(tmp_path: Path) -> None:
    out = CliRunner().invoke(_probe, ["--tls-ca", str(tmp_path / "nothing.pem")])
    assert out.exit_code == 2 and "does not exist" in out.output
