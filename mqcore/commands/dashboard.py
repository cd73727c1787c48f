"""``mqcore dashboard``: the web dashboard (``mqcore[dashboard]``) as a process of its own.

This module parses the options; :class:`mqcore.dashboard.Dashboard` is what runs.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from mqcore.commands.security import client_security, security_options
from mqcore.errors import MQError

__all__ = ["dashboard"]


@click.command()
@click.option(
    "--namesrv",
    required=True,
    envvar="MQCORE_SERVER",
    metavar="HOST:PORT[;HOST:PORT]",
    help="Name server: `mqcore namesrv`, a single `mqcore serve`, or RocketMQ's (env "
    "MQCORE_SERVER).",
)
@click.option(
    "--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT of the pages."
)
@click.option("--read-only", is_flag=True, help="Hide every action and refuse its requests.")
@click.option(
    "--acl",
    is_flag=True,
    help="The brokers check ACL: every browser signs in with an account, whose keys sign "
    "its requests; --access-key/--secret-key are then the charts' own account.",
)
@security_options
@click.option(
    "--sample-interval",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds between two samples of the TPS and lag charts (the last hour is kept).",
)
def dashboard(
    namesrv: str,
    listen: str,
    read_only: bool,
    acl: bool,
    sample_interval: float,
) -> None:
    """Serve web pages about the cluster behind a name server: broker groups, topics,
    consumer groups, messages and dead letters, with TPS and lag charts of the last hour.

    Needs the extra: pip install 'mqcore[dashboard]'. Stops on SIGINT or SIGTERM.
    """
    try:
        from mqcore.dashboard.server import Dashboard
    except ImportError as exc:
        raise click.ClickException(
            f"mqcore dashboard needs its web stack ({exc.name} is missing): "
            f"pip install 'mqcore[dashboard]'"
        ) from exc
    security = client_security()
    try:
        server = Dashboard(
            namesrv,
            listen,
            read_only=read_only,
            acl=acl,
            credentials=security["credentials"],
            tls=security["tls"],
            sample_interval=sample_interval,
        ).start()
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        mode = " (read-only)" if read_only else ""
        mode += " (sign-in: ACL)" if acl else ""
        click.echo(f"mqcore dashboard: {server.url}/ for the name server {namesrv}{mode}")
        sys.stdout.flush()
        while not stop.wait(1.0):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.close()
        click.echo("mqcore dashboard: stopped")
