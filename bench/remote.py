"""Remote produce and consume: ``mqcore serve`` against Redis Streams, side by side in one run.

Both servers run as their own process on loopback, each driven by one Python client process
(this one): mqcore's remote Producer and PullConsumer, and redis-py. Messages are 1 KiB.

- mqcore: ``send_batch`` of 32 messages, ``send`` one message at a time, and pulling with
  ``PullConsumer.pull`` 32 at a time;
- Redis: ``XADD`` pipelined 32 at a time and one at a time, ``XREADGROUP`` with ``COUNT 32``.

Placement (``--placement both``, the default): on a VM, where the scheduler puts the client
and the server moves a one-by-one figure by 2x, so every comparison runs twice per round,
with both processes pinned to the same vCPU (``same``) and to different vCPUs (``split``),
the two placements interleaved (their order alternating each round); the output names each
figure's placement and vCPUs. ``--placement none`` leaves placement to the scheduler.

Then the concurrency table (``bench/concurrency.py``), client and server on different vCPUs:
1, 4, 16 and 64 connections, each with one send in flight, through mqcore's ``Producer``
(one per connection, one thread each), through raw sockets sending pre-encoded
SEND_MESSAGE_V2 frames (each answer read and checked for SUCCESS: the server's capacity
without the client's cost), and against Redis with raw RESP ``XADD`` on as many sockets.

Every figure comes with each side's CPU per message (the client is this process, every
thread, ``time.process_time``; the server is read from ``/proc/<pid>/stat``, so Linux
only). Last, the ratio against each goal of issue 36 (single sends on different vCPUs at
least 0.9x redis-py one by one; batch-32 1.5x Redis pipelined; consume 1.5x ``XREADGROUP``;
16 raw clients' server capacity 0.5x Redis's) and, where a goal is not met, the client's and
the server's CPU per message against the per-message budget the goal allows. ``--markdown``
prints the tables for docs/benchmarks.md.

Needs ``redis-server`` on the PATH (Debian's package ``redis-server``:
``bench/install_redis.sh`` installs it with apt-get, as root) and ``pip install . --group
bench`` (redis-py, and uvloop: ``mqcore serve`` uses its event loop when installed, as with
``mqcore[fast]``, and the run says which loop the server had); ``--no-redis`` leaves Redis
out.

The same run then measures produce with replication (``bench/ha.py``'s code, unpinned): an
ASYNC_MASTER with one slave and a SYNC_MASTER with one slave, each its own process, printed
beside a single server's figures (``--no-ha`` leaves them out; they need the mmap store)::

    python bench/remote.py --messages N [--rounds 3] [--no-redis] [--no-ha] [--metrics]
        [--concurrency-messages M] [--markdown | --json]

``--peer rocketmq`` measures against Apache RocketMQ's broker instead, with mqcore's Python
client and RocketMQ's Java client on both servers (``bench/rocketmq_peer.py``).

``--metrics`` runs ``mqcore serve`` with ``--metrics-listen`` (``mqcore[metrics]``): compare
with a run without it to see what counting costs. ``--metrics-compare`` does that comparison
in one run: each round runs mqcore without metrics and with them (alternating which goes
first), and the run prints the median of each round's on/off ratio (Redis and replication
are left out)::

    python bench/remote.py --metrics-compare --messages N [--rounds 5] [--json]

``--security`` measures mqcore alone, four ways side by side in each round (docs/security.md):
plain; with ACL (``--acl``: every request signed by the client and checked by the server);
with TLS (``--tls-cert``/``--tls-key``, enforcing; a throwaway CA made for the run, with the
``cryptography`` package); and with both::

    python bench/remote.py --messages N --security [--rounds 3] [--json]

Each round runs mqcore's figures and Redis's, alternating which goes first; the run prints
the median of each figure and of each round's own ratio, with every round's ratio beside it
(this machine's speed drifts over minutes: a single round's ratio can be off by 1.5x).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import concurrency  # bench/concurrency.py: placement and the concurrency loads
import ha  # bench/ha.py: serving, producing, the replication figures

BATCH = 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- mqcore ------------------------------------------------------------------------------------


def bench_mqcore(
    n: int,
    size: int,
    store: str,
    metrics: bool = False,
    serve_args: tuple[str, ...] = (),
    client: dict[str, Any] | None = None,
    server_cpu: int | None = None,
) -> dict[str, float]:
    """mqcore's figures; ``serve_args`` go to ``mqcore serve``, ``client`` (credentials=,
    tls=) to the producer and the consumer; ``server_cpu`` pins the server to that vCPU."""
    from mqcore import Message, MessageQueue, Producer, PullConsumer, PullStatus

    client = client or {}
    data = tempfile.mkdtemp(prefix="mqcore-bench-")
    # --metrics: the server counts as it would with Prometheus scraping it (mqcore[metrics])
    extra = ("--metrics-listen", f"127.0.0.1:{_free_port()}") if metrics else ()
    proc, addr = _serve(data, server_cpu, "--store", store, *extra, *serve_args)
    try:
        body = os.urandom(size)
        with Producer("bench-pg", namesrv_addr=addr, **client) as p:
            _create_topic(p, addr, "B")
            p.send(Message(topic="B", body=body))  # connect, route
            out = ha.produce(p, n, body, proc.pid)
        with PullConsumer("bench-cg", namesrv_addr=addr, **client) as c:
            mqs = sorted(c.fetch_subscribe_message_queues("B"))

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

            out["consume_msgs_per_s"] = ha.timed(consume, "consume", proc.pid, out)
            assert isinstance(mqs[0], MessageQueue)
        return out
    finally:
        ha.stop(proc)
        shutil.rmtree(data, ignore_errors=True)


def _serve(data: str, cpu: int | None, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``mqcore serve`` (see ``ha.serve``), pinned to ``cpu`` when given."""
    with concurrency.spawning_on(cpu):
        proc, addr, _ = ha.serve(data, *args)
    if cpu is not None:
        concurrency.pin_process(proc.pid, cpu)
    return proc, addr


