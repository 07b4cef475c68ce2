"""Phase two of reading a byte range: Arrow columns for message records whose starts are known.

The mapped segment becomes one Arrow buffer (no copy) and the records one `large_binary` array
over it. One `binary_slice` copies every record's fixed header into a block of `HEAD`-byte
rows, and each header field is one strided `take` of the block's words of its width (the
field offsets come from record.py's `MESSAGE` struct itself, `FIELDS`; big-endian integers
are turned around with `array.byteswap`). Variable parts (protocol, exchange, routing key,
message id, body) sit at a different place in each record: each is gathered with one `take`
over a second array whose elements alternate between the wanted part and the gap up to the
next one, and a part that is empty in every row is not gathered. Python touches a row only
for what few rows have: headers, several targets, decoded properties. The body is the last
`body_size` bytes of the stored bytes for every protocol.
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
    aligned,
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
HEAD = aligned(MESSAGE.size)
"""Bytes of each record in the header block: the header, padded as in the log (every message
record takes at least this much space, so the next record never starts earlier)."""
_ARROW = {"H": pa.uint16(), "I": pa.uint32(), "i": pa.int32(), "q": pa.int64(), "Q": pa.uint64()}
_WORD = {2: "H", 4: "I", 8: "Q"}  # array codes by width (Arrow gives each field its sign)
_USED = {k: v for k, v in FIELDS.items() if k not in ("magic", "crc", "position")}
_ALIGNED = {k: v for k, v in _USED.items() if v[0] % struct.calcsize(v[1]) == 0}
_UNALIGNED = {k: v for k, v in _USED.items() if k not in _ALIGNED}
_RUN_AT = min(offset for offset, _ in _UNALIGNED.values())
_RUN_END = max(offset + struct.calcsize(code) for offset, code in _UNALIGNED.values())
_RUN_WORDS = (_RUN_END - _RUN_AT) // 4
"""The fields not aligned to their width (the lengths after the 2-byte protocol length) are
one run of 4-byte words in record.py's layout; `_fields` relies on it."""
_RUN_OK = {struct.calcsize(code) for _, code in _UNALIGNED.values()} == {4}
if not _RUN_OK or len(_UNALIGNED) != _RUN_WORDS:  # pragma: no cover
    raise RuntimeError("storage/record.py's MESSAGE layout changed: update columns._fields")
if any(array.array(code).itemsize != width for width, code in _WORD.items()):  # pragma: no cover
    raise RuntimeError("this platform's array item sizes are not 2, 4 and 8 bytes")
_LIST = pa.list_(pa.field("element", pa.string()))
_MAP = pa.map_(pa.field("key", pa.string(), nullable=False), pa.string())
_US = pa.timestamp("us", tz="UTC")
_NULL64 = pa.scalar(None, pa.int64())
_EXTRA_FLAGS = HAS_HEADERS | HAS_ANNOTATIONS


def _int64(values: Any) -> pa.Array:
    """An int64 Arrow array from Python ints, through `array` (a C loop, no per-item objects)."""
    data = array.array("q", values)
    return _from_array(pa.int64(), data)


def _from_array(kind: pa.DataType, values: array.array) -> pa.Array:
    """An Arrow array over an `array`'s memory (no copy)."""
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


class _Index:
    """Index arrays for interleaving, by batch length: made with Arrow from one counting
    array, and kept for the process (a worker reads split after split with the same batch
    length, so building them again per split would cost every task some milliseconds)."""

    def __init__(self) -> None:
        self._count = pa.array([], pa.int64())
        self._cache: dict[int, tuple[pa.Array, pa.Array, pa.Array]] = {}
        self._strided: dict[tuple[int, int, int], pa.Array] = {}
        self._empty: dict[int, pa.Array] = {}

    def get(self, m: int) -> tuple[pa.Array, pa.Array, pa.Array]:
        """(interleaving take indexes, even indexes, 0..m as list offsets) for m rows."""
        found = self._cache.get(m)
        if found is None:
            if len(self._count) < 2 * m + 1:
                self._count = _int64(range(max(2 * m + 1, 2 * len(self._count))))
            k = self._count.slice(0, 2 * m)
            mix = pc.add(pc.shift_right(k, 1), pc.multiply(pc.bit_wise_and(k, 1), m))
            evens = pc.multiply(self._count.slice(0, m), 2)
            found = (mix, evens, self._count.slice(0, m + 1).cast(pa.int32()))
            if len(self._cache) > 8:
                self._cache.clear()
            self._cache[m] = found
        return found

    def empty(self, m: int) -> pa.Array:
        """m empty strings."""
        found = self._empty.get(m)
        if found is None:
            zeros = pa.py_buffer(bytes(4 * (m + 1)))
            found = pa.StringArray.from_buffers(m, zeros, pa.py_buffer(b""))
            if len(self._empty) > 8:
                self._empty.clear()
            self._empty[m] = found
        return found

    def strided(self, m: int, step: int, first: int) -> pa.Array:
        """first, first + step, ... (m indexes)."""
        key = (m, step, first)
        found = self._strided.get(key)
        if found is None:
            self.get(m)  # the counting array is long enough
            found = pc.add(pc.multiply(self._count.slice(0, m), step), first)
            if len(self._strided) > 64:
                self._strided.clear()
            self._strided[key] = found
        return found


