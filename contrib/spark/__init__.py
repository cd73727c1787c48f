"""mqcore topics in Spark: the ``mqcore`` PySpark data source, behind ``mqcore[spark]``.

>>> from mqcore.contrib.spark import register      # doctest: +SKIP
>>> register(spark)
>>> spark.read.format("mqcore").option("path", "data").option("topic", "T").load()

Spark starts its Python workers with ``PYSPARK_PYTHON`` (``python3`` on the PATH unless
set): point it at the interpreter mqcore is installed in. See ``docs/spark.md``.
"""

from __future__ import annotations

from typing import Any

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        f"mqcore.contrib.spark needs pyspark and pyarrow ({exc.name} is missing): "
        f"pip install 'mqcore[spark]'"
    ) from exc

from .options import ReadOptions, Slice
from .sink import REPLAY_ID
from .source import SCHEMA, MqcoreDataSource

__all__ = ["REPLAY_ID", "SCHEMA", "MqcoreDataSource", "ReadOptions", "Slice", "register"]


def register(spark: Any) -> None:
    """Make ``format("mqcore")`` available in the SparkSession ``spark``.

    Also turns on Python data source filter pushdown (off by default in Spark), which the
    source uses to read only the queues, offsets, times and tags a query selects.
    """
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(MqcoreDataSource)
