"""Where a store's time goes: each phase of ``mqcore bench`` under cProfile, top functions.

    python bench/profile_store.py --store mmap --messages 100000 --batch 32
    python bench/profile_store.py --store lmdb --top 15

Prints, per phase (produce, consume as MessageExt, consume raw), the functions with the most
own time. cProfile slows pure-Python code several times over, so read the shares, not the
rates.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import pstats
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import structlog

import mqcore
from mqcore import Kernel
from mqcore.benchmark import TOPIC, consume, consume_raw, message_pool, produce
from mqcore.store import FlushMode

ROOT = Path(mqcore.__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Profile the three phases and print the top functions by own time."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="mmap")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    path = Path(tempfile.mkdtemp(prefix="mqcore-profile-"))
    try:
        with Kernel().open_store(args.store, path, flush_mode=FlushMode.ASYNC_FLUSH) as store:
            pool = message_pool(args.size, args.batch)
            start = store.max_offset(TOPIC, 0)
            phases = {
                "produce": lambda: produce(store, pool, args.messages, args.batch),
                "consume": lambda: consume(store, args.messages, size=args.size, start=start),
                "consume_raw": lambda: consume_raw(
                    store, args.messages, size=args.size, start=start
                ),
            }
            for name, run in phases.items():
                profiler = cProfile.Profile()
                phase = profiler.runcall(run)
                out = io.StringIO()
                stats = pstats.Stats(profiler, stream=out)
                stats.sort_stats("tottime").print_stats(args.top)
                print(f"=== {name}: {phase.msgs_per_s:,.0f} msgs/s under the profiler ===")
                # Paths relative to the source tree (and site-packages), not this machine's.
                text = out.getvalue().replace(str(ROOT) + "/", "")
                lines = text.replace(sysconfig.get_paths()["purelib"] + "/", "").splitlines()
                begin = next(i for i, line in enumerate(lines) if "ncalls" in line)
                print("\n".join(lines[begin : begin + args.top + 1]) + "\n")
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
