"""Makes `spark.read.format("herald")` work in any SparkSession, with no register() call.

PySpark 4 looks for Python data sources by itself: the first time a session needs one, a
Python worker imports every top-level module whose name starts with `pyspark_` and registers
its `DefaultSource` (pyspark/sql/worker/lookup_data_sources.py). This module is that hook
for herald, installed with `heraldmq` (the `spark` extra brings pyspark). It stays tiny:
every such module is imported in each lookup.
"""

from herald.pipeline.source import HeraldDataSource as DefaultSource

__all__ = ["DefaultSource"]
