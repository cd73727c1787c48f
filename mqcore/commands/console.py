"""``mqcore send`` and ``mqcore consume``: a console producer and consumer, so a server can be
checked by hand, or from a shell script, without writing Python (as Kafka's console tools and
RocketMQ's ``mqadmin sendMessage`` / ``consumeMessage``).

Both start from ``--server`` (a name server, or a single ``mqcore serve``) as the admin
commands do. With ``--json``, messages are JSON objects, one a line, their bodies base64 both
ways: what ``consume --json`` prints, ``send --json`` reads, so binary bodies round-trip.
Ctrl-C stops either cleanly, with exit code 130; a reader gone (``| head -1``) with 141.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import click

from mqcore.commands.admin import DEFAULT_SERVER, cli_errors, parse_timestamp
from mqcore.commands.security import client_security, security_options
from mqcore.message import (
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    PullStatus,
)
from mqcore.validation import SYSTEM_PROPERTY_NAMES

__all__ = ["consume", "message_line", "send"]

PRODUCER_GROUP = "mqcore-console-producer"
#: The group a consumer without --group pulls as: RocketMQ's tools group (mqadmin's own); it
#: commits nothing, so it leaves no offsets behind.
READER_GROUP = "TOOLS_CONSUMER"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
_IDLE_WAIT_S = 0.2  # between rounds of pulls that found nothing
_REFRESH_S = 10.0  # how often a reader looks for new queues of the topic


def _server_option(func: Any) -> Any:
    func = security_options(func)
    return click.option(
        "--server",
        envvar="MQCORE_SERVER",
        default=DEFAULT_SERVER,
        show_default=True,
        metavar="HOST:PORT",
        help="Name server: `mqcore namesrv`, or a single `mqcore serve` (env MQCORE_SERVER).",
    )(func)


def _user_properties(props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if k not in SYSTEM_PROPERTY_NAMES}


def message_line(msg: MessageExt) -> dict[str, Any]:
    """A consumed message as ``consume --json`` prints it (and ``send --json`` reads it): its
    user properties only, the body in base64."""
    return {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "tags": msg.tags,
        "keys": msg.keys,
        "properties": _user_properties(msg.properties),
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "store_host": msg.store_host,
        "reconsume_times": msg.reconsume_times,
        "body_encoding": "base64",
        "body": base64.b64encode(msg.body).decode("ascii"),
    }


# -- mqcore send ----------------------------------------------------------------------------------


def _properties(pairs: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--property")
        out[name] = value
    return out


def _json_message(line: str, number: int, defaults: dict[str, Any]) -> dict[str, Any]:
    """The fields of the message on JSON input line ``number`` (over ``defaults``)."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise click.ClickException(f"stdin line {number} is not JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("body", ""), str):
        raise click.ClickException(
            f'stdin line {number} is not a message: give {{"body": "<base64>", "tags": ..., '
            f'"keys": ..., "properties": {{...}}}}'
        )
    encoding = obj.get("body_encoding") or "base64"
    text = obj.get("body", "")
    if encoding == "base64":
        try:
            body = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise click.ClickException(
                f'stdin line {number}: body is not base64 (set "body_encoding": "utf-8" '
                f"for a text body)"
            ) from None
    elif encoding == "utf-8":
        body = text.encode("utf-8")
    else:
        raise click.ClickException(
            f"stdin line {number}: body_encoding {encoding!r} is neither base64 nor utf-8"
        )
    keys = obj.get("keys", defaults["keys"])
    if isinstance(keys, list):
        keys = " ".join(str(k) for k in keys)
    props = dict(defaults["properties"])
    props.update({str(k): str(v) for k, v in (obj.get("properties") or {}).items()})
    return {"body": body, "tags": obj.get("tags", defaults["tags"]), "keys": keys or None,
            "properties": props}  # fmt: skip


