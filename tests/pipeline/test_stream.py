"""Streaming reads tailing a live broker's data dir: micro-batches, restart, data loss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from herald.pipeline.log_view import open_log
from herald.pipeline.stream import DataLossError, HeraldStreamReader
from tests.pipeline.broker import BrokerThread
from tests.pipeline.datadir import write_store


def _publish(broker: BrokerThread, queue: str, first: int, count: int) -> None:
    connection = broker.amqp()
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for i in range(first, first + count):
            channel.basic_publish(
                "", queue, f"s{i}".encode(), pika.BasicProperties(delivery_mode=2)
            )
    finally:
        connection.close()


def _stream(spark: Any, path: Path, queue: str, **options: str) -> Any:
    reader = spark.readStream.format("herald").option("destination", queue)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(path))


def test_three_micro_batches_then_a_restart_from_the_checkpoint(
    spark: Any, live: BrokerThread, tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start() -> Any:
        return (
            _stream(spark, live.data_dir, "stream-q", startingOffsets="earliest")
            .select("offset", "body")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    query = start()
    try:
        for batch in range(3):
            _publish(live, "stream-q", batch * 10, 10)
            query.processAllAvailable()
        with_rows = [p for p in query.recentProgress if p["numInputRows"] > 0]
        assert len(with_rows) >= 3
    finally:
        query.stop()
    _publish(live, "stream-q", 30, 10)  # while the query is down
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).collect()
    bodies = sorted(r["body"] for r in rows)
    assert len(rows) == 40  # no duplicate, no gap
    assert bodies == sorted(f"s{i}".encode() for i in range(40))
    offsets = [r["offset"] for r in rows]
    assert len(set(offsets)) == 40


def test_max_records_per_trigger_bounds_each_batch(spark: Any, live: BrokerThread) -> None:
    _publish(live, "limited-q", 0, 25)
    query = (
        _stream(
            spark, live.data_dir, "limited-q", startingOffsets="earliest", maxRecordsPerTrigger="40"
        )
        .writeStream.format("memory")
        .queryName("limited")
        .start()
    )
    try:
        query.processAllAvailable()
        sizes = [p["numInputRows"] for p in query.recentProgress]
    finally:
        query.stop()
    assert spark.sql("select count(*) from limited").collect()[0][0] == 25
    assert len(sizes) > 1 and max(sizes) <= 40


def test_latest_and_timestamp_starting_positions(live: BrokerThread) -> None:
    path = str(live.data_dir)
    view = open_log(live.data_dir)
    latest = HeraldStreamReader({"path": path, "startingOffsets": "latest"}).initialOffset()
    assert latest == {"offset": view.end}
    earliest = HeraldStreamReader({"path": path, "startingOffsets": "earliest"}).initialOffset()
    assert earliest == {"offset": view.start}
    future = HeraldStreamReader({"path": path, "startingTimestamp": "2999-01-01T00:00:00"})
    assert future.initialOffset() == {"offset": view.end}
    past = HeraldStreamReader({"path": path, "startingTimestamp": "0"})
    assert past.initialOffset()["offset"] < view.end
    with pytest.raises(ValueError, match="no record starts"):
        HeraldStreamReader({"path": path, "startingOffsets": str(view.start + 8)}).initialOffset()


def test_a_deleted_segment_is_an_error_or_skipped(tmp_path: Path) -> None:
    copy = tmp_path / "data"
    write_store(copy, 3000)
    view = open_log(copy)
    assert len(view.segments) >= 3
    first = view.path_of(view.segments[0])
    first.unlink()  # as retention would
    strict = HeraldStreamReader({"path": str(copy), "startingOffsets": "earliest"})
    with pytest.raises(DataLossError, match="deleted by retention"):
        strict.latestOffset({"offset": view.segments[0]}, ReadAllAvailable())
    lenient = HeraldStreamReader({"path": str(copy), "failOnDataLoss": "false"})
    end = lenient.latestOffset({"offset": view.segments[0]}, ReadAllAvailable())
    assert end == {"offset": open_log(copy).end}
    parts = lenient.partitions({"offset": view.segments[0]}, end)
    rows = sum(b.num_rows for p in parts for b in p.batches())
    assert 0 < rows < 3000  # what still exists is read; the deleted segment is skipped