_INDEX = _Index()


class BatchBuilder:
    """Record batches with the reader's schema from a segment and its message starts."""

    def __init__(self, options: ReadOptions, queues: QueueNames) -> None:
        self.options = options
        self.queues = queues
        self.schema = arrow_schema(options.body_as_text)
        self._index = _INDEX
        self._scratch: dict[str, array.array] = {}
        self.invalid = 0

    def build(self, segment: Segment, starts: pa.Array | list[int]) -> pa.RecordBatch | None:
        """One batch for the records at `starts` (relative positions of message records the
        scan found valid, in order), after the option filters (None: empty)."""
        m = len(starts)
        if m == 0 or segment.map is None:
            return None
        buf = pa.py_buffer(segment.map)
        start = starts if isinstance(starts, pa.Array) else _int64(starts)
        last = start[m - 1].as_py()
        last_end = last + aligned(PREFIX.unpack_from(segment.map, last)[0])
        recs = _records(buf, start, last_end, m)
        return self._assemble(buf, start, _fields(recs, m, self._scratch), m, segment)

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
            return self.build(segment, start.take(keep)) if len(keep) else None
        mix, evens, _ = self._index.get(m)

        def part(begin: pa.Array, stop: pa.Array, length: pa.Array) -> pa.Array:
            if pc.max(length).as_py() == 0:  # e.g. the default exchange: nothing to gather
                return _INDEX.empty(m)
            return _text(_gather(buf, begin, stop, mix, evens, m))

        protocol = part(proto_at, exchange_at, lens["protocol_len"])
        exchange = part(exchange_at, key_at, lens["exchange_len"])
        routing_key = part(key_at, id_at, lens["key_len"])
        flags = f["flags"].cast(i64)
        has_id = pc.not_equal(pc.bit_wise_and(flags, HAS_MESSAGE_ID), 0)
        if pc.any(has_id).as_py():
            message_id = pc.if_else(
                has_id, part(id_at, headers_at, lens["id_len"]), pa.scalar(None, pa.string())
            )
        else:  # no record has an id: nothing to gather
            message_id = pa.nulls(m, pa.string())
        # the first target: the 16 bytes at the start of [targets_at[i], targets_at[i + 1])
        target = pc.binary_slice(_records(buf, targets_at, end[m - 1].as_py(), m), 0, TARGET.size)
        pairs = array.array("q")
        pairs.frombytes(memoryview(target.buffers()[2])[: m * TARGET.size])
        pairs.byteswap()
        queue_id = _from_array(i64, pairs[0::2])
        queue_offset = _from_array(i64, pairs[1::2])
        body = _gather(buf, pc.subtract(end, body_size), end, mix, evens, m).cast(pa.binary())
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


def _fields(recs: pa.Array, m: int, scratch: dict[str, array.array]) -> dict[str, pa.Array]:
    """The header fields of every record, from copies of the headers in equal rows (every
    element of `recs` is at least `HEAD` bytes long): a field aligned to its width is one
    strided `take` of the block's words of that width, then byteswapped; the others (the
    lengths after the 2-byte protocol length) are one run of big-endian words, copied into
    a scratch array, byteswapped at once and taken word by word."""
    block = pc.binary_slice(recs, 0, HEAD).buffers()[2]
    out = {}
    for name, (offset, code) in _ALIGNED.items():
        width = struct.calcsize(code)
        words = pa.Array.from_buffers(_ARROW[_WORD[width]], m * HEAD // width, [None, block])
        taken = words.take(_INDEX.strided(m, HEAD // width, offset // width))
        out[name] = _native(taken, _ARROW[code], m, width)
    run = memoryview(pc.binary_slice(recs, _RUN_AT, _RUN_END).buffers()[2])
    count = m * _RUN_WORDS
    words = scratch.get("run")
    if words is None or len(words) != count:
        words = scratch["run"] = array.array("I", bytes(4 * count))
    memoryview(words)[:] = run[: 4 * count].cast("I")
    words.byteswap()
    native = pa.Array.from_buffers(pa.uint32(), count, [None, pa.py_buffer(words)])
    for name, (offset, code) in _UNALIGNED.items():
        taken = native.take(_INDEX.strided(m, _RUN_WORDS, (offset - _RUN_AT) // 4))
        out[name] = taken if taken.type == _ARROW[code] else taken.view(_ARROW[code])
    return out


def _native(values: pa.Array, kind: pa.DataType, m: int, width: int) -> pa.Array:
    """Big-endian integers (an Arrow array's bytes) as an array of `kind`."""
    swapped = array.array(_WORD[width])
    swapped.frombytes(memoryview(values.buffers()[1])[: m * width])
    if width > 1:
        swapped.byteswap()
    return pa.Array.from_buffers(kind, m, [None, pa.py_buffer(swapped)])


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
