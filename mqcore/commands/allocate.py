"""``mqcore allocate``: show which queues each member of a consumer group would own.

The plan is computed as a rebalance computes it: the queues and consumer ids are sorted the
way RocketMQ sorts them, then every member asks the strategy for its own share. Printed as a
rich table, or as one JSON object with ``--json``.
"""

from __future__ import annotations

import json
import math
import string
from collections import Counter
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mqcore.allocation import sorted_cids, sorted_queues
from mqcore.errors import MQError
from mqcore.kernel import Kernel
from mqcore.message import MessageQueue

__all__ = ["allocate", "broker_names", "build_group", "compact_queues", "compute_plan"]

#: Strategies whose queues or consumers carry a machine room (``room@name``).
_ROOM_STRATEGIES = {"machine_room", "machine_room_nearby"}

#: The plan asks the strategy once per consumer, as each member of a group does, and a call
#: looks at every queue and consumer: consumers x (queues + consumers) steps. Larger plans are
#: refused, so that the command answers in seconds (5,000 consumers of 8 queues is 25 million).
MAX_PLAN_STEPS = 50_000_000


def max_consumers(queue_count: int) -> int:
    """The most consumers a plan of ``queue_count`` queues may have (see MAX_PLAN_STEPS)."""
    n = math.isqrt(queue_count * queue_count + 4 * MAX_PLAN_STEPS) - queue_count
    return max(1, n // 2)


def broker_names(count: int) -> list[str]:
    """``broker-a``, ``broker-b``... ``broker-z``, ``broker-aa``... (RocketMQ's usual names)."""
    names = []
    for i in range(count):
        suffix = ""
        n = i + 1
        while n:
            n, rem = divmod(n - 1, 26)
            suffix = string.ascii_lowercase[rem] + suffix
        names.append(f"broker-{suffix}")
    return names


def _split_list(value: str | None) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()] if value else []


def build_group(
    *,
    topic: str,
    queues: int | None,
    queues_per_broker: int | None,
    brokers: int,
    consumers: int,
    rooms: list[str],
    consumer_rooms: list[str],
) -> tuple[list[MessageQueue], list[str]]:
    """The topic's queues and the group's consumer ids, unsorted.

    ``queues`` is the total, spread over the brokers (the first brokers take the remainder);
    ``queues_per_broker`` puts that many on each. With rooms, broker ``i`` and consumer ``i``
    go to the rooms in turn and are named ``room@broker-a`` and ``room@c1``.
    """
    names = broker_names(brokers)
    if rooms:
        names = [f"{rooms[i % len(rooms)]}@{name}" for i, name in enumerate(names)]
    mq_all = []
    for i, name in enumerate(names):
        if queues_per_broker is not None:
            count = queues_per_broker
        else:
            count = (queues or 0) // brokers + (1 if i < (queues or 0) % brokers else 0)
        mq_all += [MessageQueue(topic, name, q) for q in range(count)]
    width = len(str(consumers))
    # Zero-padded so that the sorted order (Java string order) is the numeric order.
    cid_all = [f"c{i:0{width}d}" for i in range(1, consumers + 1)]
    if consumer_rooms:
        cid_all = [f"{consumer_rooms[i % len(consumer_rooms)]}@{c}" for i, c in enumerate(cid_all)]
    return mq_all, cid_all


def compute_plan(
    strategy: Any, group: str, mq_all: list[MessageQueue], cid_all: list[str]
) -> tuple[list[MessageQueue], list[str], dict[str, list[MessageQueue]]]:
    """Sort as the rebalance does, then ask the strategy for every member's share."""
    mqs, cids = sorted_queues(mq_all), sorted_cids(cid_all)
    return mqs, cids, {cid: list(strategy.allocate(group, cid, mqs, cids)) for cid in cids}


def compact_queues(share: list[MessageQueue], topic: str | None = None) -> str:
    """``broker-a:0-2, broker-b:0`` for a share, keeping its order (runs of ids joined).

    Queues of a topic other than ``topic`` are prefixed with theirs (``T/broker-a:0``).
    """
    parts: list[str] = []
    run: list[MessageQueue] = []

    def flush() -> None:
        if run:
            first, last = run[0], run[-1]
            ids = f"{first.queue_id}" if len(run) == 1 else f"{first.queue_id}-{last.queue_id}"
            prefix = "" if first.topic == topic else f"{first.topic}/"
            parts.append(f"{prefix}{first.broker_name}:{ids}")
            run.clear()

    for mq in share:
        if run and (
            mq.topic != run[-1].topic
            or mq.broker_name != run[-1].broker_name
            or mq.queue_id != run[-1].queue_id + 1
        ):
            flush()
        run.append(mq)
    flush()
    return ", ".join(parts)


