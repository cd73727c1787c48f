"""Admin commands over the remoting protocol: ``mqcore topic``, ``group``, ``lag``, ``offset``.

Each command starts from the name server at ``--server HOST:PORT`` (default 127.0.0.1:9876,
or the ``MQCORE_SERVER`` environment variable): ``mqcore namesrv`` and the broker groups
registered with it, or a single ``mqcore serve`` (its own name server). It works through
:class:`~mqcore.client.admin.MQAdmin`, prints a table (rich), or with ``--json`` one JSON
document for scripts, and reports an unreachable server, an unknown topic or group in one line
on stderr with exit code 1.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from mqcore.client.admin import MQAdmin, TopicInfo
from mqcore.commands.security import client_security, security_options
from mqcore.errors import MQError, RemotingConnectError, RemotingTimeoutError, TopicNotExistError

__all__ = [
    "DEFAULT_SERVER",
    "admin_options",
    "cli_errors",
    "connect",
    "emit",
    "format_time",
    "group",
    "lag",
    "offset",
    "parse_timestamp",
    "topic",
]

DEFAULT_SERVER = "127.0.0.1:9876"
F = TypeVar("F", bound=Callable[..., Any])


def admin_options(func: F) -> F:
    """Add ``--server``, ``--json`` and the ACL and TLS options
    (:func:`~mqcore.commands.security.security_options`) to an admin command."""
    func = security_options(func)
    func = click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document instead of a table."
    )(func)
    func = click.option(
        "--server",
        envvar="MQCORE_SERVER",
        default=DEFAULT_SERVER,
        show_default=True,
        metavar="HOST:PORT",
        help="Name server: `mqcore namesrv`, or a single `mqcore serve` (env MQCORE_SERVER).",
    )(func)
    return func


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def cli_errors(server: str) -> Iterator[None]:
    """mqcore's errors inside the block become one-line CLI errors about ``server``."""
    try:
        yield
    except MQError as exc:
        refused = _cause(exc, RemotingConnectError)
        if refused is not None:
            raise click.ClickException(
                f"cannot reach the mqcore server at {server} ({refused}); is `mqcore namesrv` "
                f"or `mqcore serve` running there? Point --server or MQCORE_SERVER at it"
            ) from exc
        if _cause(exc, RemotingTimeoutError) is not None:
            raise click.ClickException(
                f"the mqcore server at {server} did not answer in time: {exc}"
            ) from exc
        raise click.ClickException(" ".join(str(exc).split())) from exc


@contextlib.contextmanager
def connect(server: str) -> Iterator[MQAdmin]:
    """An :class:`MQAdmin` to ``server``; its failures become one-line CLI errors."""
    with cli_errors(server), MQAdmin(server, **client_security()) as admin:
        yield admin


def _console() -> Console:
    console = Console()
    if not console.is_terminal:  # piped: keep rows on one line each, whatever the width
        console = Console(width=max(console.width, 200))
    return console


def emit(as_json: bool, data: Any, table: Table | Callable[[], Table] | None = None) -> None:
    """Print ``data`` as JSON, or the table (built on demand)."""
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False))
        return
    if table is not None:
        _console().print(table() if callable(table) else table)


def format_time(ms: int) -> str:
    """A store timestamp in local time, or ``-`` when there is none."""
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


