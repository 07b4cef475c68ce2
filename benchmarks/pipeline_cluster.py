"""Spark over a cluster: records/s of `spark.read.format("herald").option("cluster", ...)`
reading every group of a cluster, each record once.

    python benchmarks/pipeline_cluster.py [--groups 3] [--per-group 1000000] [--body 100]
                                          [--repeat 3] [--warmup 2] [--segment-mib 256]
                                          [--dir PATH] [--keep]

Prints one JSON object. The cluster is laid out as `herald cluster dev --nodes G --groups G`
lays it out: data dirs `DIR/n1` ... `DIR/nG`, one master per group, and `DIR/cluster.json`
naming them. Each data dir is written with the commit-log store directly (as
benchmarks/pipeline.py does: millions of records over pika would take minutes per group and
measure the broker, not the reader); the reader sees exactly what it reads from a running
cluster's nodes, files. `cluster.json` names no name server, so the roles are the file's.

Timed, alternating, `repeat` times each (after a cold query and `warmup` untimed ones):
- `spark_cluster`: every group's log into the `noop` sink (every column and the `group`
  column materialised, CRCs checked);
- `spark_one_group`: the same read of one group's data dir alone (`.load(DIR/n1)`), the
  single data dir figure of the same run, for comparison.

Untimed, once: each record is read once (the count of distinct (group, offset) pairs is the
number written, and each group has `per_group` rows). Rates are records per wall-clock
second, medians over the repeats. The issue's figure: >= 0.9 M records/s over 3 groups.
`*_cpu_s` is the CPU time (user + system) of this process and its children (Spark's JVM and
its Python workers) over each timed query, medians: on a shared machine the wall-clock rate
follows the load, the CPU per record much less.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from pipeline import write  # benchmarks/pipeline.py: the store-written data dir

MIB = 1 << 20


def lay_out(root: Path, groups: int, per_group: int, body: int, segment: int) -> float:
    """G data dirs and a cluster.json; returns the seconds the writes took."""
    nodes, took = [], 0.0
    for index in range(1, groups + 1):
        data_dir = root / f"n{index}"
        took += write(data_dir, per_group, body, segment)
        nodes.append(
            {"name": f"n{index}", "group": f"g{index}", "role": "master", "data_dir": str(data_dir)}
        )
    info = {"cluster": "bench", "dir": str(root), "nameserver": None, "nodes": nodes}
    (root / "cluster.json").write_text(json.dumps(info, indent=2) + "\n")
    return took


def cpu_seconds() -> float:
    """User + system CPU of this process and its live descendants (the JVM, the workers)."""
    total = 0.0
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def timed(reader: Any, path: str | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of one query into the noop sink."""
    began, cpu = time.perf_counter(), cpu_seconds()
    df = reader.load() if path is None else reader.load(path)
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - began, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--per-group", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2, help="Untimed Spark queries.")
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="Keep the data dirs.")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="herald-bench-pipeline-cluster-"))
    root.mkdir(parents=True, exist_ok=True)
    total = args.groups * args.per_group
    load_start = os.getloadavg()[0]
    from herald.pipeline.session import local_session

    spark = local_session(memory="2g", app="herald-bench-pipeline-cluster")
    try:
        wrote = lay_out(root, args.groups, args.per_group, args.body, args.segment_mib * MIB)
        cluster = spark.read.format("herald").option("cluster", str(root / "cluster.json"))
        one = spark.read.format("herald")
        df = cluster.load()
        distinct = df.select("group", "offset").distinct().count()  # also the cold query
        per_group = {r["group"]: r["count"] for r in df.groupBy("group").count().collect()}
        once = distinct == total and set(per_group.values()) == {args.per_group}
        if not once:
            raise SystemExit(f"read {distinct} distinct records {per_group}, wrote {total}")
        warmup = [timed(cluster)[0] for _ in range(args.warmup)]
        times: dict[str, list[tuple[float, float]]] = {"spark_cluster": [], "spark_one_group": []}
        for _ in range(args.repeat):
            times["spark_cluster"].append(timed(cluster))
            times["spark_one_group"].append(timed(one, str(root / "n1")))
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    out: dict[str, Any] = {
        "benchmark": "pipeline_cluster_read",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg_1m_start": load_start,
        "groups": args.groups,
        "records_per_group": args.per_group,
        "records": total,
        "body_bytes": args.body,
        "segment_mib": args.segment_mib,
        "write_s": round(wrote, 2),
        "each_record_once": once,
        "rows_per_group": per_group,
        "spark_warmup_s": [round(t, 3) for t in warmup],
        "repeat": args.repeat,
    }
    out["load_avg_1m_end"] = os.getloadavg()[0]
    for name, values in times.items():
        median = statistics.median(wall for wall, _ in values)
        cpu = statistics.median(used for _, used in values)
        rows = total if name == "spark_cluster" else args.per_group
        out[f"{name}_s"] = round(median, 3)
        out[f"{name}_records_per_s"] = round(rows / median)
        out[f"{name}_cpu_s"] = round(cpu, 3)
        out[f"{name}_records_per_cpu_s"] = round(rows / cpu)
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
