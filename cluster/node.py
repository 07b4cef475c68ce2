"""A cluster node's life: `ClusterNode`, the cluster plugin's `NodeRunner` (CLUSTER.md §3.5).

`herald run` and `herald.core.embedded()` run a node whose `[cluster]` is enabled through
this runner instead of a bare broker (hook `herald_node_runner`). The runner owns the node;
the broker is something it builds and runs:

1. build the `Broker` (its config checks, `herald_configure`, fail here, before etcd is
   asked anything);
2. join etcd: a lease and the node key (membership.py). A node that cannot reach etcd
   within TTL/3 starts fenced (the `cluster` alarm raised) and keeps trying;
3. run the broker as its group's master (until the HA issue every group is one node, its
   master, at epoch 0) and report it once its listeners are bound;
4. put the node key again with the client addresses as bound, and again at each role
   change; register with the name servers (registration.py) now, every
   `register_interval_s` and at each role change;
5. when the broker stops (`stop()`, a signal, an embedder leaving its block), stop both:
   the lease is revoked (the node key goes at once) and the node unregistered.

A slave (the HA issue) will run a follower store instead of step 3, and switch to a broker
when promoted, in this same process: hence a runner, not broker services.

`running_node(broker)` finds the `ClusterNode` a broker belongs to while the node runs (the
management API's `/api/cluster`, tests).
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

import trio

from herald.cluster.addresses import advertised_host, client_addresses
from herald.cluster.etcd import EtcdClient, EtcdError
from herald.cluster.membership import Membership
from herald.cluster.registration import QueueTable, Registrar, queue_table
from herald.cluster.status import NodeStatus
from herald.core.broker import Broker

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.core.config import HeraldConfig
    from herald.core.plugins import Plugins

log = logging.getLogger("herald.cluster")

_RUNNING: weakref.WeakKeyDictionary[Broker, ClusterNode] = weakref.WeakKeyDictionary()


def running_node(broker: Broker) -> ClusterNode | None:
    """The node `broker` belongs to while that node runs, else None (a standalone broker)."""
    return _RUNNING.get(broker)


class ClusterNode:
    """One node of a cluster, from joining etcd to leaving it (a `NodeRunner`).

    `config` is the `[cluster]` section; `status`, `membership` (once `run` has started)
    and `registrar` (None without name servers) are the node's cluster state, `broker` its
    broker while one exists.
    """

    def __init__(self, herald_config: HeraldConfig, plugins: Plugins, config: ClusterConfig):
        node = herald_config.broker.node_name
        self.herald_config = herald_config
        self.plugins = plugins
        self.config = config
        self.status = NodeStatus(config.name, config.group_of(node), node)
        self.host = advertised_host(config)
        self.broker: Broker | None = None
        self.membership: Membership | None = None
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
        self._stopping = False

    # -- what the node publishes ---------------------------------------------------------------

    def addresses(self) -> dict[str, str]:
        """The node's client addresses as bound (see addresses.py); none before its broker
        has bound them."""
        broker = self.broker
        return {} if broker is None else client_addresses(broker.listeners, self.host)

    def queues(self) -> QueueTable:
        """The queue table sent to the name servers (registration.py)."""
        broker = self.broker
        return () if broker is None else queue_table(broker)

    def offset(self) -> int:
        """The commit log's durable offset now (`store.durable_ticket`; 0 before the broker
        exists): the node key's `offset`, sent with every registration, and `/api/cluster`'s."""
        broker = self.broker
        return 0 if broker is None else broker.store.durable_ticket

    def describe(self) -> dict[str, Any]:
        """The node key's changing part: addresses and the commit-log offset."""
        return {"addrs": self.addresses(), "offset": self.offset()}

    # -- the runner ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the node gracefully: its broker closes its connections, then the node leaves
        etcd and the name servers. Idempotent, never blocks; before the broker runs, it stops
        as soon as it has started."""
        self._stopping = True
        if self.broker is not None:
            self.broker.stop()

    async def run(self, *, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
        """Join etcd, run the broker, publish and register it; return once it has stopped
        and the node has left (see the module's docstring)."""
        broker = Broker(self.herald_config, self.plugins)
        self.broker = broker
        if self._stopping:
            broker.stop()
        interval = self.config.keepalive_interval_s
        etcd = EtcdClient(self.config.etcd, timeout=interval, connect_timeout=min(1.0, interval))
        _RUNNING[broker] = self
        try:
            membership = Membership(etcd, self.config, self.status, broker.alarms, self.describe)
            self.membership = membership
            async with trio.open_nursery() as nursery:
                await nursery.start(membership.run)  # joined, or fenced while etcd is away
                await nursery.start(broker.run)  # the master's broker, listeners bound
                nursery.start_soon(self._publish, membership)
                if self.registrar is not None:
                    nursery.start_soon(self.registrar.run)
                task_status.started(broker)
                await broker.wait_stopped()
                nursery.cancel_scope.cancel()  # membership leaves, registration unregisters
        finally:
            _RUNNING.pop(broker, None)
            with trio.CancelScope(shield=True):
                await etcd.aclose()

    async def _publish(self, membership: Membership) -> None:
        """Put the node key with the addresses as bound now, not at the next renewal; then
        again at each role change."""
        while True:
            try:
                await membership.update_key()
            except EtcdError as exc:
                log.debug("cluster: node key not updated yet (%s); the next renewal will", exc)
            await self.status.wait_changed()
