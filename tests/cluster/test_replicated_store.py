"""`ReplicatedCommitLogStore` (cluster/ha/store.py): the store contract holds through the gate,
a confirm waits for the sync set, the master's epoch is on disk before anything is written in
it, and a demoted master refuses writes and its waiting publishes with `NotMaster`."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from herald.cluster.ha.epochs import EpochEntry, EpochFile, epochs_path
from herald.cluster.ha.gate import ReplicationGate
from herald.cluster.ha.store import ReplicatedCommitLogStore
from herald.core.errors import NotMaster, ReplicationTimeout
from herald.core.message import CodecRegistry
from herald.core.store import QueueTarget, Store
from tests.storage.test_commitlog_contract import CONFIG
from tests.store_contract import StoreContract, message


def replicated(
    data_dir: Path,
    epoch: int = 1,
    *,
    mark: bool = False,
    sync_set: tuple[str, ...] = ("m",),
    min_copies: int = 1,
    sync_timeout: float = 3.0,
) -> ReplicatedCommitLogStore:
    root = data_dir / "store"
    root.mkdir(parents=True, exist_ok=True)
    holder: list[ReplicatedCommitLogStore] = []
    gate = ReplicationGate(
        "m",
        log_end=lambda: holder[0].log.write_offset,
        sync_set=sync_set,
        min_in_sync_replicas=min_copies,
        sync_timeout=sync_timeout,
    )
    store = ReplicatedCommitLogStore(
        root,
        CONFIG,
        gate=gate,
        epochs=EpochFile.load(epochs_path(data_dir)),
        epoch=epoch,
        mark_recovered_redelivered=mark,
    )
    holder.append(store)
    return store


class TestReplicatedStore(StoreContract):
    """A one-node sync set confirms local flushes: the contract holds unchanged."""

    def make_store(self, path: Path, *, reopen_from: Store | None = None) -> Store:
        if reopen_from is not None:
            assert isinstance(reopen_from, ReplicatedCommitLogStore)
        return replicated(path)


async def test_open_records_the_epoch_at_the_log_end(tmp_path: Path) -> None:
    store = replicated(tmp_path, epoch=3)
    await store.open(CodecRegistry())
    end = store.append(message(1), [QueueTarget(1, 0)])
    await store.close()
    assert EpochFile.load(epochs_path(tmp_path)).entries == (EpochEntry(3, 0),)
    again = replicated(tmp_path, epoch=5)
    await again.open(CodecRegistry())
    await again.close()
    assert EpochFile.load(epochs_path(tmp_path)).entries == (EpochEntry(3, 0), EpochEntry(5, end))


async def test_a_confirm_waits_for_the_slave(tmp_path: Path) -> None:
    store = replicated(tmp_path, sync_set=("m", "a"), min_copies=2, sync_timeout=1.0)
    await store.open(CodecRegistry())
    first = store.append(message(1), [QueueTarget(1, 0)])
    second = store.append(message(2), [QueueTarget(1, 1)])
    ended: dict[int, str] = {}

    async def publish(ticket: int) -> None:
        try:
            await store.wait_durable(ticket)
            ended[ticket] = "confirmed"
        except ReplicationTimeout:
            ended[ticket] = "timeout"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(publish, first)
        nursery.start_soon(publish, second)
        while store.local_durable < second:  # the group commit's fsync, in a worker thread
            await trio.sleep(0.01)
        assert store.local_durable >= second and store.durable_ticket < first
        store.gate.slave_acked("a", first)
        while first not in ended:
            await trio.sleep(0.01)
        assert ended == {first: "confirmed"}
        assert store.durable_ticket == first
    assert ended == {first: "confirmed", second: "timeout"}
    assert [e.queue_offset for e in store.recover_queue(1)] == [0, 1]  # nacked, still stored
    await store.close()


async def test_a_demoted_master_refuses_waiters_and_publishes(tmp_path: Path) -> None:
    store = replicated(tmp_path, sync_set=("m", "a"), min_copies=2)
    await store.open(CodecRegistry())
    ticket = store.append(message(1), [QueueTarget(1, 0)])
    refusal = NotMaster("m is no longer master of g (epoch 2)", addrs={"amqp": "127.0.0.1:1"})
    caught: list[BaseException] = []

    async def publish() -> None:
        try:
            await store.wait_durable(ticket)
        except NotMaster as exc:
            caught.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(publish)
        await trio.sleep(0.05)
        store.gate.refuse(refusal)
    assert caught == [refusal]
    with pytest.raises(NotMaster):
        store.append(message(2), [QueueTarget(1, 1)])
    store.put_metadata("vhost", "v", {})  # acks, session cleanup: local, cut at rejoin
    store.gate.slave_acked("a", ticket)
    assert store.durable_ticket < ticket  # nothing is confirmed after the demotion
    await store.close()


async def test_entries_found_at_open_come_back_redelivered(tmp_path: Path) -> None:
    """`mark_recovered_redelivered`: what the log held when this master opened may have been
    delivered by the previous master, so it is delivered flagged; what it stores later not."""
    first = replicated(tmp_path)
    await first.open(CodecRegistry())
    for offset in range(3):
        first.append(message(offset), [QueueTarget(1, offset)])
    await first.close()
    store = replicated(tmp_path, epoch=2, mark=True)
    await store.open(CodecRegistry())
    store.append(message(3), [QueueTarget(1, 3)])
    assert [(e.queue_offset, e.delivery_count) for e in store.recover_queue(1)] == [
        (0, 1), (1, 1), (2, 1), (3, 0),
    ]  # fmt: skip
    read = store.read_queue(1, 1, 3, 10)
    assert [(e.queue_offset, e.delivery_count) for e in read] == [(1, 1), (2, 1), (3, 0)]
    await store.close()
