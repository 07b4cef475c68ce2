"""Commit-log HA: how fast a slave far behind catches up with its master.

    python benchmarks/ha_catchup.py [--mib 1024] [--size 1024] [--repeat 1]
        [--runs apply,apply_cpu,two_process,one_process,snapshot] [--no-message-id] [--profile]
        [--time-limit 1800] [--dir DIR] [--keep] [--json-only]

Issue 22's figures (CLUSTER.md §8.3): a slave 1 GiB behind catches up at >= 50 MB/s of 1 KiB
records; and the snapshot resync's MB/s.

The master's log: a child process appends `--mib` MiB of persistent `--size`-byte messages
(each its own message id, one queue) straight to a `ReplicatedCommitLogStore` of epoch 1
(the store a master runs, no kernel, no protocol: far faster to fill than AMQP publishes),
waits until they are durable and exits without closing the store (a crash, its only
checkpoint at offset 0). The master process then opens it: that open replays the whole log,
timed as `crash_replay` (what CLUSTER.md §10 quotes), and serves it for the runs below.

The slave starts empty each time (a new node: everything comes from the master) with the
store settings a node has by default (256 MiB segments, a checkpoint every 64 MiB, index on),
and a run ends once the slave's **flushed** offset (what it acks, `replication.flushed` of its
node key) reaches the master's log end. Runs (`--runs`):

- `two_process`: the faithful one. The master is a process of its own: `ClusterPort` +
  `HAMaster` (async gate, sync-set changes accepted without etcd) on the filled store; the
  slave is `Follower` (cluster/ha/slave.py) in this process, dialling the master's cluster
  port on loopback: HELLO, EPOCHS, START, DATA frames of <= 256 KiB, ReplicaWriter apply,
  flush + ACK after each batch. Each node has its own process (and core), as under `herald
  cluster dev`; etcd, the name server and the node keys are left out (they play no part in
  the stream).
- `one_process`: the same master and follower in one Trio process (the sender and the apply
  share one core).
- `apply`: no socket. The master's segment files are read with `pread` in the chunks the
  sender sends (<= 256 KiB, never across a segment end) and given to `ReplicaWriter.write`,
  with a task flushing as the slave's acker does (one flush after another) and the store's
  flusher running (checkpoints): the slave's apply path alone.
- `apply_cpu`: `apply` without the flushing task (one flush at the end): the apply's CPU.
- `snapshot`: `two_process` with a slave that asks for a snapshot (START with
  `SNAPSHOT_OFFSET`): the master's checkpoint, the files shipped and fsynced, the swap, the
  new store's open and the reconnect; `snapshot_mb_per_s` is the shipping alone.

Each figure: seconds from the start of the run (the slave's store opening) to the flushed
offset reaching the log end, `mb_per_s` (10^6 bytes), `mib_per_s`, `records_per_s`, the time
the applied offset got there, the CPU seconds of the slave (this process) and of the master
process, and the progress each second. The apply runs in the slave's Trio thread, so that
thread's on-CPU time and its run-queue wait (/proc/thread-self/schedstat: ready to run, no
core free) are given too: `mb_per_thread_cpu_s` is the rate the slave would reach with a core
of its own, and a large `slave_thread_runqueue_wait_s` says the box, not herald, set the wall
rate (the CPU pressure of the box, /proc/pressure/cpu, is in the header). Figures are medians
over `--repeat`. `--profile` adds a cProfile of an `apply_cpu` pass, of the slave of a
`two_process` run and of its master process (not timed), top functions by own time.
`--no-message-id` publishes without message ids (as pika does unless told): no index entry
per record.

Prints one JSON object. The master process is stopped at the end, on an error, on Ctrl-C or
SIGTERM, and when `--time-limit` runs out; the data dir is removed unless `--keep`.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import trio
from _catchup_master import (
    CLUSTER,
    GROUP,
    MIB,
    SLAVE,
    MasterProcess,
    cpu_pressure,
    fill_and_crash,
    master_process,
    serving_master,
    since,
    store_config,
    thread_sched,
    top_functions,
)
from _catchup_report import check, medians_of, said, snapshot_figures
from _common import header

from herald.cluster.ha.epochs import EpochFile
from herald.cluster.ha.master import CHUNK
from herald.cluster.ha.slave import Follower
from herald.core.message import CodecRegistry
from herald.storage.commitlog import CommitLogStore
from herald.storage.mapped_file import parse_name
from herald.storage.replica import ReplicaWriter

RUNS = ("apply", "apply_cpu", "two_process", "one_process", "snapshot")
TARGET_MB_PER_S = 50.0
POLL_S = 0.005


class Interrupted(BaseException):
    """SIGTERM or the time limit: unwind through every clean-up, like Ctrl-C."""


def interrupt(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted("--time-limit" if signum == signal.SIGALRM else signal.Signals(signum).name)


def echo(args: argparse.Namespace, line: str) -> None:
    if not args.json_only:
        print(line, file=sys.stderr, flush=True)


class Progress:
    """The slave's applied offset each second of a run, and when it reached the log end."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.samples: list[tuple[float, float]] = []
        self.applied_at: float | None = None
        self._next = 1.0

    def sample(self, now: float, offset: int) -> None:
        if now - self.start >= self._next:
            self.samples.append((round(now - self.start, 2), round(offset / 1e6, 1)))
            self._next += 1.0


