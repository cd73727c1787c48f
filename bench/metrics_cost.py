"""What ``mqcore serve --metrics-listen`` adds to each request, measured alone: the request
timer (``MeteredProcessor``) around a processor that does nothing, and the put counters
(``mqcore_messages_stored``) for a batch of 32, in CPU µs per request.

Compared with the server's CPU per request (``bench/remote.py --metrics-compare`` prints it
per message), this is the cost of metrics, without the noise of two whole runs of a loaded
machine between the figures compared::

    python bench/metrics_cost.py [--requests N] [--batch 32] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import prometheus_client

from mqcore.remoting.command import RemotingCommand
from mqcore.server.metrics import MeteredProcessor, _StoredCounter

SEND_BATCH_MESSAGE = 320  # RequestCode.SEND_BATCH_MESSAGE


class _Nothing:
    """A processor that answers at once: what remains is the timer's own cost."""

    inline_codes: frozenset[int] = frozenset()

    def process(self, req: RemotingCommand, connection: object) -> RemotingCommand:
        return req


class _Stored:
    size = 1100  # a 1 KiB message as stored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    registry = prometheus_client.CollectorRegistry()
    latency = prometheus_client.Histogram("latency", "", ["code"], registry=registry)
    metered = MeteredProcessor(_Nothing(), latency)  # type: ignore[arg-type]
    counter = _StoredCounter(
        prometheus_client.Counter("put", "", ["topic"], registry=registry),
        prometheus_client.Counter("put_bytes", "", ["topic"], registry=registry),
    )
    plain = _Nothing()
    req = RemotingCommand.request(SEND_BATCH_MESSAGE)
    results = [_Stored()] * args.batch
    costs = []
    for _ in range(args.rounds):
        start = time.process_time()
        for _ in range(args.requests):
            plain.process(req, None)
        base = time.process_time() - start
        start = time.process_time()
        for _ in range(args.requests):
            metered.process(req, None)
            counter.mqcore_messages_stored("T", 0, results)  # type: ignore[arg-type]
        costs.append((time.process_time() - start - base) / args.requests * 1e6)
    print(
        f"metrics per request of {args.batch}: {statistics.median(costs):.2f} µs CPU "
        f"(median of {args.rounds}: {', '.join(f'{c:.2f}' for c in costs)})"
    )


if __name__ == "__main__":
    main()
