"""`Membership` on Trio's autojump clock with an in-memory etcd: when exactly the `cluster`
alarm is raised and cleared. The real-etcd tests (test_membership.py) show the same against
a real etcd with bounded waits; here virtual time makes the guard's arithmetic exact."""

from __future__ import annotations

import math
from typing import cast

import pytest
import trio
import trio.testing

from herald.cluster.config import ClusterConfig
from herald.cluster.etcd import EtcdClient, EtcdUnavailable, Lease, LeaseNotFound, RangeResult
from herald.cluster.membership import ALARM, Membership
from herald.cluster.status import NodeStatus
from herald.core.flow import Alarms

TTL, GUARD = 3, 1.0  # keepalive every 1 s; valid until the last send + 2 s


class MemoryEtcd:
    """The few etcd calls membership makes, in memory. `down`: every call fails at once;
    `hang`: every call waits forever (a blackholed link)."""

    endpoint = "memory"

    def __init__(self) -> None:
        self.down = False
        self.hang = False
        self.leases: dict[int, int] = {}
        self.keys: dict[str, tuple[bytes, int]] = {}
        self.sent: list[tuple[str, float]] = []
        self._next = 0x100

    async def _call(self, what: str) -> None:
        self.sent.append((what, trio.current_time()))
        await trio.sleep(0.001)  # a round trip
        if self.hang:
            await trio.sleep_forever()
        if self.down:
            raise EtcdUnavailable(f"{what}: etcd is down")

    async def grant(self, ttl: int) -> Lease:
        await self._call("grant")
        self._next += 1
        self.leases[self._next] = ttl
        return Lease(self._next, ttl)

    async def keepalive(self, lease_id: int) -> Lease:
        await self._call("keepalive")
        if lease_id not in self.leases:
            raise LeaseNotFound(f"lease {lease_id:x} not found", 5)
        return Lease(lease_id, self.leases[lease_id])

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> None:
        await self._call("put")
        if lease and lease not in self.leases:
            raise LeaseNotFound(f"lease {lease:x} not found", 5)
        self.keys[key] = (value, lease)

    async def range(self, key: str, *, prefix: bool = False) -> RangeResult:
        await self._call("range")
        return RangeResult((), 0, False, 1)

    async def revoke(self, lease_id: int) -> None:
        await self._call("revoke")
        self.leases.pop(lease_id, None)
        self.keys = {k: v for k, v in self.keys.items() if v[1] != lease_id}

    def expire(self, lease_id: int) -> None:
        """What etcd does when a lease runs out."""
        self.leases.pop(lease_id)
        self.keys = {k: v for k, v in self.keys.items() if v[1] != lease_id}


def membership(etcd: MemoryEtcd, alarms: Alarms) -> Membership:
    config = ClusterConfig(enabled=True, name="c", lease_ttl_s=TTL, lease_guard_s=GUARD)
    status = NodeStatus("c", "g1", "n1")
    return Membership(cast(EtcdClient, etcd), config, status, alarms, lambda: {"offset": 0})


async def wait_alarm(alarms: Alarms, active: bool) -> float:
    while (ALARM in alarms.active) != active:
        await alarms.wait_changed()
    return trio.current_time()


def last_sent(etcd: MemoryEtcd, what: str, before: float) -> float:
    return max(t for w, t in etcd.sent if w == what and t < before)


@pytest.mark.parametrize("failure", ["down", "hang"])
async def test_alarm_at_the_guard_and_cleared_by_the_next_keepalive(
    autojump_clock: trio.testing.MockClock, failure: str
) -> None:
    etcd, alarms = MemoryEtcd(), Alarms()
    node = membership(etcd, alarms)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        assert node.lease_id != 0 and not node.fenced
        await trio.sleep(5.5)  # renewals at 1, 2, 3, 4, 5 s
        setattr(etcd, failure, True)
        raised = await wait_alarm(alarms, True)
        # valid until the send time of the last answered keepalive + TTL - guard
        assert raised == pytest.approx(last_sent(etcd, "keepalive", 5.5) + TTL - GUARD)
        assert node.fenced and alarms.blocked
        setattr(etcd, failure, False)
        cleared = await wait_alarm(alarms, False)
        assert not node.fenced and node.joins == 1  # the same lease, renewed
        assert cleared - raised <= 1.0  # the next try, not the next TTL
        nursery.cancel_scope.cancel()


async def test_an_expired_lease_fences_at_once_and_joins_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    etcd, alarms = MemoryEtcd(), Alarms()
    node = membership(etcd, alarms)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        first = node.lease_id
        assert etcd.keys[node.key][1] == first
        etcd.expire(first)
        raised = await wait_alarm(alarms, True)  # at the next keepalive, not at the guard
        assert node.guard.valid_until == -math.inf
        cleared = await wait_alarm(alarms, False)
        assert cleared - raised <= 0.5
        assert node.joins == 2 and node.lease_id not in (0, first)
        assert etcd.keys[node.key][1] == node.lease_id  # the node key, put again
        nursery.cancel_scope.cancel()


async def test_start_fenced_when_etcd_is_down_then_join(
    autojump_clock: trio.testing.MockClock,
) -> None:
    etcd, alarms = MemoryEtcd(), Alarms()
    etcd.down = True
    node = membership(etcd, alarms)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        assert node.lease_id == 0 and node.fenced and ALARM in alarms.active
        etcd.down = False
        await wait_alarm(alarms, False)
        assert node.lease_id != 0 and node.key in etcd.keys
        nursery.cancel_scope.cancel()
    # Cancelled: the lease was revoked on the way out, and the key went with it.
    assert node.lease_id == 0 and etcd.leases == {} and etcd.keys == {}


async def test_the_node_key_is_put_again_only_when_it_changed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    etcd, alarms = MemoryEtcd(), Alarms()
    node = membership(etcd, alarms)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        await trio.sleep(10)
        puts = [t for w, t in etcd.sent if w == "put"]
        assert len(puts) == 1
        node.status.set_role(node.status.role, 3)  # a new epoch: the value changes
        await trio.sleep(1.5)
        assert len([w for w, _t in etcd.sent if w == "put"]) == 2
        nursery.cancel_scope.cancel()
