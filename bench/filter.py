"""Evaluation rates of the compiled message filters, on one core.

    python bench/filter.py                       # about 5 seconds
    python bench/filter.py --evaluations 2000000 --json

The headline figure is the broker's commit-log stage: the SQL92 filter
``price > 100 AND region = 'eu' AND TAGS IN ('TagA', 'TagB')`` evaluated with
``matches_properties`` on stored property maps (TAGS, KEYS, the unique key and two user
properties, as a RocketMQ producer stores them), a quarter of which match; then only on
maps that match, where all three predicates are evaluated. The client-side
paths (``matches`` on a Message and on a stored MessageExt, which decodes the properties
once per message) and the TAG filter's consume-queue stage are measured too.
Each figure is the best of ``--runs``: evaluation does no I/O, so the fastest run is the
least disturbed one.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from mqcore import Kernel, Message
from mqcore.codec import decode, encode, tags_hash_code

EXPRESSION = "price > 100 AND region = 'eu' AND TAGS IN ('TagA', 'TagB')"


def sample_messages(count: int = 1000) -> list[Message]:
    """Messages of which about a quarter match :data:`EXPRESSION`."""
    rng = random.Random(7)
    return [
        Message(
            topic="BenchTopic",
            body=b"x" * 64,
            tags=rng.choice(["TagA", "TagB", "TagC"]),
            keys=f"order-{i}",
            properties={
                "price": str(rng.randint(0, 250)),
                "region": rng.choice(["eu", "eu", "us"]),
                "UNIQ_KEY": f"7F00000100002A9F0000000000{i:06d}",
            },
        )
        for i in range(count)
    ]


def best_rate(check: Callable[[Any], bool], items: Sequence[Any], n: int, runs: int) -> float:
    """Best evaluations per second of ``check`` over ``items`` (cycled) in ``runs`` runs."""
    rounds = max(1, n // len(items))
    best = 0.0
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(rounds):
            for item in items:
                check(item)
        elapsed = time.perf_counter() - t0
        best = max(best, rounds * len(items) / elapsed)
    return best


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluations", type=int, default=1_000_000, help="per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    kernel = Kernel(autoload=False)
    sql = kernel.filter("SQL92", EXPRESSION)
    tag = kernel.filter("TAG", "TagA || TagB")
    messages = sample_messages()
    stored = [decode(encode(m)) for m in messages]
    properties = [m.all_properties() for m in messages]
    codes = [tags_hash_code(m.tags) for m in messages]
    matching = sum(sql.matches_properties(p) for p in properties) / len(properties)

    n, runs = args.evaluations, args.runs
    figures = {
        "expression": EXPRESSION,
        "matching_fraction": round(matching, 3),
        "sql92_matches_properties_per_s": best_rate(sql.matches_properties, properties, n, runs),
        # every predicate evaluated: the slowest case for an AND chain
        "sql92_matches_properties_all_match_per_s": best_rate(
            sql.matches_properties, [p for p in properties if sql.matches_properties(p)], n, runs
        ),
        "sql92_matches_message_per_s": best_rate(sql.matches, messages, n // 2, runs),
        "sql92_matches_message_ext_per_s": best_rate(
            lambda m: sql.matches(decode(m.record)), stored, n // 4, runs
        ),
        "tag_matches_tags_code_per_s": best_rate(tag.matches_tags_code, codes, n, runs),
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
    }
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"expression: {EXPRESSION}  ({matching:.0%} of messages match)")
    for key, value in figures.items():
        if key.endswith("_per_s"):
            print(f"  {key[:-6]:<42} {value:>12,.0f} evaluations/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