async def follow(
    slave: Path, address: str, log_end: int, timeout: float, snapshot: bool = False
) -> dict[str, Any]:
    """Run a `Follower` of the master at `address` from an empty store (asking for a snapshot
    with `snapshot`) until its flushed offset reaches `log_end`; the figures of the run."""
    follower = Follower(
        slave / "store",
        store_config(),
        CLUSTER,
        SLAVE,
        GROUP,
        EpochFile.load(slave / "store" / "epochs"),
    )

    async def master() -> str:
        return address

    if snapshot:
        follower.want_snapshot("the benchmark asks for one")
    sched = thread_sched()
    cpu = time.process_time()
    start = time.perf_counter()
    progress = Progress(start)
    records = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower.run, master)
        while follower.flushed < log_end:
            await trio.sleep(POLL_S)
            now = time.perf_counter()
            applied = follower.applied
            progress.sample(now, applied)
            if progress.applied_at is None and applied >= log_end:
                progress.applied_at = now
            if now - start > timeout:
                raise RuntimeError(
                    f"the slave is at {applied} of {log_end} after {timeout:g} s "
                    f"({follower.problem or 'no problem reported'})"
                )
        done = time.perf_counter()
        cpu_used = time.process_time() - cpu
        sched = since(sched)
        writer = follower.writer
        records = writer.records if writer is not None else 0
        nursery.cancel_scope.cancel()
    closed = time.perf_counter()
    return figures(log_end, records, done - start, progress, cpu_used, sched) | {
        "close_seconds": round(closed - done, 2),
        "truncations": follower.truncations,
        **snapshot_figures(follower),
    }


def figures(
    log_end: int,
    records: int,
    seconds: float,
    progress: Progress,
    slave_cpu: float,
    sched: tuple[float, float],
) -> dict[str, Any]:
    applied = (progress.applied_at or progress.start + seconds) - progress.start
    on_cpu, waited = sched
    return {
        "bytes": log_end,
        "records": records,
        "seconds": round(seconds, 2),
        "mb_per_s": round(log_end / seconds / 1e6, 1),
        "mib_per_s": round(log_end / seconds / MIB, 1),
        "records_per_s": round(records / seconds),
        "applied_seconds": round(applied, 2),
        "slave_cpu_s": round(slave_cpu, 2),
        "slave_cpu_share": round(slave_cpu / seconds, 2),
        "slave_thread_cpu_s": round(on_cpu, 2),
        "slave_thread_runqueue_wait_s": round(waited, 2),
        "mb_per_thread_cpu_s": round(log_end / on_cpu / 1e6, 1),
        "records_per_thread_cpu_s": round(records / on_cpu),
        "progress_mb": progress.samples,
    }


def chunks(master: Path, log_end: int) -> Iterator[tuple[int, bytes]]:
    """The master's log up to `log_end` in the sender's chunks (<= CHUNK, never across a
    segment end), read with `pread` from its segment files."""
    size = store_config().segment_size
    directory = master / "store" / "commitlog"
    files = {
        start: path for path in directory.iterdir() if (start := parse_name(path.name)) is not None
    }
    position = 0
    while position < log_end:
        segment = position - position % size
        fd = os.open(files[segment], os.O_RDONLY)
        try:
            stop = min(log_end, segment + size)
            while position < stop:
                length = min(stop - position, CHUNK)
                yield position, os.pread(fd, length, position - segment)
                position += length
        finally:
            os.close(fd)


