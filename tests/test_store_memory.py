"""The memory store: the store contract, plus what only an in-memory store promises."""

from __future__ import annotations

from pathlib import Path

import pluggy
import pytest

from herald.core.errors import InternalError
from herald.core.message import CodecRegistry, Message
from herald.core.store import QueueTarget, Store
from herald.storage import memory
from herald.storage.memory import MemoryStore, MemoryStoreData
from tests.store_contract import StoreContract, StoreHarness, message
from tests.store_contract_ranges import QueueRangeContract


class TestMemoryStore(StoreContract, QueueRangeContract):
    def make_store(self, path: Path, *, reopen_from: Store | None = None) -> Store:
        if reopen_from is None:
            return MemoryStore()
        assert isinstance(reopen_from, MemoryStore)
        return MemoryStore(reopen_from.data)

    async def test_restart_keeps_the_message_objects(self, harness: StoreHarness) -> None:
        original = message(1)
        harness.store.append(original, [QueueTarget(1, 0), QueueTarget(2, 0)])
        store = await harness.restart()
        [first] = store.recover_queue(1)
        [second] = store.recover_queue(2)
        assert first.message is original
        assert second.message is original

    async def test_same_target_twice_replaces_the_entry(self, harness: StoreHarness) -> None:
        store = harness.store
        store.append(message(1), [QueueTarget(1, 0)])
        store.append(message(2), [QueueTarget(1, 0), QueueTarget(1, 0)])
        assert [e.message.message_id for e in store.recover_queue(1)] == ["m2"]
        assert store.statistics().messages == 1
        store.ack(1, 0)
        assert (store.statistics().messages, store.statistics().bytes) == (0, 0)


async def test_a_store_without_data_starts_empty() -> None:
    filled = MemoryStore()
    await filled.open(CodecRegistry())
    filled.append(message(1), [QueueTarget(1, 0)])
    filled.put_metadata("kind", "key", {"a": 1})

    fresh = MemoryStore()
    await fresh.open(CodecRegistry())
    assert list(fresh.recover_queue(1)) == []
    assert fresh.load_metadata() == {}
    assert fresh.statistics().messages == 0
    assert fresh.data is not filled.data


async def test_a_store_on_existing_data_sees_it_without_a_close() -> None:
    data = MemoryStoreData()
    crashed = MemoryStore(data)
    await crashed.open(CodecRegistry())
    ticket = crashed.append(message(1), [QueueTarget(1, 0)])
    crashed.note_delivery(1, 0, 2)

    store = MemoryStore(data)
    await store.open(CodecRegistry())
    assert [(e.queue_offset, e.delivery_count) for e in store.recover_queue(1)] == [(0, 2)]
    assert store.append(message(2), [QueueTarget(1, 1)]) > ticket


async def test_append_before_open_is_refused() -> None:
    store = MemoryStore()
    with pytest.raises(InternalError, match="not open"):
        store.append(message(1), [QueueTarget(1, 0)])
    assert store.statistics().messages == 0


async def test_append_encodes_a_native_message_once() -> None:
    codecs = CodecRegistry()
    store = MemoryStore()
    await store.open(codecs)
    native = Message.native(b"payload")
    assert native.raw is None
    store.append(native, [QueueTarget(1, 0)])
    assert native.raw is not None
    assert store.statistics().bytes == len(native.raw)


def test_offered_as_the_memory_storage_backend(tmp_path: Path) -> None:
    from herald.core import hookspecs

    manager = pluggy.PluginManager("herald")
    manager.add_hookspecs(hookspecs)
    manager.register(memory)
    backends = [b for found in manager.hook.herald_storage_backends() for b in found]
    assert [b.name for b in backends] == ["memory"]
    assert isinstance(backends[0].factory(None, tmp_path), MemoryStore)


async def test_offsets_appended_out_of_order_recover_sorted() -> None:
    store = MemoryStore()
    await store.open(CodecRegistry())
    for offset in (3, 0, 2, 1):
        store.append(message(offset), [QueueTarget(1, offset)])
    assert [e.queue_offset for e in store.recover_queue(1)] == [0, 1, 2, 3]
