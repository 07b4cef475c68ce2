"""The ready-made jobs: stats, export and replay, on the DataFrame API over `format("herald")`.

Each returns plain Python results (rows as dicts) so the CLI prints them and tests check
them; none keeps a SparkSession of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from herald.pipeline.log_view import LogView, open_log
from herald.pipeline.options import ReadOptions

PERCENTILES = (0.5, 0.9, 0.99)


@attrs.frozen
class Scope:
    """What a job reads: a data dir, or a cluster (its cluster.json or name server URL: every
    group, with a `group` column), and the reader's options (filters)."""

    data_dir: Path | None
    options: Mapping[str, str] = attrs.field(factory=dict)
    cluster: str | None = None

    def frame(self, spark: Any) -> Any:
        reader = spark.read.format("herald")
        for key, value in self.options.items():
            reader = reader.option(key, value)
        if self.cluster is not None:
            return reader.option("cluster", self.cluster).load()
        return reader.load(str(self.data_dir))

    def progress(self, job: str) -> str:
        """What the job is about to read: one line, and one more per group of a cluster."""
        filters = ", ".join(f"{k}={v}" for k, v in sorted(self.options.items())) or "none"
        if self.cluster is None:
            assert self.data_dir is not None
            read = ReadOptions.from_options({"path": str(self.data_dir), **self.options})
            view = open_log(self.data_dir, read.durable_only)
            return f"herald pipeline {job}: {self.data_dir}: {_extent(view)}, filters: {filters}"
        from herald.pipeline.cluster_layout import ClusterOptions, sources

        options = {**self.options, "cluster": self.cluster}
        read = ReadOptions.from_options(options)
        chosen = sources(ClusterOptions.from_options(options) or ClusterOptions(self.cluster))
        head = f"herald pipeline {job}: cluster {self.cluster}: {len(chosen)} group(s)"
        lines = [f"{head}, filters: {filters}"]
        for group, node in chosen.items():
            assert node.data_dir is not None
            view = open_log(node.data_dir, read.durable_only)
            lines.append(f"  group {group}: from {node.describe()}: {_extent(view)}")
        return "\n".join(lines)


def _extent(view: LogView) -> str:
    size = view.end - view.start
    return (
        f"{len(view.segments)} segment(s), log positions {view.start}..{view.end} "
        f"({size / 1e6:.1f} MB)"
    )


def _destinations(df: Any) -> Any:
    """One row per (message, target queue); a queue whose name is unknown shows as #id."""
    from pyspark.sql import functions as F

    named = F.when(F.size("queues") > 0, F.col("queues")).otherwise(F.array(F.lit(None)))
    return df.withColumn("destination", F.explode(named)).withColumn(
        "destination",
        F.coalesce(F.col("destination"), F.concat(F.lit("#"), F.col("queue_id").cast("string"))),
    )


def stats(spark: Any, scope: Scope, window: str = "1 minute") -> dict[str, list[dict[str, Any]]]:
    """Messages and bytes per destination per store-time window; body size percentiles and
    publish-to-store latency (store time - born time, ms) per destination. For a cluster,
    per group and destination, and a table of the groups."""
    from pyspark.sql import functions as F

    frame = scope.frame(spark)
    keys = ["group", "destination"] if scope.cluster is not None else ["destination"]
    df = _destinations(frame)
    df = df.withColumn(
        "latency_ms",
        (F.unix_micros("store_time") - F.unix_micros("born_time")) / F.lit(1000.0),
    )
    windows = (
        df.groupBy(F.window("store_time", window).alias("w"), *keys)
        .agg(F.count("*").alias("messages"), F.sum("stored_size").alias("bytes"))
        .select(F.col("w.start").alias("window_start"), *keys, "messages", "bytes")
        .orderBy("window_start", *keys)
    )
    sizes = (
        df.groupBy(*keys)
        .agg(
            F.count("*").alias("messages"),
            F.sum("body_size").alias("body_bytes"),
            F.percentile_approx("body_size", list(PERCENTILES)).alias("size_p"),
            F.percentile_approx("latency_ms", list(PERCENTILES)).alias("latency_p"),
            F.max("latency_ms").alias("latency_max_ms"),
        )
        .orderBy(*keys)
    )
    per_destination = []
    for row in sizes.collect():
        item = {key: row[key] for key in keys}
        item.update(messages=row["messages"], body_bytes=row["body_bytes"])
        for p, size, latency in zip(PERCENTILES, row["size_p"], row["latency_p"], strict=True):
            item[f"size_p{int(p * 100)}"] = size
            item[f"latency_p{int(p * 100)}_ms"] = latency
        item["latency_max_ms"] = row["latency_max_ms"]
        per_destination.append(item)
    out = {
        "windows": [r.asDict() for r in windows.collect()],
        "destinations": per_destination,
    }
    if scope.cluster is not None:  # messages (not per target queue) and log bytes per group
        groups = frame.groupBy("group").agg(
            F.count("*").alias("messages"),
            F.sum("body_size").alias("body_bytes"),
            F.sum("stored_size").alias("bytes"),
        )
        out["groups"] = [r.asDict() for r in groups.orderBy("group").collect()]
    return out


def export(
    spark: Any, scope: Scope, out: Path, fmt: str = "parquet", partition_by: str | None = None
) -> list[dict[str, Any]]:
    """Write the messages to `out` (Parquet by default, overwriting); returns rows per queue."""
    from pyspark.sql import functions as F

    df = scope.frame(spark).cache()
    try:
        writer = df.write.mode("overwrite").format(fmt)
        if partition_by:
            writer = writer.partitionBy(partition_by)
        writer.save(str(out))
        counts = (
            df.groupBy("vhost", "queue")
            .agg(F.count("*").alias("messages"), F.sum("body_size").alias("body_bytes"))
            .orderBy("vhost", "queue")
            .collect()
        )
    finally:
        df.unpersist()
    return [r.asDict() for r in counts]


def replay(spark: Any, scope: Scope, url: str) -> list[dict[str, Any]]:
    """Publish the selected messages again, to their original exchange and routing key, into
    the broker at `url` (AMQP, confirmed); returns what was published per route."""
    from pyspark.sql import functions as F

    df = scope.frame(spark).select("exchange", "routing_key", "body", "headers", "message_id")
    df = df.cache()
    try:
        df.write.format("herald").mode("append").option("url", url).save()
        counts = (
            df.groupBy("exchange", "routing_key")
            .agg(F.count("*").alias("messages"))
            .orderBy("exchange", "routing_key")
            .collect()
        )
    finally:
        df.unpersist()
    return [r.asDict() for r in counts]


def table(rows: list[Mapping[str, Any]]) -> str:
    """Rows as an aligned text table."""
    if not rows:
        return "(no rows)"
    names = list(rows[0])
    text = [[_cell(r.get(n)) for n in names] for r in rows]
    widths = [max(len(n), *(len(t[i]) for t in text)) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)) for t in text]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
