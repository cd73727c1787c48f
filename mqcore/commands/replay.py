"""``mqcore replay``: copy a topic (filtered, time-bounded, transformed) to another, on Spark.

The job runs on a local Spark session through the ``mqcore`` data source
(:mod:`mqcore.contrib.spark`, extra ``mqcore[spark]``): the source topic is read in parallel by
queue and offset range, filtered in the store's scan (``--where``, SQL92), cut to a store-time
range (``--since``/``--until``), optionally passed through ``--transform module:function``
(a function taking and returning a DataFrame), and appended to the target topic.

``--to`` is a store directory or a broker data directory (one holding ``store/``); a new or
empty directory becomes a broker data directory. In a broker data directory the target topic
is also created in ``config/topics.json``, so that a broker opened there serves it. The target
must not be held by a running broker or another writer.

``--from-namesrv`` and ``--to-namesrv`` (``host:port[;host:port]``) read from and write to a
running server instead (``mqcore serve``, broker groups behind ``mqcore namesrv``, or an Apache
RocketMQ 4.x cluster), through the data source's ``namesrv`` option; each side takes a
directory or a server, so a topic can be copied between two servers.

Delivery is at least once: each written message carries the ``REPLAY_ID`` property (the source
message's commit-log offset), by which consumers can drop duplicates.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mqcore.errors import FilterExpressionError, MQError, StoreLockedError

__all__ = ["java_missing", "load_transform", "replay", "run_replay"]


def load_transform(spec: str) -> Any:
    """The callable named ``module:function`` (it takes and returns a DataFrame).

    The module is looked up in the current directory first, as ``python -m`` does, and
    pickled by value, so that Spark's workers need not import it from there themselves.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.ClickException(f"--transform {spec!r} is not module:function")
    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
        target: Any = module
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise click.ClickException(
            f"--transform: cannot load {spec!r} ({type(exc).__name__}: {exc}); the module is "
            f"looked up in the current directory {here!r} and on sys.path"
        ) from None
    finally:
        if added:
            sys.path.remove(here)
    if not callable(target):
        raise click.ClickException(f"--transform {spec!r} is not callable")
    with contextlib.suppress(ImportError, ValueError):
        cloudpickle: Any = importlib.import_module("pyspark.cloudpickle")
        cloudpickle.register_pickle_by_value(module)
    return target


