"""``mqcore bench``: produce then consume through a store and print the rates per phase.

The measuring is done by :mod:`mqcore.benchmark`; this module parses options and prints a
rich table with a progress bar, or one JSON object with ``--json``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import click

from mqcore.benchmark import BenchConfig, BenchResult, ProgressFn, run_bench
from mqcore.errors import MQError

__all__ = ["bench"]

_PHASE_LABELS = {
    "produce": "produce (put)",
    "consume": "consume (get, MessageExt)",
    "consume_raw": "consume (get_raw, records)",
}


@contextlib.contextmanager
def _progress_bar(enabled: bool) -> Iterator[ProgressFn | None]:
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    tasks: dict[str, Any] = {}
    with Progress(
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(stderr=True),
        transient=False,
    ) as bar:

        def update(phase: str, done: int, total: int) -> None:
            task = tasks.get(phase)
            if task is None:
                task = tasks[phase] = bar.add_task(_PHASE_LABELS.get(phase, phase), total=total)
            bar.update(task, completed=done, total=max(total, done))

        yield update


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr)


def _print_table(result: BenchResult, show_rss: bool) -> None:
    from rich.table import Table

    c = result.config
    table = Table(
        title=(
            f"mqcore bench: store={c.store} messages={c.messages} size={c.size} "
            f"batch={c.batch} flush={c.flush} threads={c.threads}"
        )
    )
    for column in ("phase", "messages", "seconds", "msgs/s", "MB/s"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    for phase in result.phases.values():
        table.add_row(
            _PHASE_LABELS.get(phase.name, phase.name),
            f"{phase.messages:,}",
            f"{phase.seconds:.3f}",
            f"{phase.msgs_per_s:,.0f}",
            f"{phase.mb_per_s:,.1f}",
        )
    console = _console()
    console.print(table)
    data = result.as_dict()
    if not data["speedups"]:
        console.print("codec: pure Python (mqcore._codec was not built or is disabled)")
    if "puts_per_s" in data:
        console.print(f"puts/s: {data['puts_per_s']:,.0f}")
    if "fsyncs_per_s" in data:
        console.print(f"fsyncs: {data['fsyncs']:,}  fsyncs/s: {data['fsyncs_per_s']:,.0f}")
    elif c.flush == "sync":
        console.print("fsyncs/s: not measurable (the store syncs outside Python and counts none)")
    if show_rss:
        parts = [f"peak RSS: {result.peak_rss_mib:,.1f} MiB"]
        for name, value in result.rss_peaks.items():
            label = {"rss_anon": "anonymous", "rss_file": "file-backed"}.get(name, name)
            parts.append(f"{label}: {value:,.1f} MiB")
        console.print("  ".join(parts))


def _parse_options(items: tuple[str, ...]) -> dict[str, Any]:
    """``NAME=VALUE`` strings as store options (JSON values where they parse)."""
    options: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--option")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        options[name.strip()] = value
    return options


@click.command()
@click.option(
    "--store",
    "store_name",
    default="mmap",
    show_default=True,
    help="Registered store backend (see `mqcore plugins`).",
)
@click.option(
    "--messages",
    "-n",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="Messages to produce, then consume.",
)
@click.option(
    "--size",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="Body size in bytes.",
)
@click.option(
    "--batch", type=click.IntRange(min=1), default=32, show_default=True, help="Messages per put."
)
@click.option(
    "--flush",
    type=click.Choice(["async", "sync"], case_sensitive=False),
    default="async",
    show_default=True,
    help="Flush mode (sync: fsync before ack).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Concurrent producer threads, one queue each.",
)
@click.option(
    "--pull-batch",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Messages per get when consuming.",
)
@click.option(
    "--raw/--no-raw",
    default=True,
    show_default=True,
    help="Also consume through the raw-record variant (get_raw).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Keep the store here instead of a temporary directory.",
)
@click.option(
    "--rss", is_flag=True, help="Report peak resident set size, and its anonymous/file parts."
)
@click.option(
    "--option",
    "-o",
    "options",
    multiple=True,
    metavar="NAME=VALUE",
    help="A store option (repeatable), e.g. -o group_commit_delay_ms=0; values are read as "
    "JSON when they parse (numbers, true/false), else as strings.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object, no progress bar.")
def bench(
    store_name: str,
    messages: int,
    size: int,
    batch: int,
    flush: str,
    threads: int,
    pull_batch: int,
    raw: bool,
    data_dir: str | None,
    rss: bool,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Produce then consume through a store and print messages/s and MB/s per phase."""
    store_options = _parse_options(options)
    if "flush_mode" in store_options:
        raise click.BadParameter("use --flush, not -o flush_mode", param_hint="--option")
    config = BenchConfig(
        store=store_name,
        messages=messages,
        size=size,
        batch=batch,
        flush=flush.lower(),
        threads=threads,
        pull_batch=pull_batch,
        raw=raw,
        data_dir=data_dir,
        rss=rss,
        store_options=store_options,
    )
    try:
        if as_json:
            # Anything a plugin prints (structlog's default writes to stdout) goes to stderr,
            # so stdout holds exactly one JSON object.
            with contextlib.redirect_stdout(sys.stderr):
                result = run_bench(config)
        else:
            with _progress_bar(True) as progress:
                result = run_bench(config, progress=progress)
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(result.as_dict(), sort_keys=True))
    else:
        _print_table(result, rss)
