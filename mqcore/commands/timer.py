"""``mqcore timer stats``: pending timer messages, the next deliver time and the lag.

Over the network (``--server``, a name server or ``mqcore serve``): each broker group's
master reports its timer scheduler in its runtime info. From a data directory
(``--data-dir``): the broker's files are read without disturbing it (it may be running): the
timer checkpoint and wheel, and the store, read only, for the held messages not yet taken
into the wheel.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from mqcore.commands.admin import DEFAULT_SERVER, connect
from mqcore.commands.security import security_options
from mqcore.errors import MQError
from mqcore.kernel import Kernel
from mqcore.store import TIMER_TOPIC

__all__ = ["timer"]


def _store_kind(store_dir: Path) -> str:
    """The bundled store that wrote ``store_dir``, from the files each always creates."""
    if (store_dir / "data.mdb").exists():
        return "lmdb"
    return "mmap"


def _when(ms: int | None, now: int) -> str:
    if ms is None:
        return "-"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
    return f"{stamp}.{ms % 1000:03d} (in {(ms - now) / 1000:.1f} s)"


def _from_dir(data_dir: Path, store: str | None, now: int) -> dict[str, Any]:
    from mqcore.plugins.delay_timer_wheel import read_stats

    store_dir = data_dir / "store"
    try:
        kernel = Kernel()
        with kernel.open_store(store or _store_kind(store_dir), store_dir, read_only=True) as s:
            held = int(s.max_offset(TIMER_TOPIC, 0))
        return read_stats(data_dir, held, now).as_dict()
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc


def _from_server(server: str) -> dict[str, Any]:
    """The groups' stats summed: the earliest next delivery, the largest lag; and each
    group's own under ``brokers``."""
    with connect(server) as admin:
        per_group = admin.timer_stats()
    if not per_group:
        raise click.ClickException(
            f"no broker at {server} runs a timer scheduler (broker setting timer_scheduler)"
        )
    rows = list(per_group.values())
    dues = [r["next_due_ms"] for r in rows if r["next_due_ms"] is not None]
    return {
        "pending": sum(r["pending"] or 0 for r in rows),
        "in_wheel": sum(r["in_wheel"] or 0 for r in rows),
        "enqueue_backlog": sum(r["enqueue_backlog"] or 0 for r in rows),
        "next_due_ms": min(dues) if dues else None,
        "lag_ms": max(r["lag_ms"] or 0 for r in rows),
        "read_ms": min(r["read_ms"] or 0 for r in rows),
        "brokers": per_group,
    }


@click.group()
def timer() -> None:
    """Timer messages (RocketMQ 5's TIMER_DELIVER_MS) held by the brokers."""


@timer.command()
@click.option(
    "--data-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Read a broker's data directory instead of asking the server.",
)  # fmt: skip
@click.option("--store", default=None, help="Store plugin of the broker (guessed if omitted).")
@click.option(
    "--server",
    envvar="MQCORE_SERVER",
    default=DEFAULT_SERVER,
    show_default=True,
    metavar="HOST:PORT",
    help="Name server: `mqcore namesrv`, or a single `mqcore serve` (env MQCORE_SERVER).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@security_options
def stats(data_dir: Path | None, store: str | None, server: str, as_json: bool) -> None:
    """Pending timers, when the next ones are delivered, and how far delivery lags.

    Every broker group's, through --server; or one broker's, from its --data-dir."""
    now = time.time_ns() // 1_000_000
    result = _from_dir(data_dir, store, now) if data_dir is not None else _from_server(server)
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"pending timers   {result['pending']}")
    click.echo(f"  in the wheel   {result['in_wheel']}")
    click.echo(f"  not yet in it  {result['enqueue_backlog']}")
    click.echo(f"next delivery    {_when(result['next_due_ms'], now)}")
    click.echo(f"lag              {result['lag_ms']} ms")
    for name, row in sorted(result.get("brokers", {}).items()):
        click.echo(
            f"  {name}: {row['pending']} pending, next {_when(row['next_due_ms'], now)}, "
            f"lag {row['lag_ms']} ms"
        )