def java_missing() -> str | None:
    """Why a local Spark cannot start here (no usable Java), or None when Java runs."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        where = f"JAVA_HOME={java_home!r} has no bin/java" if java_home else "no java on PATH"
        return (
            f"mqcore replay runs on Spark, which needs Java 17 or later: {where}; install a "
            f"Java runtime (e.g. openjdk-17-jre-headless) or set JAVA_HOME"
        )
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return (
            f"mqcore replay runs on Spark, which needs Java 17 or later: {java} -version "
            f"failed ({exc})"
        )
    return None


def _check_where(where: str) -> None:
    """Compile ``--where`` with the SQL92 filter before anything starts."""
    from mqcore.kernel import Kernel

    try:
        Kernel().filter("SQL92", where)
    except FilterExpressionError as exc:
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise click.ClickException(f"--where {where!r}: {first}") from None


def _topic_total(location: Any, topic: str) -> int:
    """Messages in ``topic`` at ``location`` (0 when the store does not exist yet)."""
    from mqcore.contrib.spark.layout import detect_store
    from mqcore.kernel import Kernel

    if detect_store(location.store_dir) is None:
        return 0
    with Kernel().open_store(location.store, location.store_dir, read_only=True) as store:
        return sum(
            store.max_offset(topic, q) - store.min_offset(topic, q) for q in store.queue_ids(topic)
        )


def _server_total(namesrv: str, topic: str) -> tuple[int, int]:
    """Messages in ``topic`` on the servers of ``namesrv`` and its queues ((0, 0) when the
    topic does not exist yet)."""
    from mqcore.client.admin import MQAdmin
    from mqcore.errors import TopicNotExistError

    with MQAdmin(namesrv) as admin:
        try:
            table = admin.topic_stats(topic).offset_table
        except TopicNotExistError:
            return 0, 0
    total = sum(o.max_offset - o.min_offset for o in table.values())
    return total, len(table)


def _one_of(local: str | None, server: str | None, what: str) -> None:
    if bool(local) == bool(server):
        raise click.ClickException(
            f"give --{what} (a data directory) or --{what}-namesrv (a running server), one of them"
        )


def _spark_session(master: str) -> Any:
    # Spark starts Python workers with PYSPARK_PYTHON: make them this interpreter, which
    # has mqcore installed (the default, python3 on the PATH, may not).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("mqcore-replay")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # The command draws its own progress bar: no stage bars from Spark in between.
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _watch(spark: Any, stop: threading.Event, total: int, console: Console) -> None:
    """Show finished tasks out of ``total`` until ``stop`` is set (on a terminal only: to a
    pipe or a file, the display shows nothing but leaves an empty line)."""
    if not console.is_terminal:
        return
    tracker = spark.sparkContext.statusTracker()
    done: dict[int, int] = {}
    columns = (
        TextColumn("replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("partitions"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("replay", total=max(total, 1))
        while not stop.wait(0.5):
            try:
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        done[stage_id] = max(done.get(stage_id, 0), info.numCompletedTasks)
            except Exception:  # the session is stopping: the display just ends
                break
            progress.update(task, completed=min(sum(done.values()), total))


def run_replay(
    *,
    source: str | None = None,
    topic: str,
    target: str | None = None,
    to_topic: str,
    from_namesrv: str | None = None,
    to_namesrv: str | None = None,
    where: str | None = None,
    since: str | None = None,
    until: str | None = None,
    transform: str | None = None,
    store: str | None = None,
    queues: int | None = None,
    master: str = "local[*]",
    max_records_per_partition: int | None = None,
    console: Console | None = None,
    spark: Any = None,
) -> dict[str, Any]:
    """Run the replay job; returns the summary (records read, written, filtered, seconds).

    ``spark`` is a SparkSession to run on (left running); by default a local session is
    started for the job and stopped after it. ``from_namesrv`` replaces ``source`` and
    ``to_namesrv`` replaces ``target`` to read from or write to a running server.
    """
    _one_of(source, from_namesrv, "from")
    _one_of(target, to_namesrv, "to")
    if from_namesrv or to_namesrv:
        return _run_network(
            source=source,
            topic=topic,
            target=target,
            to_topic=to_topic,
            from_namesrv=from_namesrv,
            to_namesrv=to_namesrv,
            where=where,
            since=since,
            until=until,
            transform=transform,
            store=store,
            queues=queues,
            master=master,
            max_records_per_partition=max_records_per_partition,
            console=console,
            spark=spark,
        )
    assert source is not None and target is not None
    try:
        from mqcore.contrib.spark import register
        from mqcore.contrib.spark.layout import resolve_read, resolve_write
        from mqcore.contrib.spark.options import ReadOptions
        from mqcore.contrib.spark.records import plan_slices
        from mqcore.contrib.spark.sink import held_error
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc
    from mqcore.kernel import Kernel
    from mqcore.lockfile import StoreLock

    console = console or Console(stderr=True)
    # Spark's Python workers may run elsewhere than this directory: pass absolute paths.
    source, target = os.path.abspath(source), os.path.abspath(target)
    started = time.monotonic()
    if where:
        _check_where(where)
    fn = load_transform(transform) if transform else None
    options = {"path": source, "topic": topic}
    if where:
        options.update(filter_type="SQL92", filter=where)
    if since:
        options["start_timestamp"] = since
    if until:
        options["end_timestamp"] = until
    if max_records_per_partition:
        options["max_records_per_partition"] = str(max_records_per_partition)
    # Check everything cheap before Spark starts (that takes seconds).
    opts = ReadOptions.parse(options)
    src = resolve_read(opts.path)
    with Kernel().open_store(src.store, src.store_dir, read_only=True) as source_store:
        slices = plan_slices(source_store, src, opts)
        source_queues = len(source_store.queue_ids(topic)) or None
    dst = resolve_write(target, store)
    if os.path.realpath(dst.store_dir) == os.path.realpath(src.store_dir):
        raise click.ClickException("--to is the store --from reads; replay into another one")
    if spark is None and master.startswith("local"):
        problem = java_missing()
        if problem:
            raise click.ClickException(problem)
    # A target this run creates is removed again when the run fails, not left half made.
    made = _first_missing(Path(dst.store_dir))
    try:
        try:
            StoreLock(dst.store_dir).acquire().release()
        except StoreLockedError as exc:
            raise held_error(dst, exc) from None
        before = _topic_total(dst, to_topic)
        to_read = sum(s.count for s in slices)
        return _run_job(
            spark=spark,
            master=master,
            options=options,
            fn=fn,
            target=target,
            to_topic=to_topic,
            store=store,
            queues=queues or source_queues,
            partitions=len(slices),
            console=console,
            register=register,
            before=before,
            to_read=to_read,
            started=started,
        )
    except BaseException:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise


def _run_network(
    *,
    source: str | None,
    topic: str,
    target: str | None,
    to_topic: str,
    from_namesrv: str | None,
    to_namesrv: str | None,
    where: str | None,
    since: str | None,
    until: str | None,
    transform: str | None,
    store: str | None,
    queues: int | None,
    master: str,
    max_records_per_partition: int | None,
    console: Console | None,
    spark: Any,
) -> dict[str, Any]:
    """A replay with a server on either side (or both): the source plans the read."""
    try:
        from mqcore.contrib.spark import register
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc
    console = console or Console(stderr=True)
    started = time.monotonic()
    if where:
        _check_where(where)
    fn = load_transform(transform) if transform else None
    options: dict[str, str] = {"topic": topic}
    if from_namesrv:
        options["namesrv"] = from_namesrv
        to_read, source_queues = _server_total(from_namesrv, topic)
        if not source_queues:
            raise click.ClickException(
                f"topic {topic!r} not found at --from-namesrv {from_namesrv}"
            )
    else:
        assert source is not None
        options["path"] = os.path.abspath(source)
        to_read, source_queues = _directory_total(options["path"], topic)
    if where:
        options.update(filter_type="SQL92", filter=where)
    if since:
        options["start_timestamp"] = since
    if until:
        options["end_timestamp"] = until
    if max_records_per_partition:
        options["max_records_per_partition"] = str(max_records_per_partition)
    if from_namesrv and to_namesrv and from_namesrv == to_namesrv and topic == to_topic:
        raise click.ClickException("--to-topic is the topic --from-namesrv reads; copy elsewhere")
    if spark is None and master.startswith("local"):
        problem = java_missing()
        if problem:
            raise click.ClickException(problem)
    if to_namesrv:
        before = _server_total(to_namesrv, to_topic)[0]
        return _run_job(
            spark=spark,
            master=master,
            options=options,
            fn=fn,
            target="",
            to_topic=to_topic,
            store=None,
            queues=queues or source_queues or None,
            partitions=-1,
            console=console,
            register=register,
            before=before,
            to_read=to_read,
            started=started,
            to_namesrv=to_namesrv,
        )
    from mqcore.contrib.spark.layout import resolve_write

    assert target is not None
    target = os.path.abspath(target)
    dst = resolve_write(target, store)
    return _run_job(
        spark=spark,
        master=master,
        options=options,
        fn=fn,
        target=target,
        to_topic=to_topic,
        store=store,
        queues=queues or source_queues or None,
        partitions=-1,
        console=console,
        register=register,
        before=_topic_total(dst, to_topic),
        to_read=to_read,
        started=started,
    )


def _directory_total(path: str, topic: str) -> tuple[int, int]:
    """Messages in ``topic`` of the data directory ``path``, and its queues."""
    from mqcore.contrib.spark.layout import resolve_read
    from mqcore.kernel import Kernel

    src = resolve_read(path)
    with Kernel().open_store(src.store, src.store_dir, read_only=True) as store:
        qids = store.queue_ids(topic)
        total = sum(store.max_offset(topic, q) - store.min_offset(topic, q) for q in qids)
    if not qids:
        raise click.ClickException(f"topic {topic!r} not found in {path}")
    return total, len(qids)


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of ``path`` that does not exist yet (None when it exists)."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


@contextlib.contextmanager
def _cancel_on_interrupt(spark: Any) -> Iterator[threading.Event]:
    """While the job runs, Ctrl-C cancels it; the event says it did.

    PySpark's own SIGINT handler calls into the JVM from inside the call it interrupts, and
    Py4J logs that reentrant call and the interruption as two tracebacks; the JVM then logs
    the cancelled tasks. Here the handler only sets the event, and a thread of its own
    silences the JVM's log and cancels the jobs, so that the job's call returns by itself.
    """
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted  # signal handlers are the main thread's alone
        return

    def cancel() -> None:
        with contextlib.suppress(Exception):  # the session is stopping already
            spark.sparkContext.setLogLevel("OFF")
            spark.sparkContext.cancelAllJobs()

    def on_sigint(signum: int, frame: Any) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt  # a second Ctrl-C: stop waiting for the cancel
        interrupted.set()
        threading.Thread(target=cancel, name="mqcore-replay-cancel", daemon=True).start()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_job(
    *,
    spark: Any,
    master: str,
    options: dict[str, str],
    fn: Any,
    target: str,
    to_topic: str,
    store: str | None,
    queues: int | None,
    partitions: int,
    console: Console,
    register: Any,
    before: int,
    to_read: int,
    started: float,
    to_namesrv: str | None = None,
) -> dict[str, Any]:
    from mqcore.contrib.spark.layout import resolve_write

    own_session = spark is None
    if spark is None:
        spark = _spark_session(master)
    try:
        register(spark)
        reader = spark.read.format("mqcore")
        for key, value in options.items():
            reader = reader.option(key, value)
        df = reader.load()
        if fn is not None:
            df = fn(df)
        if partitions < 0:  # planned by the source over the network
            partitions = df.rdd.getNumPartitions()
        writer = df.write.format("mqcore").mode("append")
        if to_namesrv:
            writer = writer.option("namesrv", to_namesrv).option("topic", to_topic)
        else:
            writer = writer.option("path", target).option("topic", to_topic)
        if store and not to_namesrv:
            writer = writer.option("store", store)
        if queues:
            writer = writer.option("queue_nums", str(queues))
        # Spark finds the registered source only from the session's own (main) thread, so
        # the job runs here and the progress display in a thread of its own.
        stop = threading.Event()
        watcher = threading.Thread(
            target=_watch, args=(spark, stop, partitions, console), name="mqcore-replay-progress"
        )
        watcher.start()
        try:
            with _cancel_on_interrupt(spark) as interrupted:
                try:
                    writer.save()
                except Exception:
                    if interrupted.is_set():  # the cancelled job's error: Ctrl-C it was
                        raise KeyboardInterrupt from None
                    raise
                if interrupted.is_set():
                    raise KeyboardInterrupt
        finally:
            stop.set()
            watcher.join(timeout=10)
    finally:
        if own_session:
            spark.stop()
    if to_namesrv:
        written = _server_total(to_namesrv, to_topic)[0] - before
    else:
        written = _topic_total(resolve_write(target, store), to_topic) - before
    return {
        "read": to_read,
        "written": written,
        "filtered": max(0, to_read - written),
        "seconds": round(time.monotonic() - started, 2),
        "partitions": partitions,
    }


@click.command()
@click.option("--from", "source", default=None, help="Store or broker data directory to read.")
@click.option(
    "--from-namesrv", default=None, help="Read from a server instead: host:port[;host:port]."
)
@click.option("--topic", required=True, help="Topic to read.")
@click.option("--to", "target", default=None, help="Store or broker data directory to write.")
@click.option(
    "--to-namesrv", default=None, help="Write to a server instead: host:port[;host:port]."
)
@click.option("--to-topic", required=True, help="Topic to write (created when missing).")
@click.option("--where", default=None, help="SQL92 filter on properties (and TAGS).")
@click.option("--since", default=None, help="First store time: ms since the epoch or ISO-8601.")
@click.option("--until", default=None, help="Store time to stop before (exclusive).")
@click.option("--transform", default=None, help="module:function taking and returning a DataFrame.")
@click.option("--store", default=None, help="Store backend for a new --to directory.")
@click.option(
    "--queues", type=int, default=None, help="Queues of a new target topic (default: as source)."
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master.")
@click.option(
    "--max-records-per-partition", type=int, default=None, help="Split queues into slices."
)
def replay(**kwargs: Any) -> None:
    """Replay a topic into another topic on a local Spark session (needs mqcore[spark])."""
    console = Console(stderr=True)
    try:
        summary = run_replay(console=console, **kwargs)
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc
    table = Table(title="mqcore replay")
    for column in ("read", "written", "filtered", "seconds", "partitions"):
        table.add_column(column, justify="right")
    table.add_row(
        *(str(summary[c]) for c in ("read", "written", "filtered", "seconds", "partitions"))
    )
    Console().print(table)