def _parse_option(raw: str) -> tuple[str, Any]:
    key, sep, value = raw.partition("=")
    if not sep or not key.strip():
        raise click.BadParameter(f"{raw!r} is not KEY=VALUE", param_hint="--option")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def _parse_queue(raw: str, topic: str) -> MessageQueue:
    broker, sep, qid = raw.rpartition(":")
    if not sep or not broker or not qid.isdigit():
        raise click.BadParameter(f"{raw!r} is not BROKER:QUEUE_ID", param_hint="--queue")
    return MessageQueue(topic, broker, int(qid))


def _room_of(name: str) -> str:
    return name.split("@", 1)[0] if "@" in name else ""


def _strategy_options(
    kernel: Kernel,
    name: str,
    *,
    rooms: list[str],
    consumer_idcs: list[str],
    inner: str,
    virtual_nodes: int | None,
    config_queues: list[MessageQueue],
    extra: dict[str, Any],
) -> dict[str, Any]:
    key = name.strip().lower()
    options: dict[str, Any] = {}
    if key in _ROOM_STRATEGIES and not rooms:
        raise click.UsageError(
            f"strategy {name!r} works with machine rooms: give --rooms ROOM1,ROOM2 "
            f"(brokers and consumers are then named ROOM@NAME)"
        )
    if key == "machine_room":
        options["consumer_idcs"] = set(consumer_idcs or rooms)
    elif key == "machine_room_nearby":
        options["broker_room"] = lambda mq: _room_of(mq.broker_name)
        options["consumer_room"] = _room_of
        inner_options: dict[str, Any] = {}
        if inner.strip().lower() == "consistent_hash" and virtual_nodes is not None:
            inner_options["virtual_nodes"] = virtual_nodes
        # Built by the kernel, so a plugin's strategy can be wrapped too.
        options["strategy"] = kernel.allocator(inner, **inner_options)
    elif key == "consistent_hash" and virtual_nodes is not None:
        options["virtual_nodes"] = virtual_nodes
    elif key == "config":
        options["message_queues"] = config_queues
    options.update(extra)
    return options


