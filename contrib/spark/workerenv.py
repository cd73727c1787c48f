"""What the driver tells the source's Spark Python workers: the log level and the pushdown switch.

Spark runs the source in Python processes of its own (planning workers next to the driver,
read and write workers on the executors). They do not see the driver's logging
configuration, and Spark does not hand a data source anything of the driver's but its
options. It does start every worker of a registered data source with the environment
variables the SparkContext held when the source was registered, so :func:`worker_env`
adds two for that moment only:

- ``MQCORE_SPARK_LOG_LEVEL``: the level of the ``mqcore`` logger in the driver (the CLI's
  ``--log-level``, or the application's logging configuration), which each worker applies
  to its own ``mqcore`` logger (:func:`follow_driver_log_level`);
- ``MQCORE_SPARK_FILTER_PUSHDOWN``: ``1`` when ``register(spark, filter_pushdown=True)``
  asked for filter pushdown (see ``docs/spark.md`` for why it is off by default).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "LOG_LEVEL_ENV",
    "PUSHDOWN_ENV",
    "follow_driver_log_level",
    "pushdown_enabled",
    "worker_env",
]

LOG_LEVEL_ENV = "MQCORE_SPARK_LOG_LEVEL"
PUSHDOWN_ENV = "MQCORE_SPARK_FILTER_PUSHDOWN"


@contextlib.contextmanager
def worker_env(spark: Any, values: Mapping[str, str]) -> Iterator[None]:
    """Add ``values`` to the environment Spark gives the workers of what is registered inside.

    A Spark Connect session has no SparkContext here; its workers then keep their defaults.
    """
    try:
        environment: dict[str, str] = spark.sparkContext.environment
    except Exception:  # Spark Connect: no SparkContext in this process
        yield
        return
    saved = {name: environment.get(name) for name in values}
    environment.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                environment.pop(name, None)
            else:
                environment[name] = old


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the worker's ``sys.stderr`` of the moment (Spark swaps it while planning)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def follow_driver_log_level() -> None:
    """In a Spark worker of the source: log ``mqcore`` events at the driver's level.

    Does nothing outside such a worker (the variable is unset), so importing the package
    never touches an application's logging. The worker is Spark's process, not the
    application's: with no handler configured there, one writing to stderr is added so that
    info and debug events are shown when the driver asked for them.
    """
    name = os.environ.get(LOG_LEVEL_ENV)
    if not name:
        return
    level = logging.getLevelName(name.upper())
    if not isinstance(level, int):
        return
    logger = logging.getLogger("mqcore")
    logger.setLevel(level)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = _StderrHandler()
        # The pid tells the lines of Spark's worker processes from the driver's own.
        handler.setFormatter(
            logging.Formatter("%(levelname)s %(name)s [spark worker %(process)d]: %(message)s")
        )
        logger.addHandler(handler)
        logger.propagate = False


def pushdown_enabled() -> bool:
    """Whether the source was registered with ``filter_pushdown=True``."""
    return os.environ.get(PUSHDOWN_ENV) == "1"
