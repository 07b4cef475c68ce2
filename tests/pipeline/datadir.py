"""Small data dirs written with the commit-log store directly (fast, deterministic)."""

from __future__ import annotations

from pathlib import Path

import trio

from herald.core.message import CodecRegistry, Message, Properties
from herald.core.store import QueueTarget
from herald.storage.commitlog import CommitLogStore
from herald.storage.commitlog_config import CommitLogConfig

QUEUES = ("alpha", "beta", "gamma")


def write_store(data_dir: Path, count: int, segment_size: int = 65536, body: int = 100) -> None:
    """`count` persistent `body`-byte messages spread over three durable queues."""

    async def main() -> None:
        store = CommitLogStore(data_dir / "store", CommitLogConfig(segment_size=segment_size))
        await store.open(CodecRegistry())
        for i, name in enumerate(QUEUES, 1):
            record = {
                "vhost": "/",
                "name": name,
                "auto_delete": False,
                "arguments": {},
                "store_id": i,
            }
            store.put_metadata("queue", f'["/","{name}"]', record)
        props = Properties(delivery_mode=2)
        payload = b"b" * body
        ticket = 0
        for i in range(count):
            q = i % len(QUEUES)
            message = Message.native(payload, routing_key=QUEUES[q], properties=props)
            ticket = store.append(message, [QueueTarget(q + 1, i // len(QUEUES))])
        await store.wait_durable(ticket)
        await store.close()

    trio.run(main)
