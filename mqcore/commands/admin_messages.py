"""Admin commands about messages: ``mqcore message`` (by id or key) and ``mqcore dlq``.

Same manners as :mod:`mqcore.commands.admin`: ``--server``, ``--json``, one-line errors.
"""

from __future__ import annotations

import base64
from typing import Any

import click
from rich.table import Table

from mqcore.commands.admin import admin_options, connect, emit, format_time
from mqcore.message import MessageExt

__all__ = ["dlq", "message", "message_json"]

_PREVIEW = 60


def _body(msg: MessageExt) -> tuple[str, str]:
    body = msg.body
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


def message_json(msg: MessageExt) -> dict[str, Any]:
    """A stored message as a JSON object (the body as text, or base64 when it is not UTF-8)."""
    body, encoding = _body(msg)
    return {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id,
        "tags": msg.tags,
        "keys": msg.keys,
        "born_timestamp": msg.born_timestamp,
        "born_host": msg.born_host,
        "store_timestamp": msg.store_timestamp,
        "store_host": msg.store_host,
        "reconsume_times": msg.reconsume_times,
        "properties": msg.properties,
        "body_size": len(msg.body),
        "body_encoding": encoding,
        "body": body,
    }


def _message_table(data: dict[str, Any]) -> Table:
    out = Table(title=f"message {data['msg_id']}", show_header=False)
    out.add_column("field", no_wrap=True, style="bold")
    out.add_column("value")
    for name, value in data.items():
        if name in ("born_timestamp", "store_timestamp"):
            value = f"{format_time(int(value))} ({value})"
        elif name == "properties":
            value = ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "-"
        elif value is None:
            value = "-"
        out.add_row(name, str(value))
    return out


@click.command()
@click.option(
    "--id", "msg_id", help="A message id: the unique id a send returned, or an offset id."
)
@click.option("--key", help="A message key (needs --topic).")
@click.option("--topic", "topic_name", help="The topic to look in (needed with --key).")
@click.option("--max", "max_num", default=64, show_default=True, help="At most this many (--key).")
@admin_options
def message(
    msg_id: str | None,
    key: str | None,
    topic_name: str | None,
    max_num: int,
    server: str,
    as_json: bool,
) -> None:
    """Show messages by id (--id ID [--topic T]) or by key (--key K --topic T).

    A unique id finds the message and its retry and dead-letter copies (in every topic, or
    in --topic only)."""
    if (msg_id is None) == (key is None):
        raise click.UsageError("give either --id ID or --key KEY --topic TOPIC")
    if key is not None and not topic_name:
        raise click.UsageError("--key needs --topic TOPIC")
    with connect(server) as admin:
        if msg_id is not None:
            found = admin.view_message(msg_id, topic_name)
            what = f"with id {msg_id}"
        else:
            assert key is not None and topic_name is not None
            admin.topic(topic_name)
            found = admin.query_by_key(topic_name, key, max_num)
            what = f"with key {key!r} in topic {topic_name}"
    if not found:
        where = f" in topic {topic_name}" if topic_name and msg_id else ""
        raise click.ClickException(f"no message {what}{where}")
    rows = [message_json(m) for m in found]
    if as_json:
        emit(True, rows)
        return
    for row in rows:
        emit(False, row, _message_table(row))


# -- mqcore dlq -------------------------------------------------------------------------------


@click.group()
def dlq() -> None:
    """A consumer group's dead letters (%DLQ%<group>): list them, send them back."""


@dlq.command("list")
@click.option("--group", "group_name", required=True, help="The consumer group.")
@click.option("--all", "include_resent", is_flag=True, help="Also the ones already resent.")
@click.option("--limit", default=1000, show_default=True, help="At most this many.")
@admin_options
def dlq_list(group_name: str, include_resent: bool, limit: int, server: str, as_json: bool) -> None:
    """The messages in the group's dead-letter queue (not yet resent, unless --all)."""
    with connect(server) as admin:
        found = list(admin.dead_letters(group_name, include_resent=include_resent, limit=limit))
    rows = []
    for m in found:
        row = message_json(m)
        row["original_topic"] = m.get_property("RETRY_TOPIC")
        row["original_msg_id"] = m.get_property("ORIGIN_MESSAGE_ID")
        rows.append(row)

    def table() -> Table:
        out = Table(title=f"dead letters of group {group_name}: {len(rows)}")
        for col in ("offset", "msg id", "original topic", "tags", "keys", "stored", "body"):
            out.add_column(col, no_wrap=col != "body")
        for r in rows:
            body = str(r["body"])
            out.add_row(
                str(r["queue_offset"]),
                str(r["msg_id"]),
                str(r["original_topic"] or "-"),
                str(r["tags"] or "-"),
                str(r["keys"] or "-"),
                format_time(int(r["store_timestamp"])),
                body if len(body) <= _PREVIEW else body[: _PREVIEW - 1] + "…",
            )
        return out

    emit(as_json, rows, table)


@dlq.command("resend")
@click.option("--group", "group_name", required=True, help="The consumer group.")
@admin_options
def dlq_resend(group_name: str, server: str, as_json: bool) -> None:
    """Send the group's dead letters back to the group alone, to be consumed again.

    Each goes to the group's retry topic %RETRY%<group> with its body, tags, keys, user
    properties and unique id, and reaches the group's members under its original topic, with
    a fresh count of retries; other groups of that topic do not get it again. The group's
    offset in its dead-letter queue moves past it, so running this again resends only newer
    dead letters."""
    with connect(server) as admin:
        result = admin.resend_dead_letters(group_name)
    data = {
        "group": group_name,
        "resent": result.resent,
        "by_topic": result.by_topic,
        "skipped": result.skipped,
    }
    if as_json:
        emit(True, data)
        return
    where = ", ".join(f"{n} of topic {t}" for t, n in sorted(result.by_topic.items()))
    click.echo(
        f"resent {result.resent} dead letters of group {group_name}"
        + (f" through %RETRY%{group_name} ({where})" if where else "")
    )
    if result.skipped:
        click.echo(f"skipped {result.skipped} without an original topic")
