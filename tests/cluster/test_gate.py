"""`ReplicationGate` (cluster/ha/gate.py) on Trio's autojump clock: which waiting publishes
the confirm rule releases, when, and which get `ReplicationTimeout` instead."""

from __future__ import annotations

from typing import Any, Literal

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from herald.cluster.ha.gate import AckAboveEnd, ReplicationGate
from herald.core.errors import ReplicationTimeout

END = 10_000


def make_gate(
    mode: Literal["sync", "async"] = "sync",
    sync_set: tuple[str, ...] = ("m", "a", "b"),
    min_in_sync_replicas: int = 2,
    sync_timeout: float = 3.0,
    local_flushed: int = 0,
) -> ReplicationGate:
    return ReplicationGate(
        "m",
        log_end=lambda: END,
        mode=mode,
        sync_set=sync_set,
        min_in_sync_replicas=min_in_sync_replicas,
        sync_timeout=sync_timeout,
        local_flushed=local_flushed,
        confirmed=local_flushed,
    )


class Outcomes:
    """Starts waiters in a nursery and records how each ended, and when."""

    def __init__(self, gate: ReplicationGate, nursery: trio.Nursery) -> None:
        self.gate = gate
        self.nursery = nursery
        self.ended: dict[str, tuple[str, float]] = {}

    def wait(self, name: str, ticket: int) -> None:
        async def run() -> None:
            try:
                await self.gate.wait_confirmed(ticket)
            except ReplicationTimeout:
                self.ended[name] = ("timeout", trio.current_time())
            else:
                self.ended[name] = ("confirmed", trio.current_time())

        self.nursery.start_soon(run)

    def states(self) -> dict[str, str]:
        return {name: state for name, (state, _) in self.ended.items()}


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_async_mode_releases_on_local_flush(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(mode="async")
    async with trio.open_nursery() as nursery:
        out = Outcomes(gate, nursery)
        out.wait("p1", 100)
        out.wait("p2", 200)
        await settle()
        assert out.ended == {}
        assert gate.waiting == 2
        gate.local_flushed(150)  # no slave acked anything: async does not wait for them
        await settle()
        assert out.states() == {"p1": "confirmed"}
        gate.local_flushed(200)
    assert out.states() == {"p1": "confirmed", "p2": "confirmed"}
    assert gate.confirmed == 200 and gate.waiting == 0


async def test_sync_waits_for_every_member_and_local_flush(
    autojump_clock: trio.abc.Clock,
) -> None:
    gate = make_gate()
    async with trio.open_nursery() as nursery:
        out = Outcomes(gate, nursery)
        out.wait("p", 100)
        await settle()
        gate.slave_acked("a", 100)
        gate.local_flushed(100)
        await settle()
        assert out.ended == {}  # b has not acked
        gate.slave_acked("b", 120)
        await settle()
        assert out.states() == {"p": "confirmed"}
    assert gate.confirmed == 100  # min(local 100, a 100, b 120)


async def test_start_confirms_only_what_it_is_told(autojump_clock: trio.abc.Clock) -> None:
    gate = ReplicationGate("m", log_end=lambda: END, sync_set=("m", "a"), local_flushed=90)
    assert gate.confirmed == 0  # a new master's tail may be unconfirmed
    gate.slave_acked("a", 70)
    assert gate.confirmed == 70


async def test_local_flush_is_also_required_in_sync_mode(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate()
    gate.slave_acked("a", 100)
    gate.slave_acked("b", 100)
    assert gate.confirmed == 0
    gate.local_flushed(80)
    assert gate.confirmed == 80


async def test_already_confirmed_returns_at_once(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(mode="async", local_flushed=50)
    start = trio.current_time()
    await gate.wait_confirmed(50)
    assert trio.current_time() == start and gate.waiting == 0


async def test_min_in_sync_not_met_then_member_joins(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(sync_set=("m",), min_in_sync_replicas=2)
    assert not gate.in_sync
    async with trio.open_nursery() as nursery:
        out = Outcomes(gate, nursery)
        out.wait("p", 100)
        gate.local_flushed(100)
        gate.slave_acked("a", 100)  # a is not in the sync set yet: its ack is only noted
        await settle()
        assert out.ended == {} and gate.confirmed == 0
        assert gate.acked("a") == 100
        await trio.sleep(1)
        gate.set_sync_set(["m", "a"])  # etcd now has {m, a}
        await settle()
        assert out.states() == {"p": "confirmed"}
    assert gate.confirmed == 100


async def test_single_node_group_with_min_one(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(sync_set=("m",), min_in_sync_replicas=1)
    gate.local_flushed(30)
    assert gate.confirmed == 30


async def test_shrinking_below_min_freezes(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(sync_set=("m", "a"))
    gate.slave_acked("a", 40)
    gate.local_flushed(60)
    assert gate.confirmed == 40
    gate.set_sync_set(["m"])  # below min_in_sync_replicas=2: frozen, not "local only"
    gate.local_flushed(90)
    assert gate.confirmed == 40


async def test_slave_leaving_releases_waiters_that_waited_for_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    gate = make_gate()
    async with trio.open_nursery() as nursery:
        out = Outcomes(gate, nursery)
        out.wait("p1", 100)
        out.wait("p2", 200)
        gate.local_flushed(300)
        gate.slave_acked("a", 150)
        gate.slave_acked("b", 40)  # b lags
        await settle()
        assert out.ended == {}
        gate.set_sync_set(["m", "a"])  # etcd dropped b
        await settle()
        assert out.states() == {"p1": "confirmed"}  # p2 still needs a
        assert gate.confirmed == 150
        gate.slave_acked("a", 200)
    assert out.states() == {"p1": "confirmed", "p2": "confirmed"}


async def test_timeout_only_for_waiters_past_it(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(sync_timeout=3.0)
    async with trio.open_nursery() as nursery:
        out = Outcomes(gate, nursery)
        start = trio.current_time()
        out.wait("early", 100)
        await trio.sleep(2)
        out.wait("late", 200)
        await trio.sleep(1.5)  # t = 3.5: early is past its 3 s, late is at 1.5 s
        assert out.states() == {"early": "timeout"}
        assert out.ended["early"][1] == pytest.approx(start + 3.0)
        for node in ("a", "b"):
            gate.slave_acked(node, 200)
        gate.local_flushed(200)
        await settle()
        assert out.states() == {"early": "timeout", "late": "confirmed"}
    assert gate.waiting == 0


async def test_timeout_text_says_the_message_is_stored(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(sync_timeout=0.5)
    with pytest.raises(ReplicationTimeout, match="stored on the master"):
        await gate.wait_confirmed(1)


async def test_fenced_releases_nothing_until_unfenced(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(sync_timeout=3.0)
    async with trio.open_nursery() as nursery:
        out = Outcomes(gate, nursery)
        out.wait("old", 100)
        await trio.sleep(2.5)
        out.wait("new", 100)
        gate.fence()
        await trio.sleep(0.1)
        for node in ("a", "b"):
            gate.slave_acked(node, 100)
        gate.local_flushed(100)
        await trio.sleep(0.1)
        assert out.ended == {} and gate.confirmed == 0  # acks arrived, fence holds them
        await trio.sleep(1)  # t = 3.7: old's timeout ran while fenced
        assert out.states() == {"old": "timeout"}
        gate.unfence()
        await settle()
        assert out.states() == {"old": "timeout", "new": "confirmed"}
    assert gate.confirmed == 100


async def test_fenced_in_async_mode_too(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(mode="async")
    gate.fence()
    gate.local_flushed(10)
    assert gate.confirmed == 0
    gate.unfence()
    assert gate.confirmed == 10


async def test_ack_above_master_end_refused(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(sync_set=("m", "a"))
    gate.local_flushed(END)
    with pytest.raises(AckAboveEnd):
        gate.slave_acked("a", END + 1)
    assert gate.acked("a") is None and gate.confirmed == 0
    gate.slave_acked("a", END)  # the end itself is fine, even past the master's flush
    assert gate.confirmed == END


async def test_master_cannot_ack_itself(autojump_clock: trio.abc.Clock) -> None:
    with pytest.raises(ValueError, match="local_flushed"):
        make_gate().slave_acked("m", 1)


async def test_cancelled_waiters_are_swept(autojump_clock: trio.abc.Clock) -> None:
    gate = make_gate(sync_timeout=1.0)
    async with trio.open_nursery() as nursery:
        out = Outcomes(gate, nursery)
        for i in range(200):
            out.wait(f"p{i}", 100 + i)
    assert len(out.ended) == 200 and gate.waiting == 0
    assert len(gate._heap) <= 64  # the dead were dropped while frozen
    gate.set_sync_set(["m"])
    gate.set_sync_set(["m", "a"])
    gate.slave_acked("a", 1000)
    gate.local_flushed(1000)
    assert gate._heap == [] and gate._dead == 0


def test_bad_settings_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        make_gate(mode="semi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_in_sync"):
        make_gate(min_in_sync_replicas=0)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("local"), st.integers(0, END)),
        st.tuples(st.just("ack"), st.sampled_from("abc"), st.integers(0, END // 4)),
        st.tuples(st.just("set"), st.sets(st.sampled_from("abc"))),
        st.tuples(st.just("fence"), st.booleans()),
    ),
    max_size=60,
)


@given(OPS, st.sampled_from(["sync", "async"]), st.integers(1, 4))
def test_confirmed_monotonic_and_bounded(
    ops: list[tuple[Any, ...]], mode: Any, min_isr: int
) -> None:
    """`confirmed` never decreases, never exceeds the local flush and, in sync mode, never
    exceeds a sync-set member's ack (members join only with ack ≥ confirmed, §3.2)."""
    gate = ReplicationGate(
        "m", log_end=lambda: END, mode=mode, min_in_sync_replicas=min_isr, sync_set=("m",)
    )
    previous = 0
    for op in ops:
        kind = op[0]
        if kind == "local":
            gate.local_flushed(op[1])
        elif kind == "ack":
            ticket = (gate.acked(op[1]) or 0) + op[2]  # a slave's acks only grow here
            try:
                gate.slave_acked(op[1], ticket)
            except AckAboveEnd:
                assert ticket > END
        elif kind == "set":
            members = {n for n in op[1] if (gate.acked(n) or 0) >= gate.confirmed}
            gate.set_sync_set(members | {"m"})
        elif op[1]:
            gate.fence()
        else:
            gate.unfence()
        assert previous <= gate.confirmed <= gate.local
        previous = gate.confirmed
        if mode == "sync":
            for member in gate.sync_set - {"m"}:
                assert gate.confirmed <= (gate.acked(member) or 0)
