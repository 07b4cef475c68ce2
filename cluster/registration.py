"""Registration with the name servers, the broker side of CLUSTER.md §4.2.

The node registers with **every** configured name server in parallel (one that is down
delays nobody, `nameserver.client.register_all`): at start, once its listeners are bound;
every `cluster.register_interval_s`; and at once when its role changes. A registration
carries the node's group, role, epoch, client addresses, commit-log offset (a snapshot: the
name servers show it as of the node's last registration), its data dir (for the Spark
pipeline, which reads a group's commit-log files) and, when its queue table changed
since the last one, the table (vhost, name, type, durable of every queue that is not
exclusive); otherwise it is a heartbeat (`queues: null`). A name server that lacks the table
(it restarted, or missed the change) answers `need_full`, and gets the table at once. A clean
stop unregisters the node from every name server.

The table's `data_version` starts from the wall clock in milliseconds and goes up by one at
each change: name servers compare it for equality only, and a restarted node must not reuse
the version of a table it sent before (that name server would keep the old table).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import httpx
import trio

from herald.cluster.nameserver.client import (
    TIMEOUT_S,
    RegisterOutcome,
    register_all,
    unregister_all,
)
from herald.cluster.nameserver.registry import QueueInfo, Registration
from herald.cluster.nameserver.wire import registration_json

if TYPE_CHECKING:
    from herald.cluster.status import NodeStatus
    from herald.core.broker import Broker

log = logging.getLogger("herald.cluster.registration")

UNREGISTER_TIMEOUT_S = 2.0
"""How long a clean stop may spend telling the name servers."""

QueueTable = tuple[QueueInfo, ...]


def queue_table(broker: Broker) -> QueueTable:
    """Every queue of every virtual host but exclusive ones (they belong to one connection of
    this node: nobody else can use them), sorted by vhost and name."""
    out = [
        QueueInfo(vhost.name, queue.name, queue.queue_type, queue.durable)
        for vhost in broker.vhosts.values()
        for queue in vhost.queues.values()
        if queue.owner is None
    ]
    out.sort(key=lambda q: (q.vhost, q.name))
    return tuple(out)


class Registrar:
    """Registers one node with its name servers; `run` is its task in the node runner.

    `addresses()`, `queues()` and `offset()` are read at each registration (client
    addresses as bound, the queue table and the commit-log offset as they are now); without
    `offset` the registration sends none. `data_dir` (an absolute path, or None: not sent)
    is the node's to set (node.py).
    """

    def __init__(
        self,
        nameservers: Sequence[str],
        status: NodeStatus,
        interval_s: float,
        addresses: Callable[[], Mapping[str, str]],
        queues: Callable[[], QueueTable],
        offset: Callable[[], int] | None = None,
    ) -> None:
        self.nameservers = tuple(nameservers)
        self.status = status
        self.interval_s = interval_s
        self.timeout_s = min(TIMEOUT_S, max(interval_s, 1.0))
        self.addresses = addresses
        self.queues = queues
        self.offset = offset
        self.data_dir: str | None = None
        self.data_version = int(time.time() * 1000)
        self.rounds = 0
        self._sent: QueueTable | None = None  # the table sent with `data_version`
        self._down: set[str] = set()  # name servers whose last registration failed

    def registration(self, queues: QueueTable | None) -> Registration:
        status = self.status
        return Registration(
            cluster=status.cluster,
            group=status.group,
            node=status.node,
            role=status.role,
            epoch=status.epoch,
            data_version=self.data_version,
            addrs=dict(self.addresses()),
            queues=queues,
            offset=None if self.offset is None else self.offset(),
            data_dir=self.data_dir,
        )

    async def register(
        self, client: httpx.AsyncClient | None = None
    ) -> tuple[RegisterOutcome, ...]:
        """One round: every name server; the table when it changed (a new `data_version`),
        else a heartbeat; then the table again to those that asked for it."""
        table = self.queues()
        if table != self._sent:
            self.data_version += 1
            self._sent = table
            payload = self.registration(table)
        else:
            payload = self.registration(None)
        outcomes = await self._send(self.nameservers, payload, client)
        wanting = [o.nameserver for o in outcomes if o.ok and o.need_full]
        if wanting:
            again = await self._send(wanting, self.registration(table), client)
            outcomes = tuple(_merge(outcomes, again))
        self.rounds += 1
        return outcomes

    async def run(self) -> None:
        """Register now, then every `interval_s` and at each role change, until cancelled;
        unregister on the way out. The node runs it once its listeners are bound."""
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                while True:
                    sent = (self.status.role, self.status.epoch)
                    await self.register(client)
                    if (self.status.role, self.status.epoch) == sent:  # else: changed meanwhile
                        with trio.move_on_after(self.interval_s):
                            await self.status.wait_changed()
        finally:
            with trio.CancelScope(shield=True):
                await unregister_all(
                    self.nameservers, self.status.node, timeout=UNREGISTER_TIMEOUT_S
                )
                log.info("cluster: node %s told the name servers it left", self.status.node)

    async def _send(
        self,
        nameservers: Sequence[str],
        registration: Registration,
        client: httpx.AsyncClient | None,
    ) -> tuple[RegisterOutcome, ...]:
        payload = registration_json(registration)
        outcomes = await register_all(nameservers, payload, timeout=self.timeout_s, client=client)
        for outcome in outcomes:
            self._note(outcome)
        return outcomes

    def _note(self, outcome: RegisterOutcome) -> None:
        """Log a name server going down or coming back, not every failed round."""
        name = outcome.nameserver
        if not outcome.ok and name not in self._down:
            self._down.add(name)
            log.warning("cluster: cannot register with name server %s: %s", name, outcome.error)
        elif outcome.ok and name in self._down:
            self._down.discard(name)
            log.info("cluster: registered with name server %s again", name)


def _merge(
    first: Iterable[RegisterOutcome], again: Iterable[RegisterOutcome]
) -> Iterable[RegisterOutcome]:
    later = {o.nameserver: o for o in again}
    for outcome in first:
        yield later.get(outcome.nameserver, outcome)
