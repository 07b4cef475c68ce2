"""Snapshot resync over a real HA stream in one process (`HAMaster` behind a `ClusterPort` on
127.0.0.1, a `Follower` dialling it): a slave that already holds a store gets a snapshot over
it, the old store is replaced whole, and the slave streams on to the master's state.

Two ways in: the slave's log shares no epoch with the master's (it asks, START with
`SNAPSHOT_OFFSET`), or its log is a prefix of the master's but the master reclaimed segments
after its end (the master decides, on START's offset). tests/cluster/test_ha_snapshot.py has
the new node on real processes.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from herald.cluster.config import ClusterConfig
from herald.cluster.ha.epochs import EpochEntry, EpochFile
from herald.cluster.ha.gate import ReplicationGate
from herald.cluster.ha.master import HAMaster
from herald.cluster.ha.slave import Follower
from herald.cluster.ha.store import ReplicatedCommitLogStore
from herald.cluster.port import ClusterPort
from herald.core.message import CodecRegistry
from herald.core.ports import free_port
from herald.core.store import QueueTarget
from tests.storage.test_replica import CONFIG, state_of
from tests.store_model import message

GROUP = "g1"
GUARD_S = 60.0
"""A hang guard, never a timing assertion."""


def master_store(root: Path, epoch: int) -> ReplicatedCommitLogStore:
    holder: list[ReplicatedCommitLogStore] = []
    gate = ReplicationGate(
        "m", log_end=lambda: holder[0].log.write_offset, mode="async", sync_set={"m"}
    )
    store = ReplicatedCommitLogStore(
        root, CONFIG, gate=gate, epochs=EpochFile.load(root / "epochs"), epoch=epoch
    )
    holder.append(store)
    return store


async def publish(store: ReplicatedCommitLogStore, first: int, count: int) -> None:
    for n in range(first, first + count):
        store.append(message(n, bytes([n % 251]) * 3000), [QueueTarget(1, n)])
    store.put_metadata("queue", f"/|q{first}", {"n": first})
    await store.wait_durable(store.log.write_offset)


@asynccontextmanager
async def serving(store: ReplicatedCommitLogStore) -> AsyncIterator[tuple[HAMaster, str]]:
    """The master's HA streams on a cluster port of 127.0.0.1."""
    config = ClusterConfig(name="t", group=GROUP, listen=f"127.0.0.1:{free_port()}", secret="s")

    async def change_sync_set(_members: frozenset[str]) -> bool:
        return True

    ha = HAMaster(store, config, "m", GROUP, change_sync_set)
    port = ClusterPort(config, "127.0.0.1", lambda: ha, lambda: "")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ha.run)
        address = await nursery.start(port.run)
        yield ha, address
        ha.close()
        nursery.cancel_scope.cancel()


async def caught_up(follower: Follower, end: int) -> None:
    with trio.fail_after(GUARD_S):
        while follower.flushed < end or follower.store is None:
            await trio.sleep(0.01)


@pytest.mark.parametrize("way", ["no shared epoch", "segments reclaimed"])
async def test_a_slave_with_a_store_gets_a_snapshot_over_it(tmp_path: Path, way: str) -> None:
    slave_root = tmp_path / "slave" / "store"
    master = master_store(tmp_path / "master", epoch=3)
    await master.open(CodecRegistry())
    try:
        await publish(master, 0, 50)
        if way == "no shared epoch":  # a store of a term the master never had (a lower one)
            other = master_store(slave_root, epoch=2)
            await other.open(CodecRegistry())
            await publish(other, 0, 10)
            await other.close()
        else:  # a copy of the master as it is now: a prefix of its log, its epochs
            await master.checkpoint()
            shutil.copytree(tmp_path / "master", slave_root, ignore=shutil.ignore_patterns("lock"))
            end = master.log.write_offset
            await publish(master, 50, 100)
            for n in range(150):
                master.ack(1, n)
            await publish(master, 150, 20)
            await master.checkpoint()
            await master.checkpoint()
            assert master.log.segment_for(end) is None  # reclaimed: the slave cannot stream on
        before: dict[str, Any] = {}
        async with serving(master) as (ha, address):
            epochs = EpochFile.load(slave_root / "epochs")
            follower = Follower(slave_root, CONFIG, ha.config, "s1", GROUP, epochs)

            async def master_address() -> str:
                return address

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower.run, master_address)
                await caught_up(follower, master.log.write_offset)
                assert follower.snapshots == 1 and ha.snapshots == 1
                assert follower.store is not None
                before = state_of(follower.store)
                await publish(master, 200, 30)  # and it streams on
                await caught_up(follower, master.log.write_offset)
                assert follower.store is not None
                assert state_of(follower.store) == state_of(master)
                assert epochs.entries == master.epochs.entries == (EpochEntry(3, 0),)
                nursery.cancel_scope.cancel()
        assert before["metadata"] != {} and follower.truncations == 0
        assert not slave_root.with_name("store.resync").exists()
        assert not slave_root.with_name("store.old").exists()
    finally:
        await master.close()