async def apply_only(
    master: Path, slave: Path, log_end: int, flush: bool, profile: cProfile.Profile | None = None
) -> dict[str, Any]:
    """ReplicaWriter.write over the master's bytes, no socket (see the module docstring)."""
    store = CommitLogStore(slave / "store", store_config())
    sched = thread_sched()
    cpu = time.process_time()
    start = time.perf_counter()
    progress = Progress(start)
    await store.open(CodecRegistry())
    writer = ReplicaWriter(store)
    flushed = [0]
    reading = writing = 0.0

    async def flusher(done: trio.Event) -> None:
        while not done.is_set():
            flushed[0] = await writer.flush()
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        await nursery.start(store.run_flusher)
        done = trio.Event()
        if flush:
            nursery.start_soon(flusher, done)
        if profile is not None:
            profile.enable()
        source = chunks(master, log_end)
        while True:
            t0 = time.perf_counter()
            chunk = next(source, None)
            t1 = time.perf_counter()
            reading += t1 - t0
            if chunk is None:
                break
            writer.write(*chunk)
            t2 = time.perf_counter()
            writing += t2 - t1
            progress.sample(t2, writer.applied)
            await trio.lowlevel.checkpoint()  # the slave's receive loop yields per frame
        if profile is not None:
            profile.disable()
        progress.applied_at = time.perf_counter()
        done.set()
        flushed[0] = await writer.flush()
        finished = time.perf_counter()
        cpu_used = time.process_time() - cpu
        sched = since(sched)
        assert flushed[0] == log_end, (flushed[0], log_end)
        nursery.cancel_scope.cancel()
    await store.close()
    closed = time.perf_counter()
    return figures(log_end, writer.records, finished - start, progress, cpu_used, sched) | {
        "read_seconds": round(reading, 2),
        "write_seconds": round(writing, 2),
        "write_mb_per_s": round(log_end / writing / 1e6, 1),
        "us_per_record": round(writing / max(writer.records, 1) * 1e6, 2),
        "close_seconds": round(closed - finished, 2),
    }


async def one_process(master: Path, slave: Path, timeout: float) -> dict[str, Any]:
    async with serving_master(master) as (address, info):
        return await follow(slave, address, info["log_end"], timeout)


# -- the benchmark ------------------------------------------------------------------------------
def fill(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--fill", str(root), "--mib", str(args.mib),
         "--size", str(args.size), *([] if args.message_id else ["--no-message-id"])],
        check=True, stdout=subprocess.PIPE,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    found["mb_per_s"] = round(found["log_end"] / found["seconds"] / 1e6, 1)
    return found


def run_once(
    name: str, base: Path, master: MasterProcess | None, args: argparse.Namespace
) -> dict[str, Any]:
    slave = base / f"slave-{name}"
    shutil.rmtree(slave, ignore_errors=True)
    timeout = max(120.0, args.mib * 2.0)
    master_root = base / "master"
    try:
        if name in ("apply", "apply_cpu"):
            assert master is not None
            return trio.run(apply_only, master_root, slave, master.info["log_end"], name == "apply")
        if name == "one_process":
            return trio.run(one_process, master_root, slave, timeout)
        assert master is not None
        cpu = master.cpu()
        info = master.info
        result = trio.run(
            follow, slave, info["address"], info["log_end"], timeout, name == "snapshot"
        )
        master_cpu = master.cpu() - cpu
        return result | {
            "master_cpu_s": round(master_cpu, 2),
            "master_cpu_share": round(master_cpu / result["seconds"], 2),
        }
    finally:
        shutil.rmtree(slave, ignore_errors=True)


def profiles(base: Path, master: MasterProcess, args: argparse.Namespace) -> dict[str, Any]:
    """cProfile of an apply_cpu pass (this process) and of the master process during a
    two_process run; neither is timed."""
    slave = base / "slave-profile"
    out: dict[str, Any] = {}
    try:
        profile = cProfile.Profile()
        shutil.rmtree(slave, ignore_errors=True)
        trio.run(apply_only, base / "master", slave, master.info["log_end"], False, profile)
        out["apply_cpu"] = top_functions(profile)
        shutil.rmtree(slave, ignore_errors=True)
        master.command("profile")
        slave_profile = cProfile.Profile()
        slave_profile.enable()
        trio.run(
            follow, slave, master.info["address"], master.info["log_end"], max(120.0, args.mib * 4)
        )
        slave_profile.disable()
        report = master.command("report")
        out["two_process_slave"] = top_functions(slave_profile)
        out["two_process_master"] = report[0]["profile"] if report else None
    finally:
        shutil.rmtree(slave, ignore_errors=True)
    return out


