"""CommitLogStore.append_listener: told the log's new end after every record it writes
(messages, metadata, acks, delivery counts, queue deletions), and only after a write that
held, so that an HA master's senders can wake without polling."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

import pytest

from herald.core.errors import ResourceError
from herald.core.store import QueueTarget
from herald.storage.mapped_file import MappedFile
from tests.storage.test_replica import SEGMENT, opened
from tests.store_model import message


async def test_every_record_end_is_told_in_order(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        seen: list[int] = []
        store.append_listener = seen.append
        ends = [store.append(message(n, b"x" * 3000), [QueueTarget(1, n)]) for n in range(60)]
        assert seen == ends and ends[-1] > 2 * SEGMENT  # across segment ends too
        ends.append(store.put_metadata("queue", "/|q", {"a": 1}))
        assert seen == ends
        store.ack(1, 0)
        store.ack(1, 1)
        assert seen == ends  # acks wait for the next record of any kind
        store.flush_acks()
        assert len(seen) == len(ends) + 1 and seen[-1] == store.log.write_offset
        store.ack(1, 2)
        await store.wait_durable(store.log.write_offset)  # logs the ack first
        assert len(seen) == len(ends) + 2 and seen[-1] == store.log.write_offset
        store.note_delivery(1, 3, 2)
        store.delete_queue(1)
        assert len(seen) == len(ends) + 4
        assert seen == sorted(set(seen)) and seen[-1] == store.log.write_offset
        store.append_listener = None
        store.append(message(99), [QueueTarget(2, 0)])
        assert len(seen) == len(ends) + 4


async def test_a_refused_write_is_not_told(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        seen: list[int] = []
        store.append_listener = seen.append
        store.append(message(0), [QueueTarget(1, 0)])

        def broken(file: MappedFile, at: int, parts: Sequence[bytes]) -> None:
            raise OSError(errno.EIO, "injected")

        store._write = broken
        with pytest.raises(ResourceError):
            store.append(message(1), [QueueTarget(1, 1)])
        assert seen == [store.log.write_offset]