@click.command("allocate")
@click.option("--strategy", "-s", default="avg", show_default=True, help="Allocator name.")
@click.option("--topic", default="TopicTest", show_default=True)
@click.option("--group", default="please_rename_unique_group_name", show_default=True)
@click.option(
    "--queues",
    "-q",
    type=click.IntRange(min=1),
    default=None,
    help="Total queues, spread over the brokers (8 on 2 brokers: 4 each). Default 8.",
)
@click.option(
    "--queues-per-broker",
    type=click.IntRange(min=1),
    default=None,
    help="Queues on each broker (a RocketMQ topic's queue number); instead of --queues.",
)
@click.option("--brokers", "-b", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--consumers", "-c", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--rooms",
    default=None,
    help="Machine rooms, comma-separated; brokers and consumers go to them in turn.",
)
@click.option(
    "--consumer-rooms",
    default=None,
    help="Rooms of the consumers, in turn (machine_room_nearby defaults to --rooms); leave a "
    "room out to see its queues shared by everyone.",
)
@click.option(
    "--consumer-idcs",
    default=None,
    help="machine_room: rooms whose queues the group serves (default: all --rooms).",
)
@click.option(
    "--inner-strategy",
    default="avg",
    show_default=True,
    help="machine_room_nearby: the strategy used inside each room.",
)
@click.option(
    "--virtual-nodes",
    type=int,
    default=None,
    help="consistent_hash: virtual nodes per consumer (RocketMQ's default: 10).",
)
@click.option(
    "--queue",
    "config_queue",
    multiple=True,
    metavar="BROKER:ID",
    help="config: a queue of the fixed list (repeatable).",
)
@click.option(
    "--option",
    "-o",
    "extra",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra option for the strategy (VALUE read as JSON when it parses); repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def allocate(
    strategy: str,
    topic: str,
    group: str,
    queues: int | None,
    queues_per_broker: int | None,
    brokers: int,
    consumers: int,
    rooms: str | None,
    consumer_rooms: str | None,
    consumer_idcs: str | None,
    inner_strategy: str,
    virtual_nodes: int | None,
    config_queue: tuple[str, ...],
    extra: tuple[str, ...],
    as_json: bool,
) -> None:
    """Show the queues each consumer of a group would own under an allocation strategy.

    Queues and consumer ids are sorted as RocketMQ's rebalance sorts them, then each member
    asks the strategy for its share, as every consumer of a group does on its own.

    \b
    mqcore allocate --strategy avg --queues 8 --brokers 2 --consumers 3
    mqcore allocate -s machine_room_nearby --rooms hz,sh --consumer-rooms hz -c 4
    """
    if queues is not None and queues_per_broker is not None:
        raise click.UsageError("give --queues or --queues-per-broker, not both")
    if queues is None and queues_per_broker is None:
        queues = 8
    room_list = _split_list(rooms)
    # Only machine_room_nearby looks at consumers' rooms; machine_room uses --consumer-idcs.
    consumer_room_list = _split_list(consumer_rooms) or (
        room_list if strategy.strip().lower() == "machine_room_nearby" else []
    )
    queue_count = queues_per_broker * brokers if queues_per_broker is not None else queues or 0
    if consumers * (consumers + queue_count) > MAX_PLAN_STEPS:
        raise click.ClickException(
            f"--consumers {consumers} with {queue_count} queues is too large a plan: it takes "
            f"one strategy call per consumer, each over all queues and consumers; give at most "
            f"{max_consumers(queue_count):,} consumers with {queue_count} queues"
        )
    mq_all, cid_all = build_group(
        topic=topic,
        queues=queues,
        queues_per_broker=queues_per_broker,
        brokers=brokers,
        consumers=consumers,
        rooms=room_list,
        consumer_rooms=consumer_room_list,
    )
    config_queues = [_parse_queue(q, topic) for q in config_queue]
    extra_options = dict(_parse_option(raw) for raw in extra)
    try:
        kernel = Kernel()
        options = _strategy_options(
            kernel,
            strategy,
            rooms=room_list,
            consumer_idcs=_split_list(consumer_idcs),
            inner=inner_strategy,
            virtual_nodes=virtual_nodes,
            config_queues=config_queues,
            extra=extra_options,
        )
        chosen = kernel.allocator(strategy, **options)
        mqs, cids, plan = compute_plan(chosen, group, mq_all, cid_all)
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc

    counts = Counter(mq for share in plan.values() for mq in share)
    unassigned = [mq for mq in mqs if counts[mq] == 0]
    repeated = [mq for mq in mqs if counts[mq] > 1]
    label = getattr(chosen, "rocketmq_name", None) or getattr(chosen, "name", strategy)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "strategy": getattr(chosen, "name", strategy),
                    "rocketmq_name": label,
                    "topic": topic,
                    "queues": [str(mq) for mq in mqs],
                    "consumers": cids,
                    "plan": {
                        cid: [[mq.topic, mq.broker_name, mq.queue_id] for mq in share]
                        for cid, share in plan.items()
                    },
                    "unassigned": [str(mq) for mq in unassigned],
                    "assigned_more_than_once": [str(mq) for mq in repeated],
                }
            )
        )
        return

    table = Table()
    table.add_column("consumer")
    if consumer_room_list:
        table.add_column("room")
    table.add_column("count", justify="right")
    table.add_column("queues (broker:ids)", overflow="fold")
    for cid in cids:
        row = [cid]
        if consumer_room_list:
            row.append(_room_of(cid))
        row += [str(len(plan[cid])), compact_queues(plan[cid], topic) or "-"]
        table.add_row(*row)
    console = Console(soft_wrap=False)
    console.print(
        f"[bold]{label}[/]: {len(mqs)} queues of {topic} on {brokers} brokers, "
        f"{len(cids)} consumers"
    )
    console.print(table)
    # config hands out a fixed list and machine_room skips other rooms: say what that means.
    if unassigned:
        console.print(f"[yellow]owned by no consumer:[/] {compact_queues(unassigned, topic)}")
    if repeated:
        console.print(f"[yellow]owned by several consumers:[/] {compact_queues(repeated, topic)}")
