"""A cluster node's life: `ClusterNode`, the cluster plugin's `NodeRunner` (CLUSTER.md §3.5).

`herald run` and `herald.core.embedded()` run a node whose `[cluster]` is enabled through
this runner instead of a bare broker (hook `herald_node_runner`). The runner owns the node;
brokers are something it builds and runs, one per term as master:

1. check the config (every plugin's `herald_configure`), then join etcd: a lease and the
   node key (membership.py). A node that cannot reach etcd stays fenced (the `cluster`
   alarm raised), takes no role and keeps trying: nobody can tell it whether it is master;
2. bind the cluster port (port.py) and watch the group's keys (controller.py);
3. take a role (roles.py): bootstrap an empty group and be its master; follow the master
   the group names as a slave (a follower store, no kernel, no client port); campaign when
   the master's claim vanished and this node is in the sync set. A master runs its `Broker`
   on a `ReplicatedCommitLogStore` and the HA streams; it demotes itself when the group
   names another master or its claim is gone, and goes back to step 3;
4. put the node key again at each role change (client addresses as bound, the cluster
   address, the commit-log offset); register with the name servers now, every
   `register_interval_s` and at each role change;
5. on `stop()` (a signal, an embedder leaving its block) or when its broker stops, leave:
   the lease is revoked (the node key and a master's claim go at once) and the node
   unregistered.

`run` reports the node's first broker once its listeners are bound, or None when the node
starts as a slave (no client listener: `herald run` says so).

`running_node(broker)` finds the `ClusterNode` a broker belongs to while the node runs (the
management API's `/api/cluster`, tests).
"""

from __future__ import annotations

import logging
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from herald.cluster.addresses import advertised_host, client_addresses
from herald.cluster.controller import GroupController, GroupView
from herald.cluster.etcd import EtcdClient, EtcdError
from herald.cluster.ha.epochs import EpochFile, epochs_path
from herald.cluster.membership import ALARM, Membership
from herald.cluster.nameserver.registry import Role
from herald.cluster.port import ClusterPort
from herald.cluster.registration import QueueTable, Registrar, queue_table
from herald.cluster.roles import Roles
from herald.cluster.shared.status import delivered as shared_delivered
from herald.cluster.status import NodeStatus
from herald.core.broker import Broker
from herald.storage.commitlog_config import CommitLogConfig

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.cluster.ha.master import HAMaster
    from herald.cluster.ha.slave import Follower
    from herald.cluster.shared.link import LinkOrigin
    from herald.cluster.shared.runtime import SharedRuntime
    from herald.core.config import HeraldConfig
    from herald.core.plugins import Plugins

log = logging.getLogger("herald.cluster")

_RUNNING: weakref.WeakKeyDictionary[Broker, ClusterNode] = weakref.WeakKeyDictionary()
WATCH_RETRY_S = 0.5


def running_node(broker: Broker) -> ClusterNode | None:
    """The node `broker` belongs to while that node runs, else None (a standalone broker)."""
    return _RUNNING.get(broker)


