"""``mqcore demo``: the whole story on an embedded broker, narrated."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)
from mqcore.errors import MQError

__all__ = ["demo"]


def _wait(cond: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


def run_demo(data_dir: Path, store: str, messages: int, console: Console) -> dict[str, Any]:
    """Produce, consume with a two-member group, retry to the DLQ, look up; returns figures."""
    summary: dict[str, Any] = {}
    # Retries wait their delay level (3 + reconsume times: 10 s, then 30 s by default); the
    # demo shortens every level to 1 s so that its poison message reaches the DLQ quickly.
    with Broker(data_dir, store=store, message_delay_level="1s 1s 1s 1s") as broker:
        broker.create_topic("Orders", queue_nums=8)
        console.print(
            f"[bold]1.[/] broker on store [cyan]{store}[/] at {data_dir}; topic Orders, 8 queues"
        )

        begin = time.perf_counter()
        with Producer("demo-producer", broker=broker) as producer:
            batch = [
                Message(
                    topic="Orders",
                    body=f"order {i}".encode(),
                    tags="paid" if i % 4 else "cancelled",
                    keys=f"order-{i}",
                    properties={"amount": str(i % 100)},
                )
                for i in range(messages)
            ]
            for start in range(0, messages, 32):
                last = producer.send_batch(batch[start : start + 32])
        summary["produce_s"] = time.perf_counter() - begin
        console.print(
            f"[bold]2.[/] sent {messages} messages in {summary['produce_s']:.2f}s "
            f"(tags paid/cancelled, keys order-N); last id {last.msg_id.split(',')[-1]}"
        )
        console.print(
            "   the listener fails the 'poison' message on purpose, to show retries: each of "
            "its 3 attempts logs a consume_listener_failed warning on stderr (expected)"
        )
        console.print(
            "   the second member joins while the first consumes: a member that hands a queue "
            "over may commit an offset behind the new owner's, which the broker logs as a "
            "consumer_offset_moved_back warning (expected; delivery is at least once)"
        )

        got: Counter[str] = Counter()
        seen: set[str] = set()
        lock = threading.Lock()

        def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
            for m in msgs:
                if m.body == b"poison":
                    raise ValueError("this message always fails")
            with lock:
                # Delivery is at least once: a queue that moves to the new member while
                # messages are in flight is re-read from the last committed offset.
                for m in msgs:
                    got["deliveries"] += 1
                    seen.add(m.msg_id)
                got["total"] = len(seen)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        members = []
        for name in ("member-1", "member-2"):
            c = PushConsumer(
                "demo-group",
                broker=broker,
                instance_name=name,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                max_reconsume_times=2,
            )
            c.subscribe("Orders", "paid")
            c.register_message_listener(listener)
            c.start()
            members.append(c)
        try:
            # The poison message is sent once the group has settled (4 queues each), so no
            # rebalance moves it while it fails: exactly its 3 attempts are logged.
            _wait(lambda: all(len(c.assigned_queues("Orders")) == 4 for c in members), 30)
            with Producer("demo-producer", broker=broker) as producer:
                first = producer.send(
                    Message(topic="Orders", body=b"poison", tags="paid", keys="poison")
                )
            console.print(f"   then the 'poison' message, id {first.msg_id}")
            expected = sum(1 for i in range(messages) if i % 4)
            _wait(lambda: got["total"] >= expected, 60)
            _wait(lambda: broker.get_max_offset("%DLQ%demo-group", 0) >= 1, 30)
            table = Table(title="demo-group: queues per member (allocation 'avg')")
            table.add_column("member")
            table.add_column("queues")
            for c in members:
                ids = sorted(mq.queue_id for mq in c.assigned_queues("Orders"))
                table.add_row(c.client_id, ", ".join(map(str, ids)))
            console.print(table)
        finally:
            for c in members:
                c.shutdown()
        summary["consumed_paid"] = got["total"]
        summary["redelivered"] = got["deliveries"] - got["total"]
        summary["dead_lettered"] = broker.get_max_offset("%DLQ%demo-group", 0)
        console.print(
            f"[bold]3.[/] the group consumed {got['total']} 'paid' messages "
            f"({summary['redelivered']} redelivered around the rebalance: at least once; "
            f"cancelled ones filtered on the broker by tag hash); the poison message was "
            f"retried twice, then moved to %DLQ%demo-group ({summary['dead_lettered']} there)"
        )

        with PullConsumer("demo-audit", broker=broker) as audit:
            found = audit.query_message("Orders", "order-7")
            summary["lookup"] = [m.body.decode() for m in found]
            by_id = audit.view_message(first.msg_id, "Orders")
            console.print(
                f"[bold]4.[/] lookup by key order-7 -> {summary['lookup']}; "
                f"by id -> {by_id.body!r} in queue {by_id.queue_id} at offset {by_id.queue_offset}"
            )
        committed = sum(broker.query_consumer_offset("demo-group", "Orders", q) for q in range(8))
        summary["committed"] = committed
        console.print(f"[bold]5.[/] committed offsets of demo-group add up to {committed}")
    return summary


@click.command()
@click.option("--store", default="mmap", show_default=True, help="Store plugin to run on.")
@click.option("--messages", default=2000, show_default=True, type=click.IntRange(1, 10_000_000))
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the broker's files here (default: a temporary directory, removed after).",
)
def demo(store: str, messages: int, data_dir: Path | None) -> None:
    """Run the whole story on an embedded broker: produce, consume as a group, retry, look up."""
    console = Console(soft_wrap=True)
    tmp = None
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="mqcore-demo-")
        data_dir = Path(tmp)
    try:
        summary = run_demo(data_dir, store, messages, console)
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    expected = sum(1 for i in range(messages) if i % 4)
    if summary["consumed_paid"] < expected or summary["dead_lettered"] < 1:
        raise click.ClickException(
            f"demo incomplete: consumed {summary['consumed_paid']} of {expected}, "
            f"dead-lettered {summary['dead_lettered']}"
        )
    console.print("[green]demo complete[/]")