def _create_topic(p: Any, addr: str, topic: str) -> None:
    """Create ``topic`` with 4 queues on the server at ``addr`` through producer ``p``."""
    from mqcore.client.transport_remote import RemoteTransport
    from mqcore.protocol import headers
    from mqcore.protocol.codes import RequestCode

    assert isinstance(p.broker, RemoteTransport)
    p.broker._call(
        addr, RequestCode.UPDATE_AND_CREATE_TOPIC,
        headers.CreateTopicRequestHeader(
            topic=topic, default_topic="TBW102", read_queue_nums=4, write_queue_nums=4,
            perm=6, topic_filter_type="SINGLE_TAG"),
    )  # fmt: skip


# -- Redis ------------------------------------------------------------------------------------


def _redis_server(cpu: int | None) -> tuple[subprocess.Popen[bytes], int, str]:
    """A ``redis-server`` without persistence on a free port, pinned to ``cpu`` when given:
    the process, its port and its working directory (remove it after)."""
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not on the PATH (Debian: bench/install_redis.sh)")
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="redis-bench-")
    with concurrency.spawning_on(cpu):
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL,
        )
    if cpu is not None:
        concurrency.pin_process(proc.pid, cpu)
    r = redis.Redis(port=port)
    for _ in range(100):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    r.close()
    return proc, port, workdir


