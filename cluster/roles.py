"""Which role a cluster node takes, and each role's life (CLUSTER.md §3.4-3.5).

`Roles.run` loops until the node stops: `decide` reads the group's keys and answers MASTER
(this node bootstrapped the group, or won an election) or SLAVE; the role then runs until it
ends, and the loop decides again.

- **decide**: no group state: bootstrap (the first node of a group is its master, epoch 1).
  A claim of another node: follow it. No claim: a sync-set member campaigns after
  `rank * RANK_DELAY_S` (the node with the most durable log first; ranking only shortens
  truncation, safety comes from the transaction), anyone else waits. A claim of mine on an
  old lease (my previous run's): wait until etcd expires it.
- **slave**: a `Follower` streams from the master the group names. When the claim vanishes
  and this node may campaign, the follower is closed **first** (no more acks to a master
  that may still be alive and confirming), then the loop decides.
- **master**: a `Broker` on a `ReplicatedCommitLogStore` (the epoch recorded at its open), the
  HA streams (`HAMaster`), each sync-set change written to etcd before the gate acts on it.
  When the group names another master, or this node's claim is gone (its lease expired), it
  demotes: waiting publishes and later writes get `NotMaster` naming the new master, the
  broker stops (its connections closed), and the node follows.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import math
from typing import TYPE_CHECKING

import trio

from herald.cluster import keys
from herald.cluster.controller import ControllerError, GroupState, GroupView
from herald.cluster.etcd import EtcdError
from herald.cluster.ha.gate import ReplicationGate
from herald.cluster.ha.master import HAMaster
from herald.cluster.ha.slave import Follower
from herald.cluster.ha.store import ReplicatedCommitLogStore
from herald.cluster.nameserver.registry import Role
from herald.cluster.peer import leaves
from herald.cluster.shared.runtime import SharedRuntime
from herald.core.broker import Broker
from herald.core.errors import HeraldError, NotMaster
from herald.plugins.management.replica_server import serve_replica

if TYPE_CHECKING:
    from herald.cluster.controller import GroupController
    from herald.cluster.ha.epochs import EpochFile
    from herald.cluster.membership import Membership
    from herald.cluster.node import ClusterNode

log = logging.getLogger("herald.cluster")

RANK_DELAY_S = 0.3
"""Each candidate ahead of this node in the ranking delays its campaign this much."""
DECIDE_RETRY_S = 0.25
STEP_DOWN_BACKOFF_S = 5.0
"""A node whose broker failed to start as master stays out of elections this long."""
ADDRESS_WAIT_S = 3.0
"""How long a demoted master waits for the new master's client addresses to tell its
clients (the new one publishes them once its listeners are bound)."""


AGAIN = object()
"""`_decide`: the group changed under this node (a bootstrap or election lost): decide again
at once, not after a wait (the winner's claim is there to follow)."""


class Decision(enum.Enum):
    MASTER = "master"
    SLAVE = "slave"


class Roles:
    """The role loop of one node (see the module docstring)."""

    def __init__(
        self,
        node: ClusterNode,
        controller: GroupController,
        membership: Membership,
        epochs: EpochFile,
    ) -> None:
        self.node = node
        self.controller = controller
        self.membership = membership
        self.epochs = epochs
        self.me = node.status.node
        self.state: GroupState | None = None  # the group state as this master last wrote it
        self.previous_sync_set: tuple[str, ...] = ()  # before this node's last campaign
        self.backoff_until = -math.inf  # no campaign before (after a step-down)
        self._reported = False

    def _report(self, task_status: trio.TaskStatus[Broker | None], broker: Broker | None) -> None:
        if not self._reported:
            self._reported = True
            task_status.started(broker)

    async def run(self, task_status: trio.TaskStatus[Broker | None]) -> None:
        node = self.node
        while not node.stopping:
            decision = await self.decide()
            if decision is None:
                break
            kind, state = decision
            if kind is Decision.MASTER:
                assert state is not None
                await self.run_master(state, task_status)
            else:
                await self.run_slave(task_status)
        self._report(task_status, node.broker)

    # -- deciding ------------------------------------------------------------------------------
    async def decide(self) -> tuple[Decision, GroupState | None] | None:
        """MASTER (with the state this node claimed the group in) or SLAVE; None once the
        node stops."""
        node = self.node
        while not node.stopping:
            lease = self.membership.lease_id
            if lease == 0:  # not joined (etcd away, or the lease just expired)
                await node.wait_view(DECIDE_RETRY_S)
                continue
            try:
                view = await self.controller.read()
                decision = await self._decide(view, lease)
            except (EtcdError, ValueError) as exc:  # ValueError: the group moved under a txn
                log.info("cluster: cannot decide a role yet (%s); retrying", exc)
                await trio.sleep(DECIDE_RETRY_S)
                continue
            if decision is AGAIN:
                continue
            if isinstance(decision, tuple):
                if decision[0] is Decision.MASTER:
                    node.claim_lease = lease
                return decision
            await node.wait_view(DECIDE_RETRY_S * 4)
        return None

    async def _decide(
        self, view: GroupView, lease: int
    ) -> tuple[Decision, GroupState | None] | object | None:
        """A decision; AGAIN: decide again at once (the group just changed); None: wait for
        the group to change."""
        me, address = self.me, self.node.cluster_address
        state, claim = view.state, view.master
        if state is None:
            won = await self.controller.bootstrap(lease, address)
            if won is not None:
                log.info("cluster: %s bootstraps group %r (epoch 1)", me, self.node.status.group)
                return Decision.MASTER, won
            return AGAIN  # another node bootstrapped it: follow it now
        if claim is not None:
            if claim.node != me:
                return Decision.SLAVE, None
            if claim.lease == lease and state.master == me:
                return Decision.MASTER, state  # mine, on this lease (a role loop restarted)
            return None  # my previous run's claim: etcd expires it with its lease
        if me not in state.sync_set and state.master != me:
            return Decision.SLAVE, None  # not electable: wait for a master to follow
        if trio.current_time() < self.backoff_until:
            return None  # stepped down: let another member take the group
        rank = await self._rank(state)
        if rank:
            await trio.sleep(rank * RANK_DELAY_S)
            view = await self.controller.read()
            if view.master is not None or view.state is None:
                return AGAIN  # someone won meanwhile: follow at once
            if me not in view.state.sync_set:
                return Decision.SLAVE, None  # the winner died, and its sync set is itself
        self.previous_sync_set = view.state.sync_set if view.state is not None else ()
        won = await self.controller.campaign(view, lease, address)
        if won is not None:
            log.warning(
                "cluster: %s elected master of %r (epoch %d)", me, self.node.status.group, won.epoch
            )
            return Decision.MASTER, won
        return AGAIN  # lost: the winner's claim is there to follow

    async def _rank(self, state: GroupState) -> int:
        """How many other electable nodes have a more durable log than this one (by their
        node keys; the master whose claim vanished is not counted)."""
        etcd = self.controller.etcd
        found = await etcd.range(keys.nodes_prefix(self.node.config.name), prefix=True)
        offsets: dict[str, int] = {}
        for kv in found.kvs:
            try:
                data = json.loads(kv.value)
                offsets[str(data["node"])] = int(data.get("offset", 0))
            except (ValueError, KeyError, TypeError):
                continue
        mine = (-offsets.get(self.me, 0), self.me)
        others = set(state.sync_set) - {self.me, state.master}  # the old master: likely dead
        return sum(1 for other in others if other in offsets and (-offsets[other], other) < mine)

    # -- slave ---------------------------------------------------------------------------------
    async def run_slave(self, task_status: trio.TaskStatus[Broker | None]) -> None:
        node = self.node
        follower = Follower(
            node.data_dir / "store",
            node.store_config,
            node.config,
            self.me,
            node.status.group,
            self.epochs,
        )
        node.follower = follower
        view = node.view
        node.status.set_role(Role.SLAVE, view.state.epoch if view and view.state else 0)
        log.info("cluster: %s is a slave of group %r", self.me, node.status.group)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower.run, self._master_to_follow)
                nursery.start_soon(serve_replica, node, follower)  # read-only management API
                self._report(task_status, None)
                while not node.stopping and not self._may_campaign(node.view):
                    view = await node.wait_view()
                    if view is not None and view.state is not None:
                        node.status.set_role(Role.SLAVE, view.state.epoch)  # the group's term
                    address = node.master_address()
                    if follower.streaming_from and address != follower.streaming_from:
                        follower.restream()  # the group names another master now
                nursery.cancel_scope.cancel()  # the stream and the store close first
        finally:
            node.follower = None

    def _may_campaign(self, view: GroupView | None) -> bool:
        if view is None or view.state is None:
            return False
        claim = view.master
        if claim is None:
            return self.me in view.state.sync_set or view.state.master == self.me
        return claim.node == self.me and claim.lease == self.membership.lease_id

    async def _master_to_follow(self) -> str:
        """The cluster address of the master to stream from, once the group names one."""
        node = self.node
        while True:
            view = node.view
            if view is not None and view.master is not None and view.master.node != self.me:
                address = node.master_address()
                if address:
                    return address
            await node.wait_view()

    # -- master --------------------------------------------------------------------------------
    async def run_master(
        self, state: GroupState, task_status: trio.TaskStatus[Broker | None]
    ) -> None:
        node, config = self.node, self.node.config
        holder: list[ReplicatedCommitLogStore] = []
        gate = ReplicationGate(
            self.me,
            log_end=lambda: holder[0].log.write_offset,
            mode="sync" if config.replication == "sync" else "async",
            min_in_sync_replicas=config.min_in_sync_replicas,
            sync_timeout=config.sync_timeout_ms / 1000,
            sync_set=state.sync_set,
        )
        store = ReplicatedCommitLogStore(
            node.data_dir / "store",
            node.store_config,
            gate=gate,
            epochs=self.epochs,
            epoch=state.epoch,
            mark_recovered_redelivered=config.mark_recovered_redelivered,
        )
        holder.append(store)
        store.shared = node.shared = SharedRuntime(
            config, self.membership.etcd, store, self.me, node.status.group,
            lambda: self.membership.lease_id,
        )  # fmt: skip
        self.state = state
        broker = Broker(node.herald_config, node.plugins, store=store)
        ha = HAMaster(store, config, self.me, node.status.group, self._change_sync_set)
        demoted = started = False
        failed = ""
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(broker.run)
                started = True
                demoted = await self._serve(nursery, broker, ha, state, task_status)
                nursery.cancel_scope.cancel()
        except* (OSError, HeraldError) as group:
            if started:
                raise
            failed = "; ".join(str(exc) for exc in leaves(group))
        node.ha = node.shared = None
        node.note_broker(None)
        if failed:
            await self._step_down(state, failed)
        elif not demoted:
            node.stopping = True  # the broker stopped on its own (an embedder, a signal)

    async def _serve(
        self,
        nursery: trio.Nursery,
        broker: Broker,
        ha: HAMaster,
        state: GroupState,
        task_status: trio.TaskStatus[Broker | None],
    ) -> bool:
        """Serve as master until replaced (True: demoted) or stopped (False)."""
        node, gate, demoted = self.node, ha.gate, False
        node.note_broker(broker)
        node.ha = ha
        node.apply_alarm()
        node.status.set_role(Role.MASTER, state.epoch)  # registered once it listens
        nursery.start_soon(ha.run)
        nursery.start_soon(self._run_shared, broker)
        self._report(task_status, broker)
        log.info("cluster: %s is master of %r (epoch %d)", self.me, node.status.group, state.epoch)
        replaced: NotMaster | None = None
        async with trio.open_nursery() as watch:
            watch.start_soon(self._until_stopped, broker, watch.cancel_scope)
            replaced = await self._until_replaced(state)
            watch.cancel_scope.cancel()
        if replaced is not None and not broker.stopping:
            demoted = True
            gate.refuse(replaced)
            log.warning("cluster: %s", replaced.reply_text)
            broker.stop(replaced)  # every connection told where the master went
        ha.close()  # before the store closes: the streams read it
        node.ha = None
        await broker.wait_stopped()
        return demoted

    async def _run_shared(self, broker: Broker) -> None:
        """Shared queues for this term; started again while etcd refuses its first reads."""
        runtime = self.node.shared
        assert runtime is not None
        while True:
            try:
                await runtime.run(broker)
                return
            except (EtcdError, OSError) as exc:
                log.warning("cluster: shared queues not started yet (%s)", exc)
                await trio.sleep(1.0)

    async def _step_down(self, state: GroupState, why: str) -> None:
        """This node won the group but its broker did not start (a client port taken, the
        store refusing to open): give the group back to the sync set it had before, and stay
        out of elections for `STEP_DOWN_BACKOFF_S`, so another member takes over."""
        log.error("cluster: %s cannot serve as master (%s): stepping down", self.me, why)
        self.backoff_until = trio.current_time() + STEP_DOWN_BACKOFF_S
        try:
            await self.controller.step_down(state, self.previous_sync_set)
        except (EtcdError, ValueError) as exc:
            log.error("cluster: %s could not step down (%s)", self.me, exc)

    async def _until_stopped(self, broker: Broker, scope: trio.CancelScope) -> None:
        await broker.wait_stopped()
        scope.cancel()

    async def _until_replaced(self, state: GroupState) -> NotMaster | None:
        """Wait until the group no longer names this node master at `state.epoch` (the
        refusal to give clients), or the node stops (None). A claim that went with an
        expired lease is put back on the new one when nobody was elected meanwhile."""
        node = self.node
        while not node.stopping:
            view = await node.wait_view()
            if view is None:
                continue
            claim = view.master
            if claim is not None and claim.node == self.me and claim.epoch == state.epoch:
                if claim.lease != node.claim_lease and claim.lease == self.membership.lease_id:
                    node.claim_lease = claim.lease
                    node.apply_alarm()
                continue
            if claim is None:
                if await self._claim_again(view, state):
                    continue
                # Not put back: the group moved on since this view (an election won while
                # the view still showed the claim's DELETE). Read it again, so the refusal
                # names the new master rather than "its claim expired".
                with contextlib.suppress(EtcdError, ControllerError):
                    view = await self.controller.read()
            return await self._refusal(view, state)
        return None

    async def _claim_again(self, view: GroupView, state: GroupState) -> bool:
        """The claim is gone: put it back if the state still names this master's term."""
        current, lease = view.state, self.membership.lease_id
        if current is None or current.master != self.me or current.epoch != state.epoch:
            return False
        while lease == 0 and not self.node.stopping:  # joining again: wait for the lease
            await self.node.wait_view(DECIDE_RETRY_S)
            lease = self.membership.lease_id
        try:
            if await self.controller.renew_claim(current, lease):
                self.node.claim_lease = lease
                self.node.apply_alarm()
                return True
        except EtcdError as exc:
            log.info("cluster: cannot claim %r again yet (%s)", self.node.status.group, exc)
            return True  # look again at the next view (fenced meanwhile)
        return False

    async def _refusal(self, view: GroupView, state: GroupState) -> NotMaster:
        """What this node's clients are told at its demotion: the new master, with its
        client addresses once its node key has them (it publishes them when its listeners
        are bound: waited for up to `ADDRESS_WAIT_S`, with this node fenced meanwhile)."""
        group = self.node.status.group
        claim, current = view.master, view.state
        if claim is not None:
            successor, epoch = claim.node, claim.epoch
        elif current is not None and current.master != self.me:  # an operator's promote
            successor, epoch = current.master, current.epoch
        else:
            return NotMaster(
                f"{self.me} is no longer master of {group} (epoch {state.epoch}: its claim expired)"
            )
        if self.node.ha is not None:
            self.node.ha.gate.fence()
        addrs: dict[str, str] = {}
        with trio.move_on_after(ADDRESS_WAIT_S):
            while not (addrs.keys() - {"cluster"}):
                addrs = await self._addresses_of(successor)
                if not (addrs.keys() - {"cluster"}):
                    await trio.sleep(DECIDE_RETRY_S)
        return NotMaster(
            f"{self.me} is no longer master of {group} (epoch {epoch}: {successor})", addrs=addrs
        )

    async def _addresses_of(self, node: str) -> dict[str, str]:
        """The client addresses `node` publishes in its node key ({} if unknown)."""
        try:
            kv = await self.controller.etcd.get(keys.node_key(self.node.config.name, node))
            if kv is not None:
                found = json.loads(kv.value).get("addrs", {})
                return {str(k): str(v) for k, v in found.items()}
        except (EtcdError, ValueError, AttributeError):
            pass
        return {}

    async def _change_sync_set(self, members: frozenset[str]) -> bool:
        state = self.state
        if state is None:
            return False
        try:
            new = await self.controller.set_sync_set(state, members, self.membership.lease_id)
        except EtcdError as exc:
            log.warning("cluster: sync set not changed (%s)", exc)
            return False
        if new is None:
            return False
        self.state = new
        return True
