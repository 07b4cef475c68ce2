"""Commit-log store benchmark: durable publishes against the disk's own fsync rate.

    python benchmarks/store_append.py [--messages 20000] [--publishers 64] [--size 1024]
                                      [--rounds 5] [--dir PATH] [--recovery [--recovery-mib 1024]]

Prints one JSON object. Each round runs three writers on the same disk, the store first and
the other two in an order that alternates between rounds:
- store: `publishers` Trio tasks each append a persistent `size`-byte message and await
  `wait_durable` (sync flush: group commit), until `messages` are durable. Reports msg/s, MB/s
  (log bytes, headers included), and fsync rounds.
- plain: the same benchmark with plain file writes: `publishers` Trio tasks each `pwrite` a
  block of the store's bytes per record at the file's end and await a minimal group commit
  (one `fdatasync` at a time in a worker thread). What the disk gives this harness with no
  store at all; `ratio_plain` = store msg/s / plain msg/s.
- disk: the same bytes written by one loop of `os.pwrite` into a preallocated file with one
  `fdatasync` per `publishers` writes, no Trio: the disk with perfect batching and no Python
  around it. `ratio` = store msg/s / disk msg/s.
Medians over the rounds are reported with every round's figures.
- recovery (with --recovery): a child process writes `recovery-mib` MiB of 1 KiB messages and
  exits without closing the store (a crash, abort marker left); the time to open it (replaying
  the whole log) is measured, then the time to open it again after a clean close.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from herald.core.message import CodecRegistry, Message
from herald.core.store import QueueTarget
from herald.storage.commitlog import CommitLogConfig, CommitLogStore

MIB = 1024 * 1024


def make_message(n: int, size: int) -> Message:
    body = os.urandom(size)
    return Message(
        protocol="bench",
        raw=body,
        exchange="amq.direct",
        routing_key="bench",
        body_size=size,
        persistent=True,
        message_id=f"msg-{n}",
    )


async def store_run(path: Path, messages: int, publishers: int, size: int) -> dict:
    store = CommitLogStore(path, CommitLogConfig(segment_size=256 * MIB))
    await store.open(CodecRegistry())
    bodies = [make_message(n, size) for n in range(min(messages, 1024))]
    counter = iter(range(messages))
    first = store.statistics().appended_ticket
    flushes = store.commitlog_statistics().flushes

    async def publisher() -> None:
        for n in counter:
            message = bodies[n % len(bodies)]
            ticket = store.append(message, [QueueTarget(1, n)])
            await store.wait_durable(ticket)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(publishers):
            nursery.start_soon(publisher)
    elapsed = time.perf_counter() - start
    written = store.statistics().appended_ticket - first
    rounds = store.commitlog_statistics().flushes - flushes
    await store.close()
    return {
        "msgs_per_s": round(messages / elapsed),
        "mb_per_s": round(written / elapsed / 1e6, 2),
        "seconds": round(elapsed, 3),
        "bytes_per_record": round(written / messages, 1),
        "fsync_rounds": rounds,
        "msgs_per_fsync": round(messages / max(rounds, 1), 1),
    }


def disk_run(path: Path, messages: int, batch: int, record: int) -> dict:
    data = os.urandom(record)
    total = messages * record
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, total + record)
        start = time.perf_counter()
        offset = 0
        for n in range(messages):
            os.pwrite(fd, data, offset)
            offset += record
            if (n + 1) % batch == 0 or n + 1 == messages:
                os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return {
        "msgs_per_s": round(messages / elapsed),
        "mb_per_s": round(total / elapsed / 1e6, 2),
        "seconds": round(elapsed, 3),
        "writes_per_fsync": batch,
    }


class PlainGroupCommit:
    """The least a group commit can do: one leader fdatasyncs in a worker thread at a time,
    everyone it covered returns, the rest lead or join the next round."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.written = 0  # bytes written so far
        self.durable = 0
        self.rounds = 0
        self._running = False
        self._done = trio.Event()

    async def wait_durable(self, ticket: int) -> None:
        while ticket > self.durable:
            if self._running:
                await self._done.wait()
                continue
            self._running = True
            await trio.lowlevel.cancel_shielded_checkpoint()  # let runnable writers join
            target = self.written
            await trio.to_thread.run_sync(os.fdatasync, self.fd)
            self.durable = target
            self.rounds += 1
            self._running = False
            done, self._done = self._done, trio.Event()
            done.set()


async def plain_run(path: Path, messages: int, publishers: int, record: int) -> dict:
    """The same benchmark with plain file writes: `publishers` Trio tasks each `pwrite` a
    record-sized block at the file's end and wait for a shared fdatasync round."""
    data = os.urandom(record)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, messages * record + record)
        group = PlainGroupCommit(fd)
        counter = iter(range(messages))

        async def publisher() -> None:
            for _ in counter:
                at = group.written
                group.written = at + record
                os.pwrite(fd, data, at)
                await group.wait_durable(at + record)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(publishers):
                nursery.start_soon(publisher)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return {
        "msgs_per_s": round(messages / elapsed),
        "mb_per_s": round(messages * record / elapsed / 1e6, 2),
        "seconds": round(elapsed, 3),
        "fsync_rounds": group.rounds,
    }


