"""Durable definitions: virtual hosts, exchanges, queues and bindings in the store's metadata.

Each change is one metadata record, written when it happens (RabbitMQ semantics: a durable
exchange, queue or binding survives a restart; a binding is durable when both ends are).
At start the broker reads them back with `restore`, then refills durable queues with their
un-acked messages. Keys are JSON arrays, so names may hold any character.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from herald.core.native_codec import from_json_safe, to_json_safe

if TYPE_CHECKING:
    from herald.core.exchange import Exchange
    from herald.core.queue import Queue
    from herald.core.store import Store
    from herald.core.vhost import VirtualHost

log = logging.getLogger(__name__)

VHOST, EXCHANGE, QUEUE, BINDING, SEQUENCE = "vhost", "exchange", "queue", "binding", "sequence"


def _key(*parts: Any) -> str:
    return json.dumps(parts, separators=(",", ":"), sort_keys=True, default=str)


class Definitions:
    """Writes definition changes to the store and reads them back at start."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._next_queue_id = 1

    def load_sequence(self, metadata: Mapping[str, Mapping[str, Any]]) -> None:
        """Continue queue ids after the highest one ever handed out."""
        record = metadata.get(SEQUENCE, {}).get("queue_id") or {}
        ids = [r.get("store_id") or 0 for r in metadata.get(QUEUE, {}).values()]
        self._next_queue_id = max(record.get("next", 1), max(ids, default=0) + 1)

    def allocate_queue_id(self) -> int:
        """A store id for a new durable queue; never reused, even after deletion."""
        queue_id = self._next_queue_id
        self._next_queue_id += 1
        self.store.put_metadata(SEQUENCE, "queue_id", {"next": self._next_queue_id})
        return queue_id

    # -- writes ----------------------------------------------------------------------------
    def save_vhost(self, name: str) -> None:
        self.store.put_metadata(VHOST, name, {"name": name})

    def delete_vhost(self, name: str) -> None:
        self.store.put_metadata(VHOST, name, None)

    def save_exchange(self, vhost: str, exchange: Exchange) -> None:
        self.store.put_metadata(
            EXCHANGE,
            _key(vhost, exchange.name),
            {
                "vhost": vhost,
                "name": exchange.name,
                "type": exchange.type,
                "auto_delete": exchange.auto_delete,
                "internal": exchange.internal,
                "arguments": to_json_safe(dict(exchange.arguments)),
            },
        )

    def delete_exchange(self, vhost: str, exchange: Exchange) -> None:
        self.store.put_metadata(EXCHANGE, _key(vhost, exchange.name), None)

    def save_queue(self, queue: Queue) -> None:
        self.store.put_metadata(
            QUEUE,
            _key(queue.vhost.name, queue.name),
            {
                "vhost": queue.vhost.name,
                "name": queue.name,
                "auto_delete": queue.auto_delete,
                "arguments": to_json_safe(dict(queue.arguments)),
                "store_id": queue.store_id,
            },
        )

    def delete_queue(self, queue: Queue) -> None:
        self.store.put_metadata(QUEUE, _key(queue.vhost.name, queue.name), None)

    def save_binding(
        self,
        vhost: str,
        source: Exchange,
        destination: Queue | Exchange,
        routing_key: str,
        arguments: Mapping[str, Any],
    ) -> None:
        record = self._binding_record(vhost, source, destination, routing_key, arguments)
        self.store.put_metadata(BINDING, self._binding_key(record), record)

    def delete_binding(
        self,
        vhost: str,
        source: Exchange,
        destination: Queue | Exchange,
        routing_key: str,
        arguments: Mapping[str, Any],
    ) -> None:
        record = self._binding_record(vhost, source, destination, routing_key, arguments)
        self.store.put_metadata(BINDING, self._binding_key(record), None)

    @staticmethod
    def _binding_record(
        vhost: str,
        source: Exchange,
        destination: Queue | Exchange,
        routing_key: str,
        arguments: Mapping[str, Any],
    ) -> dict[str, Any]:
        from herald.core.queue import Queue

        is_queue = isinstance(destination, Queue)
        return {
            "vhost": vhost,
            "source": source.name,
            "destination": destination.name,
            "destination_kind": "queue" if is_queue else "exchange",
            "routing_key": routing_key,
            "arguments": to_json_safe(dict(arguments)),
        }

    @staticmethod
    def _binding_key(record: Mapping[str, Any]) -> str:
        return _key(
            record["vhost"],
            record["source"],
            record["destination_kind"],
            record["destination"],
            record["routing_key"],
            record["arguments"],
        )


def restore(
    vhosts: Mapping[str, VirtualHost], metadata: Mapping[str, Mapping[str, Any]]
) -> list[Queue]:
    """Re-create durable exchanges, queues and bindings; returns the durable queues."""
    queues: list[Queue] = []
    for record in metadata.get(EXCHANGE, {}).values():
        vhost = vhosts.get(record["vhost"])
        if vhost is None:
            continue
        if record["name"] not in vhost.exchanges:
            vhost.restore_exchange(record, from_json_safe(record.get("arguments", {})))
    for record in metadata.get(QUEUE, {}).values():
        vhost = vhosts.get(record["vhost"])
        if vhost is None:
            continue
        queues.append(vhost.restore_queue(record, from_json_safe(record.get("arguments", {}))))
    for record in metadata.get(BINDING, {}).values():
        vhost = vhosts.get(record["vhost"])
        if vhost is None:
            continue
        try:
            arguments = from_json_safe(record.get("arguments", {}))
            if record["destination_kind"] == "queue":
                vhost.bind_queue(
                    record["destination"], record["source"], record["routing_key"], arguments
                )
            else:
                vhost.bind_exchange(
                    record["destination"], record["source"], record["routing_key"], arguments
                )
        except Exception as exc:  # a dangling binding must not stop the broker
            log.warning("dropping binding %r at recovery: %s", record, exc)
    return queues
