"""Phase two of reading a byte range: Arrow columns for message records whose starts are known.

The mapped segment becomes one Arrow buffer (no copy) and the records one `large_binary` array
over it, so every fixed header field is a `binary_slice` of it in C++: the field offsets come
from record.py's `MESSAGE` struct itself (`FIELDS`), and big-endian integers are turned around
with `array.byteswap`. Variable parts (protocol, exchange, routing key, message id, first
target, body) sit at a different place in each record: each is gathered with one `take` over a
second array whose elements alternate between the wanted part and the gap up to the next one.
Python touches a row only for what few rows have: headers, several targets, decoded
properties. The body is the last `body_size` bytes of the stored bytes for every protocol.
"""

from __future__ import annotations

import array
import logging
import struct
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from herald.pipeline.options import ReadOptions
from herald.pipeline.props import header_pairs, property_pairs
from herald.pipeline.records import Segment
from herald.pipeline.schema import arrow_schema
from herald.storage.record import (
    HAS_ANNOTATIONS,
    HAS_EXPIRATION,
    HAS_HEADERS,
    HAS_MESSAGE_ID,
    MESSAGE,
    PERSISTENT,
    PREFIX,
    TARGET,
    TEXT_ERRORS,
)

log = logging.getLogger(__name__)

QueueNames = Mapping[int, tuple[str, str]]
"""Queue store id -> (vhost, queue name), from the metadata records."""

FIELD_NAMES = (
    "size", "magic", "crc", "position", "flags", "born", "store", "expiration", "body_size",
    "priority", "protocol_len", "exchange_len", "key_len", "id_len", "headers_len",
    "annotations_len", "count", "raw_len",
)  # fmt: skip
"""record.py's MESSAGE fields, in its order (see the comment above its definition)."""


def _layout(layout: struct.Struct) -> dict[str, tuple[int, str]]:
    """Field name -> (byte offset, struct code), computed from the struct's own format."""
    order, codes = layout.format[0], layout.format[1:].replace(" ", "")
    if len(codes) != len(FIELD_NAMES):
        raise RuntimeError("storage/record.py's MESSAGE layout changed: update FIELD_NAMES")
    out, at = {}, 0
    for name, code in zip(FIELD_NAMES, codes, strict=True):
        out[name] = (at, code)
        at += struct.calcsize(order + code)
    return out


FIELDS = _layout(MESSAGE)
_ARROW = {"H": pa.uint16(), "I": pa.uint32(), "i": pa.int32(), "q": pa.int64(), "Q": pa.uint64()}
_LIST = pa.list_(pa.field("element", pa.string()))
_MAP = pa.map_(pa.field("key", pa.string(), nullable=False), pa.string())
_US = pa.timestamp("us", tz="UTC")
_NULL64 = pa.scalar(None, pa.int64())
_EXTRA_FLAGS = HAS_HEADERS | HAS_ANNOTATIONS
_UNUSED = frozenset({"magic", "crc", "position"})  # checked by the scan already


def _int64(values: Any) -> pa.Array:
    """An int64 Arrow array from Python ints, through `array` (a C loop, no per-item objects)."""
    data = array.array("q", values)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