def _stdin_messages(as_json: bool, defaults: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stream = sys.stdin.buffer
    for number, raw in enumerate(stream, 1):
        line = raw.rstrip(b"\n").rstrip(b"\r")
        if not line.strip():
            continue  # a blank line is no message (a body must not be empty)
        if as_json:
            yield _json_message(line.decode("utf-8"), number, defaults)
        else:
            yield {**defaults, "body": line}


def _result_line(topic: str, result: Any) -> dict[str, Any]:
    mq: MessageQueue = result.message_queue
    return {
        "status": result.send_status.name,
        "msg_id": result.msg_id,
        "offset_msg_id": result.offset_msg_id,
        "topic": topic,
        "broker_name": mq.broker_name,
        "queue_id": mq.queue_id,
        "queue_offset": result.queue_offset,
    }


@click.command()
@click.option("--topic", required=True, help="The topic to send to.")
@click.option("--tag", help="The messages' tag (for TAG filters).")
@click.option(
    "--key", "keys", multiple=True, help="A key the message is indexed under (repeatable)."
)
@click.option(
    "--property", "properties", multiple=True, metavar="NAME=VALUE",
    help="A user property (repeatable; for SQL92 filters).",
)  # fmt: skip
@click.option("--body", help="Send one message with this body (UTF-8 text).")
@click.option("--body-base64", help="Send one message with this body, base64-encoded.")
@_server_option
@click.option(
    "--json", "as_json", is_flag=True,
    help="Read messages as JSON lines (body base64; what `consume --json` prints) and print "
    "each result as a JSON line.",
)  # fmt: skip
def send(
    topic: str,
    tag: str | None,
    keys: tuple[str, ...],
    properties: tuple[str, ...],
    body: str | None,
    body_base64: str | None,
    server: str,
    as_json: bool,
) -> None:
    """Send messages to a topic: one (--body / --body-base64), or one per line of stdin.

    Each line of stdin is a message body (blank lines are skipped); with --json, each line is
    a JSON object with "body" (base64, or text with "body_encoding": "utf-8"), and optional
    "tags", "keys" and "properties" that win over --tag, --key and --property. Prints each
    message's id and where it was stored.
    """
    from mqcore.client.producer import Producer

    if body is not None and body_base64 is not None:
        raise click.UsageError("give --body or --body-base64, not both")
    defaults: dict[str, Any] = {
        "tags": tag,
        "keys": " ".join(keys) or None,
        "properties": _properties(properties),
    }
    messages: Iterable[dict[str, Any]]
    if body is not None:
        messages = [{**defaults, "body": body.encode("utf-8")}]
    elif body_base64 is not None:
        try:
            raw = base64.b64decode(body_base64, validate=True)
        except (binascii.Error, ValueError):
            raise click.BadParameter("not base64", param_hint="--body-base64") from None
        messages = [{**defaults, "body": raw}]
    else:
        if sys.stdin is not None and sys.stdin.isatty():
            click.echo("type one message a line; Ctrl-D to end", err=True)
        messages = _stdin_messages(as_json, defaults)
    # Ctrl-C (KeyboardInterrupt) is the mqcore command group's: status 130, one line.
    with (
        cli_errors(server),
        Producer(PRODUCER_GROUP, namesrv_addr=server, **client_security()) as p,
    ):
        for fields in messages:
            result = p.send(Message(topic=topic, **fields))
            line = _result_line(topic, result)
            if as_json:
                click.echo(json.dumps(line))
            else:
                click.echo(
                    f"{line['status']} {line['msg_id']} {line['broker_name']} "
                    f"queue {line['queue_id']} offset {line['queue_offset']}"
                )


# -- mqcore consume -------------------------------------------------------------------------------


class _Printer:
    """Prints consumed messages (from any thread) and counts them against ``--max``."""

    def __init__(self, as_json: bool, limit: int | None) -> None:
        self.as_json = as_json
        self.limit = limit
        self.count = 0
        self.done = threading.Event()
        self.interrupted = threading.Event()
        self.broken_pipe = False
        self._lock = threading.Lock()
        self._out = sys.stdout.buffer

    def take(self, msg: MessageExt) -> bool:
        """Print ``msg``; False (nothing printed) once ``--max`` messages were, or Ctrl-C
        was pressed."""
        with self._lock:
            if self.done.is_set():
                return False
            if self.as_json:
                data = (json.dumps(message_line(msg), ensure_ascii=False) + "\n").encode()
            else:
                data = bytes(msg.body) + b"\n"  # the body as is, as Kafka's console consumer
            try:
                self._out.write(data)
                self._out.flush()
            except BrokenPipeError:  # the reader is gone (perhaps in a consumer's thread)
                self.broken_pipe = True
                self.done.set()
                return False
            self.count += 1
            if self.limit is not None and self.count >= self.limit:
                self.done.set()
            return True


def _start_offset(consumer: Any, mq: MessageQueue, start: str | int) -> int:
    if start == "first":
        return int(consumer.min_offset(mq))
    if start == "last":
        return int(consumer.max_offset(mq))
    return int(consumer.search_offset(mq, int(start)))


def _read(
    server: str,
    topic: str,
    expression: str,
    expression_type: str,
    start: str | int,
    printer: _Printer,
    idle_timeout: float | None,
) -> None:
    """Pull every queue of ``topic`` in turn, without a group: nothing is committed."""
    from mqcore.client.pull_consumer import PullConsumer

    # Broadcasting: a clustering member would get the group a retry topic on the brokers,
    # which would keep it listed for good; its offset store is never written to.
    reader = PullConsumer(
        READER_GROUP,
        namesrv_addr=server,
        message_model=MessageModel.BROADCASTING,
        offset_store="broker",
        **client_security(),
    )
    with reader as consumer:
        offsets: dict[MessageQueue, int] = {}
        refreshed = 0.0
        last_message = time.monotonic()
        while not printer.done.is_set():
            now = time.monotonic()
            if now - refreshed >= _REFRESH_S:
                known = bool(offsets)
                for mq in sorted(consumer.fetch_subscribe_message_queues(topic)):
                    if mq not in offsets:  # a queue that appears later is read from its start
                        offsets[mq] = _start_offset(consumer, mq, start if not known else "first")
                refreshed = now
            found = False
            for mq, offset in offsets.items():
                if printer.done.is_set():
                    return
                result = consumer.pull(mq, expression, offset, 32, expression_type=expression_type)
                if result.pull_status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG,
                                          PullStatus.OFFSET_ILLEGAL):  # fmt: skip
                    offsets[mq] = result.next_begin_offset
                for msg in result.msg_found_list:
                    found = True
                    if not printer.take(msg):
                        return
            if found:
                last_message = time.monotonic()
            elif idle_timeout is not None and time.monotonic() - last_message >= idle_timeout:
                return
            else:
                printer.done.wait(_IDLE_WAIT_S)