class NodeAlarms:
    """What membership raises the `cluster` alarm on: the node's current broker, and its
    gate (a fenced master releases no confirm), whichever exist when it changes or later."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.fenced = False

    def set(self, name: str, active: bool) -> None:
        if name == ALARM:
            self.fenced = active
        self.node.apply_alarm()


class ClusterNode:
    """One node of a cluster, from joining etcd to leaving it (a `NodeRunner`).

    `config` is the `[cluster]` section; `status`, `membership` (once `run` has started),
    `registrar` (None without name servers), `view` (the group's keys as last seen) are the
    node's cluster state; `broker` and `ha` exist while it is master, `follower` while slave.
    """

    def __init__(self, herald_config: HeraldConfig, plugins: Plugins, config: ClusterConfig):
        node = herald_config.broker.node_name
        self.herald_config = herald_config
        self.plugins = plugins
        self.config = config
        # A slave until its broker listens as master: registered as master before that, a
        # node would send clients to ports nobody listens on yet.
        self.status = NodeStatus(config.name, config.group_of(node), node, Role.SLAVE)
        self.host = advertised_host(config)
        section = herald_config.plugins.get("commitlog")
        self.store_config = section if isinstance(section, CommitLogConfig) else CommitLogConfig()
        self.data_dir = Path(herald_config.broker.data_dir)
        self.broker: Broker | None = None
        self.ha: HAMaster | None = None
        self.follower: Follower | None = None
        self.shared: SharedRuntime | None = None
        self.membership: Membership | None = None
        self.view: GroupView | None = None
        self.cluster_address = ""
        self.claim_lease = 0
        """The lease this node's master claim is on (0: it holds none)."""
        self.alarms = NodeAlarms(self)
        self.registrar: Registrar | None = None
        if config.nameservers:
            self.registrar = Registrar(
                config.nameservers,
                self.status,
                config.register_interval_s,
                self.addresses,
                self.queues,
                self.offset,
            )
            # The Spark pipeline reads a group's log from a node's data dir.
            self.registrar.data_dir = str(self.data_dir.resolve())
        self.stopping = False
        self._view_changed = trio.Event()

    # -- what the node publishes ---------------------------------------------------------------

    def addresses(self) -> dict[str, str]:
        """The node's client addresses as bound (see addresses.py; none on a slave) and its
        cluster port's, under `cluster`."""
        broker = self.broker
        out = {} if broker is None else client_addresses(broker.listeners, self.host)
        if self.cluster_address:
            out["cluster"] = self.cluster_address
        return out

    def queues(self) -> QueueTable:
        """The queue table sent to the name servers (registration.py)."""
        broker = self.broker
        return () if broker is None else queue_table(broker)

    def offset(self) -> int:
        """How far this node's commit log is durable: a master's local flush, a slave's
        flushed replica (0 before either exists): the node key's `offset` (elections rank
        candidates by it), every registration's, `/api/cluster`'s."""
        ha, follower = self.ha, self.follower
        if ha is not None:
            return ha.store.local_durable
        if follower is not None:
            return follower.flushed
        return 0

    def replication(self) -> dict[str, Any]:
        """Where this node's replication stands: a master's epoch, sync set, confirm offset
        and each slave's ack and lag; a slave's master, applied and flushed offsets, the
        master's confirm offset as last heard, its truncations and its last problem."""
        ha, follower = self.ha, self.follower
        if ha is not None:
            return {
                "epoch": ha.epoch,
                "sync_set": sorted(ha.gate.sync_set),
                "confirmed": ha.gate.confirmed,
                "log_end": ha.store.log.write_offset,
                "slaves": ha.lags(),
            }
        if follower is not None:
            return {
                "master": follower.streaming_from,
                "applied": follower.applied,
                "flushed": follower.flushed,
                "confirm_offset": follower.confirm_offset,
                "truncations": follower.truncations,
                "problem": follower.problem,
            }
        return {}

    def describe(self) -> dict[str, Any]:
        """The node key's changing part: addresses, the commit-log offset, replication, and
        on a master what its consumers settled per shared queue."""
        return {
            "addrs": self.addresses(),
            "offset": self.offset(),
            "replication": self.replication(),
            "shared": shared_delivered(self.shared) if self.shared is not None else {},
        }

    def apply_alarm(self) -> None:
        """Put the fence where it acts now: the broker's alarm and the gate. A master is
        fenced while its lease guard is out, and while its claim is not on its current
        lease (the lease expired and was granted again: until the claim is back, another
        node may be elected)."""
        membership = self.membership
        fenced = self.alarms.fenced or (
            self.ha is not None and (membership is None or membership.lease_id != self.claim_lease)
        )
        broker, ha = self.broker, self.ha
        if broker is not None:
            broker.alarms.set(ALARM, fenced)
        if ha is not None:
            if fenced:
                ha.gate.fence()
            else:
                ha.gate.unfence()

    # -- the group's keys ----------------------------------------------------------------------

    async def wait_view(self, timeout: float = 1.0) -> GroupView | None:
        """Return after the next change of the group's keys, or `timeout`: the view now."""
        with trio.move_on_after(timeout):
            await self._view_changed.wait()
        return self.view

    def _saw(self, view: GroupView) -> None:
        self.view = view
        self._view_changed.set()
        self._view_changed = trio.Event()

    async def _watch_group(self, controller: GroupController) -> None:
        """Keep `view` current: read it, then follow etcd's changes; start over on errors
        (etcd away: `view` stays as last seen, and the role loop reads for itself)."""
        while True:
            try:
                view = await controller.read()
                self._saw(view)
                async with controller.changes(view.revision + 1) as changes:
                    async for view in changes:
                        self._saw(view)
            except EtcdError as exc:
                log.debug("cluster: group watch interrupted (%s); reading again", exc)
            await trio.sleep(WATCH_RETRY_S)

    # -- the runner ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the node gracefully: a master's broker closes its connections, then the node
        leaves etcd and the name servers. Idempotent, never blocks."""
        self.stopping = True
        if self.broker is not None:
            self.broker.stop()
        self._view_changed.set()

    def note_broker(self, broker: Broker | None) -> None:
        """The master's broker from now on (None: no broker any more). `running_node` finds
        the node from each of its brokers until the node has left."""
        self.broker = broker
        if broker is not None:
            _RUNNING[broker] = self
            if self.stopping:
                broker.stop()

    async def run(
        self, *, task_status: trio.TaskStatus[Broker | None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Join etcd, take roles until stopped, leave (see the module's docstring)."""
        self.plugins.configure(self.herald_config)  # config errors before etcd is asked anything
        interval = self.config.keepalive_interval_s
        etcd = EtcdClient(self.config.etcd, timeout=interval, connect_timeout=min(1.0, interval))
        self.data_dir.joinpath("store").mkdir(parents=True, exist_ok=True)
        epochs = await trio.to_thread.run_sync(EpochFile.load, epochs_path(self.data_dir))
        try:
            membership = Membership(etcd, self.config, self.status, self.alarms, self.describe)
            self.membership = membership
            controller = GroupController(
                etcd, self.config.name, self.status.group, self.status.node
            )
            port = ClusterPort(
                self.config, self.host, lambda: self.ha, self.master_address, self._link_origin
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(membership.run)  # joined, or fenced while etcd is away
                self.cluster_address = await nursery.start(port.run)
                nursery.start_soon(self._watch_group, controller)
                nursery.start_soon(self._publish, membership)
                if self.registrar is not None:
                    nursery.start_soon(self.registrar.run)
                roles = Roles(self, controller, membership, epochs)
                await roles.run(task_status)
                nursery.cancel_scope.cancel()  # membership leaves, registration unregisters
        finally:
            self.note_broker(None)
            for broker in [b for b, node in _RUNNING.items() if node is self]:
                del _RUNNING[broker]
            with trio.CancelScope(shield=True):
                await etcd.aclose()

    def _link_origin(self) -> LinkOrigin | None:
        """Where the cluster port sends a holder's node link: this term's shared queues."""
        shared = self.shared
        return shared.origin if shared is not None else None

    def master_address(self) -> str:
        """The group master's cluster address as the group state names it ("" if none)."""
        view = self.view
        if view is None or view.state is None or view.master is None:
            return ""
        return view.state.master_addr if view.state.master == view.master.node else ""

    async def _publish(self, membership: Membership) -> None:
        """Put the node key with the addresses as bound now, not at the next renewal; then
        again at each role change."""
        while True:
            try:
                await membership.update_key()
            except EtcdError as exc:
                log.debug("cluster: node key not updated yet (%s); the next renewal will", exc)
            await self.status.wait_changed()