async def write_and_crash(path: Path, mib: int) -> None:
    """Child process: fill the log with `mib` MiB of 1 KiB messages, then die unclosed."""
    config = CommitLogConfig(checkpoint_bytes=1 << 40)  # the only checkpoint is at open
    store = CommitLogStore(path, config)
    await store.open(CodecRegistry())
    bodies = [make_message(n, 1024) for n in range(256)]
    n = 0
    while store.statistics().appended_ticket < mib * MIB:
        store.append(bodies[n % 256], [QueueTarget(1, n)])
        n += 1
        if n % 10_000 == 0:
            await store.wait_durable(store.statistics().appended_ticket)
    await store.wait_durable(store.statistics().appended_ticket)
    sys.stdout.flush()
    os._exit(0)


async def timed_open(path: Path) -> tuple[float, CommitLogStore]:
    store = CommitLogStore(path, CommitLogConfig(checkpoint_bytes=1 << 40))
    start = time.perf_counter()
    await store.open(CodecRegistry())
    return time.perf_counter() - start, store


async def recovery_run(path: Path, mib: int) -> dict:
    child = [sys.executable, __file__, "--write-and-crash", str(path), "--recovery-mib", str(mib)]
    start = time.perf_counter()
    subprocess.run(child, check=True)
    write_seconds = time.perf_counter() - start
    crashed_seconds, store = await timed_open(path)
    report = store.recovery
    messages = store.statistics().messages
    await store.close()
    clean_seconds, store = await timed_open(path)
    await store.close()
    assert report is not None and report.crashed
    return {
        "log_mib": mib,
        "messages": messages,
        "write_seconds": round(write_seconds, 2),
        "crash_open_seconds": round(crashed_seconds, 2),
        "records_replayed": report.records,
        "clean_open_seconds": round(clean_seconds, 2),
    }


async def one_round(base: Path, args: argparse.Namespace, n: int) -> dict:
    """Store, plain Trio writer and raw loop once each, in an order that rotates per round
    (so no side always runs first on a machine whose load drifts)."""
    store = await store_run(base / f"store-{n}", args.messages, args.publishers, args.size)
    record = round(store["bytes_per_record"])
    runs = {"store": store}
    for name in ("plain", "disk")[:: 1 if n % 2 else -1]:
        if name == "plain":
            runs[name] = await plain_run(base / "plain", args.messages, args.publishers, record)
        else:
            runs[name] = disk_run(base / "disk", args.messages, args.publishers, record)
    shutil.rmtree(base / f"store-{n}", ignore_errors=True)
    return runs


async def main(args: argparse.Namespace) -> dict:
    base = Path(tempfile.mkdtemp(prefix="herald-bench-", dir=args.dir))
    try:
        rounds = [await one_round(base, args, n) for n in range(args.rounds)]
        ratio = [r["store"]["msgs_per_s"] / r["disk"]["msgs_per_s"] for r in rounds]
        ratio_plain = [r["store"]["msgs_per_s"] / r["plain"]["msgs_per_s"] for r in rounds]
        result = {
            "benchmark": "store_append",
            "python": platform.python_version(),
            "machine": platform.machine(),
            "messages": args.messages,
            "publishers": args.publishers,
            "size": args.size,
            "rounds": rounds,
            "median_msgs_per_s": {
                side: round(statistics.median(r[side]["msgs_per_s"] for r in rounds))
                for side in ("store", "plain", "disk")
            },
            "ratio": [round(x, 3) for x in ratio],
            "ratio_plain": [round(x, 3) for x in ratio_plain],
            "median_ratio": round(statistics.median(ratio), 3),
            "median_ratio_plain": round(statistics.median(ratio_plain), 3),
        }
        if args.recovery:
            result["recovery"] = await recovery_run(base / "recovery", args.recovery_mib)
        return result
    finally:
        shutil.rmtree(base, ignore_errors=True)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--publishers", type=int, default=64)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5, help="store/plain/disk runs each")
    parser.add_argument("--dir", default=None, help="where to put the files (default: $TMPDIR)")
    parser.add_argument("--recovery", action="store_true", help="also time recovery")
    parser.add_argument("--recovery-mib", type=int, default=1024)
    parser.add_argument("--write-and-crash", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    if arguments.write_and_crash:
        trio.run(write_and_crash, Path(arguments.write_and_crash), arguments.recovery_mib)
    print(json.dumps(trio.run(main, arguments), indent=2))
