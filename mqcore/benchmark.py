"""The benchmark engine behind ``mqcore bench``: produce then consume through the store API.

``bench/peers.py`` imports these functions, so it measures mqcore with exactly the code
the command runs. Messages are generated on the fly
from a small pool, so memory stays flat however large the backlog is (``--rss`` reports
the peak resident set size to prove it).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from mqcore import batch
from mqcore.errors import InvalidArgumentError, StoreError
from mqcore.kernel import Kernel
from mqcore.message import Message
from mqcore.store import DEFAULT_MAX_BYTES, FlushMode, GetStatus

__all__ = [
    "TOPIC",
    "BenchConfig",
    "BenchResult",
    "FsyncCounter",
    "Phase",
    "RssSampler",
    "consume",
    "consume_raw",
    "message_pool",
    "peak_rss_mib",
    "produce",
    "produce_threads",
    "run_bench",
]

TOPIC = "BenchTopic"
POOL_TARGET = 1024  # distinct messages cycled through: ~1 MiB of bodies at 1 KiB
MB = 1_000_000

#: progress(phase_name, done, total) is called every few thousand messages
ProgressFn = Callable[[str, int, int], None]


@attrs.frozen(kw_only=True)
class BenchConfig:
    """What to measure: backend, volume, message size, batching, flush mode and threads."""

    store: str = "mmap"
    messages: int = 100_000
    size: int = 1024
    batch: int = 32
    flush: str = "async"
    threads: int = 1
    pull_batch: int = 32  # RocketMQ's pullBatchSize
    consume: bool = True  # read everything back after producing
    raw: bool = True  # also consume through get_raw
    rss: bool = False  # sample anonymous and file-backed RSS while running (Linux)
    data_dir: str | None = None
    store_options: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Phase:
    """One timed phase: how many messages and payload bytes moved in how many seconds."""

    name: str
    messages: int
    nbytes: int
    seconds: float
    # CPU time of the whole process during the phase (the store's own threads included)
    cpu_seconds: float | None = None

    @property
    def cpu_msgs_per_s(self) -> float | None:
        """Messages per CPU second of the process (steadier than wall time on a busy machine)."""
        if not self.cpu_seconds:
            return None
        return self.messages / self.cpu_seconds

    @property
    def msgs_per_s(self) -> float:
        """Messages per second."""
        return self.messages / self.seconds if self.seconds > 0 else math.inf

    @property
    def mb_per_s(self) -> float:
        """Payload (body) megabytes (10**6 bytes) per second."""
        return self.nbytes / MB / self.seconds if self.seconds > 0 else math.inf


@attrs.frozen
class BenchResult:
    """Every phase of one run, plus peak RSS and fsync counts where measurable."""

    config: BenchConfig
    phases: dict[str, Phase]
    peak_rss_mib: float
    fsyncs: int | None = None
    rss_peaks: dict[str, float] = attrs.field(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The flat JSON object ``mqcore bench --json`` prints."""
        c = self.config
        out: dict[str, Any] = {
            "store": c.store,
            "messages": c.messages,
            "size": c.size,
            "batch": c.batch,
            "flush": c.flush,
            "threads": c.threads,
            "pull_batch": c.pull_batch,
            # Whether the codec's C loops ran (mqcore._codec, see mqcore.batch).
            "speedups": batch.SPEEDUPS,
            # The -o options the store ran with (check_crc_on_read=true...), so a figure says
            # what it measured.
            "store_options": dict(c.store_options),
        }
        for phase in self.phases.values():
            out[f"{phase.name}_msgs_per_s"] = round(phase.msgs_per_s, 1)
            out[f"{phase.name}_mb_per_s"] = round(phase.mb_per_s, 2)
            out[f"{phase.name}_seconds"] = round(phase.seconds, 4)
            if phase.cpu_msgs_per_s is not None:
                out[f"{phase.name}_cpu_msgs_per_s"] = round(phase.cpu_msgs_per_s, 1)
        produce_phase = self.phases.get("produce")
        if produce_phase is not None:
            # Each thread's last put may be short, so count the calls rather than divide.
            shares = [
                c.messages // c.threads + (i < c.messages % c.threads) for i in range(c.threads)
            ]
            puts = sum(math.ceil(share / c.batch) for share in shares)
            out["puts_per_s"] = round(puts / produce_phase.seconds, 1)
        if self.fsyncs is not None and produce_phase is not None:
            out["fsyncs"] = self.fsyncs
            out["fsyncs_per_s"] = round(self.fsyncs / produce_phase.seconds, 1)
        out["peak_rss_mib"] = round(self.peak_rss_mib, 1)
        for name, value in self.rss_peaks.items():
            out[f"peak_{name}_mib"] = round(value, 1)
        return out


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 / (1024 if sys.platform == "darwin" else 1)