class _Index:
    """Cached index arrays for interleaving (one size per batch length)."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[pa.Array, pa.Array, pa.Array]] = {}

    def get(self, m: int) -> tuple[pa.Array, pa.Array, pa.Array]:
        """(interleaving take indexes, even indexes, 0..m as list offsets) for m rows."""
        found = self._cache.get(m)
        if found is None:
            k = _int64(range(2 * m))
            mix = pc.add(pc.shift_right(k, 1), pc.multiply(pc.bit_wise_and(k, 1), m))
            found = (mix, _int64(range(0, 2 * m, 2)), _int64(range(m + 1)).cast(pa.int32()))
            if len(self._cache) > 4:
                self._cache.clear()
            self._cache[m] = found
        return found


class BatchBuilder:
    """Record batches with the reader's schema from a segment and its message starts."""

    def __init__(self, options: ReadOptions, queues: QueueNames) -> None:
        self.options = options
        self.queues = queues
        self.schema = arrow_schema(options.body_as_text)
        self._index = _Index()
        self.invalid = 0

    def build(self, segment: Segment, starts: list[int]) -> pa.RecordBatch | None:
        """One batch for the records at `starts`, after the option filters (None: empty)."""
        m = len(starts)
        if m == 0 or segment.map is None:
            return None
        buf = pa.py_buffer(segment.map)
        start = _int64(starts)
        last_end = starts[-1] + PREFIX.unpack_from(segment.map, starts[-1])[0]
        recs = _records(buf, start, last_end, m)
        fields = {name: _swap(recs, m, *FIELDS[name]) for name in FIELDS if name not in _UNUSED}
        return self._assemble(buf, start, fields, m, segment)

    # -- assembling --------------------------------------------------------------------------
    def _assemble(
        self, buf: pa.Buffer, start: pa.Array, f: dict[str, pa.Array], m: int, segment: Segment
    ) -> pa.RecordBatch | None:
        i64 = pa.int64()
        lens = {k: f[k].cast(i64) for k in FIELD_NAMES[10:] if k in f}
        end = pc.add(start, f["size"].cast(i64))
        proto_at = pc.add(start, MESSAGE.size)
        exchange_at = pc.add(proto_at, lens["protocol_len"])
        key_at = pc.add(exchange_at, lens["exchange_len"])
        id_at = pc.add(key_at, lens["key_len"])
        headers_at = pc.add(id_at, lens["id_len"])
        targets_at = pc.add(pc.add(headers_at, lens["headers_len"]), lens["annotations_len"])
        raw_at = pc.subtract(end, lens["raw_len"])
        body_size = f["body_size"].cast(i64)
        # the lengths must add up (record.py's decode checks the same): rows that do not are
        # dropped with an error rather than read out of bounds
        sane = pc.and_(
            pc.equal(pc.add(targets_at, pc.multiply(lens["count"], TARGET.size)), raw_at),
            pc.and_(pc.greater_equal(lens["count"], 1), pc.less_equal(body_size, lens["raw_len"])),
        )
        if not pc.all(sane).as_py():
            bad = m - pc.sum(sane.cast(i64)).as_py()
            self.invalid += bad
            log.error(
                "commit log segment %s: %d record(s) whose lengths do not add up were skipped",
                segment.path.name,
                bad,
            )
            keep = pc.indices_nonzero(sane)
            starts = start.take(keep).to_pylist()
            return self.build(segment, starts) if starts else None
        mix, evens, _ = self._index.get(m)

        def part(begin: pa.Array, stop: pa.Array) -> pa.Array:
            return _gather(buf, begin, stop, mix, evens, m)

        protocol = _text(part(proto_at, exchange_at))
        exchange = _text(part(exchange_at, key_at))
        routing_key = _text(part(key_at, id_at))
        flags = f["flags"].cast(i64)
        has_id = pc.not_equal(pc.bit_wise_and(flags, HAS_MESSAGE_ID), 0)
        message_id = pc.if_else(
            has_id, _text(part(id_at, headers_at)), pa.scalar(None, pa.string())
        )
        target = part(targets_at, pc.add(targets_at, TARGET.size)).cast(pa.binary(TARGET.size))
        pairs = array.array("q")
        pairs.frombytes(memoryview(target.buffers()[1])[: m * TARGET.size])
        pairs.byteswap()
        queue_id = pa.array(pairs[0::2], i64)
        queue_offset = pa.array(pairs[1::2], i64)
        body = part(pc.subtract(end, body_size), end).cast(pa.binary())
        born, stored = f["born"].cast(i64), f["store"].cast(i64)
        distinct = pc.unique(queue_id)
        where = pc.index_in(queue_id, distinct)
        known = [self.queues.get(q) for q in distinct.to_pylist()]
        vhost = pa.array([k[0] if k else None for k in known], pa.string()).take(where)
        queue = pa.array([k[1] if k else None for k in known], pa.string()).take(where)
        headers, properties, queues = self._extras(
            buf, start, flags, lens, headers_at, targets_at, raw_at, end, protocol, queue, m
        )
        has_expiration = pc.not_equal(pc.bit_wise_and(flags, HAS_EXPIRATION), 0)
        columns = [
            pc.add(start, segment.start),
            vhost,
            exchange,
            routing_key,
            queue,
            queue_id,
            queue_offset,
            queues,
            protocol,
            message_id,
            headers,
            properties,
            self._body(body),
            f["body_size"].cast(pa.int32()),
            f["size"].cast(pa.int32()),
            pc.not_equal(pc.bit_wise_and(flags, PERSISTENT), 0),
            f["priority"],
            pc.if_else(has_expiration, f["expiration"], _NULL64),
            _times(born),
            _times(stored),
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        return self._filter(batch, stored, queue, exchange, vhost, queues)

    def _filter(
        self,
        batch: pa.RecordBatch,
        stored: pa.Array,
        queue: pa.Array,
        exchange: pa.Array,
        vhost: pa.Array,
        queues: pa.Array,
    ) -> pa.RecordBatch | None:
        o = self.options
        masks = []
        if o.start_ms is not None:
            masks.append(pc.greater_equal(stored, o.start_ms))
        if o.end_ms is not None:
            masks.append(pc.less(stored, o.end_ms))
        if o.destinations:
            names = pa.array(sorted(o.destinations), pa.string())
            in_queues = pc.fill_null(pc.is_in(pc.list_flatten(queues), value_set=names), False)
            hit_rows = pc.filter(pc.list_parent_indices(queues), in_queues).cast(pa.int64())
            rows = pa.array(range(len(batch)), pa.int64())
            by_queue = pc.is_in(rows, value_set=pc.unique(hit_rows))
            masks.append(pc.or_(pc.fill_null(pc.is_in(exchange, value_set=names), False), by_queue))
        if o.vhost is not None:
            masks.append(pc.fill_null(pc.equal(vhost, o.vhost), False))
        if not masks:
            return batch
        mask = masks[0]
        for extra in masks[1:]:
            mask = pc.and_(mask, extra)
        batch = batch.filter(mask)
        return batch if len(batch) else None

    def _body(self, body: pa.Array) -> pa.Array:
        if not self.options.body_as_text:
            return body
        try:
            return body.cast(pa.string())
        except pa.ArrowInvalid:  # a body that is not UTF-8: its invalid bytes replaced
            return pa.array(
                [None if b is None else b.decode("utf-8", "replace") for b in body.to_pylist()],
                pa.string(),
            )

    def _extras(
        self,
        buf: pa.Buffer,
        start: pa.Array,
        flags: pa.Array,
        lens: dict[str, pa.Array],
        headers_at: pa.Array,
        targets_at: pa.Array,
        raw_at: pa.Array,
        end: pa.Array,
        protocol: pa.Array,
        queue: pa.Array,
        m: int,
    ) -> tuple[pa.Array, pa.Array, pa.Array]:
        """The headers and properties maps and the `queues` list: Python only for the rows
        that have headers or several targets (or all rows, to decode properties)."""
        null_map = pa.nulls(m, _MAP)
        with_headers = pc.indices_nonzero(pc.not_equal(pc.bit_wise_and(flags, _EXTRA_FLAGS), 0))
        several = pc.indices_nonzero(pc.greater(lens["count"], 1))
        data = memoryview(buf)
        headers = null_map
        if len(with_headers):
            rows: list[list[tuple[str, str]] | None] = [None] * m
            h_at, fl = headers_at.to_pylist(), flags.to_pylist()
            h_len, a_len = lens["headers_len"].to_pylist(), lens["annotations_len"].to_pylist()
            for row in with_headers.to_pylist():
                first, hl, al = h_at[row], h_len[row], a_len[row]
                rows[row] = header_pairs(
                    bytes(data[first : first + hl]) if fl[row] & HAS_HEADERS else None,
                    bytes(data[first + hl : first + hl + al])
                    if fl[row] & HAS_ANNOTATIONS
                    else None,
                )
            headers = pa.array(rows, _MAP)
        if len(several):
            names = queue.to_pylist()
            lists: list[list[str | None]] = [[name] for name in names]
            t_at, counts = targets_at.to_pylist(), lens["count"].to_pylist()
            for row in several.to_pylist():
                for i in range(1, counts[row]):
                    qid = TARGET.unpack_from(data, t_at[row] + i * TARGET.size)[0]
                    lists[row].append(self.queues.get(qid, (None, None))[1])
            queues = pa.array(lists, _LIST)
        else:
            queues = pa.ListArray.from_arrays(self._index.get(m)[2], queue, type=_LIST)
        properties = null_map
        if self.options.properties:
            r_at, r_end, protos = raw_at.to_pylist(), end.to_pylist(), protocol.to_pylist()
            props = [property_pairs(protos[i], bytes(data[r_at[i] : r_end[i]])) for i in range(m)]
            properties = pa.array(props, _MAP)
        data.release()
        return headers, properties, queues


def _records(buf: pa.Buffer, begin: pa.Array, last_end: int, m: int) -> pa.Array:
    """A large_binary array over `buf` whose element i is [begin[i], begin[i+1]) (the record
    and whatever follows it up to the next one); the last ends at `last_end`."""
    offsets = pa.concat_arrays([begin, pa.array([last_end], pa.int64())])
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), m, [None, offsets.buffers()[1], buf])


