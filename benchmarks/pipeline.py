"""Batch reader benchmark: records/s of `spark.read.format("herald")` against plain
single-process Python reading the same segments, in the same run.

    python benchmarks/pipeline.py [--sizes 1000000,10000000] [--body 100] [--repeat 3]
                                  [--warmup 2] [--variants count,nocrc] [--segment-mib 256]
                                  [--split-mib N] [--dir PATH] [--keep]

Prints one JSON object. For each size, a data dir is written with the commit-log store
directly (`store.append`, no broker, no sockets: the fastest way to get N records), one
durable queue per three messages. Then, alternating, `repeat` times each:

- `python`: one process, the pipeline's own split reader (`read.read_split`: the record scan
  with CRC checks and the Arrow columns) over every split, in order; the baseline;
- `python_scan`: the same process, only the scan (positions of valid message records, CRC
  checked), i.e. the least any reader of this format does per record in Python;
- `spark`: `spark.read.format("herald").load(dir).write.format("noop")` in a local[2]
  session: every column of every record is materialised as a Spark row (with CRC checks,
  the reader's defaults). Spark's own start-up, the first (cold) query and `warmup` more
  queries are not timed: the JVM compiles Spark's code paths over the first queries (a
  1 M query takes up to 1.6x as long then); their times are given as `spark_warmup_s`.

`--variants` adds Spark figures of the same read: `count` (`df.count()`: the Python data
source cannot prune columns, so the reader still builds every column; Spark drops them
after its conversion to rows) and `nocrc` (`verifyCrc=false`). `--split-mib` sets the
reader's `splitBytes` (default: the reader's own, 128 MiB).

Rates are records per wall-clock second, medians over the repeats; CPU seconds of this
process are given for the Python paths. The machine is shared: compare figures of one run.
The issue's target: spark >= 0.9 M records/s on 2 cores.
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

import trio

from herald.core.message import CodecRegistry, Message, Properties
from herald.core.store import QueueTarget
from herald.pipeline.log_view import open_log
from herald.pipeline.options import SPLIT_BYTES, ReadOptions
from herald.pipeline.read import plan, read_split
from herald.pipeline.records import Segment
from herald.pipeline.scan import message_starts
from herald.storage.commitlog import CommitLogStore
from herald.storage.commitlog_config import CommitLogConfig

MIB = 1 << 20


def write(data_dir: Path, count: int, body: int, segment_size: int) -> float:
    """Write `count` persistent messages with the store; returns seconds taken."""

    async def main() -> None:
        config = CommitLogConfig(segment_size=segment_size, index=False)
        store = CommitLogStore(data_dir / "store", config)
        await store.open(CodecRegistry())
        for q in (1, 2, 3):
            record = {"vhost": "/", "name": f"q{q}", "auto_delete": False, "arguments": {}}
            store.put_metadata("queue", f'["/","q{q}"]', {**record, "store_id": q})
        props, payload, ticket = Properties(delivery_mode=2), b"x" * body, 0
        for i in range(count):
            message = Message.native(payload, routing_key=f"q{i % 3 + 1}", properties=props)
            ticket = store.append(message, [QueueTarget(i % 3 + 1, i // 3)])
            if i % 200_000 == 0:
                await store.wait_durable(ticket)
        await store.wait_durable(ticket)
        await store.close()

    began = time.perf_counter()
    trio.run(main)
    return time.perf_counter() - began


def python_read(data_dir: Path, split_bytes: int) -> tuple[int, float, float]:
    """(rows, wall s, cpu s) of reading every split in this process."""
    options = ReadOptions(path=data_dir, split_bytes=split_bytes)
    wall, cpu = time.perf_counter(), time.process_time()
    view = open_log(data_dir)
    rows = 0
    for split in plan(view, options):
        for batch in read_split(view.root, split, options, view.queues):
            rows += batch.num_rows
    return rows, time.perf_counter() - wall, time.process_time() - cpu


def python_scan(data_dir: Path) -> tuple[int, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    view = open_log(data_dir)
    rows = 0
    for start in view.segments:
        with Segment(view.path_of(start), start) as segment:
            limit = min(view.end - start, segment.size)
            rows += len(message_starts(segment, 0, limit).starts)
    return rows, time.perf_counter() - wall, time.process_time() - cpu


def spark_read(spark: Any, data_dir: Path, split_bytes: int, variant: str = "") -> float:
    """Wall seconds of one Spark query reading every record (see the module docstring)."""
    reader = spark.read.format("herald").option("splitBytes", str(split_bytes))
    if variant == "nocrc":
        reader = reader.option("verifyCrc", "false")
    began = time.perf_counter()
    df = reader.load(str(data_dir))
    if variant == "count":
        df.count()
    else:
        df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - began


def run_size(spark: Any, root: Path, count: int, args: argparse.Namespace) -> dict[str, Any]:
    data_dir = root / f"n{count}"
    wrote = write(data_dir, count, args.body, args.segment_mib * MIB)
    view = open_log(data_dir)
    out: dict[str, Any] = {
        "records": count,
        "log_bytes": view.end - view.start,
        "segments": len(view.segments),
        "write_s": round(wrote, 2),
    }
    split = args.split_mib * MIB if args.split_mib else SPLIT_BYTES
    out["splits"] = len(plan(view, ReadOptions(path=data_dir, split_bytes=split)))
    rows, _, _ = python_read(data_dir, split)  # warm the page cache, check the count
    if rows != count:
        raise SystemExit(f"read {rows} rows, wrote {count}")
    spark_read(spark, data_dir, split)  # the cold query: Python workers start
    warmup = [spark_read(spark, data_dir, split) for _ in range(args.warmup)]
    out["spark_warmup_s"] = [round(t, 3) for t in warmup]
    times: dict[str, list[float]] = {"python": [], "python_cpu": [], "scan": [], "scan_cpu": []}
    times["spark"] = []
    variants = [v for v in args.variants.split(",") if v]
    for variant in variants:
        times[f"spark_{variant}"] = []
    for _ in range(args.repeat):
        _, wall, cpu = python_read(data_dir, split)
        times["python"].append(wall)
        times["python_cpu"].append(cpu)
        _, wall, cpu = python_scan(data_dir)
        times["scan"].append(wall)
        times["scan_cpu"].append(cpu)
        times["spark"].append(spark_read(spark, data_dir, split))
        for variant in variants:
            times[f"spark_{variant}"].append(spark_read(spark, data_dir, split, variant))
    for name, values in times.items():
        median = statistics.median(values)
        out[f"{name}_s"] = round(median, 3)
        if not name.endswith("_cpu"):
            out[f"{name}_records_per_s"] = round(count / median)
    out["spark_over_python"] = round(out["python_s"] / out["spark_s"], 2)
    if not args.keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2, help="Untimed Spark queries.")
    parser.add_argument("--variants", default="", help="More Spark figures: count,nocrc.")
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--split-mib", type=int, default=0, help="0: the reader's default.")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="Keep the data dirs.")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="herald-bench-pipeline-"))
    from herald.pipeline.session import local_session

    spark = local_session(memory="2g", app="herald-bench-pipeline")
    try:
        results = [run_size(spark, root, int(n), args) for n in args.sizes.split(",")]
    finally:
        spark.stop()
        if args.dir is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    json.dump(
        {
            "benchmark": "pipeline_batch_read",
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "body_bytes": args.body,
            "segment_mib": args.segment_mib,
            "split_mib": (args.split_mib * MIB if args.split_mib else SPLIT_BYTES) // MIB,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "results": results,
        },
        sys.stdout,
        indent=2,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
