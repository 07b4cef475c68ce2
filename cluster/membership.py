"""Membership: the node's etcd lease, its node key, and the lease guard (CLUSTER.md §3.4).

A node is a member while it holds a lease of `cluster.lease_ttl_s` seconds, renewed by a
keepalive every TTL/3, and the key `P/nodes/<node>` on that lease says what it is: group,
role, epoch, client addresses, commit-log offset. When the node dies or is cut off, etcd
expires the lease and the key goes with it; every other node sees it go.

**The lease guard** decides, on the monotonic clock, how long the node may still act as a
member without hearing from etcd: until the send time of the last keepalive etcd answered,
plus the TTL, minus `cluster.lease_guard_s`. etcd handled that keepalive after it was sent,
so it cannot expire the lease before then (the guard covers clock-rate differences and a
stalled loop). Monotonic time keeps running through SIGSTOP, so a paused node fences on its
first check after resuming. Past the guard the node raises the `cluster` alarm (publishers
blocked, consumers drain, as with the disk alarm) and clears it as soon as a keepalive
succeeds again; if etcd expired the lease meanwhile, the node joins again: a new lease, and
its node key put again.

A clean stop revokes the lease, so the node key goes at once rather than after the TTL.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from herald.cluster import keys
from herald.cluster.etcd import EtcdClient, EtcdError, LeaseNotFound

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.cluster.status import NodeStatus

log = logging.getLogger("herald.cluster.membership")

ALARM = "cluster"
RETRY_S = 0.25
"""After a failed renewal, the next try comes this soon (or after TTL/3 if that is sooner)."""
LEAVE_TIMEOUT_S = 2.0
"""How long a clean stop may spend revoking the lease."""


class AlarmSink(Protocol):
    """Where the `cluster` alarm goes (`herald.core.flow.Alarms`, or the node's, which passes
    it to whatever broker and gate the node has when it changes)."""

    def set(self, name: str, active: bool) -> None: ...


@attrs.define
class LeaseGuard:
    """Until when the node may act as a member: `valid_until` = the send time of the last
    renewal etcd acknowledged + its TTL - `guard_s` (monotonic seconds, Trio's clock)."""

    guard_s: float
    valid_until: float = -math.inf

    def renewed(self, sent_at: float, ttl: float) -> None:
        """etcd acknowledged a keepalive (or grant) sent at `sent_at`, for `ttl` seconds."""
        self.valid_until = max(self.valid_until, sent_at + ttl - self.guard_s)

    def lost(self) -> None:
        """etcd said the lease is gone: the node is no member until it joins again."""
        self.valid_until = -math.inf

    def valid(self, now: float) -> bool:
        return now < self.valid_until


class Membership:
    """One node's membership. `run` is its task in the node runner (node.py): join, then
    keep the lease alive and the node key current until cancelled, then leave.

    `describe()` returns the node key's changing part (`addrs`, `offset`); it is called at
    each renewal and the key is put again only when its value changed.
    """

    def __init__(
        self,
        etcd: EtcdClient,
        config: ClusterConfig,
        status: NodeStatus,
        alarms: AlarmSink,
        describe: Callable[[], Mapping[str, Any]],
    ) -> None:
        self.etcd = etcd
        self.config = config
        self.status = status
        self.alarms = alarms
        self.describe = describe
        self.key = keys.node_key(status.cluster, status.node)
        self.guard = LeaseGuard(config.lease_guard_s)
        self.lease_id = 0
        """The lease held now; 0 while the node holds none (not joined, or it expired)."""
        self.fenced = False
        """The `cluster` alarm is raised: the lease guard ran out."""
        self.joins = 0
        """Leases granted so far (1 after the first join; more after an expiry)."""
        self._written: bytes | None = None  # the node key's value as last put on this lease
        self._renewal = trio.Event()
        self._put_lock = trio.Lock()
        self._failing = False

    def value(self) -> bytes:
        """The node key's value: JSON (CLUSTER.md §4.3)."""
        status = self.status
        data = {
            "node": status.node,
            "group": status.group,
            "role": status.role.value,
            "epoch": status.epoch,
            **self.describe(),
        }
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()

    # -- the task ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Join (a node that cannot reach etcd starts fenced and keeps trying), report
        `started`, then renew every TTL/3 until cancelled; leave on the way out."""
        try:
            async with trio.open_nursery() as nursery:
                with trio.move_on_after(self.config.keepalive_interval_s):
                    await self.renew()
                self._update_alarm()
                nursery.start_soon(self._watch_guard)
                task_status.started()
                await self._keep_alive()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(LEAVE_TIMEOUT_S):
                await self.leave()

    async def renew(self) -> bool:
        """One round: a keepalive (a new lease when the node holds none), then the node key
        if it changed. True when etcd acknowledged the lease."""
        sent = trio.current_time()
        try:
            if self.lease_id == 0:
                lease = await self.etcd.grant(self.config.lease_ttl_s)
                self.lease_id, self._written = lease.id, None
                self.joins += 1
                log.info(
                    "cluster %r: node %s joined group %r (lease %x, TTL %d s)",
                    self.status.cluster,
                    self.status.node,
                    self.status.group,
                    lease.id,
                    lease.ttl,
                )
            else:
                lease = await self.etcd.keepalive(self.lease_id)
            self.guard.renewed(sent, lease.ttl or self.config.lease_ttl_s)
            await self._put_key()  # a new lease: a member again once its key is back
            self._renewed()
        except LeaseNotFound:
            log.warning(
                "cluster: lease %x of node %s expired; joining again",
                self.lease_id,
                self.status.node,
            )
            self.lease_id = 0
            self.guard.lost()
            self._update_alarm()
            return False
        except EtcdError as exc:  # EtcdUnavailable included: etcd is down or unreachable
            if not self._failing:
                log.warning("cluster: cannot reach etcd (%s); retrying", exc)
            self._failing = True
            return False
        if self._failing:
            log.info("cluster: etcd reachable again (%s)", self.etcd.endpoint)
        self._failing = False
        return True

    async def update_key(self) -> None:
        """Put the node key now if its value changed (the next renewal would anyway).

        :raises EtcdError: etcd refused or did not answer; the next renewal tries again.
        """
        if self.lease_id != 0:
            await self._put_key()

    async def leave(self) -> None:
        """Revoke the lease: the node key goes now. etcd unreachable: it goes at expiry."""
        lease_id, self.lease_id = self.lease_id, 0
        if lease_id == 0:
            return
        try:
            await self.etcd.revoke(lease_id)
            log.info("cluster: node %s left (lease %x revoked)", self.status.node, lease_id)
        except EtcdError as exc:
            log.warning(
                "cluster: could not revoke lease %x (%s); its node key goes within %d s",
                lease_id,
                exc,
                self.config.lease_ttl_s,
            )

    # -- internals ---------------------------------------------------------------------------

    async def _keep_alive(self) -> None:
        """A renewal every TTL/3 from the start of the last one; after a failure, sooner."""
        interval = self.config.keepalive_interval_s
        retry = min(RETRY_S, interval)
        ok, started = self.lease_id != 0, trio.current_time()  # the first round was run()'s
        while True:
            await trio.sleep_until(started + (interval if ok else retry))
            started, ok = trio.current_time(), False
            with trio.move_on_after(interval) as scope:  # a hung request must not hold up the next
                ok = await self.renew()
            if scope.cancelled_caught and not self._failing:
                log.warning("cluster: etcd did not answer within %.3g s; retrying", interval)
                self._failing = True

    async def _put_key(self) -> None:
        async with self._put_lock:  # one put at a time, so the newest value lands last
            value = self.value()
            if value != self._written:
                await self.etcd.put(self.key, value, lease=self.lease_id)
                self._written = value

    def _renewed(self) -> None:
        self._update_alarm()
        self._renewal.set()
        self._renewal = trio.Event()

    async def _watch_guard(self) -> None:
        """Raise the alarm the moment the guard runs out (renewals clear it themselves)."""
        while True:
            if self.guard.valid(trio.current_time()):
                with trio.move_on_at(self.guard.valid_until):
                    await self._renewal.wait()
            else:
                await self._renewal.wait()
            self._update_alarm()

    def _update_alarm(self) -> None:
        fenced = not self.guard.valid(trio.current_time())
        if fenced == self.fenced:
            return
        self.fenced = fenced
        if fenced:
            log.warning(
                "cluster: node %s cannot renew its etcd lease in time: fenced "
                "(publishers blocked until etcd answers again)",
                self.status.node,
            )
        else:
            log.info("cluster: node %s renewed its etcd lease: no longer fenced", self.status.node)
        self.alarms.set(ALARM, fenced)
