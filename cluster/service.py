"""What a broker runs while it is a cluster node: the plugin's `herald_services`.

`ClusterNode` holds one broker's cluster state (`NodeStatus`, its `Membership`, its
`Registrar`) and provides two services: membership (the etcd lease, node key and lease
guard) and, when `cluster.nameservers` lists any, registration with the name servers.
Membership starts first and reports `started` once it has tried to join, so a node that
starts while etcd is away starts fenced. Both services then wait for the broker's listeners
before publishing addresses (services start before listeners are bound).

`running_node(broker)` finds a broker's `ClusterNode` while it runs (the management API and
`herald cluster status` of later stages read it; tests do too).
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

import trio

from herald.cluster.addresses import advertised_host, client_addresses, wait_listening
from herald.cluster.etcd import EtcdClient, EtcdError
from herald.cluster.membership import Membership
from herald.cluster.registration import Registrar, queue_table
from herald.cluster.status import NodeStatus
from herald.core.plugin_types import Service

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.core.broker import Broker

log = logging.getLogger("herald.cluster")

_RUNNING: weakref.WeakKeyDictionary[Broker, ClusterNode] = weakref.WeakKeyDictionary()


def running_node(broker: Broker) -> ClusterNode | None:
    """The cluster state of `broker` while its cluster services run, else None."""
    return _RUNNING.get(broker)


class ClusterNode:
    """One broker as a node of a cluster."""

    def __init__(self, broker: Broker, config: ClusterConfig) -> None:
        node = broker.config.broker.node_name
        self.broker = broker
        self.config = config
        self.status = NodeStatus(config.name, config.group_of(node), node)
        self.host = advertised_host(config)
        self.membership: Membership | None = None
        self.registrar: Registrar | None = None
        if config.nameservers:
            self.registrar = Registrar(
                config.nameservers,
                self.status,
                config.register_interval_s,
                self.addresses,
                lambda: queue_table(broker),
            )

    def services(self) -> list[Service]:
        out = [Service("cluster-membership", self.run_membership)]
        if self.registrar is not None:
            out.append(Service("cluster-registration", self.run_registration))
        return out

    def addresses(self) -> dict[str, str]:
        """The node's client addresses as bound (see addresses.py)."""
        return client_addresses(self.broker.listeners, self.host)

    def describe(self) -> dict[str, Any]:
        """The node key's changing part: addresses and the commit-log offset."""
        return {"addrs": self.addresses(), "offset": self.broker.store.durable_ticket}

    async def run_membership(
        self, broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        interval = self.config.keepalive_interval_s
        etcd = EtcdClient(self.config.etcd, timeout=interval, connect_timeout=min(1.0, interval))
        _RUNNING[broker] = self
        try:
            self.membership = Membership(
                etcd, self.config, self.status, broker.alarms, self.describe
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(self.membership.run)
                task_status.started()
                await wait_listening(broker)
                await self._update_key(self.membership)
                while True:  # a role change shows in the node key at once, too
                    await self.status.wait_changed()
                    await self._update_key(self.membership)
        finally:
            _RUNNING.pop(broker, None)
            with trio.CancelScope(shield=True):
                await etcd.aclose()

    async def run_registration(
        self, broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        assert self.registrar is not None
        task_status.started()
        await self.registrar.run(wait_ready=lambda: wait_listening(broker))

    async def _update_key(self, membership: Membership) -> None:
        """Put the node key again now (listeners bound, role changed), not at the next
        renewal."""
        try:
            await membership.update_key()
        except EtcdError as exc:
            log.debug("cluster: node key not updated yet (%s); the next renewal will", exc)