_RELATIVE = re.compile(r"^-(\d+)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_timestamp(text: str, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch from ``now``, ``-10m`` (also ms, s, h, d), a number of
    milliseconds, an ISO 8601 time (no zone: local time) or RocketMQ's
    ``yyyy-MM-dd#HH:mm:ss:SSS``.

    :raises click.BadParameter: none of those.
    """
    value = text.strip()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if value.lower() == "now":
        return now
    rel = _RELATIVE.match(value)
    if rel:
        return now - int(rel.group(1)) * _UNIT_MS[rel.group(2)]
    if value.isdigit():
        return int(value)
    rocketmq = re.fullmatch(r"(\d{4}-\d{2}-\d{2})#(\d{2}:\d{2}:\d{2}):(\d{3})", value)
    if rocketmq:
        value = f"{rocketmq.group(1)}T{rocketmq.group(2)}.{rocketmq.group(3)}"
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time: give now, -10m, milliseconds since the epoch, "
            f"2026-01-31T12:00:00 or 2026-01-31#12:00:00:000"
        ) from None


def _perm(perm: int) -> str:
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-")


# -- mqcore topic ---------------------------------------------------------------------------------


@click.group()
def topic() -> None:
    """List, create, delete topics and show their queues (on every broker group)."""


@topic.command("list")
@admin_options
def topic_list(server: str, as_json: bool) -> None:
    """Every topic with its queue counts and permission."""
    with connect(server) as admin:
        topics = admin.topics()
    rows = [
        {
            "topic": t.topic,
            "read_queue_nums": t.read_queue_nums,
            "write_queue_nums": t.write_queue_nums,
            "perm": t.perm,
            "order": t.order,
            "brokers": list(t.brokers),
        }
        for t in topics
    ]

    def table() -> Table:
        out = Table(title=f"topics on {server}")
        for name in ("topic", "read queues", "write queues", "perm", "order", "brokers"):
            out.add_column(name, no_wrap=True)
        for t in topics:
            out.add_row(
                t.topic,
                str(t.read_queue_nums),
                str(t.write_queue_nums),
                _perm(t.perm),
                "yes" if t.order else "no",
                ", ".join(t.brokers),
            )
        return out

    emit(as_json, rows, table)


@topic.command("create")
@click.argument("name")
@click.option("--queues", default=8, show_default=True, help="Read and write queue count.")
@click.option("--read-queues", type=int, help="Read queue count (default: --queues).")
@click.option("--write-queues", type=int, help="Write queue count (default: --queues).")
@click.option(
    "--perm",
    type=click.Choice(["rw", "r", "w"], case_sensitive=False),
    default="rw",
    show_default=True,
    help="Who may use the topic: read, write or both.",
)
@click.option("--order", is_flag=True, help="Mark the topic as ordered.")
@click.option(
    "--message-type",
    type=click.Choice(["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"], case_sensitive=False),
    help="The messages RocketMQ 5 clients may send to it (topic attribute message.type).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Update an existing topic even to fewer queues (consumers stop reading the rest).",
)
@click.option(
    "--broker",
    "broker_names",
    multiple=True,
    metavar="NAME",
    help="Only on this broker group (repeatable; default: every group).",
)
@admin_options
def topic_create(
    name: str,
    queues: int,
    read_queues: int | None,
    write_queues: int | None,
    perm: str,
    order: bool,
    force: bool,
    broker_names: tuple[str, ...],
    server: str,
    as_json: bool,
    message_type: str | None = None,
) -> None:
    """Create topic NAME (or update its queues and permission) on every broker group.

    Each group's master gets that many queues (--broker NAME: only those groups). An
    existing topic keeps its queues unless --force: fewer read queues hide the messages of
    the others from every consumer."""
    bits = {"rw": 6, "r": 4, "w": 2}[perm.lower()]
    with connect(server) as admin:
        before = _existing_topic(admin, name)
        if before is not None and not force:
            _refuse_shrink(
                admin, before, read_queues or queues, write_queues or queues, broker_names
            )
        info = admin.create_topic(
            name,
            queues,
            read_queue_nums=read_queues,
            write_queue_nums=write_queues,
            perm=bits,
            order=order,
            brokers=broker_names or None,
            message_type=None if message_type is None else message_type.upper(),
        )
    data = {
        "topic": info.topic,
        "read_queue_nums": info.read_queue_nums,
        "write_queue_nums": info.write_queue_nums,
        "perm": info.perm,
        "order": info.order,
        "brokers": list(info.brokers),
    }
    if message_type is not None:
        data["message_type"] = message_type.upper()
    if before is not None:
        data["before"] = {
            "read_queue_nums": before.read_queue_nums,
            "write_queue_nums": before.write_queue_nums,
            "perm": before.perm,
            "order": before.order,
        }
    if as_json:
        emit(True, data)
    else:
        was = (
            ""
            if before is None
            else f" (was {before.read_queue_nums} read / {before.write_queue_nums} write)"
        )
        click.echo(
            f"topic {info.topic}: {info.read_queue_nums} read / {info.write_queue_nums} write "
            f"queues{was}, perm {_perm(info.perm)}{', ordered' if info.order else ''}"
            f"{f', message type {message_type.upper()}' if message_type else ''}, "
            f"on {', '.join(info.brokers)}"
        )


def _existing_topic(admin: MQAdmin, name: str) -> TopicInfo | None:
    try:
        return admin.topic(name)
    except TopicNotExistError:
        return None


def _refuse_shrink(
    admin: MQAdmin, before: TopicInfo, read: int, write: int, brokers: tuple[str, ...] = ()
) -> None:
    """A click error when ``read``/``write`` queues are fewer than the topic has now on one
    of the broker groups the update goes to (``brokers``, or every group)."""
    for name, had_read, had_write in before.queue_nums:
        if brokers and name not in brokers:
            continue
        if read >= had_read and write >= had_write:
            continue
        where = f" on {name}" if len(before.queue_nums) > 1 else ""
        hidden = ""
        if read < had_read:
            stats = admin.topic_stats(before.topic).offset_table
            held = sum(
                o.max_offset - o.min_offset
                for mq, o in stats.items()
                if mq.broker_name == name and mq.queue_id >= read
            )
            hidden = (
                f"; consumers would stop reading queues {read}..{had_read - 1}{where}, "
                f"which hold {held} message(s)"
            )
        raise click.ClickException(
            f"topic {before.topic} exists with {had_read} read / {had_write} write queues"
            f"{where}; {read} read / {write} write is fewer{hidden}. Pass --force to shrink it "
            f"anyway"
        )


@topic.command("delete")
@click.argument("name")
@admin_options
def topic_delete(name: str, server: str, as_json: bool) -> None:
    """Delete topic NAME and the offsets of every group in it."""
    with connect(server) as admin:
        admin.delete_topic(name)
    if as_json:
        emit(True, {"topic": name, "deleted": True})
    else:
        click.echo(f"topic {name} deleted")


@topic.command("stats")
@click.argument("name")
@admin_options
def topic_stats(name: str, server: str, as_json: bool) -> None:
    """Each queue of topic NAME: offsets stored, message count, last store time."""
    with connect(server) as admin:
        stats = admin.topic_stats(name)
    rows: list[dict[str, Any]] = [
        {
            "topic": mq.topic,
            "broker_name": mq.broker_name,
            "queue_id": mq.queue_id,
            "min_offset": o.min_offset,
            "max_offset": o.max_offset,
            "messages": o.max_offset - o.min_offset,
            "last_update_timestamp": o.last_update_timestamp,
        }
        for mq, o in sorted(stats.offset_table.items())
    ]

    def table() -> Table:
        out = Table(title=f"topic {name}")
        for col in ("broker", "queue", "min offset", "max offset", "messages", "last stored"):
            out.add_column(col, no_wrap=True, justify="left" if col == "broker" else "right")
        for r in rows:
            out.add_row(
                str(r["broker_name"]),
                str(r["queue_id"]),
                str(r["min_offset"]),
                str(r["max_offset"]),
                str(r["messages"]),
                format_time(int(r["last_update_timestamp"])),
            )
        out.add_section()
        total = sum(int(r["messages"]) for r in rows)
        out.add_row("total", "", "", "", str(total), "")
        return out

    emit(as_json, rows, table)


# -- mqcore group -------------------------------------------------------------------------------


@click.group()
def group() -> None:
    """Consumer groups (of every broker group)."""


@group.command("list")
@admin_options
def group_list(server: str, as_json: bool) -> None:
    """Every consumer group the server knows: members online, subscriptions, total lag."""
    rows: list[dict[str, Any]] = []
    with connect(server) as admin:
        for name in admin.groups():
            conns = admin.connections(name)
            stats = admin.consume_stats(name)
            rows.append(
                {
                    "group": name,
                    "clients": [c.client_id for c in conns.connection_set] if conns else [],
                    "message_model": conns.message_model if conns else None,
                    "subscriptions": sorted(conns.subscription_table) if conns else [],
                    "lag": stats.total_lag(),
                }
            )

    def table() -> Table:
        out = Table(title=f"consumer groups on {server}")
        for col in ("group", "online", "model", "subscriptions", "lag"):
            out.add_column(col, no_wrap=True)
        for r in rows:
            out.add_row(
                str(r["group"]),
                str(len(r["clients"])),
                str(r["message_model"] or "-"),
                ", ".join(r["subscriptions"]) or "-",
                str(r["lag"]),
            )
        return out

    emit(as_json, rows, table)


# -- mqcore lag ---------------------------------------------------------------------------------


@click.command()
@click.option("--group", "group_name", required=True, help="The consumer group.")
@click.option("--topic", "topic_name", help="Only this topic (default: every topic of the group).")
@admin_options
def lag(group_name: str, topic_name: str | None, server: str, as_json: bool) -> None:
    """A group's progress per queue: broker offset, consumer offset, lag and owner client.

    The owner is the member consuming the queue now, as each live member reports it."""
    with connect(server) as admin:
        rows = admin.lag(group_name, topic_name)
    data = {
        "group": group_name,
        "total_lag": sum(r.lag for r in rows),
        "queues": [
            {
                "topic": r.queue.topic,
                "broker_name": r.queue.broker_name,
                "queue_id": r.queue.queue_id,
                "broker_offset": r.broker_offset,
                "consumer_offset": r.consumer_offset,
                "lag": r.lag,
                "owner": r.owner,
                "last_timestamp": r.last_timestamp,
            }
            for r in rows
        ],
    }

    def table() -> Table:
        out = Table(title=f"group {group_name}")
        columns = ("topic", "broker", "queue", "broker offset", "consumer offset", "lag")
        for col in (*columns, "owner", "last consumed"):
            out.add_column(col, no_wrap=True)
        for r in rows:
            out.add_row(
                r.queue.topic,
                r.queue.broker_name,
                str(r.queue.queue_id),
                str(r.broker_offset),
                str(r.consumer_offset),
                str(r.lag),
                r.owner or "-",
                format_time(r.last_timestamp),
            )
        out.add_section()
        out.add_row("total", "", "", "", "", str(data["total_lag"]), "", "")
        return out

    emit(as_json, data, table)


# -- mqcore offset ------------------------------------------------------------------------------


@click.group()
def offset() -> None:
    """Consumer offsets (on every broker group of a topic)."""


@offset.command("reset")
@click.option("--group", "group_name", required=True, help="The consumer group.")
@click.option("--topic", "topic_name", required=True, help="The topic.")
@click.option(
    "--timestamp",
    required=True,
    help="now, -10m, ms since the epoch, 2026-01-31T12:00:00 or 2026-01-31#12:00:00:000.",
)
@click.option(
    "--force/--no-force",
    default=True,
    show_default=True,
    help="Move offsets forward too (--no-force: only back).",
)
@admin_options
def offset_reset(
    group_name: str, topic_name: str, timestamp: str, force: bool, server: str, as_json: bool
) -> None:
    """Move a group's offsets in a topic to the first message stored at or after a time.

    Running members of the group drop what they hold of the topic and consume from there."""
    when = parse_timestamp(timestamp)
    with connect(server) as admin:
        offsets = admin.reset_offset(group_name, topic_name, when, force=force)
    rows = [
        {
            "topic": mq.topic,
            "broker_name": mq.broker_name,
            "queue_id": mq.queue_id,
            "offset": off,
        }
        for mq, off in sorted(offsets.items())
    ]
    data = {"group": group_name, "topic": topic_name, "timestamp": when, "queues": rows}

    def table() -> Table:
        out = Table(title=f"group {group_name} in {topic_name} reset to {format_time(when)}")
        for col in ("broker", "queue", "new offset"):
            out.add_column(col, no_wrap=True)
        for r in rows:
            out.add_row(str(r["broker_name"]), str(r["queue_id"]), str(r["offset"]))
        return out

    emit(as_json, data, table)