def _place_new_group(server: str, topic: str, group: str, start: str | int) -> None:
    """A group no broker knows yet starts at ``--from``: its offsets are committed there
    first. (Without them a broker answers 0, a queue's start, for a queue whose first message
    is still stored, as RocketMQ's does, whatever the consumer's consumeFromWhere.)"""
    from mqcore.client.admin import MQAdmin

    with MQAdmin(server, **client_security()) as admin:
        if group in admin.groups():
            return  # it goes on from its committed offsets
        transport = admin.transport
        for mq in transport.get_route_info_by_topic(topic).read_queues():
            if start == "first":
                offset = transport.get_min_offset(mq)
            elif start == "last":
                offset = transport.get_max_offset(mq)
            else:
                offset = transport.search_offset_by_timestamp(mq, int(start))
            transport.update_consumer_offset(group, mq, offset)


def _consume_as_group(
    server: str,
    topic: str,
    group: str,
    expression: str,
    expression_type: str,
    start: str | int,
    printer: _Printer,
    idle_timeout: float | None,
) -> None:
    """A member of ``group``: it shares the queues with the group's other members and
    commits what it printed."""
    from mqcore.client.push_consumer import PushConsumer
    from mqcore.message import ConsumeConcurrentlyStatus

    where = {
        "first": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        "last": ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    }.get(str(start), ConsumeFromWhere.CONSUME_FROM_TIMESTAMP)
    stamp = None
    if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        stamp = datetime.fromtimestamp(int(start) / 1000).strftime("%Y%m%d%H%M%S")
    _place_new_group(server, topic, group, start)
    last_message = [time.monotonic()]

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        for msg in msgs:
            if not printer.take(msg):
                # Past --max: not consumed here, so the group gets it again (its retry topic).
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
        last_message[0] = time.monotonic()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group,
        namesrv_addr=server,
        consume_from_where=where,
        consume_timestamp=stamp,
        consume_thread_min=1,
        consume_thread_max=1,
        pull_batch_size=min(32, printer.limit or 32),
        **client_security(),
    )
    consumer.subscribe(topic, expression, expression_type=expression_type)
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        while not printer.done.wait(_IDLE_WAIT_S):
            idle = time.monotonic() - last_message[0]
            if idle_timeout is not None and idle >= idle_timeout:
                return
    finally:
        consumer.shutdown()


