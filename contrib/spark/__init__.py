"""mqcore topics in Spark: the ``mqcore`` PySpark data source, behind ``mqcore[spark]``.

>>> from mqcore.contrib.spark import register      # doctest: +SKIP
>>> register(spark)
>>> spark.read.format("mqcore").option("path", "data").option("topic", "T").load()

Spark starts its Python workers with ``PYSPARK_PYTHON`` (``python3`` on the PATH unless
set): point it at the interpreter mqcore is installed in. See ``docs/spark.md``.
"""

from __future__ import annotations

import logging
from typing import Any

from .workerenv import follow_driver_log_level


def _missing() -> list[str]:
    """The Spark extra's packages that cannot be imported."""
    import importlib

    out = []
    for name in ("pyspark", "pyarrow"):
        try:
            importlib.import_module(name)
        except ImportError:
            out.append(name)
    return out


if _missing():  # pragma: no cover - exercised without the extra installed
    _gone = _missing()
    raise ImportError(
        f"mqcore.contrib.spark needs pyspark and pyarrow, and {' and '.join(_gone)} "
        f"{'is' if len(_gone) == 1 else 'are'} missing: pip install 'mqcore[spark]' (from a "
        f"clone of the repository: pip install '.[spark]'); Spark also needs Java 17 or later",
        name=_gone[0],
    )

from .options import ReadOptions, Slice  # noqa: E402 (after the check above)
from .sink import REPLAY_ID  # noqa: E402
from .source import SCHEMA, MqcoreDataSource  # noqa: E402
from .workerenv import LOG_LEVEL_ENV, PUSHDOWN_ENV, worker_env  # noqa: E402

__all__ = ["REPLAY_ID", "SCHEMA", "MqcoreDataSource", "ReadOptions", "Slice", "register"]

# In a Spark worker of the source, follow the log level the driver registered it with.
follow_driver_log_level()


def register(spark: Any, *, filter_pushdown: bool = False, log_level: int | None = None) -> None:
    """Make ``format("mqcore")`` available in the SparkSession ``spark``.

    The source's Python workers log ``mqcore`` events at ``log_level`` (default: the
    effective level of the ``mqcore`` logger here, as the application configured it).

    ``filter_pushdown=True`` turns on Python data source filter pushdown, so the store reads
    only the queues, offsets, times and tags a ``where`` selects. It is off by default:
    PySpark 4.3 and earlier keep the read planned for one query's pushed filters on the
    DataFrame and reuse it for the DataFrame's later queries, which then miss rows. With it
    on, load a new DataFrame for each query (see ``docs/spark.md``).
    """
    if log_level is None:
        log_level = logging.getLogger("mqcore").getEffectiveLevel()
    env = {LOG_LEVEL_ENV: logging.getLevelName(log_level)}
    if filter_pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        env[PUSHDOWN_ENV] = "1"
    with worker_env(spark, env):
        spark.dataSource.register(MqcoreDataSource)
