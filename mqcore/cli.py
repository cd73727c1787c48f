"""The ``mqcore`` command. Subcommands live in their own modules and are added here."""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

import mqcore
from mqcore.errors import MQError
from mqcore.kernel import Kernel

__all__ = ["main"]


#: Exit statuses of a command stopped by a signal, as a shell reports them (128 + the signal).
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


class _Commands(click.Group):
    """The ``mqcore`` group: Ctrl-C and a closed pipe end any command as they end the
    commands of a shell (status 130 with one line; 141 quietly), never with a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("Aborted!", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            # `mqcore demo | head -1`: the reader is gone. Later writes (Python flushes
            # stdout at exit) go nowhere instead of raising again.
            _stdout_to_devnull()
            ctx.exit(EXIT_BROKEN_PIPE)
        except SystemExit as exc:
            if isinstance(exc.__context__, BrokenPipeError):  # rich's own way out of it
                ctx.exit(EXIT_BROKEN_PIPE)
            raise


def _stdout_to_devnull() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test runner's buffer)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(mqcore.__version__, prog_name="mqcore")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="warning",
    show_default=True,
    help="Events at this level and above go to stderr.",
)
@click.option("-v", "--verbose", count=True, help="More log events on stderr: -v info, -vv debug.")
def main(log_level: str, verbose: int) -> None:
    """mqcore: an embeddable message-queue kernel modelled on Apache RocketMQ 4.x."""
    level = getattr(logging, log_level.upper())
    if verbose:
        level = min(level, logging.INFO if verbose == 1 else logging.DEBUG)
    _log_to_stderr(level)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (click's test runner swaps it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _log_to_stderr(level: int) -> None:
    """The command is an application, so it (not the library) decides where logs go: the
    ``mqcore`` loggers to stderr, keeping stdout for results such as `mqcore bench --json`."""
    logger = logging.getLogger("mqcore")
    for handler in list(logger.handlers):
        if isinstance(handler, _StderrHandler):
            logger.removeHandler(handler)  # main() runs again (tests invoke it repeatedly)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def kernel_or_exit() -> Kernel:
    """A Kernel, or a clean CLI error when plugins cannot be loaded."""
    try:
        return Kernel()
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc


@main.command()
@click.option(
    "--format",
    "output",
    type=click.Choice(["table", "names"]),
    default="table",
    show_default=True,
    help="names: one tab-separated line per registration (kind, name, plugin, distribution).",
)
def plugins(output: str) -> None:
    """List registered stores, allocators, filters, offset stores, delay and timer schedulers."""
    kernel = kernel_or_exit()
    rows = [
        (kind, reg.name, reg.plugin, reg.distribution or "-")
        for kind, regs in kernel.registrations().items()
        for reg in regs
    ]
    if output == "names":
        for row in rows:
            click.echo("\t".join(row))
        return
    table = Table(title="mqcore plugins")
    for column in ("kind", "name", "plugin", "distribution"):
        # Fold long names over lines rather than cutting them at the terminal's width.
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


# Subcommands defined in mqcore.commands.* are attached below, one line each.
from mqcore.commands.bench import bench  # noqa: E402

main.add_command(bench)

from mqcore.commands.allocate import allocate  # noqa: E402

main.add_command(allocate)

from mqcore.commands.demo import demo  # noqa: E402

main.add_command(demo)

from mqcore.commands.replay import replay  # noqa: E402

main.add_command(replay)

from mqcore.commands.serve import serve  # noqa: E402

main.add_command(serve)

from mqcore.commands.namesrv import namesrv  # noqa: E402

main.add_command(namesrv)

from mqcore.commands.cluster import cluster  # noqa: E402

main.add_command(cluster)

from mqcore.commands.timer import timer  # noqa: E402

main.add_command(timer)

from mqcore.commands.admin import group, lag, offset, topic  # noqa: E402
from mqcore.commands.admin_messages import dlq, message  # noqa: E402

for _admin_command in (topic, group, lag, offset, message, dlq):
    main.add_command(_admin_command)

from mqcore.commands.console import consume, send  # noqa: E402

main.add_command(send)
main.add_command(consume)

from mqcore.commands.dashboard import dashboard  # noqa: E402

main.add_command(dashboard)
