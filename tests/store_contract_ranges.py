"""The part of the store contract that swapping needs: reading a queue by ranges.

A backend's test class mixes this in beside `StoreContract` (it uses that class's `harness`
fixture): `class TestMyStore(StoreContract, QueueRangeContract)`.
"""

from __future__ import annotations

from herald.core.store import QueueRange, StoredEntry
from tests.store_contract import StoreHarness, message, targets


def offsets(entries: list[StoredEntry]) -> list[int]:
    return [e.queue_offset for e in entries]


class QueueRangeContract:
    async def test_read_queue_by_offset_window(self, harness: StoreHarness) -> None:
        store = harness.store
        for offset in range(0, 20, 2):  # gaps, as transient messages leave them
            store.append(message(offset), targets((1, offset)))
        store.ack(1, 4)
        assert offsets(store.read_queue(1, 0, 100, 100)) == [0, 2, 6, 8, 10, 12, 14, 16, 18]
        assert offsets(store.read_queue(1, 3, 12, 100)) == [6, 8, 10, 12]
        assert offsets(store.read_queue(1, 0, 100, 3)) == [0, 2, 6]
        assert store.read_queue(1, 19, 100, 10) == []
        assert store.read_queue(2, 0, 100, 10) == []
        (entry,) = store.read_queue(1, 8, 8, 1)
        assert entry.message.message_id == "m8"

    async def test_read_queue_sees_delivery_counts(self, harness: StoreHarness) -> None:
        store = harness.store
        store.append(message(1), targets((1, 0)))
        store.note_delivery(1, 0, 3)
        (entry,) = store.read_queue(1, 0, 0, 1)
        assert entry.delivery_count == 3

    async def test_queue_ranges_summarise_without_loading(self, harness: StoreHarness) -> None:
        store = harness.store
        for offset in range(25):
            store.append(message(offset, body=b"x" * offset), targets((7, offset)))
        store.ack(7, 0)
        store.ack(7, 24)
        await harness.restart()
        ranges = list(harness.store.queue_ranges(7, 10))
        assert ranges == [
            QueueRange(1, 10, 10, sum(range(1, 11))),
            QueueRange(11, 20, 10, sum(range(11, 21))),
            QueueRange(21, 23, 3, 21 + 22 + 23),
        ]
        assert list(harness.store.queue_ranges(8, 10)) == []

    async def test_ranges_and_reads_agree_after_acks(self, harness: StoreHarness) -> None:
        store = harness.store
        for offset in range(100):
            store.append(message(offset), targets((3, offset)))
        for offset in range(0, 100, 3):
            store.ack(3, offset)
        ranges = list(store.queue_ranges(3, 16))
        assert sum(r.count for r in ranges) == 66
        for r in ranges:
            got = store.read_queue(3, r.first_offset, r.last_offset, r.count + 5)
            assert len(got) == r.count
            assert got[0].queue_offset == r.first_offset and got[-1].queue_offset == r.last_offset
            assert sum(e.message.body_size for e in got) == r.bytes

    async def test_next_offset_survives_acks_and_restarts(self, harness: StoreHarness) -> None:
        store = harness.store
        assert store.queue_next_offset(4) == 0
        for offset in (0, 1, 5):
            store.append(message(offset), targets((4, offset)))
        store.ack(4, 5)
        store.ack(4, 1)
        assert store.queue_next_offset(4) == 6
        await harness.restart()
        assert harness.store.queue_next_offset(4) == 6
        harness.store.delete_queue(4)
        assert harness.store.queue_next_offset(4) == 0
