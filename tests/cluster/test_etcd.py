"""`EtcdClient` against a real etcd: KV, CAS, leases, watches across restarts and compaction,
endpoint failover. Waits are bounded loops under `fail_after`, never timing asserts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import trio

from herald.cluster.etcd import (
    Compacted,
    Compare,
    DeleteOp,
    DeleteResult,
    EtcdClient,
    EtcdUnavailable,
    EventType,
    LeaseNotFound,
    PutOp,
    PutResult,
    RangeOp,
    RangeResult,
    Watch,
    WatchEvent,
    WatchReset,
)
from tests.cluster.harness import EtcdProcess, free_port

TIMEOUT = 20


@pytest.fixture
async def client(etcd: EtcdProcess) -> AsyncIterator[EtcdClient]:
    async with EtcdClient([etcd.endpoint]) as c:
        yield c


async def wait_for(predicate: Callable[[], bool], interval: float = 0.05) -> None:
    """Poll until `predicate()` holds (the test's fail_after bounds the wait)."""
    while not predicate():
        await trio.sleep(interval)


async def collect(watch: Watch, into: list[WatchEvent | WatchReset]) -> None:
    async for item in watch:
        into.append(item)


def puts(items: list[WatchEvent | WatchReset]) -> list[tuple[bytes, bytes]]:
    return [(e.kv.key, e.kv.value) for e in items if isinstance(e, WatchEvent)]


async def test_put_get_range_delete(client: EtcdClient, prefix: str) -> None:
    with trio.fail_after(TIMEOUT):
        first = await client.put(prefix + "a", "1")
        assert isinstance(first, PutResult) and first.revision > 0
        await client.put(prefix + "b", b"\x00\xff")
        await client.put(prefix + "c", "3")
        kv = await client.get(prefix + "a")
        assert kv is not None
        assert (kv.key, kv.value, kv.version) == ((prefix + "a").encode(), b"1", 1)
        assert kv.create_revision == kv.mod_revision == first.revision
        assert await client.get(prefix + "missing") is None

        found = await client.range(prefix, prefix=True)
        assert [kv.value for kv in found.kvs] == [b"1", b"\x00\xff", b"3"]
        assert found.count == 3 and not found.more
        page = await client.range(prefix, prefix=True, limit=2)
        assert len(page.kvs) == 2 and page.more and page.count == 3
        assert (await client.range(prefix, prefix=True, count_only=True)).count == 3
        old = await client.range(prefix + "a", revision=first.revision)
        assert old.kvs[0].value == b"1"

        again = await client.put(prefix + "a", "2", prev_kv=True)
        assert again.prev_kv is not None and again.prev_kv.value == b"1"
        kv2 = await client.get(prefix + "a")
        assert kv2 is not None and kv2.version == 2 and kv2.mod_revision == again.revision

        gone = await client.delete(prefix + "b")
        assert gone.deleted == 1
        rest = await client.delete(prefix, prefix=True, prev_kv=True)
        assert rest.deleted == 2
        assert sorted(kv.value for kv in rest.prev_kvs) == [b"2", b"3"]
        assert (await client.range(prefix, prefix=True)).count == 0


async def test_txn_put_if_absent_and_branches(client: EtcdClient, prefix: str) -> None:
    key = prefix + "k"
    with trio.fail_after(TIMEOUT):
        created = await client.txn([Compare.create(key, 0)], [PutOp(key, "first")])
        assert created.succeeded
        assert isinstance(created.responses[0], PutResult)
        again = await client.txn([Compare.create(key, 0)], [PutOp(key, "second")], [RangeOp(key)])
        assert not again.succeeded
        (current,) = again.responses
        assert isinstance(current, RangeResult) and current.kvs[0].value == b"first"

        assert (await client.txn([Compare.value(key, "first")], [DeleteOp(key)])).succeeded
        result = await client.txn([Compare.version(key, 0)], [PutOp(key, "x"), RangeOp(key)])
        assert result.succeeded
        assert isinstance(result.responses[1], RangeResult)
        assert result.responses[1].kvs[0].value == b"x"
        deleted = await client.txn([], [DeleteOp(prefix, prefix=True)])
        assert isinstance(deleted.responses[0], DeleteResult)
        assert deleted.responses[0].deleted == 1


async def cas(
    client: EtcdClient, key: str, revision: int, value: str, results: dict[str, bool]
) -> None:
    txn = await client.txn([Compare.mod(key, revision)], [PutOp(key, value)])
    results[value] = txn.succeeded


async def test_cas_race_exactly_one_writer_wins(client: EtcdClient, prefix: str) -> None:
    """Two writers read the same mod revision and race a CAS on it, 20 rounds: each round
    exactly one wins and the value is the winner's."""
    key = prefix + "state"
    await client.put(key, "0")
    with trio.fail_after(TIMEOUT):
        for round_ in range(20):
            seen = await client.get(key)
            assert seen is not None
            results: dict[str, bool] = {}
            async with trio.open_nursery() as nursery:
                for writer in ("w1", "w2"):
                    name = f"{writer}-{round_}"
                    nursery.start_soon(cas, client, key, seen.mod_revision, name, results)
            winners = [name for name, won in results.items() if won]
            assert len(winners) == 1, results
            after = await client.get(key)
            assert after is not None and after.value == winners[0].encode()


async def test_lease_expiry_deletes_keys(client: EtcdClient, prefix: str) -> None:
    with trio.fail_after(TIMEOUT):
        lease = await client.grant(2)
        assert lease.ttl == 2
        await client.put(prefix + "a", "1", lease=lease.id)
        await client.put(prefix + "b", "2", lease=lease.id)
        kv = await client.get(prefix + "a")
        assert kv is not None and kv.lease == lease.id
        while (await client.range(prefix, prefix=True, count_only=True)).count:
            await trio.sleep(0.2)
        with pytest.raises(LeaseNotFound):
            await client.keepalive(lease.id)
        with pytest.raises(LeaseNotFound):
            await client.put(prefix + "c", "3", lease=lease.id)


async def test_keepalive_keeps_key_past_ttl(client: EtcdClient, prefix: str) -> None:
    """Two leases of the same TTL, one renewed every 0.5 s: once etcd has expired the other
    one's key, the renewed one's key must still be there (no clock guesses)."""
    with trio.fail_after(TIMEOUT):
        kept, control = await client.grant(2), await client.grant(2)
        await client.put(prefix + "kept", "1", lease=kept.id)
        await client.put(prefix + "control", "1", lease=control.id)
        while await client.get(prefix + "control") is not None:
            renewed = await client.keepalive(kept.id)
            assert renewed.ttl == 2
            await trio.sleep(0.5)
        assert await client.get(prefix + "kept") is not None
        await client.revoke(kept.id)
        assert await client.get(prefix + "kept") is None
        with pytest.raises(LeaseNotFound):
            await client.revoke(kept.id)


async def test_watch_delivers_every_change_in_order(client: EtcdClient, prefix: str) -> None:
    seen: list[WatchEvent | WatchReset] = []
    with trio.fail_after(TIMEOUT):
        async with client.watch(prefix, prev_kv=True) as watch, trio.open_nursery() as n:
            n.start_soon(collect, watch, seen)
            revisions = []
            for i in range(30):
                revisions.append((await client.put(prefix + f"k{i % 5}", str(i))).revision)
            revisions.append((await client.delete(prefix + "k0")).revision)
            # Keys beside the prefix are not watched.
            await client.put(prefix[:-1] + "-other/x", "no")
            await client.put(prefix + "last", "end")
            await wait_for(lambda: len(seen) == 32)
            n.cancel_scope.cancel()
    events = [e for e in seen if isinstance(e, WatchEvent)]
    assert len(events) == 32
    assert [e.revision for e in events[:31]] == revisions
    assert [e.kv.value for e in events[:30]] == [str(i).encode() for i in range(30)]
    assert events[29].prev_kv is not None and events[29].prev_kv.value == b"24"
    assert events[30].type is EventType.DELETE and events[30].kv.key == (prefix + "k0").encode()
    assert events[31].kv.key == (prefix + "last").encode()


async def test_watch_from_a_past_revision_replays(client: EtcdClient, prefix: str) -> None:
    with trio.fail_after(TIMEOUT):
        start = (await client.put(prefix + "a", "1")).revision
        await client.put(prefix + "b", "2")
        async with client.watch(prefix, start) as watch:
            first, second = [await watch.__anext__() for _ in range(2)]
    assert isinstance(first, WatchEvent) and isinstance(second, WatchEvent)
    assert (first.kv.value, second.kv.value) == (b"1", b"2")
    assert watch.next_revision == second.revision + 1


async def test_a_cancelled_read_leaves_the_watch_usable(client: EtcdClient, prefix: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with client.watch(prefix) as watch:
            with trio.move_on_after(0.2) as waited:
                await watch.__anext__()  # nothing yet: cancelled mid-read
            assert waited.cancelled_caught
            put = await client.put(prefix + "k", "v")
            event = await watch.__anext__()
    assert isinstance(event, WatchEvent) and event.revision == put.revision


@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_watch_resumes_after_etcd_restart(own_etcd: EtcdProcess, how: str) -> None:
    """Watch, write A, restart etcd on the same data dir (SIGTERM: etcd says goodbye on the
    stream; SIGKILL: the stream just breaks), write B and C: the watcher sees A, B, C, each
    once, in order."""
    prefix = "/restart/"
    seen: list[WatchEvent | WatchReset] = []
    with trio.fail_after(TIMEOUT):
        async with (
            EtcdClient(own_etcd.endpoint) as client,
            client.watch(prefix) as watch,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(collect, watch, seen)
            await client.put(prefix + "a", "A")
            await wait_for(lambda: len(seen) == 1)

            def restart() -> None:
                own_etcd.stop() if how == "stop" else own_etcd.kill()
                own_etcd.start()

            await trio.to_thread.run_sync(restart)
            await client.put(prefix + "b", "B")
            await client.put(prefix + "c", "C")
            await wait_for(lambda: len(seen) >= 3)
            await trio.sleep(0.3)  # room for a duplicate to show up, were there one
            nursery.cancel_scope.cancel()
    assert [v for _, v in puts(seen)] == [b"A", b"B", b"C"]
    assert len(seen) == 3
    assert watch.reconnects >= 1


async def test_compaction_makes_the_watcher_reread(client: EtcdClient, prefix: str) -> None:
    with trio.fail_after(TIMEOUT):
        start = (await client.put(prefix + "a", "1")).revision
        await client.put(prefix + "b", "2")
        await client.delete(prefix + "a")
        now = (await client.put(prefix + "c", "3")).revision
        await client.compact(now)
        with pytest.raises(Compacted):
            await client.range(prefix, prefix=True, revision=start)

        seen: list[WatchEvent | WatchReset] = []
        async with client.watch(prefix, start) as watch, trio.open_nursery() as nursery:
            nursery.start_soon(collect, watch, seen)
            await wait_for(lambda: len(seen) == 1)
            later = await client.put(prefix + "d", "4")
            await wait_for(lambda: len(seen) == 2)
            nursery.cancel_scope.cancel()
    reset, event = seen
    assert isinstance(reset, WatchReset) and reset.revision >= now
    assert sorted(kv.value for kv in reset.kvs) == [b"2", b"3"]
    assert isinstance(event, WatchEvent) and event.revision == later.revision


async def test_failover_to_the_next_endpoint(etcd: EtcdProcess, prefix: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with trio.fail_after(TIMEOUT):
        async with EtcdClient([dead, etcd.endpoint]) as client:
            assert client.endpoint == dead
            put = await client.put(prefix + "k", "v")
            assert client.endpoint == etcd.endpoint
            kv = await client.get(prefix + "k")
            assert kv is not None and kv.value == b"v"

        # A watch connects through the same failover.
        async with (
            EtcdClient([dead, etcd.endpoint]) as client,
            client.watch(prefix, put.revision) as watch,
        ):
            event = await watch.__anext__()
        assert isinstance(event, WatchEvent) and event.kv.value == b"v"


async def test_no_endpoint_raises_unavailable() -> None:
    dead = [f"http://127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    with trio.fail_after(TIMEOUT):
        async with EtcdClient(dead) as client:
            with pytest.raises(EtcdUnavailable):
                await client.get("/x")
            with pytest.raises(EtcdUnavailable):
                await client.put("/x", "1")