def _swap(recs: pa.Array, m: int, offset: int, code: str) -> pa.Array:
    """The big-endian field at `offset` of every element, as an Arrow integer array."""
    width = struct.calcsize(code)
    sliced = pc.binary_slice(recs, offset, offset + width)
    values = array.array(code)
    if values.itemsize != width:  # pragma: no cover - Linux's C types have these sizes
        raise RuntimeError(f"array code {code} is not {width} bytes here")
    values.frombytes(memoryview(sliced.buffers()[2])[: m * width])
    if width > 1:
        values.byteswap()
    return pa.Array.from_buffers(_ARROW[code], m, [None, pa.py_buffer(values)])


def _gather(
    buf: pa.Buffer, begin: pa.Array, stop: pa.Array, mix: pa.Array, evens: pa.Array, m: int
) -> pa.Array:
    """Element i = buf[begin[i]:stop[i]] (ranges in increasing order, not overlapping)."""
    offsets = pc.take(pa.concat_arrays([begin, stop]), mix)
    both = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), 2 * m - 1, [None, offsets.buffers()[1], buf]
    )
    return both.take(evens)


def _text(values: pa.Array) -> pa.Array:
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decode as record.py does (surrogates kept)
        return pa.array(
            [None if v is None else v.decode("utf-8", TEXT_ERRORS) for v in values.to_pylist()],
            pa.string(),
        )


def _times(ms: pa.Array) -> pa.Array:
    return pc.multiply(ms, 1000).cast(_US)


__all__ = ["FIELDS", "BatchBuilder", "QueueNames"]
