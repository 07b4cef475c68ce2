"""The in-memory store: the `Store` contract without a disk, for transient brokers and tests.

Everything lives in a `MemoryStoreData` object that outlives the store using it, so a test or
an embedding application can "restart" a broker on the same data (`MemoryStore(data)`) and see
exactly what a restart on the commit-log store would show: the un-acked entries of each queue,
their delivery counts and the metadata. Both stores pass one contract suite
(tests/store_contract.py), so the memory store keeps the disk store's observable rules too: it
takes each message's stored bytes at append time (which encodes native messages) and keeps
metadata as JSON text, so a value that could not be written to disk is refused here as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from herald.core.errors import InternalError
from herald.core.hookspecs import hookimpl
from herald.core.plugin_types import PluginInfo, StorageBackend
from herald.core.store import (
    EntryFactory,
    MetadataValue,
    QueueRange,
    QueueTarget,
    StoredEntry,
    StoreStatistics,
    plain_json,
)

if TYPE_CHECKING:
    from herald.core.message import CodecRegistry, Message

__all__ = ["MemoryStore", "MemoryStoreData", "herald_storage_backends"]


@attrs.define(slots=True, eq=False)
class _Kept:
    """A stored message, shared by its entries; forgotten when the last entry goes."""

    message: Message
    size: int
    entries: int


@attrs.define(slots=True, eq=False)
class _Entry:
    """One (queue, offset) of a kept message."""

    kept: _Kept
    delivery_count: int = 0


@attrs.define(slots=True, eq=False)
class MemoryStoreData:
    """What a `MemoryStore` holds; hand it to a new `MemoryStore` to "restart" on it.

    Treat the fields as the store's private state: read them through a store.
    """

    queues: dict[int, dict[int, _Entry]] = attrs.field(factory=dict, repr=False)
    next_offsets: dict[int, int] = attrs.field(factory=dict, repr=False)
    metadata: dict[str, dict[str, str]] = attrs.field(factory=dict, repr=False)
    ticket: int = 0
    messages: int = 0
    bytes: int = 0


class MemoryStore:
    """A `herald.core.store.Store` kept in memory: every ticket is durable at once."""

    def __init__(self, data: MemoryStoreData | None = None) -> None:
        self._data = data if data is not None else MemoryStoreData()
        self._codecs: CodecRegistry | None = None

    @property
    def data(self) -> MemoryStoreData:
        """The data this store works on (to open another store on it later)."""
        return self._data

    async def open(self, codecs: CodecRegistry) -> None:
        """Nothing to recover: the data object already holds the state."""
        await trio.lowlevel.checkpoint()
        self._codecs = codecs

    async def close(self) -> None:
        """Nothing to flush; the data stays usable by the next store."""
        await trio.lowlevel.checkpoint()
        self._codecs = None

    # -- metadata --------------------------------------------------------------------------
    def load_metadata(self) -> Mapping[str, Mapping[str, MetadataValue]]:
        """Every record, decoded afresh: callers may change what they get."""
        return {
            kind: {key: json.loads(text) for key, text in records.items()}
            for kind, records in self._data.metadata.items()
        }

    def put_metadata(self, kind: str, key: str, value: MetadataValue | None) -> int:
        """Insert, replace or delete one record; refuses values that JSON cannot hold."""
        if not isinstance(kind, str) or not isinstance(key, str):
            raise TypeError(f"metadata kind and key must be str, not {kind!r}, {key!r}")
        data = self._data
        if value is None:
            records = data.metadata.get(kind)
            if records is not None:
                records.pop(key, None)
                if not records:
                    del data.metadata[kind]
        else:
            where = f"metadata record kind={kind!r} key={key!r}"
            if not isinstance(value, Mapping):
                raise TypeError(f"{where}: must be a mapping, not a {type(value).__name__}")
            text = json.dumps(plain_json(value, where, "value"), separators=(",", ":"))
            data.metadata.setdefault(kind, {})[key] = text
        data.ticket += 1
        return data.ticket

    # -- messages --------------------------------------------------------------------------
    def append(self, message: Message, targets: Sequence[QueueTarget]) -> int:
        """Keep `message` once for all `targets`; a target already present is replaced."""
        codecs = self._codecs
        if codecs is None:
            raise InternalError("the memory store is not open")
        size = len(message.stored_bytes(codecs))
        data = self._data
        if targets:
            kept = _Kept(message, size, len(targets))
            data.messages += 1
            data.bytes += size
            queues = data.queues
            for target in targets:
                entries = queues.get(target.queue_id)
                if entries is None:
                    entries = queues[target.queue_id] = {}
                old = entries.get(target.queue_offset)
                entries[target.queue_offset] = _Entry(kept)
                next_offsets = data.next_offsets
                if target.queue_offset >= next_offsets.get(target.queue_id, 0):
                    next_offsets[target.queue_id] = target.queue_offset + 1
                if old is not None:
                    self._release(old.kept)
        data.ticket += 1
        return data.ticket

    @property
    def durable_ticket(self) -> int:
        return self._data.ticket

    async def wait_durable(self, ticket: int) -> None:
        """Every ticket is durable when issued; still a checkpoint, as Trio expects."""
        await trio.lowlevel.checkpoint()

    def ack(self, queue_id: int, queue_offset: int) -> None:
        """Forget the entry; unknown entries are ignored (acks may race with deletes)."""
        entries = self._data.queues.get(queue_id)
        if entries is None:
            return
        entry = entries.pop(queue_offset, None)
        if entry is None:
            return
        if not entries:
            del self._data.queues[queue_id]
        self._release(entry.kept)

    def note_delivery(self, queue_id: int, queue_offset: int, delivery_count: int) -> None:
        entries = self._data.queues.get(queue_id)
        entry = entries.get(queue_offset) if entries is not None else None
        if entry is not None:
            entry.delivery_count = delivery_count

    def recover_queue(self, queue_id: int) -> Iterable[StoredEntry]:
        """A snapshot list, so the caller may ack while it walks it."""
        entries = self._data.queues.get(queue_id)
        if not entries:
            return []
        return [
            StoredEntry(offset, entry.kept.message, entry.delivery_count)
            for offset, entry in sorted(entries.items(), key=_by_offset)
        ]

    def queue_next_offset(self, queue_id: int) -> int:
        return self._data.next_offsets.get(queue_id, 0)

    def queue_ranges(self, queue_id: int, range_size: int) -> Iterable[QueueRange]:
        ranges: list[QueueRange] = []
        entries = self._data.queues.get(queue_id)
        if not entries:
            return ranges
        ordered = sorted(entries.items(), key=_by_offset)
        for start in range(0, len(ordered), range_size):
            chunk = ordered[start : start + range_size]
            ranges.append(
                QueueRange(
                    first_offset=chunk[0][0],
                    last_offset=chunk[-1][0],
                    count=len(chunk),
                    bytes=sum(entry.kept.message.body_size for _, entry in chunk),
                )
            )
        return ranges

    def read_queue(
        self,
        queue_id: int,
        first_offset: int,
        last_offset: int,
        limit: int,
        make: EntryFactory[Any] = StoredEntry,
    ) -> list[Any]:
        entries = self._data.queues.get(queue_id)
        if not entries or limit <= 0:
            return []
        wanted = sorted(o for o in entries if first_offset <= o <= last_offset)[:limit]
        return [
            make(offset, entries[offset].kept.message, entries[offset].delivery_count)
            for offset in wanted
        ]

    def queue_ids(self) -> list[int]:
        data = self._data
        return sorted(data.queues.keys() | data.next_offsets.keys())

    def delete_queue(self, queue_id: int) -> None:
        self._data.next_offsets.pop(queue_id, None)
        entries = self._data.queues.pop(queue_id, None)
        if entries is not None:
            for entry in entries.values():
                self._release(entry.kept)

    def statistics(self) -> StoreStatistics:
        data = self._data
        return StoreStatistics(
            messages=data.messages,
            bytes=data.bytes,
            appended_ticket=data.ticket,
            durable_ticket=data.ticket,
        )

    def _release(self, kept: _Kept) -> None:
        kept.entries -= 1
        if kept.entries == 0:
            self._data.messages -= 1
            self._data.bytes -= kept.size


def _by_offset(item: tuple[int, _Entry]) -> int:
    return item[0]


@hookimpl
def herald_storage_backends() -> list[StorageBackend]:
    """Offer this store as the storage backend named "memory"."""
    return [
        StorageBackend(
            name="memory",
            description="keeps everything in memory; nothing survives the process",
            factory=lambda cfg, data_dir: MemoryStore(),
        )
    ]


@hookimpl
def herald_plugin_info() -> PluginInfo:
    return PluginInfo("memory_store", "storage backend 'memory': everything in RAM")
