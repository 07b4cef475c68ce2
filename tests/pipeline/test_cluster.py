"""The Spark reader over a whole cluster, on real processes: `herald cluster dev --nodes 3
--groups 3` (three masters, no slaves) and a group of a master and a slave (sync
replication), filled with pika through each master. Batch reads return each record once with
its group, from cluster.json or the name server; a stream's offsets are per group and a
restart resumes each group where it was; a group with a slave is read from the slave.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from herald.cluster.nameserver.wire import BadRequest, parse_registration, registration_json
from herald.core.cli import main
from herald.pipeline.cluster_layout import ClusterError, ClusterOptions, sources
from herald.pipeline.options import OptionError, ReadOptions
from herald.pipeline.source import HeraldPartition, HeraldReader
from tests.cluster.conftest import etcd as etcd  # the cluster tests' session etcd
from tests.cluster.ha_cluster import HACluster
from tests.cluster.harness import DevCluster, EtcdProcess, cluster_view, wait_until
from tests.pipeline.clusters import (
    count_rows,
    dev_cluster,
    log_end,
    node_entry,
    port,
    publish,
    source_offsets,
    store_dir,
)
from tests.ports import free_port

PER_GROUP = 50
GROUPS = ("g1", "g2", "g3")


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory, etcd: EtcdProcess) -> Iterator[DevCluster]:
    """Three groups of one node each; `PER_GROUP` messages published to each master."""
    root = tmp_path_factory.mktemp("three") / "D"
    with dev_cluster(root, etcd.endpoint, 3, "--groups", "3") as dev:
        for entry in dev.info["nodes"]:
            group = entry["group"]
            publish(port(dev, entry["name"]), [f"{group}-{i}" for i in range(PER_GROUP)])
        yield dev


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, etcd: EtcdProcess) -> Iterator[HACluster]:
    """One group: a master and a slave in its sync set."""
    with HACluster(tmp_path_factory.mktemp("pair"), etcd.endpoint, 2, "sync") as group:
        group.wait_full_sync_set()
        yield group


def _expected(count: int = PER_GROUP) -> list[tuple[str, bytes]]:
    return sorted((g, f"{g}-{i}".encode()) for g in GROUPS for i in range(count))


def _rows(spark: Any, cluster: str, **options: str) -> list[tuple[str, bytes]]:
    reader = spark.read.format("herald").option("cluster", cluster)
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted((r["group"], bytes(r["body"])) for r in reader.load().collect())


def _roots(**options: str) -> set[str]:
    """The store dirs a batch read's partitions read (the driver's plan, no Spark job)."""
    reader = HeraldReader(
        ReadOptions.from_options(options), True, ClusterOptions.from_options(options)
    )
    parts = reader.partitions()
    assert parts and all(isinstance(p, HeraldPartition) for p in parts)
    return {p.root for p in parts if isinstance(p, HeraldPartition)}


def test_a_batch_read_returns_each_record_once_with_its_group(
    spark: Any, three: DevCluster
) -> None:
    rows = _rows(spark, str(three.root / "cluster.json"))
    assert rows == _expected()  # every record, once, each with the group it was published to
    df = spark.read.format("herald").option("cluster", str(three.root)).load()
    assert df.columns[-1] == "group"
    per_group = {r["group"]: r["count"] for r in df.groupBy("group").count().collect()}
    assert per_group == dict.fromkeys(GROUPS, PER_GROUP)


def test_the_name_server_gives_the_groups_and_their_data_dirs(
    spark: Any, three: DevCluster
) -> None:
    view = cluster_view(three.nameserver)
    assert view is not None
    registered = {n["node"]: n["data_dir"] for g in view["groups"] for n in g["nodes"]}
    assert registered == {
        n["name"]: str(Path(n["data_dir"]).resolve()) for n in three.info["nodes"]
    }
    url = f"http://{three.nameserver}"
    assert _rows(spark, url) == _expected()
    assert _rows(spark, url, groups="g2") == [r for r in _expected() if r[0] == "g2"]
    assert _roots(cluster=url) == {store_dir(three, n) for n in ("n1", "n2", "n3")}


def test_a_stream_keeps_an_offset_per_group_and_resumes_each(
    spark: Any, three: DevCluster, tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    cluster = str(three.root / "cluster.json")

    def start() -> Any:
        stream = (
            spark.readStream.format("herald")
            .option("cluster", cluster)
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "40")
            .load()
        )
        return (
            stream.select("group", "offset", "body")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    query = start()
    try:
        query.processAllAvailable()
        first = source_offsets(query)
    finally:
        query.stop()
    assert len(first) >= 3  # 150 records at most 40 per trigger
    assert all(sorted(o) == list(GROUPS) for o in first)  # a JSON map group -> offset
    ends = {entry["group"]: log_end(three, entry["name"]) for entry in three.info["nodes"]}
    assert all(0 < first[-1][g] <= ends[g] for g in GROUPS)
    n2 = node_entry(three, "n2")
    publish(port(three, "n2"), [f"g2-{i}" for i in range(PER_GROUP, PER_GROUP + 10)])
    query = start()  # from the checkpoint
    try:
        query.processAllAvailable()
        resumed = source_offsets(query)
        assert sum(p["numInputRows"] for p in query.recentProgress) == 10
    finally:
        query.stop()
    assert n2["group"] == "g2" and resumed[-1]["g2"] > first[-1]["g2"]
    assert all(resumed[-1][g] >= first[-1][g] for g in GROUPS)
    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r["group"], bytes(r["body"])) for r in rows)
    extra = [("g2", f"g2-{i}".encode()) for i in range(PER_GROUP, PER_GROUP + 10)]
    assert got == sorted(_expected() + extra)  # no duplicate, no gap, in every group
    assert len({(r["group"], r["offset"]) for r in rows}) == len(rows)


def test_stats_over_a_cluster_aggregates_per_group(spark: Any, three: DevCluster) -> None:
    result = CliRunner().invoke(
        main,
        ["pipeline", "stats", "--cluster", str(three.root / "cluster.json"), "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [g["group"] for g in data["groups"]] == list(GROUPS)
    assert all(g["messages"] >= PER_GROUP for g in data["groups"])
    assert {(d["group"], d["destination"]) for d in data["destinations"]} == {
        (g, "spark-cluster") for g in GROUPS
    }


def test_bad_clusters_are_clear_errors(spark: Any, three: DevCluster, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "cluster.json"
    with pytest.raises(ClusterError, match="does not exist"):
        sources(ClusterOptions(str(missing)))
    with pytest.raises(Exception, match="does not exist"):  # as Spark reports it
        spark.read.format("herald").option("cluster", str(missing)).load().collect()
    with pytest.raises(ClusterError, match=r"unknown group\(s\) g9; .* has g1, g2, g3"):
        sources(ClusterOptions(str(three.root), frozenset({"g9"})))
    with pytest.raises(ClusterError, match="no answer from the name server"):
        sources(ClusterOptions(f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(OptionError, match="not both"):
        ReadOptions.from_options({"path": str(tmp_path), "cluster": str(three.root)})
    result = CliRunner().invoke(main, ["pipeline", "stats", "--cluster", str(missing)])
    assert result.exit_code == 1 and "does not exist" in result.output


def test_a_group_with_a_slave_is_read_from_the_slave(spark: Any, pair: HACluster) -> None:
    state = pair.wait_full_sync_set()
    master = state["master"]
    slave = next(n for n in state["sync_set"] if n != master)
    bodies = [f"g1-{i}" for i in range(100)]
    publish(pair.port(master), bodies)  # sync: confirmed once the slave has them
    slave_dir = Path(node_entry(pair.dev, slave)["data_dir"])
    wait_until(lambda: count_rows(slave_dir) >= len(bodies), "the slave's log", 60.0)
    cluster = str(pair.dev.root / "cluster.json")
    assert _roots(cluster=cluster) == {store_dir(pair.dev, slave)}
    assert _rows(spark, cluster) == sorted(("g1", b.encode()) for b in bodies)
    assert _roots(cluster=cluster, readFrom="master") == {store_dir(pair.dev, master)}
    url = f"http://{pair.dev.nameserver}"
    assert _roots(cluster=url) == {store_dir(pair.dev, slave)}
    assert _rows(spark, url) == sorted(("g1", b.encode()) for b in bodies)


def test_a_registration_carries_an_absolute_data_dir() -> None:
    body = {"cluster": "c", "group": "g1", "node": "n1", "role": "slave", "data_dir": "/d/n1"}
    assert parse_registration(body).data_dir == "/d/n1"
    assert registration_json(parse_registration(body))["data_dir"] == "/d/n1"
    assert parse_registration({**body, "data_dir": None}).data_dir is None  # a node before it
    with pytest.raises(BadRequest) as caught:
        parse_registration({**body, "data_dir": "relative/n1"})
    assert caught.value.field == "data_dir"