def bench_redis(n: int, size: int, server_cpu: int | None = None) -> dict[str, float]:
    import redis

    proc, port, workdir = _redis_server(server_cpu)
    try:
        r = redis.Redis(port=port)
        body = os.urandom(size)
        out: dict[str, float] = {}

        def pipelined() -> int:
            for _ in range(n // BATCH):
                pipe = r.pipeline(transaction=False)
                for _ in range(BATCH):
                    pipe.xadd("B", {"b": body})
                pipe.execute()
            return (n // BATCH) * BATCH

        def singles() -> int:
            k = max(1000, n // 10)
            for _ in range(k):
                r.xadd("S", {"b": body})
            return k

        out["produce_batch32_msgs_per_s"] = ha.timed(pipelined, "produce_batch32", proc.pid, out)
        out["produce_one_msgs_per_s"] = ha.timed(singles, "produce_one", proc.pid, out)
        r.xgroup_create("B", "g", id="0")

        def consume() -> int:
            total = 0
            while True:
                got = r.xreadgroup("g", "c", {"B": ">"}, count=BATCH)
                if not got:
                    return total
                for _, entries in got:
                    for _, fields in entries:
                        fields[b"b"]
                    total += len(entries)

        out["consume_msgs_per_s"] = ha.timed(consume, "consume", proc.pid, out)
        return out
    finally:
        r.close()
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


# -- concurrency ------------------------------------------------------------------------------


def concurrency_mqcore(
    total: int, client_total: int, size: int, store: str, server_cpu: int | None
) -> dict[int, dict[str, dict[str, float]]]:
    """connections -> {"mqcore": figures, "raw": figures} on one ``mqcore serve``: N producers
    of the real client sending ``client_total`` messages one by one between them, then N raw
    sockets sending ``total`` pre-encoded SEND_MESSAGE_V2 frames."""
    from mqcore import Message, Producer

    data = tempfile.mkdtemp(prefix="mqcore-bench-")
    proc, addr = _serve(data, server_cpu, "--store", store)
    body = os.urandom(size)
    out: dict[int, dict[str, dict[str, float]]] = {}
    try:
        with Producer("bench-pg", namesrv_addr=addr) as p:
            _create_topic(p, addr, "C")
            p.send(Message(topic="C", body=body))
        port = int(addr.rsplit(":", 1)[1])
        for n in concurrency.CONNECTIONS:
            load = concurrency.mqcore_clients(addr, "C", body, n, client_total)
            real = concurrency.timed_load(load, proc.pid)
            frames = [
                concurrency.send_frame("C", i % 4, body, f"{os.getpid():08X}{n:04X}{i:020X}")
                for i in range(n)
            ]
            raw = concurrency.timed_load(
                lambda f=frames: concurrency.raw_load(port, f, total, concurrency._mqcore_answer),
                proc.pid,
            )
            out[n] = {"mqcore": real, "raw": raw}
        return out
    finally:
        ha.stop(proc)
        shutil.rmtree(data, ignore_errors=True)


def concurrency_redis(total: int, size: int, server_cpu: int | None) -> dict[int, dict[str, float]]:
    """connections -> figures of N raw sockets sending ``total`` pre-encoded XADDs."""
    proc, port, workdir = _redis_server(server_cpu)
    frame = concurrency.xadd_frame("C", os.urandom(size))
    try:
        return {
            n: concurrency.timed_load(
                lambda n=n: concurrency.raw_load(
                    port, [frame] * n, total, concurrency._redis_answer
                ),
                proc.pid,
            )
            for n in concurrency.CONNECTIONS
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


# -- ACL and TLS ------------------------------------------------------------------------------

SECURITY = ("plain", "acl", "tls", "acl+tls")
_BENCH_ACCOUNT = ("bench-user", "bench-secret")


def _security_setups(folder: str) -> dict[str, tuple[tuple[str, ...], dict[str, Any]]]:
    """Each way of :data:`SECURITY`: the serve options and the clients' keywords."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "support"))  # fmt: skip
    from certs import make_certs  # tests/support/certs.py: a throwaway CA (cryptography)

    from mqcore.remoting.tls import client_context

    certs = make_certs(Path(folder) / "ca")
    acl = os.path.join(folder, "plain_acl.yml")
    with open(acl, "w", encoding="utf-8") as f:
        f.write(
            "accounts:\n"
            f"  - accessKey: {_BENCH_ACCOUNT[0]}\n"
            f"    secretKey: {_BENCH_ACCOUNT[1]}\n"
            "    admin: true\n"  # creates the topic; an admin without entries may do anything
        )
    acl_args = ("--acl", acl)
    tls_args = ("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))
    tls = client_context(True, ca=certs.ca)
    return {
        "plain": ((), {}),
        "acl": (acl_args, {"credentials": _BENCH_ACCOUNT}),
        "tls": (tls_args, {"tls": tls}),
        "acl+tls": (acl_args + tls_args, {"credentials": _BENCH_ACCOUNT, "tls": tls}),
    }


def run_security(args: argparse.Namespace) -> dict[str, Any]:
    """The four ways, ``args.rounds`` times, the order rotating each round; medians."""
    folder = tempfile.mkdtemp(prefix="mqcore-bench-security-")
    try:
        setups = _security_setups(folder)
        rounds: dict[str, list[dict[str, float]]] = {k: [] for k in SECURITY}
        for i in range(args.rounds):
            for kind in SECURITY[i % len(SECURITY) :] + SECURITY[: i % len(SECURITY)]:
                serve_args, client = setups[kind]
                rounds[kind].append(
                    bench_mqcore(args.messages, args.size, args.store, False, serve_args, client)
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    medians = {
        k: {f: statistics.median(r[f] for r in rs) for f in rs[0]} for k, rs in rounds.items()
    }
    return {
        "machine": f"{os.cpu_count()} cores",
        "server_event_loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "messages": args.messages,
        "size": args.size,
        "rounds": args.rounds,
        "security": medians,
        "security_rounds": rounds,
    }


def print_security(results: dict[str, Any]) -> None:
    """The four ways side by side: rates, each relative to plain, and CPU per message."""
    med = results["security"]
    print(
        f"mqcore serve on {results['server_event_loop']}'s event loop, {results['machine']}, "
        f"{results['messages']} messages of {results['size']} B, median of "
        f"{results['rounds']} round(s)"
    )
    rates = [k for k in med["plain"] if k.endswith("_msgs_per_s")]
    print(f"{'msgs/s':24}" + "".join(f"{k:>18}" for k in SECURITY))
    for rate in rates:
        base = med["plain"][rate]
        cells = "".join(f"{med[k][rate]:>10,.0f} ({med[k][rate] / base:4.2f})" for k in SECURITY)
        print(f"{rate.removesuffix('_msgs_per_s'):24}{cells}")
    print()
    print(f"{'CPU us/msg client/server':24}" + "".join(f"{k:>18}" for k in SECURITY))
    for rate in rates:
        name = rate.removesuffix("_msgs_per_s")
        cells = "".join(
            f"{med[k][f'cpu_client_us_{name}']:>8.1f} /{med[k][f'cpu_server_us_{name}']:>7.1f} "
            for k in SECURITY
        )
        print(f"{name:24}{cells}")


def _rounds(args: argparse.Namespace) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """mqcore's and Redis's figures, ``args.rounds`` times, alternating which goes first:
    this machine's speed drifts over minutes, and alternating spreads the drift over both.
    The scheduler places the processes (``--placement none``)."""
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    for i in range(args.rounds):
        _round(args, None, i, ours, theirs)
    return ours, theirs


def _round(
    args: argparse.Namespace,
    placement: tuple[int, int] | None,
    i: int,
    ours: list[dict[str, float]],
    theirs: list[dict[str, float]],
) -> None:
    """One round of mqcore's and Redis's figures (``i`` even: mqcore first), appended."""
    server_cpu = None
    if placement is not None:
        concurrency.pin_process(0, placement[0])
        server_cpu = placement[1]

    def mq() -> None:
        ours.append(
            bench_mqcore(args.messages, args.size, args.store, args.metrics, server_cpu=server_cpu)
        )

    def rd() -> None:
        theirs.append(bench_redis(args.messages, args.size, server_cpu))

    steps = [mq] if args.no_redis else [mq, rd] if i % 2 == 0 else [rd, mq]
    for step in steps:
        step()


#: criterion 1's goals: (label, figure, placement, target ratio against Redis)
GOALS = (
    ("single send vs redis-py XADD one by one", "produce_one_msgs_per_s", "split", 0.9),
    ("batch-32 send_batch vs XADD pipelined 32", "produce_batch32_msgs_per_s", "split", 1.5),
    ("PullConsumer 32 a pull vs XREADGROUP COUNT 32", "consume_msgs_per_s", "split", 1.5),
    ("server capacity, 16 raw clients vs Redis", "raw16", "split", 0.5),
)


def run_placed(args: argparse.Namespace) -> dict[str, Any]:
    """Every comparison in both placements, interleaved: each round runs every placement
    (alternating their order), mqcore and Redis in each (alternating which goes first), then
    the concurrency table with the processes on different vCPUs."""
    places = concurrency.placements()
    if not places:
        raise SystemExit("no vCPU to pin to")
    names = list(places)
    ours: dict[str, list[dict[str, float]]] = {p: [] for p in names}
    theirs: dict[str, list[dict[str, float]]] = {p: [] for p in names}
    conc: list[dict[str, Any]] = []
    conc_place = "split" if "split" in places else names[0]
    for i in range(args.rounds):
        order = names if i % 2 == 0 else names[::-1]
        for name in order:
            _round(args, places[name], i, ours[name], theirs[name])
        if args.concurrency_messages:
            client_cpu, server_cpu = places[conc_place]
            concurrency.pin_process(0, client_cpu)
            entry: dict[str, Any] = {}
            steps = ["mqcore", "redis"] if i % 2 == 0 or args.no_redis else ["redis", "mqcore"]
            for step in steps:
                if step == "mqcore":
                    entry["mqcore"] = concurrency_mqcore(
                        args.concurrency_messages,
                        args.concurrency_client_messages,
                        args.size,
                        args.store,
                        server_cpu,
                    )
                elif not args.no_redis:
                    entry["redis"] = concurrency_redis(
                        args.concurrency_messages, args.size, server_cpu
                    )
            conc.append(entry)
    concurrency.unpin()
    results: dict[str, Any] = {"placements": {}, "concurrency_placement": conc_place}
    for name in names:
        o, t = ours[name], theirs[name]
        entry = {
            "cpus": {"client": places[name][0], "server": places[name][1]},
            "mqcore": {k: statistics.median(x[k] for x in o) for k in o[0]},
            "mqcore_rounds": o,
        }
        if t:
            rates = [k for k in o[0] if k.endswith("_msgs_per_s")]
            per_round = [{k: a[k] / b[k] for k in rates} for a, b in zip(o, t, strict=True)]
            entry["redis"] = {k: statistics.median(x[k] for x in t) for k in t[0]}
            entry["redis_rounds"] = t
            entry["ratios"] = {k: statistics.median(p[k] for p in per_round) for k in rates}
            entry["ratio_rounds"] = per_round
        results["placements"][name] = entry
    if conc:
        table: dict[str, dict[str, dict[str, float]]] = {}
        for n in concurrency.CONNECTIONS:
            row: dict[str, dict[str, float]] = {}
            for side in ("mqcore", "raw", "redis"):
                if side == "redis":
                    got = [c["redis"][n] for c in conc if "redis" in c]
                else:
                    got = [c["mqcore"][n][side] for c in conc]
                if got:
                    row[side] = {k: statistics.median(g[k] for g in got) for k in got[0]}
            table[str(n)] = row
        results["concurrency"] = table
        results["concurrency_rounds"] = conc
    results["goals"] = _goals(results)
    return results


def _goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of criterion 1 with its ratio and, where it is not met, the CPU per message
    that bounds it against the per-message budget the goal allows."""
    out = []
    for label, figure, place, target in GOALS:
        goal: dict[str, Any] = {"goal": label, "placement": place, "target": target}
        if figure == "raw16":
            row = results.get("concurrency", {}).get("16", {})
            if "raw" not in row or "redis" not in row:
                continue
            ours, theirs = row["raw"], row["redis"]
            goal["ratio"] = ours["msgs_per_s"] / theirs["msgs_per_s"]
            cpu = (ours["cpu_client_us"], ours["cpu_server_us"])
            redis_cpu = (theirs["cpu_client_us"], theirs["cpu_server_us"])
            rate = theirs["msgs_per_s"]
        else:
            entry = results["placements"].get(place)
            if entry is None or "ratios" not in entry:
                continue
            name = figure.removesuffix("_msgs_per_s")
            m, r = entry["mqcore"], entry["redis"]
            goal["ratio"] = entry["ratios"][figure]
            cpu = (m[f"cpu_client_us_{name}"], m[f"cpu_server_us_{name}"])
            redis_cpu = (r[f"cpu_client_us_{name}"], r[f"cpu_server_us_{name}"])
            rate = r[figure]
        goal["met"] = goal["ratio"] >= target
        # At target x Redis's rate, one message may take this long end to end: with one
        # request in flight the client's and the server's CPU add up within it; with many,
        # the busier side's CPU alone must fit.
        goal["budget_us"] = 1e6 / (target * rate)
        goal["cpu_us"] = {"client": cpu[0], "server": cpu[1]}
        goal["redis_cpu_us"] = {"client": redis_cpu[0], "server": redis_cpu[1]}
        out.append(goal)
    return out


def _bound(g: dict[str, Any]) -> str:
    """What bounds a goal not met, in words."""
    c, s, b = g["cpu_us"]["client"], g["cpu_us"]["server"], g["budget_us"]
    waiting = "; the rest is waiting (wake-ups, other processes on the vCPUs), not CPU"
    if g["goal"].startswith("server capacity"):
        return f"server {s:.1f} µs/msg against {b:.1f} allowed" + (
            " (the server's CPU alone is over)" if s > b else waiting
        )
    over = [n for n, v in (("client", c), ("server", s)) if v > b]
    if over:
        tail = f"; over alone: {', '.join(over)}"
    elif c + s > b:
        tail = "; the two together are over"
    else:
        tail = waiting
    return f"client {c:.1f} + server {s:.1f} µs/msg against {b:.1f} allowed{tail}"


def print_placed(results: dict[str, Any], markdown: bool) -> None:
    """The placed comparison, the concurrency table and the goals, as text or Markdown."""
    head = (
        f"mqcore serve on {results['server_event_loop']}'s event loop, {results['machine']}, "
        f"{results['messages']} messages of {results['size']} B, median of "
        f"{results['rounds']} round(s); load average {results['load_before']} before, "
        f"{results['load_after']} after"
    )
    print(head if not markdown else f"{head}.\n")
    rows = []
    for name, e in results["placements"].items():
        where = f"{name} (client vCPU {e['cpus']['client']}, server vCPU {e['cpus']['server']})"
        m, r = e["mqcore"], e.get("redis")
        for k in (k for k in m if k.endswith("_msgs_per_s")):
            n = k.removesuffix("_msgs_per_s")
            cpu = f"{m[f'cpu_client_us_{n}']:.1f} / {m[f'cpu_server_us_{n}']:.1f}"
            if r is None:
                rows.append([n, where, f"{m[k]:,.0f}", "", "", cpu, ""])
                continue
            each = ", ".join(f"{p[k]:.2f}" for p in e["ratio_rounds"])
            rcpu = f"{r[f'cpu_client_us_{n}']:.1f} / {r[f'cpu_server_us_{n}']:.1f}"
            rows.append(
                [
                    n,
                    where,
                    f"{m[k]:,.0f}",
                    f"{r[k]:,.0f}",
                    f"{e['ratios'][k]:.2f} ({each})",
                    cpu,
                    rcpu,
                ]
            )
    _table(
        ["figure", "placement", "mqcore msgs/s", "Redis msgs/s", "ratio (rounds)",
         "mqcore CPU µs/msg client / server", "Redis CPU µs/msg client / server"],
        rows, markdown,
    )  # fmt: skip
    if "concurrency" in results:
        print()
        print(
            f"Concurrency, one request in flight per connection, placement "
            f"{results['concurrency_placement']}; msgs/s (CPU µs/msg client / server)"
            + (":\n" if markdown else "")
        )
        rows = []
        for n, row in results["concurrency"].items():
            cells = [n]
            for side in ("mqcore", "raw", "redis"):
                f = row.get(side)
                cells.append(
                    f"{f['msgs_per_s']:,.0f} ({f['cpu_client_us']:.1f} / {f['cpu_server_us']:.1f})"
                    if f
                    else ""
                )
            raw, red = row.get("raw"), row.get("redis")
            cells.append(f"{raw['msgs_per_s'] / red['msgs_per_s']:.2f}" if raw and red else "")
            rows.append(cells)
        _table(
            ["connections", "mqcore Producer", "raw SEND_MESSAGE_V2", "Redis raw XADD",
             "raw / Redis"],
            rows, markdown,
        )  # fmt: skip
    if results["goals"]:
        print()
        rows = [
            [g["goal"], g["placement"], f"{g['ratio']:.2f}", f"{g['target']:.2f}",
             "met" if g["met"] else "not met", "" if g["met"] else _bound(g)]
            for g in results["goals"]
        ]  # fmt: skip
        _table(["goal", "placement", "ratio", "target", "", "what bounds it"], rows, markdown)


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" for _ in header) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    for r in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)).rstrip())


def metrics_compare(args: argparse.Namespace) -> dict[str, Any]:
    """mqcore's figures without and with ``--metrics-listen``, side by side: each round runs
    both, alternating which goes first, and each round's own on/off ratio is kept (the
    machine's speed drifts over minutes; one round's two runs are seconds apart)."""
    off: list[dict[str, float]] = []
    on: list[dict[str, float]] = []
    for i in range(args.rounds):
        for metrics in (False, True) if i % 2 == 0 else (True, False):
            (on if metrics else off).append(
                bench_mqcore(args.messages, args.size, args.store, metrics)
            )
    rates = [k for k in off[0] if k.endswith("_msgs_per_s")]
    per_round = [{k: b[k] / a[k] for k in rates} for a, b in zip(off, on, strict=True)]
    # The server's CPU per message: what counting costs, less swayed than a rate by what
    # else the machine runs at the time.
    cpu = [f"cpu_server_us_{k.removesuffix('_msgs_per_s')}" for k in rates]
    return {
        "machine": f"{os.cpu_count()} cores",
        "server_event_loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "messages": args.messages,
        "size": args.size,
        "rounds": args.rounds,
        "off": {k: statistics.median(o[k] for o in off) for k in rates},
        "on": {k: statistics.median(o[k] for o in on) for k in rates},
        # on / off: 1.0 is no cost; 0.95 is metrics costing 5% of the rate
        "ratios": {k: statistics.median(p[k] for p in per_round) for k in rates},
        "ratio_rounds": per_round,
        "server_cpu_us_off": {k: statistics.median(o[k] for o in off) for k in cpu},
        "server_cpu_us_on": {k: statistics.median(o[k] for o in on) for k in cpu},
        # on / off of each round's server CPU per message: 1.05 is metrics costing 5% more
        "server_cpu_ratios": {
            k: statistics.median(b[k] / a[k] for a, b in zip(off, on, strict=True)) for k in cpu
        },
    }


def metrics_interleaved(n: int, size: int, store: str) -> dict[str, Any]:
    """Batch produce to two servers at once, one without and one with metrics, batch by
    batch in turn (which goes first alternates): whatever else the machine runs slows both
    alike. Each side's rate is its messages over the time its own sends took; its CPU per
    message is its process's over the whole run (its idle waits cost none)."""
    from mqcore import Message, Producer, SendStatus
    from mqcore.client.admin import MQAdmin

    sides: dict[str, dict[str, Any]] = {}
    try:
        for name, metrics in (("off", False), ("on", True)):
            data = tempfile.mkdtemp(prefix="mqcore-bench-")
            extra = ("--metrics-listen", f"127.0.0.1:{_free_port()}") if metrics else ()
            proc, addr, _ = ha.serve(data, "--store", store, *extra)
            sides[name] = {"proc": proc, "data": data}
            producer = Producer(f"bench-pg-{name}", namesrv_addr=addr)
            producer.start()
            sides[name]["producer"] = producer
            with MQAdmin(addr) as admin:
                admin.create_topic("B", 4)
            producer.send(Message(topic="B", body=b"warm"))  # connect, route
        body = os.urandom(size)
        msgs = [Message(topic="B", body=body) for _ in range(BATCH)]
        spent = {"off": 0.0, "on": 0.0}
        cpu0 = {k: ha.cpu_seconds(v["proc"].pid) for k, v in sides.items()}
        rounds = n // BATCH
        for i in range(rounds):
            for name in ("off", "on") if i % 2 == 0 else ("on", "off"):
                start = time.perf_counter()
                result = sides[name]["producer"].send_batch(msgs)
                spent[name] += time.perf_counter() - start
                assert result.send_status is SendStatus.SEND_OK
        count = rounds * BATCH
        out: dict[str, Any] = {"messages": count, "size": size}
        for name, side in sides.items():
            cpu = ha.cpu_seconds(side["proc"].pid) - cpu0[name]
            out[name] = {
                "produce_batch32_msgs_per_s": count / spent[name],
                "cpu_server_us_produce_batch32": cpu / count * 1e6,
            }
        out["ratio"] = (
            out["on"]["produce_batch32_msgs_per_s"] / out["off"]["produce_batch32_msgs_per_s"]
        )
        out["cpu_ratio"] = (
            out["on"]["cpu_server_us_produce_batch32"] / out["off"]["cpu_server_us_produce_batch32"]
        )
        return out
    finally:
        for side in sides.values():
            if "producer" in side:
                side["producer"].shutdown()
            ha.stop(side["proc"])
            shutil.rmtree(side["data"], ignore_errors=True)


def print_metrics_compare(results: dict[str, Any]) -> None:
    """The table of :func:`metrics_compare`."""
    print(
        f"mqcore serve without and with --metrics-listen, on {results['server_event_loop']}'s "
        f"event loop, {results['machine']}, median of {results['rounds']} round(s)"
    )
    print(f"{'figure':32} {'off':>12} {'on':>12} {'on/off':>7}  ratio per round")
    for k, ratio in results["ratios"].items():
        each = ", ".join(f"{p[k]:.3f}" for p in results["ratio_rounds"])
        print(f"{k:32} {results['off'][k]:12,.0f} {results['on'][k]:12,.0f} {ratio:7.3f}  {each}")
    print()
    print(f"{'server CPU us per message':32} {'off':>12} {'on':>12} {'on/off':>7}  (per round)")
    for k, off in results["server_cpu_us_off"].items():
        on = results["server_cpu_us_on"][k]
        paired = results["server_cpu_ratios"][k]
        name = k.removeprefix("cpu_server_us_")
        print(f"{name:32} {off:12.1f} {on:12.1f} {on / off:7.3f}  ({paired:.3f})")
    runs = results.get("interleaved_rounds")
    if runs:
        print()
        print(
            "both servers at once, batches of 32 in turn (on/off per round: "
            + ", ".join(f"{r['ratio']:.3f}" for r in runs)
            + ")"
        )
        print(f"{'batch-32 produce, on/off':32} {results['interleaved_ratio']:7.3f}")
        print(f"{'server CPU per message, on/off':32} {results['interleaved_cpu_ratio']:7.3f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--store", default="mmap")
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of mqcore then Redis, alternating which goes first (medians are printed)",
    )
    ap.add_argument("--no-redis", action="store_true", help="leave Redis Streams out")
    ap.add_argument(
        "--no-ha", action="store_true", help="leave out the ASYNC_MASTER and SYNC_MASTER figures"
    )
    ap.add_argument(
        "--metrics",
        action="store_true",
        help="run mqcore serve with --metrics-listen (needs mqcore[metrics]); compare a run "
        "without it",
    )
    ap.add_argument(
        "--metrics-compare",
        action="store_true",
        help="mqcore alone, each round without and with --metrics-listen: the cost of metrics",
    )
    ap.add_argument(
        "--security",
        action="store_true",
        help="mqcore alone: plain, with ACL, with TLS, and with both, side by side",
    )
    ap.add_argument(
        "--peer",
        choices=["redis", "rocketmq"],
        default="redis",
        help="what mqcore serve is measured against: Redis Streams (default), or Apache "
        "RocketMQ's broker with the Python and the Java client (bench/rocketmq_peer.py)",
    )
    ap.add_argument(
        "--placement",
        choices=["both", "none"],
        default="both",
        help="both (default): every comparison with client and server pinned to the same vCPU "
        "and to different vCPUs, interleaved; none: the scheduler places them (the old figures)",
    )
    ap.add_argument(
        "--concurrency-messages",
        type=int,
        default=20_000,
        help="messages per point of the concurrency table (raw clients and Redis); 0 leaves "
        "the table out",
    )
    ap.add_argument(
        "--concurrency-client-messages",
        type=int,
        default=4_000,
        help="messages per point of the concurrency table through mqcore's Producer",
    )
    ap.add_argument("--markdown", action="store_true", help="the tables as Markdown")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.peer == "rocketmq":
        import rocketmq_peer  # bench/rocketmq_peer.py

        if args.rounds < 1:
            raise SystemExit("--rounds must be at least 1")
        rocketmq_peer.main(args)
        return
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    if args.security:
        sec = run_security(args)
        if args.json:
            print(json.dumps(sec, indent=2))
        else:
            print_security(sec)
        return
    if args.metrics_compare:
        compared = metrics_compare(args)
        # Then both servers at once, batch by batch in turn: the steadier comparison.
        runs = [
            metrics_interleaved(args.messages, args.size, args.store) for _ in range(args.rounds)
        ]
        compared["interleaved_rounds"] = runs
        compared["interleaved_ratio"] = statistics.median(r["ratio"] for r in runs)
        compared["interleaved_cpu_ratio"] = statistics.median(r["cpu_ratio"] for r in runs)
        if args.json:
            print(json.dumps(compared, indent=2))
        else:
            print_metrics_compare(compared)
        return
    if not args.no_ha and args.store != "mmap":
        raise SystemExit("replication needs the mmap store: pass --no-ha with --store lmdb")
    if args.placement == "both":
        load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
        placed = run_placed(args)
        placed.update(
            machine=f"{os.cpu_count()} vCPUs",
            server_event_loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            messages=args.messages,
            size=args.size,
            rounds=args.rounds,
            load_before=load_before,
            load_after=" ".join(f"{x:.1f}" for x in os.getloadavg()),
        )
        if not args.no_ha:
            # Unpinned, as before: the replication figures compare setups with each other.
            single = ha.bench(args.messages, args.size, None)
            placed["replication"] = ha.table(single, args.messages, args.size)
        if args.json:
            print(json.dumps(placed, indent=2))
            return
        print_placed(placed, args.markdown)
        if not args.no_ha:
            print()
            ha.print_table(placed["replication"])
        return
    ours, theirs = _rounds(args)
    m = {k: statistics.median(o[k] for o in ours) for k in ours[0]}
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores",
        # mqcore serve runs on this interpreter: uvloop's event loop when it is installed
        "server_event_loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "metrics": args.metrics,
        "messages": args.messages,
        "size": args.size,
        "rounds": args.rounds,
        "mqcore": m,
        "mqcore_rounds": ours,
    }
    rates = [k for k in m if k.endswith("_msgs_per_s")]  # the rest: CPU per message
    if not args.no_redis:
        r = {k: statistics.median(t[k] for t in theirs) for k in theirs[0]}
        per_round = [{k: o[k] / t[k] for k in rates} for o, t in zip(ours, theirs, strict=True)]
        results["redis"] = r
        results["redis_rounds"] = theirs
        # The median of each round's own ratio: both sides of a ratio ran minutes apart at most.
        results["ratios"] = {k: statistics.median(p[k] for p in per_round) for k in rates}
        results["ratio_rounds"] = per_round
    if not args.no_ha:
        results["replication"] = ha.table(m, args.messages, args.size)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"mqcore serve on {results['server_event_loop']}'s event loop, {results['machine']}, "
        f"median of {args.rounds} round(s)"
    )
    if args.no_redis:
        print(f"{'figure':32} {'mqcore':>12}")
        for k in rates:
            print(f"{k:32} {m[k]:12,.0f}")
    else:
        ratios = results["ratios"]
        print(f"{'figure':32} {'mqcore':>12} {'redis':>12} {'ratio':>7}  ratio per round")
        for k in rates:
            each = ", ".join(f"{p[k]:.2f}" for p in results["ratio_rounds"])
            print(f"{k:32} {m[k]:12,.0f} {r[k]:12,.0f} {ratios[k]:7.2f}  {each}")
    # What limits each figure: CPU per message on each side (medians), client / server.
    print()
    print(f"{'CPU us per message':32} {'mqcore client / server':>24}", end="")
    print("" if args.no_redis else f" {'redis client / server':>24}")
    for k in rates:
        name = k.removesuffix("_msgs_per_s")
        ours_cpu = f"{m[f'cpu_client_us_{name}']:.1f} / {m[f'cpu_server_us_{name}']:.1f}"
        print(f"{name:32} {ours_cpu:>24}", end="")
        if args.no_redis:
            print()
        else:
            theirs_cpu = f"{r[f'cpu_client_us_{name}']:.1f} / {r[f'cpu_server_us_{name}']:.1f}"
            print(f" {theirs_cpu:>24}")
    if not args.no_ha:
        print()
        ha.print_table(results["replication"])


if __name__ == "__main__":
    main()
