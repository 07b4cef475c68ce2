"""The group controller against a real etcd: bootstrap, elections, sync set changes, the
change feed and the operator's promote. Each test has a cluster of its own, so tests
sharing the session's etcd never meet; races run as concurrent tasks, waits are bounded."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

import pytest
import trio

from herald.cluster import keys
from herald.cluster.controller import (
    ControllerError,
    GroupController,
    GroupState,
    GroupView,
    MasterClaim,
)
from herald.cluster.etcd import EtcdClient, KeyValue
from tests.cluster.harness import EtcdProcess
from tests.cluster.nodes import cluster_name

TIMEOUT = 20
GROUP = "g/1"  # a "/" travels percent-encoded


@pytest.fixture
async def client(etcd: EtcdProcess) -> AsyncIterator[EtcdClient]:
    async with EtcdClient([etcd.endpoint]) as c:
        yield c


@pytest.fixture
def controllers(client: EtcdClient) -> Callable[[str], GroupController]:
    """`controllers("n1")`: node n1's controller of GROUP in this test's own cluster."""
    cluster = cluster_name()
    return lambda node: GroupController(client, cluster, GROUP, node)


async def lease(client: EtcdClient) -> int:
    return (await client.grant(30)).id


async def bootstrapped(client: EtcdClient, node: GroupController) -> tuple[int, GroupState]:
    """`node` bootstraps the group on a lease of its own: (that lease, the state)."""
    held = await lease(client)
    state = await node.bootstrap(held, "h1:1")
    assert state is not None
    return held, state


# -- keys and values --------------------------------------------------------------------------


def test_group_keys_are_percent_encoded() -> None:
    assert keys.groups_prefix("c 1", "a/b") == "/herald/c%201/groups/a%2Fb/"
    assert keys.group_state_key("c", "g") == "/herald/c/groups/g/state"
    assert keys.group_master_key("c", "g") == "/herald/c/groups/g/master"


def kv(value: bytes, revision: int = 7, lease: int = 0) -> KeyValue:
    return KeyValue(b"/k", value, 3, revision, 1, lease)


def test_values_round_trip_as_compact_sorted_json() -> None:
    state = GroupState(8, "n2", ("n2", "n3"), "10.0.0.2:25680")
    assert state.to_json() == (
        b'{"epoch":8,"master":"n2","master_addr":"10.0.0.2:25680","sync_set":["n2","n3"]}'
    )
    assert GroupState.from_kv(kv(state.to_json())) == GroupState(
        8, "n2", ("n2", "n3"), "10.0.0.2:25680", revision=7
    )
    claim = MasterClaim("n2", 8)
    assert claim.to_json() == b'{"epoch":8,"node":"n2"}'
    assert MasterClaim.from_kv(kv(claim.to_json(), lease=5)) == MasterClaim("n2", 8, 5, 3)


@pytest.mark.parametrize(
    "value",
    [
        b"{not json",
        b"\xff",
        b"[1]",
        b'{"epoch":"8","master":"n2","sync_set":["n2"],"master_addr":""}',
        b'{"epoch":true,"master":"n2","sync_set":["n2"],"master_addr":""}',
        b'{"epoch":0,"master":"n2","sync_set":["n2"],"master_addr":""}',
        b'{"epoch":8,"master":"","sync_set":["n2"],"master_addr":""}',
        b'{"epoch":8,"master":"n2","sync_set":"n2","master_addr":""}',
        b'{"epoch":8,"master":"n2","sync_set":[2],"master_addr":""}',
        b'{"epoch":8,"master":"n2","sync_set":["n2"]}',
    ],
)
def test_bad_state_values_raise_value_error(value: bytes) -> None:
    with pytest.raises(ValueError):
        GroupState.from_kv(kv(value))


# -- bootstrap ---------------------------------------------------------------------------------


async def test_bootstrap_once_only(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1, n2 = controllers("n1"), controllers("n2")
    with trio.fail_after(TIMEOUT):
        empty = await n1.read()
        assert (empty.state, empty.master) == (None, None) and empty.revision > 0
        held = await lease(client)
        state = await n1.bootstrap(held, "h1:25680")
        assert state == GroupState(1, "n1", ("n1",), "h1:25680", state.revision if state else 0)
        view = await n2.read()
        assert view.state == state and view.revision >= state.revision > 0
        assert view.master is not None
        assert (view.master.node, view.master.epoch, view.master.lease) == ("n1", 1, held)
        assert await n2.bootstrap(await lease(client), "h2:1") is None
        assert await n1.bootstrap(held, "h1:25680") is None
        assert (await n1.read()).state == state


async def test_concurrent_bootstraps_exactly_one_wins(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    results: dict[str, GroupState | None] = {}

    async def boot(node: str) -> None:
        results[node] = await controllers(node).bootstrap(await lease(client), node + ":1")

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            for node in ("n1", "n2", "n3"):
                nursery.start_soon(boot, node)
        winners = [node for node, won in results.items() if won is not None]
        assert len(winners) == 1, results
        view = await controllers("n1").read()
        assert view.state is not None and view.master is not None
        assert view.state.master == view.master.node == winners[0]


# -- elections ---------------------------------------------------------------------------------


async def test_campaign_needs_the_sync_set_and_no_master_key(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1, n2, n4 = controllers("n1"), controllers("n2"), controllers("n4")
    with trio.fail_after(TIMEOUT):
        with pytest.raises(ValueError, match="no state"):
            await n2.campaign(await n2.read(), await lease(client), "h2:1")
        held, first = await bootstrapped(client, n1)
        assert await n1.set_sync_set(first, ["n2", "n3"], held) is not None
        seen = await n2.read()
        with pytest.raises(ValueError, match="no unclean election"):
            await n4.campaign(seen, await lease(client), "h4:1")
        # n1's key is alive: an SSS member loses, the state stays as it was.
        assert await n2.campaign(seen, await lease(client), "h2:1") is None
        after = await n2.read()
        assert (after.state, after.master) == (seen.state, seen.master)


async def test_master_key_vanishes_with_its_lease_and_one_of_two_campaigns_wins(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1, n2, n3 = controllers("n1"), controllers("n2"), controllers("n3")
    with trio.fail_after(TIMEOUT):
        held, first = await bootstrapped(client, n1)
        synced = await n1.set_sync_set(first, ["n1", "n3", "n2", "n3"], held)
        assert synced is not None and synced.sync_set == ("n1", "n2", "n3")
        await client.revoke(held)
        seen = await n2.read()
        assert seen.master is None and seen.state == synced

        results: dict[str, GroupState | None] = {}

        async def run(controller: GroupController) -> None:
            node = controller.node
            results[node] = await controller.campaign(seen, await lease(client), node + ":1")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, n2)
            nursery.start_soon(run, n3)
        winners = [state for state in results.values() if state is not None]
        assert len(winners) == 1, results
        won = winners[0]
        assert (won.epoch, won.sync_set) == (2, (won.master,))
        assert won.master_addr == won.master + ":1"
        after = await n1.read()
        assert after.state == won and after.master is not None
        assert (after.master.node, after.master.epoch) == (won.master, 2)


async def test_reclaim_after_my_lease_expired(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1, n2 = controllers("n1"), controllers("n2")
    with trio.fail_after(TIMEOUT):
        old, _ = await bootstrapped(client, n1)
        await client.revoke(old)
        seen = await n1.read()
        with pytest.raises(ValueError, match="not master"):
            await n2.reclaim(seen, await lease(client), "h2:1")
        new = await lease(client)
        state = await n1.reclaim(seen, new, "h1:2")
        assert state is not None and (state.epoch, state.master_addr) == (2, "h1:2")
        view = await n1.read()
        assert view.master == MasterClaim("n1", 2, new, state.revision)
        assert await n1.reclaim(seen, new, "h1:2") is None  # the state moved on


async def test_renew_claim_keeps_the_epoch_unless_the_state_moved(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1, n2 = controllers("n1"), controllers("n2")
    with trio.fail_after(TIMEOUT):
        old, first = await bootstrapped(client, n1)
        await client.revoke(old)  # the claim goes with the lease
        new = await lease(client)
        assert await n1.renew_claim(first, new)
        view = await n1.read()
        assert view.master is not None and (view.master.epoch, view.master.lease) == (1, new)
        assert view.state == first  # same term: the state is untouched
        assert not await n1.renew_claim(first, new)  # the claim is there already
        with pytest.raises(ValueError, match="not master"):
            await n2.renew_claim(first, new)


async def test_step_down_gives_the_group_back_to_the_old_sync_set(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1, n2 = controllers("n1"), controllers("n2")
    with trio.fail_after(TIMEOUT):
        held, first = await bootstrapped(client, n1)
        before = await n1.set_sync_set(first, ["n2", "n3"], held)
        assert before is not None
        await client.revoke(held)
        won = await n2.campaign(await n2.read(), await lease(client), "h2:1")
        assert won is not None and won.sync_set == ("n2",)
        with pytest.raises(ValueError, match="not master"):
            await n1.step_down(won, before.sync_set)
        assert await n2.step_down(won, before.sync_set)
        view = await n2.read()
        assert view.master is None  # the claim is gone: another member may campaign
        assert view.state is not None and view.state.sync_set == ("n1", "n2", "n3")
        assert view.state.epoch == won.epoch
        assert not await n2.step_down(won, before.sync_set)  # the state moved on


# -- sync set changes --------------------------------------------------------------------------


async def test_set_sync_set_refused_once_another_node_is_master(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1, n2 = controllers("n1"), controllers("n2")
    with trio.fail_after(TIMEOUT):
        held, first = await bootstrapped(client, n1)
        stale = await n1.set_sync_set(first, ["n2"], held)
        assert stale is not None and stale.sync_set == ("n1", "n2")
        assert (await n1.read()).state == stale  # the revision returned is the stored one
        # Another lease than the master key's: refused.
        assert await n1.set_sync_set(stale, ["n2", "n3"], await lease(client)) is None
        await client.revoke(held)
        # The master key is gone, the state unchanged: refused on the key alone.
        assert await n1.set_sync_set(stale, ["n2", "n3"], 0) is None
        won = await n2.campaign(await n2.read(), await lease(client), "h2:1")
        assert won is not None
        assert await n1.set_sync_set(stale, ["n2", "n3"], await lease(client)) is None
        assert (await n1.read()).state == won
        with pytest.raises(ValueError, match="not master"):
            await n1.set_sync_set(won, ["n1"], held)


async def test_set_sync_set_refused_after_a_concurrent_state_change(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1 = controllers("n1")
    with trio.fail_after(TIMEOUT):
        held, first = await bootstrapped(client, n1)
        results: list[GroupState | None] = []

        async def change(members: list[str]) -> None:
            results.append(await n1.set_sync_set(first, members, held))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(change, ["n2"])
            nursery.start_soon(change, ["n3"])
        winners = [state for state in results if state is not None]
        assert len(winners) == 1 and len(results) == 2
        assert (await n1.read()).state == winners[0]
        assert await n1.set_sync_set(winners[0], [], held) is not None


# -- the change feed ---------------------------------------------------------------------------


async def test_changes_yield_a_view_per_change(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1, n2 = controllers("n1"), controllers("n2")
    with trio.fail_after(TIMEOUT):
        held, first = await bootstrapped(client, n1)
        start = await n2.read()
        async with n2.changes(start.revision + 1) as views:
            synced = await n1.set_sync_set(first, ["n2"], held)
            view = await views.__anext__()
            assert view.state == synced and view.master is not None
            await client.revoke(held)
            view = await views.__anext__()
            assert view.state == synced and view.master is None
            won = await n2.campaign(view, await lease(client), "h2:1")
            assert won is not None
            view = await views.__anext__()  # one view for the txn's two puts
            assert view.state == won and view.master is not None
            assert view.master.node == "n2"
            with trio.move_on_after(0.3) as idle:
                await views.__anext__()
            assert idle.cancelled_caught  # nothing more happened
            synced = await n2.set_sync_set(won, ["n1"], 0)
            assert synced is not None  # and the cancelled wait left the feed usable:
            assert (await views.__anext__()).state == synced


async def test_changes_from_now_and_with_aclosing(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1 = controllers("n1")
    seen: list[GroupView] = []
    with trio.fail_after(TIMEOUT):
        async with n1.changes() as views:  # "from now" is fixed on entering
            state = await n1.bootstrap(await lease(client), "h1:1")
            assert state is not None
            assert (await views.__anext__()).state == state
        rev = (await n1.read()).revision
        async with aclosing(n1.changes(rev + 1)) as views, trio.open_nursery() as nursery:

            async def collect() -> None:
                async for view in views:
                    seen.append(view)

            nursery.start_soon(collect)
            assert await n1.set_sync_set(state, ["n2"], 0) is not None
            while not seen:
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    assert [view.state.sync_set for view in seen if view.state] == [("n1", "n2")]


# -- the operator's promote --------------------------------------------------------------------


async def test_promote_refusals_and_force(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1, n2 = controllers("n1"), controllers("n2")
    with trio.fail_after(TIMEOUT):
        with pytest.raises(ControllerError, match="no state"):
            await n1.promote("n2")
        held, first = await bootstrapped(client, n1)
        synced = await n1.set_sync_set(first, ["n2"], held)
        assert synced is not None
        with pytest.raises(ControllerError, match="n4 is not in the sync set"):
            await n1.promote("n4", force=True)
        with pytest.raises(ControllerError, match="n1 is master and alive; use --force"):
            await n1.promote("n2")
        assert await n1.promote("n1") == synced  # already master: nothing to do

        node_lease = await lease(client)
        addrs = {"addrs": {"amqp": "h2:5672", "cluster": "h2:25680"}}
        await client.put(keys.node_key(n2.cluster, "n2"), json.dumps(addrs), lease=node_lease)
        promoted = await n1.promote("n2", force=True)
        assert (promoted.epoch, promoted.master, promoted.sync_set) == (2, "n2", ("n2",))
        assert promoted.master_addr == "h2:25680"
        view = await n2.read()
        assert view.state == promoted and view.master is None
        # The old master can no longer change the sync set.
        assert await n1.set_sync_set(synced, ["n2"], held) is None
        # The target claims what the state gives it.
        claimed = await n2.reclaim(view, node_lease, "h2:25680")
        assert claimed is not None and claimed.epoch == 3
        master = (await n2.read()).master
        assert master is not None and (master.node, master.lease) == ("n2", node_lease)


async def test_promote_without_a_live_master_needs_no_force(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1 = controllers("n1")
    with trio.fail_after(TIMEOUT):
        held, first = await bootstrapped(client, n1)
        assert await n1.set_sync_set(first, ["n2"], held) is not None
        await client.revoke(held)
        promoted = await n1.promote("n2")
        assert (promoted.epoch, promoted.master, promoted.master_addr) == (2, "n2", "")


async def test_bad_json_in_the_state_key_raises_naming_it(
    client: EtcdClient, controllers: Callable[[str], GroupController]
) -> None:
    n1 = controllers("n1")
    with trio.fail_after(TIMEOUT):
        await client.put(n1.state_key, "{oops")
        with pytest.raises(ControllerError, match="groups/g%2F1/state holds no valid value"):
            await n1.read()
        with pytest.raises(ControllerError):
            await n1.promote("n1")
