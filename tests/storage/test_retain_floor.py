"""CommitLogStore.retain_floor: retention keeps every segment ending after it, acked or not,
because a slave that is behind streams the log contiguously from there."""

from __future__ import annotations

from pathlib import Path

from herald.core.store import QueueTarget
from tests.storage.test_replica import SEGMENT, opened
from tests.store_model import message


async def test_acked_segments_past_the_floor_are_kept(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        for n in range(100):
            store.append(message(n, b"x" * 3000), [QueueTarget(1, n)])
        for n in range(100):
            store.ack(1, n)
        starts = sorted(store.log.files)
        assert len(starts) >= 5
        store.retain_floor = 0
        await store.checkpoint()
        await store.checkpoint()  # both kept checkpoints are past every full segment now
        assert sorted(store.log.files) == starts
        assert not store._keeper.reclaimable()  # no checkpoint would free space either
        assert await store.reclaim() == 0
        store.retain_floor = 2 * SEGMENT + 100  # the slowest slave has reached segment 2
        assert store._keeper.reclaimable()
        assert await store.reclaim() == 2
        assert store.log.min_offset == 2 * SEGMENT
        store.retain_floor = None
        assert await store.reclaim() == len(starts) - 3  # all but the active segment
        assert list(store.log.files) == [starts[-1]]
