"""``bench/remote.py --peer rocketmq``: ``mqcore serve`` against Apache RocketMQ's broker on
this machine, with the same two clients on each, in one run.

Each round starts one server, warms it up (a quarter of the messages through the Python
client, not counted: a fresh JVM runs the broker's code interpreted until its JIT compiles the
hot paths), runs both clients against it, stops it, then does the same with the other
server (which goes first alternates from round to round; this machine's speed drifts over
minutes). Messages are 1 KiB by default, on a topic of 4 queues.

- mqcore's Python client (this process): ``send_batch`` of 32, ``send`` one at a time, and
  ``PullConsumer.pull`` of 32 over every queue (as ``bench/remote.py`` measures against Redis);
- RocketMQ's Java client 4.9.8 (``tests/java``, one JVM per figure, timed inside the JVM so
  its start is not counted): ``send(List)`` of 32, ``send`` one at a time, and
  ``DefaultMQPullConsumer.pull`` of 32 over every queue.

Apache RocketMQ runs from Maven Central's jars (``tests/java/rocketmq``, Maven resolves them
into its local repository; Java 17 and Maven needed): its name server and one broker, ASYNC_FLUSH
like ``mqcore serve``'s default, a 1 GiB heap, the JVM's default collector and JIT (the
tests start it with the first JIT tier only; the bench does not). The Java client runs with
the JVM's defaults too. Each server's CPU per message is read from
``/proc`` (the broker's process; the name server is not counted, as ``mqcore serve``'s name
server role is counted in its one process).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
import ha  # noqa: E402  (bench/ha.py: serving, producing, CPU readings)
from apache_rocketmq import ApacheRocketMQ  # noqa: E402
from mqjava import CLIENT_VERSIONS, classpath  # noqa: E402

BATCH = 32
SERVERS = ("mqcore", "rocketmq")


def _create_topic(addr: str, topic: str) -> None:
    from mqcore.client.admin import MQAdmin

    with MQAdmin(addr) as admin:
        admin.create_topic(topic, 4)


def python_client(addr: str, n: int, size: int, pid: int) -> dict[str, float]:
    """mqcore's remote Producer and PullConsumer, topic ``B`` (``ha.produce``'s); the pull
    reads the whole topic, the warm-up's messages included."""
    topic = "B"
    from mqcore import Message, Producer, PullConsumer, PullStatus

    _create_topic(addr, topic)
    body = os.urandom(size)
    with Producer("bench-pg", namesrv_addr=addr) as p:
        p.send(Message(topic=topic, body=body))  # connect, route
        out = ha.produce(p, n, body, pid)
    with PullConsumer("bench-cg", namesrv_addr=addr) as c:
        mqs = sorted(c.fetch_subscribe_message_queues(topic))

        def consume() -> int:
            total = 0
            for mq in mqs:
                offset = 0
                while True:
                    res = c.pull(mq, "*", offset, BATCH)
                    if res.pull_status is not PullStatus.FOUND:
                        break
                    for m in res.msg_found_list:
                        m.body  # noqa: B018  (read each body, as a consumer would)
                    total += len(res.msg_found_list)
                    offset = res.next_begin_offset
            return total

        out["consume_msgs_per_s"] = ha.timed(consume, "consume", pid, out)
    return out


