"""`SharedRuntime`: shared queues on one master, for one term (CLUSTER.md §5).

Made by the node when it becomes its group's master, before its broker opens the store (the
store carries it as `store.shared`, which is how `SharedQueue`s find it, restored ones
included), and run once the broker listens; it ends with the term, giving back the node's
slots. It holds:

- the `SlotIndex`, fed by one watch on `P/shared/`: declarations, slots, owners, marks;
- declarations both ways: a shared queue declared here is put in etcd; one put there by
  another master is declared here (the vhost must exist here); one deleted there is deleted
  here;
- the `Reporter` (this node as an origin), `Feeds` (as a holder), `LinkPool` (its links to
  other origins) and the `LinkOrigin` the cluster port hands holders' links to.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from herald.cluster import keys
from herald.cluster.controller import GroupState, MasterClaim
from herald.cluster.etcd_types import EtcdError, EventType, PutOp, WatchReset
from herald.cluster.shared.feeds import Feeds
from herald.cluster.shared.index import SlotIndex
from herald.cluster.shared.link import LinkOrigin, LinkPool
from herald.cluster.shared.queue import QUEUE_TYPE, SharedQueue
from herald.cluster.shared.reporter import Reporter
from herald.cluster.shared.slots import SlotTable
from herald.core.errors import HeraldError

if TYPE_CHECKING:
    from herald.cluster.config import ClusterConfig
    from herald.cluster.etcd import EtcdClient
    from herald.cluster.ha.store import ReplicatedCommitLogStore
    from herald.core.broker import Broker

log = logging.getLogger("herald.cluster.shared")

GET_INTEREST_S = 5.0
"""A basic.get keeps the node holding slots of its queue this long without consumers."""


def declaration_json(queue: SharedQueue) -> bytes:
    return json.dumps(
        {"auto_delete": queue.auto_delete, "arguments": dict(queue.arguments)},
        sort_keys=True,
        default=str,
    ).encode()


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
        self.reporter = Reporter(self)
        self.feeds = Feeds(self)
        self.links = LinkPool(config, node, self.master_address_of)
        self.origin = LinkOrigin(config, node, lambda: self if self.running else None)
        self.broker: Broker | None = None
        self.running = False
        self._unpublished: dict[tuple[str, str], SharedQueue | None] = {}
        self._publish_due = trio.Event()

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

    # -- queues come and go --------------------------------------------------------------------
    def adopt(self, queue: SharedQueue) -> None:
        self.queues[queue.key] = queue
        self._unpublished[queue.key] = queue
        self._publish_due.set()

    def forget(self, queue: SharedQueue) -> None:
        if self.queues.get(queue.key) is queue:
            del self.queues[queue.key]
        self.reporter.pending.pop(queue.key, None)
        self._unpublished[queue.key] = None
        self._publish_due.set()

    async def _publish(self) -> None:
        """Put declarations made here in etcd, delete the ones deleted here."""
        while True:
            await self._publish_due.wait()
            self._publish_due = trio.Event()
            due, self._unpublished = self._unpublished, {}
            for (vhost, name), queue in due.items():
                try:
                    if queue is None:
                        if (vhost, name) in self.index.definitions:
                            await self.table.forget_queue(vhost, name)
                    else:
                        value = declaration_json(queue)
                        key = keys.shared_queue_key(self.config.name, vhost, name)
                        if json.loads(value) != self.index.definitions.get((vhost, name)):
                            await self.etcd.txn([], [PutOp(key, value)])
                except (EtcdError, OSError) as exc:
                    log.info("shared queue %s: declaration not in etcd yet (%s)", name, exc)
                    self._unpublished.setdefault((vhost, name), queue)
                    await trio.sleep(0.5)
                    self._publish_due.set()

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
        self._declare_known()
        for queue in list(self.queues.values()):
            await self.reporter.recover(queue)
        self.running = True
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.links.run)
                await nursery.start(self.feeds.run)
                nursery.start_soon(self.reporter.run)
                nursery.start_soon(self._publish)
                nursery.start_soon(self._watch, found.revision + 1)
                task_status.started()
        finally:
            self.running = False
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await self.feeds.release_all()

    async def _watch(self, start: int) -> None:
        prefix = keys.shared_prefix(self.config.name)
        async with self.etcd.watch(prefix, start) as events:
            async for event in events:
                if isinstance(event, WatchReset):
                    self.index.load(event.kvs)
                    self._declare_known()
                    continue
                self.index.apply(event)
                parsed = keys.parse_shared_key(self.config.name, event.kv.key.decode())
                if parsed is None or parsed[0] != "queues":
                    continue
                if event.type is EventType.PUT:
                    self._declare_known()
                else:
                    self._delete_here(parsed[1], parsed[2])

    def _declare_known(self) -> None:
        """Declare here every shared queue etcd knows and this node does not."""
        broker = self.broker
        if broker is None:
            return
        for (vhost_name, name), definition in list(self.index.definitions.items()):
            if (vhost_name, name) in self.queues:
                continue
            vhost = broker.vhosts.get(vhost_name)
            if vhost is None:
                log.warning("shared queue %s: no vhost %r on this node", name, vhost_name)
                continue
            arguments = dict(definition.get("arguments") or {})
            arguments["x-queue-type"] = QUEUE_TYPE
            try:
                vhost.declare_queue(
                    name,
                    durable=True,
                    auto_delete=bool(definition.get("auto_delete")),
                    arguments=arguments,
                )
            except HeraldError as exc:
                log.warning("shared queue %s cannot be declared here: %s", name, exc)

    def _delete_here(self, vhost_name: str, name: str) -> None:
        queue = self.queues.get((vhost_name, name))
        broker = self.broker
        if queue is None or broker is None:
            return
        vhost = broker.vhosts.get(vhost_name)
        if vhost is not None and vhost.queues.get(name) is queue:
            vhost.delete_queue(name)

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
                "slots": [s.describe() for s in slots],
                "free": sum(1 for s in slots if not s.owner),
                "held_here": len(feed.held) if feed is not None else 0,
            }
        return out
