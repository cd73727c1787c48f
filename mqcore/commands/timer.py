"""``mqcore timer stats``: pending timer messages, the next deliver time and the lag.

Reads a broker's data directory without disturbing it (the broker may be running): the
timer checkpoint and wheel, and the store, read only, for the held messages not yet taken
into the wheel.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

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


@click.group()
def timer() -> None:
    """Timer messages (RocketMQ 5's TIMER_DELIVER_MS) held by a broker."""


@timer.command()
@click.option(
    "--data-dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The broker's data directory.",
)  # fmt: skip
@click.option("--store", default=None, help="Store plugin of the broker (guessed if omitted).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def stats(data_dir: Path, store: str | None, as_json: bool) -> None:
    """Pending timers, when the next ones are delivered, and how far delivery lags."""
    from mqcore.plugins.delay_timer_wheel import read_stats

    now = time.time_ns() // 1_000_000
    store_dir = data_dir / "store"
    try:
        kernel = Kernel()
        with kernel.open_store(store or _store_kind(store_dir), store_dir, read_only=True) as s:
            held = int(s.max_offset(TIMER_TOPIC, 0))
        result = read_stats(data_dir, held, now)
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(result.as_dict()))
        return
    click.echo(f"pending timers   {result.pending}")
    click.echo(f"  in the wheel   {result.in_wheel}")
    click.echo(f"  not yet in it  {result.enqueue_backlog}")
    click.echo(f"next delivery    {_when(result.next_due_ms, now)}")
    click.echo(f"lag              {result.lag_ms} ms")
