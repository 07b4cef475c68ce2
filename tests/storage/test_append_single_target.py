"""The one-target append path (`StoreState.ready_single`/`on_single`) keeps the general
path's promises: offsets only grow, a consume-queue file it cannot make refuses the message
without writing it, and its entries read back and survive a reopen."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from herald.core.errors import InternalError, ResourceError
from herald.core.store import QueueTarget
from herald.storage.consume_queue import ConsumeQueue
from tests.storage.crash_helper import message
from tests.storage.test_recovery import CONFIG, ids, opened


async def test_offsets_below_the_next_one_are_refused(tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        store.append(message(0), [QueueTarget(1, 5)])
        before = store.log.write_offset
        with pytest.raises(InternalError, match="only grow"):
            store.append(message(1), [QueueTarget(1, 5)])
        assert store.log.write_offset == before  # nothing written


async def test_a_consume_queue_file_it_cannot_make_refuses_the_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(tmp_path) as store:
        store.append(message(0), [QueueTarget(1, 0)])
        cq = store.state.ledger.queues[1].cq
        cq.length = cq.per_file * 3  # the next entry needs a file that does not exist yet

        def full(self: ConsumeQueue) -> None:
            raise OSError(errno.ENOSPC, "no space")

        monkeypatch.setattr(ConsumeQueue, "reserve", full)
        before = store.log.write_offset
        with pytest.raises(ResourceError, match="disk full"):
            store.append(message(1), [QueueTarget(1, 1)])
        assert store.log.write_offset == before
        assert store.state.ledger.queues[1].next_offset == 1


async def test_one_target_messages_read_back_and_survive_a_reopen(tmp_path: Path) -> None:
    names = [f"m{n}" for n in range(50)]
    async with opened(tmp_path, CONFIG) as store:
        for n in range(len(names)):
            store.append(message(n), [QueueTarget(1, 10 + 2 * n)])
        assert ids(store) == names
        assert store.statistics().messages == len(names)
    async with opened(tmp_path, CONFIG) as store:
        assert ids(store) == names
        assert [entry.queue_offset for entry in store.recover_queue(1)] == [
            10 + 2 * n for n in range(50)
        ]
