"""A child process that takes in a snapshot resync and is killed (SIGKILL, by itself) in the
middle of it: a real crash at a chosen point (tests/storage/test_snapshot.py).

`python -m tests.storage.snapshot_helper '<json>'` with keys: mode, replica (the replica
store's directory), config (CommitLogConfig fields), and
- mode "receive": master (a closed store's directory; the child opens it and takes a
  snapshot), files (how many of the snapshot's files are written before the kill);
- mode "swap": steps (how many of `swap_steps` run before the kill; the staging directory
  must hold a complete snapshot).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from herald.core.message import CodecRegistry
from herald.storage.commitlog import CommitLogConfig, CommitLogStore
from herald.storage.resync import SnapshotWriter, swap_steps
from herald.storage.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[2]


def write_files(snapshot: Snapshot, writer: SnapshotWriter, count: int) -> None:
    """Begin, then write the first `count` files of `snapshot` whole."""
    writer.begin(snapshot.checkpoint_bytes)
    for index, file in enumerate(snapshot.files[:count]):
        writer.open_file(file.relpath, file.size)
        for at, length in snapshot.chunks(index):
            writer.write(snapshot.read(index, at, length))


async def receive(spec: dict[str, Any]) -> None:
    config = CommitLogConfig(**spec["config"])
    master = CommitLogStore(Path(spec["master"]), config)
    await master.open(CodecRegistry())
    snapshot = await master.snapshot()
    writer = SnapshotWriter(Path(spec["replica"]), config)
    write_files(snapshot, writer, spec["files"])
    os.kill(os.getpid(), signal.SIGKILL)


def swap(spec: dict[str, Any]) -> None:
    for step in swap_steps(Path(spec["replica"]))[: spec["steps"]]:
        step()
    os.kill(os.getpid(), signal.SIGKILL)


def killed_at(**spec: Any) -> None:
    """Run the child; it must die of SIGKILL."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.storage.snapshot_helper", json.dumps(spec)],
        cwd=ROOT,
        timeout=120,
        capture_output=True,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode(errors="replace")


if __name__ == "__main__":
    given = json.loads(sys.argv[1])
    if given["mode"] == "receive":
        trio.run(receive, given)
    else:
        swap(given)
