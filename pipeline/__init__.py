"""herald's data pipeline on Apache Spark: a PySpark data source named `herald` over the
commit log (batch and streaming reads), a writer publishing rows into a broker over AMQP, and
ready-made jobs (stats, export, replay). See docs/pipeline.md.

Only this package imports pyspark and pyarrow (the `spark` extra); the broker never does, and
importing `herald.pipeline` itself imports neither, so `herald pipeline` can tell the user to
install the extra.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HeraldDataSource", "register"]


def register(spark: Any) -> None:
    """Register the `herald` format with a SparkSession."""
    from herald.pipeline.source import HeraldDataSource

    spark.dataSource.register(HeraldDataSource)


def __getattr__(name: str) -> Any:
    if name == "HeraldDataSource":
        from herald.pipeline.source import HeraldDataSource

        return HeraldDataSource
    raise AttributeError(name)