def java_client(addr: str, n: int, size: int, pid: int, work: Path) -> dict[str, float]:
    """RocketMQ's Java client, topic ``J``: each figure in its own JVM, timed inside it; the
    server's CPU per message is what it spent while that JVM ran."""
    _create_topic(addr, "J")
    cp = classpath(CLIENT_VERSIONS[0])
    out: dict[str, float] = {}
    for name, phase, count in (
        ("produce_batch32", "batch", n),
        ("produce_one", "one", max(1000, n // 10)),
        ("consume", "consume", 0),
    ):
        before = ha.cpu_seconds(pid)
        done = subprocess.run(
            ["java", "-Xmx512m", f"-Drocketmq.client.logRoot={work}",
             "-Drocketmq.client.logUseSlf4j=false", "-cp", cp,
             "mqcore.javaclient.Scenarios", "bench", addr, "J", phase, str(count), str(size)],
            capture_output=True, text=True, timeout=1800, env=dict(os.environ, HOME=str(work)),
        )  # fmt: skip
        spent = ha.cpu_seconds(pid) - before
        if done.returncode != 0:
            raise SystemExit(f"the Java client failed ({phase}):\n{done.stderr[-3000:]}")
        line = next(json.loads(x) for x in done.stdout.splitlines() if '"bench"' in x)
        out[f"{name}_msgs_per_s"] = line["messages"] / line["seconds"]
        out[f"cpu_server_us_{name}"] = spent / line["messages"] * 1e6
    return out


def one_server(kind: str, n: int, size: int, store: str) -> dict[str, dict[str, float]]:
    """Start server ``kind``, run both clients against it, stop it."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
    try:
        if kind == "mqcore":
            proc, addr, _ = ha.serve(str(work / "data"), "--store", store)
            pid = proc.pid
        else:
            rmq = ApacheRocketMQ(work / "rocketmq", broker_heap="1g", quick_start=False)
            addr = rmq.start()
            pid = rmq.procs["broker"].pid
        try:
            # Warm-up, not counted: a fresh JVM interprets the broker's code until its JIT
            # has compiled the send and pull paths (and Python's caches fill too).
            python_client(addr, max(2000, n // 4), size, pid)
            return {
                "python": python_client(addr, n, size, pid),
                "java": java_client(addr, n, size, pid, work),
            }
        finally:
            if kind == "mqcore":
                ha.stop(proc)
            else:
                rmq.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The rounds, and the medians of each figure and of each round's own ratio."""
    rounds: list[dict[str, dict[str, dict[str, float]]]] = []
    for i in range(args.rounds):
        order = SERVERS if i % 2 == 0 else SERVERS[::-1]
        n, size = args.messages, args.size
        rounds.append({kind: one_server(kind, n, size, args.store) for kind in order})
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores",
        "messages": args.messages,
        "size": args.size,
        "rounds": args.rounds,
        "java_client": CLIENT_VERSIONS[0],
        "rounds_raw": rounds,
    }
    for client in ("python", "java"):
        figures = rounds[0]["mqcore"][client].keys()
        med = {
            kind: {k: statistics.median(r[kind][client][k] for r in rounds) for k in figures}
            for kind in SERVERS
        }
        rates = [k for k in figures if k.endswith("_msgs_per_s")]
        ratios = {
            k: statistics.median(r["mqcore"][client][k] / r["rocketmq"][client][k] for r in rounds)
            for k in rates
        }
        results[client] = {"median": med, "ratios": ratios}
    return results


def print_results(results: dict[str, Any]) -> None:
    """The side-by-side table: rates, ratios, and each server's CPU per message."""
    print(
        f"mqcore serve vs Apache RocketMQ's broker, {results['machine']}, "
        f"{results['messages']} messages of {results['size']} B, "
        f"median of {results['rounds']} round(s)"
    )
    for client, label in (("python", "mqcore Python client"), ("java", "RocketMQ Java client")):
        med, ratios = results[client]["median"], results[client]["ratios"]
        print()
        print(f"{label:32} {'mqcore':>12} {'rocketmq':>12} {'ratio':>7}   server CPU us/msg")
        for k, ratio in ratios.items():
            name = k.removesuffix("_msgs_per_s")
            cpu = (
                f"{med['mqcore'][f'cpu_server_us_{name}']:.1f} / "
                f"{med['rocketmq'][f'cpu_server_us_{name}']:.1f}"
            )
            print(f"{name:32} {med['mqcore'][k]:12,.0f} {med['rocketmq'][k]:12,.0f} "
                  f"{ratio:7.2f}   {cpu}")  # fmt: skip


def main(args: argparse.Namespace) -> None:
    """Run and print (``args.json``: one JSON document)."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        raise SystemExit("--peer rocketmq needs java (17+) and mvn on the PATH")
    results = run(args)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_results(results)