@click.command()
@click.option("--topic", required=True, help="The topic to consume.")
@click.option(
    "--group",
    help="Consume as a member of this group, committing its offsets (default: read every "
    "queue without a group, committing nothing).",
)
@click.option(
    "--filter", "expression", default="*", show_default=True,
    help="Which messages: a TAG expression (TagA || TagB), or SQL92 with --filter-type.",
)  # fmt: skip
@click.option(
    "--filter-type",
    type=click.Choice(["TAG", "SQL92"], case_sensitive=False),
    default="TAG",
    show_default=True,
    help="The language of --filter.",
)
@click.option(
    "--from", "start", default="last", show_default=True,
    help="Where to start: first, last (only new messages), or a time (now, -10m, ms since the "
    "epoch, 2026-01-31T12:00:00). With --group: for a group the brokers do not know yet.",
)  # fmt: skip
@click.option("--max", "max_messages", type=click.IntRange(min=1), help="Stop after N messages.")
@click.option(
    "--timeout", "idle_timeout", type=click.FloatRange(min=0),
    help="Stop when no message came for this many seconds (default: wait for ever).",
)  # fmt: skip
@_server_option
@click.option(
    "--json", "as_json", is_flag=True,
    help="Print each message as a JSON line (body base64, tags, keys, properties, ids).",
)  # fmt: skip
def consume(
    topic: str,
    group: str | None,
    expression: str,
    filter_type: str,
    start: str,
    max_messages: int | None,
    idle_timeout: float | None,
    server: str,
    as_json: bool,
) -> None:
    """Print the messages of a topic as they come: each body on a line, or with --json a
    JSON object a line. Ctrl-C (or --max, --timeout) stops; the count goes to stderr."""
    where: str | int = start.lower() if start.lower() in ("first", "last") else ""
    if not where:
        where = parse_timestamp(start)
    printer = _Printer(as_json, max_messages)
    args = (expression, filter_type.upper(), where, printer, idle_timeout)
    try:
        with _stop_on_ctrl_c(printer), cli_errors(server):
            if group is None:
                _read(server, topic, *args)
            else:
                _consume_as_group(server, topic, group, *args)
    finally:
        click.echo(f"consumed {printer.count} messages", err=True)
    if printer.broken_pipe:
        raise BrokenPipeError  # `mqcore consume | head -1`: the command group ends it quietly
    if printer.interrupted.is_set():
        click.echo("Aborted!", err=True)  # as the mqcore command group says it
        raise click.exceptions.Exit(EXIT_INTERRUPTED)


@contextlib.contextmanager
def _stop_on_ctrl_c(printer: _Printer) -> Iterator[None]:
    """Ctrl-C ends the consumer's loop between two messages (rather than raising wherever
    the main thread is, mid-print or mid-request), and the consumer shuts down as usual."""

    def stop(signum: int, frame: Any) -> None:
        printer.interrupted.set()
        printer.done.set()

    try:
        previous = signal.signal(signal.SIGINT, stop)
    except ValueError:  # not the main thread: Ctrl-C cannot reach it here anyway
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
