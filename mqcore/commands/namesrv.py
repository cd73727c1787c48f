"""``mqcore namesrv``: a name server alone, for several broker groups (see docs/ha.md)."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from mqcore.errors import MQError

__all__ = ["NamesrvServer", "namesrv"]


class NamesrvServer:
    """A :class:`~mqcore.broker.namesrv.NameServer` behind a remoting server; owns both.

    :param listen: ``HOST:PORT`` (port 0: any free port).
    """

    def __init__(self, listen: str = "127.0.0.1:9876") -> None:
        from mqcore.broker.namesrv import NameServer
        from mqcore.commands.serve import _split_listen
        from mqcore.remoting.server import RemotingServer

        host, port = _split_listen(listen)
        self.tables = NameServer()
        self.remoting = RemotingServer(self.tables, host, port)
        bound_host, bound_port = self.remoting.start()
        self.address = f"{bound_host}:{bound_port}"

    def close(self) -> None:
        """Close every connection."""
        self.remoting.close()

    def __enter__(self) -> NamesrvServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@click.command()
@click.option("--listen", default="127.0.0.1:9876", show_default=True, help="HOST:PORT to serve.")
def namesrv(listen: str) -> None:
    """Run a name server alone: brokers started with --namesrv register with it, and clients
    whose namesrv_addr points at it get routes over every broker group. Stops on SIGINT or
    SIGTERM."""
    try:
        server = NamesrvServer(listen)
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        click.echo(f"mqcore namesrv: listening on {server.address}")
        sys.stdout.flush()
        while not stop.wait(1.0):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.close()
        click.echo("mqcore namesrv: stopped")
