"""Batch reads of a live broker's data dir written over AMQP, MQTT and STOMP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from herald.pipeline.log_view import open_log
from herald.pipeline.options import ReadOptions
from herald.pipeline.read import plan, read_split
from herald.pipeline.records import Segment
from herald.storage.record import MessageRecord, decode
from tests.pipeline.conftest import AMQP_COUNT, MQTT_COUNT, STOMP_COUNT


def _rows(spark: Any, path: Path, **options: str) -> list[Any]:
    reader = spark.read.format("herald")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(path)).collect()


def test_every_protocol_is_read_with_its_names_and_bodies(spark: Any, live_dir: Path) -> None:
    df = spark.read.format("herald").load(str(live_dir))
    counts = {r["protocol"]: r["count"] for r in df.groupBy("protocol").count().collect()}
    assert counts == {"amqp": 2 * AMQP_COUNT, "mqtt": MQTT_COUNT, "stomp": STOMP_COUNT}
    orders = df.where("queue = 'orders'").orderBy("queue_offset").collect()
    assert [r["body"] for r in orders] == [f"order {i}".encode() for i in range(AMQP_COUNT)]
    first = orders[0]
    assert first["vhost"] == "/" and first["exchange"] == "" and first["routing_key"] == "orders"
    assert first["message_id"] == "order-0" and first["persistent"]
    assert first["headers"] == {"n": "0", "tag": "x"}
    assert first["store_time"] >= first["born_time"].replace(microsecond=0)
    mqtt = df.where("protocol = 'mqtt'").orderBy("offset").collect()
    assert {r["exchange"] for r in mqtt} == {"amq.topic"}
    assert {r["routing_key"] for r in mqtt} == {"sensors.t1"}
    assert [r["body"] for r in mqtt] == [f"reading {i}".encode() for i in range(MQTT_COUNT)]
    stomp = df.where("protocol = 'stomp'").orderBy("offset").collect()
    assert [r["body"] for r in stomp] == [f"frame {i}".encode() for i in range(STOMP_COUNT)]
    assert {r["queue"] for r in stomp} == {"stomp-q"}
    assert stomp[3]["headers"]["x-i"] == "3"


def test_a_fanout_message_is_one_row_naming_every_target(spark: Any, live_dir: Path) -> None:
    rows = _rows(spark, live_dir, destination="fan")
    assert len(rows) == AMQP_COUNT
    assert all(sorted(r["queues"]) == ["fan-a", "fan-b"] for r in rows)


def test_filters_and_text_bodies(spark: Any, live_dir: Path) -> None:
    rows = _rows(spark, live_dir, destination="stomp-q,orders", bodyAsText="true")
    assert len(rows) == AMQP_COUNT + STOMP_COUNT
    assert {type(r["body"]) for r in rows} == {str}
    offsets = sorted(r["offset"] for r in rows)
    middle = offsets[len(offsets) // 2]
    later = _rows(spark, live_dir, destination="stomp-q,orders", startOffset=str(middle))
    assert sorted(r["offset"] for r in later) == offsets[len(offsets) // 2 :]
    times = sorted(r["store_time"] for r in rows)
    cut = times[-1]
    after = _rows(spark, live_dir, destination="stomp-q,orders", startTime=cut.isoformat())
    assert after and all(r["store_time"] >= cut for r in after)
    assert _rows(spark, live_dir, destination="no-such-queue") == []


def test_properties_are_decoded_by_the_protocol_codecs(spark: Any, live_dir: Path) -> None:
    rows = _rows(spark, live_dir, destination="orders", decodeProperties="true")
    assert rows[0]["properties"]["content_type"] == "text/plain"
    assert rows[0]["properties"]["message_id"].startswith("order-")


def test_small_splits_read_every_record_exactly_once(spark: Any, live_dir: Path) -> None:
    whole = sorted(r["offset"] for r in _rows(spark, live_dir))
    split = sorted(r["offset"] for r in _rows(spark, live_dir, splitBytes="4096"))
    assert split == whole
    view = open_log(live_dir)
    assert len(view.segments) > 1  # the data spans several segments
    assert len(plan(view, ReadOptions(path=live_dir, split_bytes=4096))) > len(view.segments)


def test_rows_match_record_py_decoding_of_the_same_records(live_dir: Path) -> None:
    """The columns equal what herald's own `record.decode` reads from the same bytes."""
    view = open_log(live_dir)
    options = ReadOptions(path=live_dir)
    checked = 0
    for split in plan(view, options):
        for batch in read_split(view.root, split, options, view.queues):
            for row in batch.to_pylist():
                with Segment(view.path_of(split.segment), split.segment) as segment:
                    at = row["offset"] - split.segment
                    record = decode(segment.data[at : at + row["stored_size"]], row["offset"])
                assert isinstance(record, MessageRecord)
                assert row["exchange"] == record.exchange
                assert row["routing_key"] == record.routing_key
                assert row["protocol"] == record.protocol
                assert row["message_id"] == record.message_id
                assert (row["queue_id"], row["queue_offset"]) == record.targets[0]
                assert row["body"] == record.raw[len(record.raw) - record.body_size :]
                assert int(row["store_time"].timestamp() * 1000) == record.store_ms
                checked += 1
    assert checked == 2 * AMQP_COUNT + MQTT_COUNT + STOMP_COUNT


def test_the_arrow_schema_is_what_spark_expects(spark: Any) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType, _parse_datatype_string

    from herald.pipeline.schema import arrow_schema, ddl

    for text in (False, True):
        struct = _parse_datatype_string(ddl(text))
        assert isinstance(struct, StructType)
        expected = to_arrow_schema(struct, timezone="UTC")
        assert arrow_schema(text) == expected


def test_the_broker_and_the_cli_never_import_spark() -> None:
    import subprocess
    import sys

    code = (
        "import sys, herald.core.cli, herald.core.broker, herald.pipeline.cli;"
        "assert not {'pyspark', 'pyarrow'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
