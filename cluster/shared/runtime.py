"""`SharedRuntime`: shared queues on one master, for one term (CLUSTER.md §5).

Made by the node when it becomes its group's master, before its broker opens the store (the
store carries it as `store.shared`, which is how `SharedQueue`s find it, restored ones
included), and run once the broker listens; it ends with the term, giving back the node's
slots. It holds:

- the `SlotIndex`, fed by one watch on `P/shared/`: declarations, slots, owners, marks;
- `Definitions`: declarations and bindings both ways (definitions.py);
- the `Reporter` (this node as an origin), `Feeds` (as a holder), `LinkPool` (its links to
  other origins) and the `LinkOrigin` the cluster port hands holders' links to.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from herald.cluster import keys
from herald.cluster.controller import GroupState, MasterClaim
from herald.cluster.etcd_types import EventType, WatchReset
from herald.cluster.shared.definitions import Definitions
from herald.cluster.shared.feeds import Feeds
from herald.cluster.shared.index import SlotIndex
from herald.cluster.shared.link import LinkOrigin, LinkPool
from herald.cluster.shared.queue import SharedQueue
from herald.cluster.shared.reporter import Reporter
from herald.cluster.shared.slots import SlotTable

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.cluster.etcd import EtcdClient
    from herald.cluster.ha.store import ReplicatedCommitLogStore
    from herald.core.broker import Broker
    from herald.core.exchange import Exchange
    from herald.core.vhost import VirtualHost

log = logging.getLogger("herald.cluster.shared")

GET_INTEREST_S = 5.0
"""A basic.get keeps the node holding slots of its queue this long without consumers."""


class SharedRuntime:
    def __init__(
        self,
        config: ClusterConfig,
        etcd: EtcdClient,
        store: ReplicatedCommitLogStore,
        node: str,
        group: str,
        lease: Any,
    ) -> None:
        self.config = config
        self.etcd = etcd
        self.store = store
        self.node = node
        self.group = group
        self.lease = lease
        """() -> the node's membership lease id (owner keys go on it)."""
        self.get_interest_s = GET_INTEREST_S
        self.table = SlotTable(etcd, config.name, node, group)
        self.index = SlotIndex(config.name)
        self.queues: dict[tuple[str, str], SharedQueue] = {}
        self.definitions = Definitions(self)
        self.reporter = Reporter(self)
        self.feeds = Feeds(self)
        self.links = LinkPool(config, node, self.master_address_of)
        self.origin = LinkOrigin(config, node, lambda: self if self.running else None)
        self.broker: Broker | None = None
        self.running = False

    # -- clocks and the store ----------------------------------------------------------------
    @staticmethod
    def now() -> float:
        return trio.current_time()

    @staticmethod
    def wall_ms() -> int:
        return int(time.time() * 1000)

    def appended(self) -> int:
        return self.store.log.write_offset

    async def acks_durable(self) -> None:
        """Acks taken so far reach the log and become durable (and replicated)."""
        self.store.flush_acks()
        await self.store.wait_durable(self.store.log.write_offset)

    # -- queues come and go -------------------------------------------------------------------
    def adopt(self, queue: SharedQueue) -> None:
        self.queues[queue.key] = queue
        self.definitions.declared(queue)

    def forget(self, queue: SharedQueue) -> None:
        if self.queues.get(queue.key) is queue:
            del self.queues[queue.key]
        self.reporter.pending.pop(queue.key, None)
        self.definitions.deleted(queue)

    def binding_changed(
        self, queue: SharedQueue, source: Exchange, routing_key: str,
        arguments: Mapping[str, Any], *, bound: bool,
    ) -> None:  # fmt: skip
        self.definitions.binding_changed(queue, source, routing_key, arguments, bound=bound)

    def vhost(self, name: str) -> VirtualHost | None:
        broker = self.broker
        return broker.vhosts.get(name) if broker is not None else None

    # -- the origin groups' masters --------------------------------------------------------------
    async def master_address_of(self, group: str) -> str:
        state_kv = await self.etcd.get(keys.group_state_key(self.config.name, group))
        master_kv = await self.etcd.get(keys.group_master_key(self.config.name, group))
        if state_kv is None or master_kv is None:
            return ""
        try:
            state, claim = GroupState.from_kv(state_kv), MasterClaim.from_kv(master_kv)
        except ValueError:
            return ""
        return state.master_addr if state.master == claim.node else ""

    # -- the term ------------------------------------------------------------------------------
    async def run(
        self, broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.broker = broker
        prefix = keys.shared_prefix(self.config.name)
        found = await self.etcd.range(prefix, prefix=True)
        self.index.load(found.kvs)
        self.definitions.apply_all()
        for queue in list(self.queues.values()):
            await self.reporter.recover(queue)
        self.running = True
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.links.run)
                await nursery.start(self.feeds.run)
                nursery.start_soon(self.reporter.run)
                nursery.start_soon(self.reporter.sweep_every, self.config.sweep_interval_s)
                nursery.start_soon(self.definitions.publish)
                nursery.start_soon(self._watch, found.revision + 1)
                task_status.started()
        finally:
            self.running = False
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await self.feeds.release_all()

    async def _watch(self, start: int) -> None:
        prefix = keys.shared_prefix(self.config.name)
        async with self.etcd.watch(prefix, start, prev_kv=True) as events:
            async for event in events:
                if isinstance(event, WatchReset):
                    self.index.load(event.kvs)
                    self.definitions.apply_all()
                    continue
                self.index.apply(event)
                parsed = keys.parse_shared_key(self.config.name, event.kv.key.decode())
                if parsed is None:
                    continue
                what, vhost, name, _ = parsed
                if what in ("slots", "owners"):  # made, or come free
                    self.feeds.slots_changed((vhost, name))
                    continue
                if what not in ("queues", "bindings"):
                    continue
                if event.type is EventType.PUT:
                    self.definitions.apply_all()
                elif what == "queues":
                    self.definitions.deleted_there(vhost, name)
                elif event.prev_kv is not None:
                    self.definitions.unbound_there(vhost, name, json.loads(event.prev_kv.value))

    # -- what status shows ---------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (vhost, name), queue in sorted(self.queues.items()):
            feed = self.feeds.feeds.get((vhost, name))
            slots = self.index.of_queue((vhost, name))
            out[f"{vhost}/{name}"] = {
                "ready_here": queue.message_count,
                "consumers_here": len(queue.consumers),
                "delivered_here": feed.delivered if feed is not None else 0,
                "delivered_from_other_groups": feed.from_links if feed is not None else 0,
                "slots": [s.describe() for s in slots],
                "free": sum(1 for s in slots if not s.owner),
                "held_here": len(feed.held) if feed is not None else 0,
            }
        return out
