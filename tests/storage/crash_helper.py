"""A child process that writes to a commit-log store and dies without closing it: a real crash.

`python -m tests.storage.crash_helper '<json>'` with keys: path, config (CommitLogConfig
fields), count (messages m0.. to queue 1 at offsets 0..), queues (the queues every message
goes to, default [1]), body (bytes per body), acks (offsets of queue 1 to ack), acks_by_queue
({queue: offsets} to ack), checkpoint_after (call checkpoint() after that many messages),
metadata ({kind: {key: value}}). Everything is waited durable, then the process exits with os._exit:
no close, no checkpoint, the abort marker stays.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from herald.core.message import CodecRegistry, Message
from herald.core.store import QueueTarget
from herald.storage.commitlog import CommitLogConfig, CommitLogStore

ROOT = Path(__file__).resolve().parents[2]


def message(n: int, body_size: int = 16) -> Message:
    body = (f"body {n} ".encode() * body_size)[:body_size]
    return Message(
        protocol="test",
        raw=b"HDR" + body,
        exchange="ex",
        routing_key=f"key.{n}",
        body_size=len(body),
        persistent=True,
        message_id=f"m{n}",
        headers={"n": n},
    )


def log_position(store: CommitLogStore, queue_id: int, offset: int) -> int:
    """The commit-log position of the message at `offset` in a queue (still kept there)."""
    entry = store.state.queues[queue_id].cq.get(offset)
    assert entry is not None
    return entry[0]


async def scenario(spec: dict[str, Any]) -> None:
    store = CommitLogStore(Path(spec["path"]), CommitLogConfig(**spec.get("config", {})))
    await store.open(CodecRegistry())
    for kind, records in spec.get("metadata", {}).items():
        for key, value in records.items():
            store.put_metadata(kind, key, value)
    positions = []
    queues = spec.get("queues", [1])
    for n in range(spec.get("count", 0)):
        targets = [QueueTarget(q, n) for q in queues]
        ticket = store.append(message(n, spec.get("body", 16)), targets)
        positions.append((log_position(store, queues[0], n), ticket))
        if n + 1 == spec.get("checkpoint_after"):
            await store.checkpoint()
    for offset in spec.get("acks", []):
        store.ack(1, offset)
    for queue, offsets in spec.get("acks_by_queue", {}).items():
        for offset in offsets:
            store.ack(int(queue), offset)
    await store.wait_durable(store.statistics().appended_ticket)
    print(json.dumps({"records": positions, "end": store.statistics().appended_ticket}))


def crash(path: Path, **spec: Any) -> dict[str, Any]:
    """Run the scenario in a child process that exits without closing the store; returns
    {"records": [(position, ticket) of each message], "end": the log's end}."""
    spec["path"] = str(path)
    done = subprocess.run(
        [sys.executable, "-m", "tests.storage.crash_helper", json.dumps(spec)],
        cwd=ROOT,
        check=True,
        timeout=120,
        capture_output=True,
    )
    return json.loads(done.stdout)


if __name__ == "__main__":
    trio.run(scenario, json.loads(sys.argv[1]))
    sys.stdout.flush()
    os._exit(0)
