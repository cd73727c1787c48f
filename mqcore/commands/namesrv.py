"""``mqcore namesrv``: a name server alone, for several broker groups (see docs/ha.md).

This module parses the options; :class:`mqcore.server.NamesrvServer` is what runs.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from mqcore.errors import MQError
from mqcore.server.server import NamesrvServer

__all__ = ["namesrv"]


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