def message_pool(size: int, batch: int, topic: str = TOPIC, seed: int = 5) -> list[Message]:
    """Distinct random messages to cycle through; a multiple of ``batch`` long."""
    rng = random.Random(seed)
    count = max(1, math.ceil(POOL_TARGET / batch)) * batch
    return [Message(topic=topic, body=rng.randbytes(size)) for _ in range(count)]


def _batches(pool: Sequence[Message], batch: int, total: int) -> Iterator[Sequence[Message]]:
    # Slices of the pool are built once; only the last, shorter batch is sliced again.
    ready = [pool[i : i + batch] for i in range(0, len(pool), batch)]
    full, rest = divmod(total, batch)
    for i in range(full):
        yield ready[i % len(ready)]
    if rest:
        yield ready[full % len(ready)][:rest]


def _report_every(batch: int) -> int:
    # Calls per progress update: about every 4096 messages, so the bar costs nothing.
    return max(1, 4096 // max(1, batch))


def produce(
    store: Any,
    pool: Sequence[Message],
    total: int,
    batch: int,
    *,
    queue_id: int = 0,
    progress: ProgressFn | None = None,
    phase: str = "produce",
) -> Phase:
    """Put ``total`` messages in batches of ``batch`` into one queue; time the puts only."""
    put = store.put
    every = _report_every(batch)
    done = 0
    size = len(pool[0].body)
    start, cpu = time.perf_counter(), time.process_time()
    for i, chunk in enumerate(_batches(pool, batch, total)):
        put(TOPIC, queue_id, chunk)
        done += len(chunk)
        if progress is not None and i % every == 0:
            progress(phase, done, total)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if progress is not None:
        progress(phase, done, total)
    return Phase(phase, done, done * size, seconds, cpu)


def produce_threads(
    store: Any,
    pool: Sequence[Message],
    total: int,
    batch: int,
    threads: int,
    *,
    progress: ProgressFn | None = None,
) -> Phase:
    """``threads`` producers, thread ``i`` putting into queue ``i``, all started together."""
    shares = [total // threads + (1 if i < total % threads else 0) for i in range(threads)]
    counts = [0] * threads
    errors: list[BaseException] = []
    gate = threading.Barrier(threads + 1)
    size = len(pool[0].body)

    def worker(index: int) -> None:
        put = store.put
        gate.wait(timeout=60)
        try:
            for chunk in _batches(pool, batch, shares[index]):
                put(TOPIC, index, chunk)
                counts[index] += len(chunk)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [
        threading.Thread(target=worker, args=(i,), name=f"bench-producer-{i}")
        for i in range(threads)
    ]
    for t in workers:
        t.start()
    gate.wait(timeout=60)
    start, cpu = time.perf_counter(), time.process_time()
    for t in workers:
        while t.is_alive():
            t.join(timeout=0.25)
            if progress is not None:
                progress("produce", sum(counts), total)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if errors:
        raise errors[0]
    done = sum(counts)
    return Phase("produce", done, done * size, seconds, cpu)


def _phase_progress(progress: ProgressFn | None, before: int, total: int) -> ProgressFn | None:
    """Progress of one queue's read reported as progress of the whole phase (all queues)."""
    if progress is None:
        return None
    report = progress

    def update(phase: str, done: int, _queue_total: int) -> None:
        report(phase, before + done, total)

    return update


def _pull(
    fetch: Callable[..., Any],
    queue_id: int,
    start: int,
    total: int,
    pull_batch: int,
    max_bytes: int,
    handle: Callable[[Any], int],
    progress: ProgressFn | None,
    phase: str,
) -> tuple[int, int]:
    offset, end = start, start + total
    got = nbytes = 0
    calls = 0
    every = _report_every(pull_batch)
    while offset < end:
        result = fetch(
            TOPIC, queue_id, offset, max_count=min(pull_batch, end - offset), max_bytes=max_bytes
        )
        if result.status is not GetStatus.FOUND or result.next_offset <= offset:
            raise StoreError(
                f"bench read of {TOPIC!r} queue {queue_id} at offset {offset} got "
                f"{result.status.name} (next offset {result.next_offset}); the store lost or "
                f"hid messages it acknowledged"
            )
        nbytes += handle(result)
        got += result.next_offset - offset
        offset = result.next_offset
        calls += 1
        if progress is not None and calls % every == 0:
            progress(phase, got, total)
    if progress is not None:
        progress(phase, got, total)
    return got, nbytes


def _read_messages(result: Any) -> int:
    # A consumer reads each body: build the MessageExt views and copy their bodies out.
    n = 0
    for m in result.messages:
        n += len(m.body)
    return n


def _read_records(result: Any) -> int:
    # Raw records go to the wire as they are: count their bytes, decode nothing.
    n = 0
    for r in result.records:
        n += len(r)
    return n


def _max_bytes(pull_batch: int, size: int) -> int:
    return max(DEFAULT_MAX_BYTES, pull_batch * (size + 512))


def consume(
    store: Any,
    total: int,
    *,
    size: int,
    queue_id: int = 0,
    start: int = 0,
    pull_batch: int = 32,
    progress: ProgressFn | None = None,
    phase: str = "consume",
) -> Phase:
    """Read ``total`` messages back as ``MessageExt`` with ``store.get``, reading each body."""
    t0, cpu = time.perf_counter(), time.process_time()
    got, nbytes = _pull(
        store.get,
        queue_id,
        start,
        total,
        pull_batch,
        _max_bytes(pull_batch, size),
        _read_messages,
        progress,
        phase,
    )
    return Phase(phase, got, nbytes, time.perf_counter() - t0, time.process_time() - cpu)


def consume_raw(
    store: Any,
    total: int,
    *,
    size: int,
    queue_id: int = 0,
    start: int = 0,
    pull_batch: int = 32,
    progress: ProgressFn | None = None,
    phase: str = "consume_raw",
) -> Phase:
    """Read ``total`` messages back as encoded records with ``store.get_raw``.

    Throughput in MB/s counts the payload (``total * size``), like every other phase.
    """
    t0, cpu = time.perf_counter(), time.process_time()
    got, _ = _pull(
        store.get_raw,
        queue_id,
        start,
        total,
        pull_batch,
        _max_bytes(pull_batch, size),
        _read_records,
        progress,
        phase,
    )
    return Phase(phase, got, got * size, time.perf_counter() - t0, time.process_time() - cpu)


class RssSampler:
    """Samples this process's resident memory from ``/proc/self/status`` in a thread.

    ``ru_maxrss`` counts every resident page, file-backed ones included: pages of a mapped
    store file that the kernel may drop at any time. The sampler tells the two apart:
    peaks of ``rss_anon`` (heap: what the process really holds) and ``rss_file``.
    """

    FIELDS = {"RssAnon:": "rss_anon", "RssFile:": "rss_file"}

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Read the current values once and keep the peaks (no-op where /proc is missing)."""
        try:
            with open("/proc/self/status") as f:
                lines = f.readlines()
        except OSError:
            return
        for line in lines:
            name = self.FIELDS.get(line.split(maxsplit=1)[0]) if line.strip() else None
            if name is not None:
                mib = int(line.split()[1]) / 1024  # the kernel reports kB
                self.peaks[name] = max(self.peaks.get(name, 0.0), mib)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> RssSampler:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()


class FsyncCounter:
    """Counts ``os.fsync``/``os.fdatasync`` and ``mmap.mmap.flush`` calls while active.

    Used only when a store does not count its own flushes (``store.fsync_count``). Patches
    the functions of this process while the ``with`` block runs; stores must look them up
    at call time (``os.fsync(fd)``, ``mmap.mmap(...)``) to be counted.
    """

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._saved: list[tuple[Any, str, Any]] = []

    def _bump(self) -> None:
        with self._lock:
            self.count += 1

    def __enter__(self) -> FsyncCounter:
        import mmap

        counter = self

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            def counted(*args: Any) -> Any:
                counter._bump()
                return fn(*args)

            return counted

        class CountingMmap(mmap.mmap):
            def flush(self, *args: Any) -> None:
                counter._bump()
                super().flush(*args)

        for owner, name, new in (
            (os, "fsync", wrap(os.fsync)),
            (os, "fdatasync", wrap(os.fdatasync)) if hasattr(os, "fdatasync") else (None, "", None),
            (mmap, "mmap", CountingMmap),
        ):
            if owner is not None:
                self._saved.append((owner, name, getattr(owner, name)))
                setattr(owner, name, new)
        return self

    def __exit__(self, *exc: object) -> None:
        while self._saved:
            owner, name, old = self._saved.pop()
            setattr(owner, name, old)


def _store_fsyncs(store: Any) -> int | None:
    value = getattr(store, "fsync_count", None)
    if callable(value):
        value = value()
    return value if isinstance(value, int) else None


def run_bench(
    config: BenchConfig,
    *,
    kernel: Kernel | None = None,
    progress: ProgressFn | None = None,
) -> BenchResult:
    """Open a store, produce ``config.messages`` then consume them back; return the rates.

    Works in a fresh temporary directory removed afterwards, unless ``config.data_dir`` is set.
    """
    if config.messages < 1 or config.size < 1 or config.batch < 1 or config.threads < 1:
        raise InvalidArgumentError(
            f"messages={config.messages}, size={config.size}, batch={config.batch} and "
            f"threads={config.threads} must all be >= 1"
        )
    flush_mode = FlushMode.parse(config.flush)
    count_fsyncs = flush_mode is FlushMode.SYNC_FLUSH
    with contextlib.ExitStack() as stack:
        counter = stack.enter_context(FsyncCounter()) if count_fsyncs else None
        sampler = stack.enter_context(RssSampler()) if config.rss else None
        kernel = kernel or Kernel()
        if config.data_dir is None:
            path = Path(tempfile.mkdtemp(prefix="mqcore-bench-"))
            stack.callback(shutil.rmtree, path, True)
        else:
            path = Path(config.data_dir)
            path.mkdir(parents=True, exist_ok=True)
        store = kernel.open_store(config.store, path, flush_mode=flush_mode, **config.store_options)
        stack.enter_context(store)
        pool = message_pool(config.size, config.batch)
        queues = range(config.threads)
        starts = [store.max_offset(TOPIC, q) for q in queues]
        fsyncs_before = _store_fsyncs(store)
        if config.threads == 1:
            prod = produce(store, pool, config.messages, config.batch, progress=progress)
        else:
            prod = produce_threads(
                store, pool, config.messages, config.batch, config.threads, progress=progress
            )
        fsyncs: int | None = None
        if count_fsyncs:
            own = _store_fsyncs(store)
            if own is not None and fsyncs_before is not None:
                fsyncs = own - fsyncs_before
            elif counter is not None and counter.count > 0:
                # Zero means the store syncs where we cannot see it (LMDB's C code, say):
                # report nothing rather than a false "no fsync at all".
                fsyncs = counter.count
        phases = {"produce": prod}
        readers: list[tuple[str, Callable[..., Phase]]] = []
        if config.consume:
            readers.append(("consume", consume))
        if config.consume and config.raw:
            readers.append(("consume_raw", consume_raw))
        for name, reader in readers:
            counts = [store.max_offset(TOPIC, q) - starts[q] for q in queues]
            parts = [
                reader(
                    store,
                    counts[i],
                    size=config.size,
                    queue_id=q,
                    start=starts[q],
                    pull_batch=config.pull_batch,
                    progress=_phase_progress(progress, sum(counts[:i]), sum(counts)),
                    phase=name,
                )
                for i, q in enumerate(queues)
            ]
            phases[name] = Phase(
                name,
                sum(p.messages for p in parts),
                sum(p.nbytes for p in parts),
                sum(p.seconds for p in parts),
                sum(p.cpu_seconds or 0.0 for p in parts),
            )
        for name in ("consume", "consume_raw"):
            if name in phases and phases[name].messages != prod.messages:
                raise StoreError(
                    f"{name} read {phases[name].messages} messages, {prod.messages} were put"
                )
    peaks = dict(sampler.peaks) if sampler is not None else {}
    return BenchResult(config, phases, peak_rss_mib(), fsyncs, peaks)
