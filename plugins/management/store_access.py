"""What the management API asks of the store beyond the kernel's `Store` protocol.

Both are optional store abilities, looked up by name so that any backend can offer them:
- `find_by_key(key, begin_ms, end_ms, limit) -> list[Message]`: the commit-log store's
  IndexFile (RocketMQ's "query message by key"), over a store-time range;
- `message_at(position) -> record or Message`: one stored message by its commit-log position.
  The commit-log store has no such method yet, so for it the record is read here through its
  public pieces (`store.log.read` and `herald.storage.record.decode`); a store with neither
  answers 501.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from herald.plugins.management.errors import ApiError, not_found

if TYPE_CHECKING:
    from herald.core.message import Message
    from herald.core.store import Store


def _store_name(store: Store) -> str:
    return type(store).__name__


def find_by_key(store: Store, key: str, begin_ms: int, end_ms: int, limit: int) -> list[Message]:
    finder = getattr(store, "find_by_key", None)
    if finder is None:
        raise ApiError(501, f"the store ({_store_name(store)}) keeps no message index")
    return finder(key, begin_ms, end_ms, limit)


def message_at(store: Store, position: int) -> dict[str, Any]:
    """{"message": Message, "position", "store_ms", "born_ms", "targets"} for the message
    record at `position`; 404 if no message record starts there."""
    reader = getattr(store, "message_at", None)
    if reader is not None:
        found = reader(position)
        if found is None:
            raise not_found(f"message at position {position}")
        return _describe(found, position)
    log = getattr(store, "log", None)
    if log is None or not callable(getattr(log, "read", None)):
        raise ApiError(501, f"the store ({_store_name(store)}) cannot read by position")
    from herald.storage import record as rec

    if position % rec.ALIGN:
        raise not_found(f"message at position {position} (positions are multiples of 8)")
    head = log.read(position, rec.PREFIX.size)
    if head is None:
        raise not_found(f"message at position {position}")
    size, _magic = rec.PREFIX.unpack(head)
    data = log.read(position, size) if size >= rec.PREFIX.size else None
    if data is None:
        raise not_found(f"message at position {position}")
    try:
        record = rec.decode(data, position)
    except rec.RecordError:
        raise not_found(f"message at position {position}") from None
    if not isinstance(record, rec.MessageRecord):
        raise not_found(f"message at position {position} (a {type(record).__name__} is there)")
    return _describe(record, position)


def _describe(found: Any, position: int) -> dict[str, Any]:
    to_message = getattr(found, "to_message", None)
    if to_message is None:  # the store returned the Message itself
        return {"message": found, "position": position}
    return {
        "message": to_message(),
        "position": position,
        "store_ms": found.store_ms,
        "born_ms": found.born_ms,
        "targets": [{"queue_id": q, "queue_offset": o} for q, o in found.targets],
    }
