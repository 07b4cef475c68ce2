"""The jobs (stats, export, replay) through the real `herald pipeline` commands, in-process
(the CLI reuses the active SparkSession instead of starting a JVM of its own)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from herald.core.cli import main
from tests.pipeline.broker import BrokerThread
from tests.pipeline.datadir import QUEUES, write_store

COUNT = 600


@pytest.fixture(scope="module")
def small_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jobs") / "data"
    write_store(path, COUNT)
    return path


def _run(*args: str) -> Any:
    result = CliRunner().invoke(main, ["pipeline", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_stats_counts_bytes_percentiles_and_latency(spark: Any, small_dir: Path) -> None:
    result = _run("stats", str(small_dir), "--json")
    data = json.loads(result.stdout)
    per = {d["destination"]: d for d in data["destinations"]}
    assert sorted(per) == sorted(QUEUES)
    assert sum(d["messages"] for d in per.values()) == COUNT
    assert {d["size_p50"] for d in per.values()} == {100}
    assert all(d["latency_p99_ms"] >= 0 for d in per.values())
    assert sum(w["messages"] for w in data["windows"]) == COUNT
    table = _run("stats", str(small_dir), "--destination", "alpha").output
    assert "herald pipeline stats:" in table.splitlines()[0]  # the progress line
    assert "destinations:" in table and "alpha" in table and "beta" not in table


def test_export_writes_parquet(spark: Any, small_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    result = _run("export", str(small_dir), "--to", "parquet", str(out))
    assert "exported:" in result.output
    back = spark.read.parquet(str(out))
    assert back.count() == COUNT
    assert sorted(r["queue"] for r in back.select("queue").distinct().collect()) == sorted(QUEUES)


def test_replay_publishes_into_a_broker(spark: Any, small_dir: Path, live: BrokerThread) -> None:
    connection = live.amqp()
    try:
        connection.channel().queue_declare("beta", durable=True)
    finally:
        connection.close()
    before = live.queue_count("beta")
    result = _run("replay", str(small_dir), "--to", live.url, "--destination", "beta")
    assert "replayed:" in result.output
    assert live.queue_count("beta") == before + COUNT // len(QUEUES)


def test_a_path_that_is_no_data_dir_is_one_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["pipeline", "stats", str(tmp_path)])
    assert result.exit_code == 2
    assert "is not a herald data dir" in result.output
