"""The writer publishing DataFrame rows into a live broker over AMQP with confirms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.broker import BrokerThread


def _declare(broker: BrokerThread, queue: str) -> None:
    connection = broker.amqp()
    try:
        connection.channel().queue_declare(queue, durable=True)
    finally:
        connection.close()


def _drain(broker: BrokerThread, queue: str) -> list[tuple[bytes, dict[str, Any] | None]]:
    connection = broker.amqp()
    out: list[tuple[bytes, dict[str, Any] | None]] = []
    try:
        channel = connection.channel()
        while True:
            method, props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append((body, props.headers))
    finally:
        connection.close()


def test_every_row_arrives_from_several_tasks(spark: Any, live: BrokerThread) -> None:
    _declare(live, "written")
    rows = [("/queue/written", f"row {i}", {"i": str(i)}) for i in range(300)]
    df = spark.createDataFrame(rows, "destination STRING, body STRING, headers MAP<STRING,STRING>")
    df.repartition(3).write.format("herald").mode("append").option("url", live.url).save()
    assert live.queue_count("written") == 300  # confirmed before the job committed
    got = _drain(live, "written")
    assert sorted(body for body, _ in got) == sorted(f"row {i}".encode() for i in range(300))
    assert {h["i"] for _, h in got if h is not None} == {str(i) for i in range(300)}


def test_a_row_no_queue_takes_fails_the_job(spark: Any, live: BrokerThread) -> None:
    df = spark.createDataFrame([("nowhere-at-all", b"x")], "routing_key STRING, body BINARY")
    with pytest.raises(Exception, match="no queue took a message"):
        df.write.format("herald").mode("append").option("url", live.url).save()


def test_stream_writer_publishes_each_micro_batch(
    spark: Any, live: BrokerThread, tmp_path: Path
) -> None:
    _declare(live, "piped")
    source = (
        spark.readStream.format("herald")
        .option("destination", "orders")
        .option("startingOffsets", "earliest")
        .load(str(live.data_dir))
        .selectExpr("'piped' AS routing_key", "body")
    )
    query = (
        source.writeStream.format("herald")
        .option("url", live.url)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    from tests.pipeline.conftest import AMQP_COUNT

    assert live.queue_count("piped") == AMQP_COUNT
