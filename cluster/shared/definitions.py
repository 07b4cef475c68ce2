"""`Definitions`: shared queues and their bindings, the same on every master (CLUSTER.md §5
"Declare").

A shared queue declared here, and each binding made to it, is put in etcd
(`P/shared/queues/...`, `P/shared/bindings/<vhost>/<queue>/<exchange>/<key>/<args>`); what
another master put there is declared and bound here, the exchange too when this node lacks
it (a binding carries its exchange's declaration). A queue deleted anywhere is deleted
everywhere, with its slots. Changes are applied locally at once and put in etcd in the
background, so a publish on another node a few milliseconds after a declare may find no
queue there yet (RabbitMQ's definitions are synchronous within a cluster; herald trades that
for never blocking a declare on etcd).

Every local change is compared with what etcd already holds (`SlotIndex.values`), so
applying a remote change, which changes the local vhost too, writes nothing back.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from herald.cluster import keys
from herald.cluster.etcd_types import DeleteOp, EtcdError, PutOp, TxnOp
from herald.core.errors import HeraldError

if TYPE_CHECKING:
    from herald.cluster.shared.queue import SharedQueue
    from herald.cluster.shared.runtime import SharedRuntime
    from herald.core.exchange import Exchange

log = logging.getLogger("herald.cluster.shared")

RETRY_S = 0.5


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, default=str).encode()


def declaration_value(queue: SharedQueue) -> bytes:
    return _json({"auto_delete": queue.auto_delete, "arguments": dict(queue.arguments)})


def binding_name(exchange: str, routing_key: str, arguments: Mapping[str, Any]) -> str:
    digest = hashlib.sha1(_json(dict(arguments))).hexdigest()[:12]
    return f"{keys.part(exchange)}/{keys.part(routing_key)}/{digest}"


def binding_value(source: Exchange, routing_key: str, arguments: Mapping[str, Any]) -> bytes:
    return _json(
        {
            "exchange": source.name,
            "routing_key": routing_key,
            "arguments": dict(arguments),
            "type": source.type,
            "durable": source.durable,
            "auto_delete": source.auto_delete,
            "internal": source.internal,
            "exchange_arguments": dict(source.arguments),
        }
    )


class Definitions:
    def __init__(self, runtime: SharedRuntime) -> None:
        self.runtime = runtime
        self.cluster = runtime.config.name
        self._ops: dict[str, bytes | None] = {}  # key -> value to put, or None: delete
        self._forget: set[tuple[str, str]] = set()
        self._due = trio.Event()

    # -- local changes (synchronous: from the queue and the vhost) -------------------------------
    def declared(self, queue: SharedQueue) -> None:
        vhost, name = queue.key
        self._forget.discard(queue.key)
        self._put(keys.shared_queue_key(self.cluster, vhost, name), declaration_value(queue))

    def deleted(self, queue: SharedQueue) -> None:
        self._forget.add(queue.key)
        self._due.set()

    def binding_changed(
        self, queue: SharedQueue, source: Exchange, routing_key: str,
        arguments: Mapping[str, Any], *, bound: bool,
    ) -> None:  # fmt: skip
        if not source.name:
            return  # the default exchange binds every queue everywhere by itself
        vhost, name = queue.key
        key = keys.bindings_prefix(self.cluster, vhost, name) + binding_name(
            source.name, routing_key, arguments
        )
        self._put(key, binding_value(source, routing_key, arguments) if bound else None)

    def _put(self, key: str, value: bytes | None) -> None:
        self._ops[key] = value
        self._due.set()

    # -- to etcd ---------------------------------------------------------------------------------
    async def publish(self) -> None:
        index = self.runtime.index
        while True:
            await self._due.wait()
            self._due = trio.Event()
            ops, self._ops = self._ops, {}
            forget, self._forget = self._forget, set()
            try:
                for vhost, name in forget:
                    if (vhost, name) in index.definitions:
                        await self.runtime.table.forget_queue(vhost, name)
                batch: list[TxnOp] = [
                    PutOp(key, value) if value is not None else DeleteOp(key)
                    for key, value in ops.items()
                    if index.values.get(key) != value
                ]
                for start in range(0, len(batch), 100):
                    await self.runtime.etcd.txn([], batch[start : start + 100])
            except (EtcdError, OSError) as exc:
                log.info("shared queues: definitions not in etcd yet (%s)", exc)
                self._ops = {**ops, **self._ops}
                self._forget |= forget
                await trio.sleep(RETRY_S)
                self._due.set()

    # -- from etcd -------------------------------------------------------------------------------
    def apply_all(self) -> None:
        """Declare and bind here whatever etcd holds that this node lacks."""
        runtime = self.runtime
        for (vhost, name), definition in list(runtime.index.definitions.items()):
            if (vhost, name) not in runtime.queues:
                self._declare(vhost, name, definition)
        for (vhost, name), bindings in list(runtime.index.bindings.items()):
            for binding in list(bindings.values()):
                self._bind(vhost, name, binding)

    def deleted_there(self, vhost_name: str, name: str) -> None:
        runtime = self.runtime
        queue = runtime.queues.get((vhost_name, name))
        vhost = runtime.vhost(vhost_name)
        if queue is not None and vhost is not None and vhost.queues.get(name) is queue:
            vhost.delete_queue(name)

    def unbound_there(self, vhost_name: str, name: str, binding: Mapping[str, Any]) -> None:
        vhost = self.runtime.vhost(vhost_name)
        if vhost is not None and (vhost_name, name) in self.runtime.queues:
            vhost.unbind_queue(
                name, binding["exchange"], binding["routing_key"], binding["arguments"]
            )

    def _declare(self, vhost_name: str, name: str, definition: Mapping[str, Any]) -> None:
        from herald.cluster.shared.queue import QUEUE_TYPE

        vhost = self.runtime.vhost(vhost_name)
        if vhost is None:
            log.warning("shared queue %s: no vhost %r on this node", name, vhost_name)
            return
        arguments = dict(definition.get("arguments") or {})
        arguments["x-queue-type"] = QUEUE_TYPE
        try:
            vhost.declare_queue(
                name, durable=True, auto_delete=bool(definition.get("auto_delete")),
                arguments=arguments,
            )  # fmt: skip
        except HeraldError as exc:
            log.warning("shared queue %s cannot be declared here: %s", name, exc)

    def _bind(self, vhost_name: str, name: str, binding: Mapping[str, Any]) -> None:
        vhost = self.runtime.vhost(vhost_name)
        if vhost is None or (vhost_name, name) not in self.runtime.queues:
            return
        exchange = binding["exchange"]
        try:
            if exchange not in vhost.exchanges:
                vhost.declare_exchange(
                    exchange, binding["type"], durable=binding["durable"],
                    auto_delete=binding["auto_delete"], internal=binding["internal"],
                    arguments=binding["exchange_arguments"],
                )  # fmt: skip
            vhost.bind_queue(name, exchange, binding["routing_key"], binding["arguments"])
        except HeraldError as exc:
            log.warning("shared queue %s: binding to %s not made here: %s", name, exchange, exc)