def main(args: argparse.Namespace) -> dict[str, Any]:
    runs = [r for r in args.runs.split(",") if r]
    unknown = set(runs) - set(RUNS)
    if unknown:
        raise SystemExit(f"--runs: unknown {sorted(unknown)} (known: {', '.join(RUNS)})")
    result = header("ha_catchup", [], args)
    result["cpu_pressure_at_start"] = cpu_pressure()
    base = Path(tempfile.mkdtemp(prefix="herald-catchup-", dir=args.dir))
    master: MasterProcess | None = None
    try:
        echo(args, f"filling {args.mib} MiB in {base / 'master'} ...")
        result["fill"] = fill(base / "master", args)
        echo(args, f"fill: {result['fill']}")
        master = MasterProcess(base / "master", base / "master.log")
        info = master.wait_ready()
        replay = {
            "bytes": info["log_end"],
            "records": info["records_replayed"],
            "seconds": info["open_seconds"],
            "mb_per_s": round(info["log_end"] / info["open_seconds"] / 1e6, 1),
            "mib_per_s": round(info["log_end"] / info["open_seconds"] / MIB, 1),
            "cpu_seconds": info["open_cpu_seconds"],
            "mb_per_cpu_s": round(info["log_end"] / info["open_cpu_seconds"] / 1e6, 1),
            "records_per_s": round(info["records_replayed"] / info["open_seconds"]),
        }
        assert info["crashed"], "the master's open should have replayed a crashed log"
        result["crash_replay"] = replay
        echo(args, f"crash replay (the master's open): {replay}")
        by_run: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
        for repetition in range(args.repeat):
            for name in runs:
                if name == "one_process":
                    continue  # needs the master's store: after the master process stops
                figures = run_once(name, base, master, args)
                check(figures, replay)
                echo(args, f"[{repetition}] {name}: {said(figures)}")
                by_run[name].append(figures)
        if args.profile:
            echo(args, "profiling ...")
            result["profile"] = profiles(base, master, args)
        master.stop()
        master = None
        if "one_process" in runs:
            for repetition in range(args.repeat):
                figures = run_once("one_process", base, None, args)
                check(figures, replay)
                echo(args, f"[{repetition}] one_process: {said(figures)}")
                by_run["one_process"].append(figures)
        result["runs"] = by_run
        result["median"] = {name: medians_of(found) for name, found in by_run.items() if found}
        catchup = result["median"].get("two_process") or result["median"].get("one_process")
        result["target_mb_per_s"] = TARGET_MB_PER_S
        result["cpu_pressure_at_end"] = cpu_pressure()
        if catchup:
            result["catchup_mb_per_s"] = catchup["mb_per_s"]
            result["catchup_records_per_s"] = catchup["records_per_s"]
            result["meets_target"] = catchup["mb_per_s"] >= TARGET_MB_PER_S
            # the rate with the slave's apply thread on a core of its own
            result["catchup_mb_per_thread_cpu_s"] = catchup["mb_per_thread_cpu_s"]
            result["meets_target_per_thread_cpu_s"] = (
                catchup["mb_per_thread_cpu_s"] >= TARGET_MB_PER_S
            )
        if "apply" in result["median"]:
            result["catchup_over_apply"] = (
                round(catchup["mb_per_s"] / result["median"]["apply"]["mb_per_s"], 2)
                if catchup
                else None
            )
        result["catchup_over_replay"] = (
            round(catchup["mb_per_s"] / replay["mb_per_s"], 2) if catchup else None
        )
        if "snapshot" in result["median"]:  # the whole resync, and the shipping alone
            result["snapshot_resync_mb_per_s"] = result["median"]["snapshot"]["mb_per_s"]
            result["snapshot_mb_per_s"] = result["median"]["snapshot"]["snapshot_mb_per_s"]
        return result
    finally:
        if master is not None:
            master.stop()
        if args.keep:
            echo(args, f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="the master's log, MiB")
    parser.add_argument("--size", type=int, default=1024, help="message body bytes")
    parser.add_argument(
        "--message-id", action=argparse.BooleanOptionalAction, default=True,
        help="give each message an id (indexed by the store)",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help="runs of each kind")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"of {', '.join(RUNS)}")
    parser.add_argument("--profile", action="store_true", help="add cProfile top functions")
    parser.add_argument("--time-limit", type=float, default=1800.0)
    parser.add_argument("--dir", default=None, help="where the stores go (default: $TMPDIR)")
    parser.add_argument("--keep", action="store_true", help="leave the stores behind")
    parser.add_argument("--json-only", action="store_true", help="no progress on stderr")
    parser.add_argument("--fill", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve-master", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def entry(argv: list[str]) -> None:
    args = parse(argv)
    if args.fill:
        trio.run(fill_and_crash, Path(args.fill), args.mib, args.size, args.message_id)
        return
    if args.serve_master:
        trio.run(master_process, Path(args.serve_master))
        return
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, args.time_limit)
    result = main(args)
    signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    entry(sys.argv[1:])
