"""Reading stored messages back: recovering a queue, summarising it as ranges, loading the part
of a swapped range a consumer needs next, finding messages by key.

Consume-queue entries carry each message's sizes and target count, so `queue_ranges` answers
from the consume queue alone; `read_queue` finds its first entry by binary search and walks
forward; only the records returned are read, a run of adjacent records with one `pread`
(reading maps no pages into the broker). `record_reads` counts decoded message records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from herald.core.store import EntryFactory, QueueRange, StoredEntry
from herald.storage import record as rec
from herald.storage.consume_queue import Entry
from herald.storage.dispatch import StoreState
from herald.storage.ledger import QueueState
from herald.storage.mapped_file import MappedFileQueue
from herald.storage.message_read import Failure, read_run

if TYPE_CHECKING:
    from herald.core.message import Message

log = logging.getLogger(__name__)

_GAP = 4096
"""Records at most this far apart are read with one `pread` (what lies between is skipped)."""
_RUN = 1 << 20
"""The most bytes one `pread` reads."""


class QueueReader:
    """Reads one store's queues and records back from its log."""

    def __init__(self, log_files: MappedFileQueue, state: StoreState) -> None:
        self.log = log_files
        self.state = state
        self.record_reads = 0  # message records decoded
        self.recovered: dict[int, Message] = {}  # shared between a message's queues at start

    def recover_queue(self, queue_id: int) -> Iterable[StoredEntry]:
        state = self.state.queues.get(queue_id)
        if state is None:
            return []
        return self._stored(state, [entry for _, entry in state.live_entries()], shared=True)

    def queue_ranges(self, queue_id: int, range_size: int) -> Iterable[QueueRange]:
        state = self.state.queues.get(queue_id)
        if state is None:
            return []
        ranges: list[QueueRange] = []
        count = size = first = last = 0
        for _, entry in state.live_entries():
            if count == range_size:
                ranges.append(QueueRange(first, last, count, size))
                count = size = 0
            last = entry[5]
            if not count:
                first = last
            count += 1
            size += entry[3]
        if count:
            ranges.append(QueueRange(first, last, count, size))
        return ranges

    def read_queue(
        self,
        queue_id: int,
        first_offset: int,
        last_offset: int,
        limit: int,
        make: EntryFactory[Any] = StoredEntry,
    ) -> list[Any]:
        state = self.state.queues.get(queue_id)
        if state is None or limit <= 0 or first_offset > last_offset:
            return []
        cq = state.cq
        begin = cq.lower_bound(first_offset, state.low)
        return self._stored(state, cq.collect(begin, last_offset, limit, state.acked), make=make)

    def read_queue_records(
        self, queue_id: int, first_offset: int, last_offset: int, limit: int
    ) -> list[tuple[int, int, bytes]]:
        """(queue offset, delivery count, the message record's bytes as stored) of the live
        entries in [first_offset, last_offset]: what a shared queue's origin ships to a slot
        holder, neither decoded nor encoded again here (the holder checks the CRC)."""
        state = self.state.queues.get(queue_id)
        if state is None or limit <= 0 or first_offset > last_offset:
            return []
        cq = state.cq
        begin = cq.lower_bound(first_offset, state.low)
        counts = state.counts
        out = []
        for entry in cq.collect(begin, last_offset, limit, state.acked):
            data = self.log.read(entry[0], entry[1])
            if data is not None:
                out.append((entry[5], counts.get(entry[5], 0), bytes(data)))
        self.record_reads += len(out)
        return out

    def find_by_key(self, key: str, begin_ms: int, end_ms: int, limit: int) -> list[Message]:
        index = self.state.index
        if index is None or limit <= 0:
            return []
        found = []
        for position in sorted(set(index.query(key, begin_ms, end_ms, limit * 4 + 16))):
            head = self.log.read(position, rec.PREFIX.size)
            if head is None:
                continue
            data = self.log.read(position, rec.PREFIX.unpack(head)[0])
            record = self._record(position, data) if data is not None else None
            if record is None or record.message_id != key:
                continue
            if begin_ms <= record.store_ms <= end_ms:
                try:
                    found.append(record.to_message())
                except rec.RecordError:
                    continue
        return found[:limit]

    # -- records ---------------------------------------------------------------------------
    def _stored(
        self,
        state: QueueState,
        wanted: list[Entry],
        shared: bool = False,
        make: EntryFactory[Any] = StoredEntry,
    ) -> list[Any]:
        """`wanted`'s messages; an unreadable one is logged and its entry dropped. `shared`:
        a message of several queues is decoded once (recovery, until the first append).

        Records close together in one segment are read with one `pread` (a run): a batch
        that spans at most `_RUN` bytes of one segment is one run, without looking at each
        entry. This is the per-delivery path of a swapped queue."""
        entries: list[Any] = []
        counts = state.counts
        segment_size = self.log.size
        count = len(wanted)
        first = 0
        while first < count:
            start = wanted[first][0]
            last = wanted[-1]
            end = last[0] + last[1]
            if end - start <= _RUN and start // segment_size == last[0] // segment_size:
                stop = count  # the rest in one read (gaps included: at most _RUN bytes)
            else:
                end = start + wanted[first][1]
                stop = first + 1
                while stop < count:  # extend the run
                    position, size = wanted[stop][0], wanted[stop][1]
                    if position - end > _GAP or position + size - start > _RUN:
                        break
                    if position // segment_size != start // segment_size:
                        break
                    end = position + size
                    stop += 1
            data = self.log.read(start, end - start) or b""
            self.record_reads += stop - first
            run = wanted[first:stop] if first or stop < count else wanted
            if shared:
                failed = self._shared(data, start, run, counts, entries)
            else:
                failed = read_run(data, start, run, counts, entries, make)
            for position, offset, exc in failed:
                self._unreadable(state, position, offset, exc)
            first = stop
        return entries

    def _shared(
        self,
        data: bytes,
        start: int,
        run: list[Entry],
        counts: dict[int, int],
        entries: list[StoredEntry],
    ) -> list[Failure]:
        """`read_run` for recovery: a message already read for another queue is reused."""
        cache = self.recovered
        failed: list[Failure] = []
        for entry in run:
            position, offset = entry[0], entry[5]
            message = cache.get(position)
            if message is None:
                failed += read_run(data, start, (entry,), counts, entries)
                if entries and entries[-1].queue_offset == offset:
                    cache[position] = entries[-1].message
            else:
                entries.append(StoredEntry(offset, message, counts.get(offset, 0)))
        return failed

    def _unreadable(self, state: QueueState, position: int, offset: int, exc: Exception) -> None:
        segment = self.log.segment_start(position)
        log.error("commit log segment %020d: record at %d: %s", segment, position, exc)
        log.error("queue %d: dropping unreadable message at offset %d", state.queue_id, offset)
        index = state.find(offset)
        if index is not None:
            self.state.ledger.drop_index(state, index)

    def _record(self, position: int, data: bytes | memoryview) -> rec.MessageRecord | None:
        self.record_reads += 1
        try:
            record = rec.decode(data, position)
        except rec.RecordError as exc:
            segment = self.log.segment_start(position)
            log.error("commit log segment %020d: record at %d: %s", segment, position, exc)
            return None
        return record if isinstance(record, rec.MessageRecord) else None
