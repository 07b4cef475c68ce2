"""Messages read from a store alone: search by key, one message by commit-log position, and a
durable queue's stored entries.

The master's API (api_messages.py) and a slave's read-only API (replica_api.py) answer these
through this one code path. It needs a store, the codecs its records decode with, and which
queue each store id is, never a kernel: a slave, whose replicated store has no broker on top,
answers search and read-by-position with the same JSON as its master.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from herald.plugins.management import store_access
from herald.plugins.management.endpoints import int_query
from herald.plugins.management.errors import bad_request
from herald.plugins.management.shapes import message_json

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.message import CodecRegistry
    from herald.core.store import Store

QUEUE_KIND = "queue"  # core/definitions.py's metadata kind of durable queues
VHOST_KIND = "vhost"
ENCODINGS = ("auto", "base64")
LAST_OFFSET = 2**62

QueueNames = Mapping[int, tuple[str, str]]
"""store id -> (vhost, queue name)."""


@attrs.frozen
class StoredMessages:
    """A store as these reads see it."""

    store: Store
    codecs: CodecRegistry
    queue_names: Callable[[], QueueNames]
    """Which queue each store id is now: the broker's live queues on a master, the durable
    queues in the store's metadata on a slave."""

    @classmethod
    def of_broker(cls, broker: Broker) -> StoredMessages:
        return cls(broker.store, broker.codecs, lambda: live_queue_names(broker))

    @classmethod
    def of_store(cls, store: Store, codecs: CodecRegistry) -> StoredMessages:
        return cls(store, codecs, lambda: durable_queue_names(store.load_metadata()))


def live_queue_names(broker: Broker) -> dict[int, tuple[str, str]]:
    return {
        queue.store_id: (vhost.name, queue.name)
        for vhost in broker.vhosts.values()
        for queue in vhost.queues.values()
        if queue.store_id is not None
    }


def durable_queue_names(metadata: Mapping[str, Mapping[str, Any]]) -> dict[int, tuple[str, str]]:
    """The durable queues a store's metadata records (each record carries its store id)."""
    out: dict[int, tuple[str, str]] = {}
    for record in metadata.get(QUEUE_KIND, {}).values():
        store_id, vhost, name = record.get("store_id"), record.get("vhost"), record.get("name")
        if isinstance(store_id, int) and isinstance(vhost, str) and isinstance(name, str):
            out[store_id] = (vhost, name)
    return out


def encoding_of(value: Any) -> str:
    if value not in ENCODINGS:
        raise bad_request("'encoding' must be 'auto' or 'base64'")
    return str(value)


def search(source: StoredMessages, query: Mapping[str, str], max_messages: int) -> dict[str, Any]:
    """`GET /api/messages?key=&from=&to=&limit=&encoding=`: messages by key through the
    store's index, oldest first."""
    key = query.get("key")
    if not key:
        raise bad_request("query parameter 'key' is required")
    begin = int_query(query, "from", 0)
    end = int_query(query, "to", LAST_OFFSET)
    if end < begin:
        raise bad_request("'to' is before 'from'")
    limit = int_query(query, "limit", 64, low=1, high=max_messages)
    encoding = encoding_of(query.get("encoding", "auto"))
    found = store_access.find_by_key(source.store, key, begin, end, limit)
    return {
        "key": key,
        "from": begin,
        "to": end,
        "items": [message_json(m, source.codecs, encoding) for m in found],
    }


def at_position(source: StoredMessages, text: str, query: Mapping[str, str]) -> dict[str, Any]:
    """`GET /api/messages/{position}`: the message record there, with the queues it was for."""
    if not text.isdigit():
        raise bad_request("the position must be a non-negative integer")
    encoding = encoding_of(query.get("encoding", "auto"))
    found = store_access.message_at(source.store, int(text))
    message = found.pop("message")
    out = message_json(message, source.codecs, encoding)
    out.update(found)
    out["queues"] = queues_of(source, found.get("targets", []))
    return out


def queues_of(source: StoredMessages, targets: list[dict[str, int]]) -> list[dict[str, Any]]:
    """The named queues among a record's targets, in the record's order."""
    names = source.queue_names()
    out = []
    for target in targets:
        named = names.get(target["queue_id"])
        if named is not None:
            vhost, name = named
            out.append({"vhost": vhost, "name": name, "queue_offset": target["queue_offset"]})
    return out


@attrs.frozen
class BrowsePage:
    """A browse's parameters (the master's and a slave's): `offset`, `limit`, `encoding`,
    `truncate` (None: whole payloads)."""

    offset: int
    limit: int
    encoding: str
    truncate: int | None

    @classmethod
    def parse(cls, query: Mapping[str, str], max_messages: int) -> BrowsePage:
        """From the query string; 400 on a bad value."""
        offset = int_query(query, "offset", 0)
        limit = int_query(query, "limit", 50, low=1, high=max_messages)
        encoding = encoding_of(query.get("encoding", "auto"))
        truncate = int_query(query, "truncate", -1, low=-1)
        return cls(offset, limit, encoding, None if truncate < 0 else truncate)


def browse_stored(source: StoredMessages, store_id: int, page: BrowsePage) -> dict[str, Any]:
    """A durable queue's un-acked stored entries in queue-offset order: what a store alone
    knows of a queue, so messages delivered but not acked yet are listed too. `more`: entries
    follow this page. Reads `offset + limit + 1` entries, as the master's browse walks
    `offset + limit`."""
    end = page.offset + page.limit
    entries = source.store.read_queue(store_id, 0, LAST_OFFSET, end + 1)
    items = []
    for entry in entries[page.offset : end]:
        drawn = message_json(entry.message, source.codecs, page.encoding, page.truncate)
        drawn.update(
            queue_offset=entry.queue_offset,
            delivery_count=entry.delivery_count,
            redelivered=entry.delivery_count > 0,
        )
        items.append(drawn)
    return {"offset": page.offset, "limit": page.limit, "more": len(entries) > end, "items": items}
