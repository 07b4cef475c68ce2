"""The commit log's record format: golden bytes, round trips, and garbage that only ever
yields RecordError."""

from __future__ import annotations

import struct
import zlib
from contextlib import suppress

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.core.message import Message
from herald.core.store import QueueTarget
from herald.storage import record as rec
from herald.storage.message_read import read_message

GOLDEN_ACK = bytes.fromhex(
    "00000024b37a9e025361ef4a00000000000010000000000000000007000000000000002a00000000"
)
"""encode_ack(queue 7, offset 42) written at offset 4096: 36 bytes + 4 of padding."""

GOLDEN_ACKS = bytes.fromhex(
    "00000038b37a9e06f4c9a09300000000000010000000000000000007"  # size 56, ACKS, crc, position
    "00000003000000000000002a000000000000002b000000000000002d"  # 3 offsets: 42, 43, 45
)
"""encode_acks(queue 7, [42, 43, 45]) written at offset 4096: 56 bytes, no padding."""

GOLDEN_MESSAGE = bytes.fromhex(
    "0000007ab37a9e01d6f184ec0000000000000008"  # size 122, MESSAGE, crc, position 8
    "0000000f"  # flags: persistent | expiration | message id | headers
    "0000018bcfe5687b0000018bcfe569c8"  # born 1700000000123 ms, stored 1700000000456 ms
    "00000000000001f4"  # expiration 500 ms
    "00000004000000030001"  # body size 4, priority 3, protocol length 1
    "000000020000000100000002000000070000000000000001"  # exchange, key, id, headers, ann, targets
    "00000007"  # raw length
    "7065786b6964"  # "p" "ex" "k" "id"
    "7b2261223a317d"  # {"a":1}
    "00000000000000010000000000000002"  # target (queue 1, offset 2)
    "484452626f6479"  # raw b"HDRbody"
    "000000000000"  # padding to 128
)

GOLDEN_METADATA = bytes.fromhex(
    "00000036b37a9e04a59f54f00000000000000000"  # size 54, METADATA, crc, position 0
    "000000000000000500000003"
    "0000000a"  # flags, kind 5, key 3, value 10 bytes
    "71756575652f7c71"  # "queue" "/|q"
    "7b2264223a747275657d"  # {"d":true}
    "0000"
)


def golden_message() -> Message:
    return Message(
        protocol="p",
        raw=b"HDRbody",
        exchange="ex",
        routing_key="k",
        body_size=4,
        headers={"a": 1},
        persistent=True,
        priority=3,
        expiration_ms=500,
        message_id="id",
        timestamp=1700000000.123,
    )


def test_golden_ack() -> None:
    assert rec.encode_ack(7, 42).to_bytes(4096) == GOLDEN_ACK
    assert rec.decode(GOLDEN_ACK, 4096) == rec.AckRecord(4096, 36, 7, 42)


def test_golden_acks() -> None:
    assert rec.encode_acks(7, [42, 43, 45]).to_bytes(4096) == GOLDEN_ACKS
    assert rec.decode(GOLDEN_ACKS, 4096) == rec.AcksRecord(4096, 56, 7, (42, 43, 45))
    one = rec.encode_acks(7, [42])
    assert one.size == 40 and one.space == 40
    assert rec.decode(one.to_bytes(8), 8) == rec.AcksRecord(8, 40, 7, (42,))


def test_acks_record_with_a_wrong_count_is_refused() -> None:
    fields = struct.pack(">qIqq", 7, 3, 42, 43)  # claims 3 offsets, holds 2; CRC right
    magic = rec.magic_of(rec.Kind.ACKS)
    pending = rec.Pending(rec.ACKS.size + 16, magic, zlib.crc32(fields), fields)
    with pytest.raises(rec.RecordError, match="3 offsets"):
        rec.decode(pending.to_bytes(0), 0)


def test_golden_message() -> None:
    message = golden_message()
    pending = rec.encode_message(message, b"HDRbody", [QueueTarget(1, 2)], 1700000000456)
    assert pending.size == 122 and pending.space == 128
    assert pending.to_bytes(8) == GOLDEN_MESSAGE
    record = rec.decode(GOLDEN_MESSAGE, 8)
    assert isinstance(record, rec.MessageRecord)
    assert record.targets == ((1, 2),)
    assert record.store_ms == 1700000000456
    got = record.to_message()
    for name in ("protocol", "raw", "exchange", "routing_key", "body_size", "headers"):
        assert getattr(got, name) == getattr(message, name), name
    for name in ("persistent", "priority", "expiration_ms", "message_id", "annotations"):
        assert getattr(got, name) == getattr(message, name), name
    assert got.timestamp == pytest.approx(message.timestamp, abs=0.001)


def test_golden_metadata() -> None:
    assert rec.encode_metadata("queue", "/|q", '{"d":true}').to_bytes(0) == GOLDEN_METADATA
    assert rec.decode(GOLDEN_METADATA, 0) == rec.MetadataRecord(0, 54, "queue", "/|q", '{"d":true}')


@pytest.mark.parametrize(
    "pending, expected",
    [
        (rec.encode_delivery(3, 9, 4), rec.DeliveryRecord(64, 40, 3, 9, 4)),
        (rec.encode_delete_queue(3), rec.DeleteQueueRecord(64, 28, 3)),
        (rec.encode_metadata("user", "ünï", None), rec.MetadataRecord(64, 45, "user", "ünï", None)),
    ],
)
def test_small_records_round_trip(pending: rec.Pending, expected: object) -> None:
    data = pending.to_bytes(64)
    assert len(data) % rec.ALIGN == 0
    assert rec.decode(data, 64) == expected


def test_message_without_optional_fields_round_trips() -> None:
    message = Message(protocol="mqtt", raw=b"", exchange="", routing_key="", body_size=0)
    data = rec.encode_message(message, b"", [], 0).to_bytes(0)
    got = rec.decode(data, 0)
    assert isinstance(got, rec.MessageRecord)
    restored = got.to_message()
    assert restored.headers is None and restored.annotations is None
    assert restored.message_id is None and restored.expiration_ms is None
    assert not restored.persistent and restored.raw == b""


def test_end_of_segment_filler() -> None:
    assert rec.decode(rec.encode_end(24) + bytes(16), 100) == rec.EndRecord(100, 24)
    with pytest.raises(rec.RecordError):
        rec.decode(struct.pack(">II", 13, rec.MAGIC_END), 0)


def test_a_record_found_at_another_offset_is_invalid() -> None:
    with pytest.raises(rec.RecordError, match="written for offset 4096"):
        rec.decode(GOLDEN_ACK, 8192)


@pytest.mark.parametrize("at", range(len(GOLDEN_MESSAGE) - 6))  # the padding is not checked
def test_any_flipped_bit_is_detected(at: int) -> None:
    for bit in (0x01, 0x80):
        data = bytearray(GOLDEN_MESSAGE)
        data[at] ^= bit
        with pytest.raises(rec.RecordError):
            rec.decode(bytes(data), 8)


def test_truncated_records_are_invalid() -> None:
    for length in range(len(GOLDEN_MESSAGE) - 6):
        with pytest.raises(rec.RecordError):
            rec.decode(GOLDEN_MESSAGE[:length], 8)


def test_unencodable_values_raise_value_error() -> None:
    message = golden_message()
    with pytest.raises(ValueError, match="cannot be stored"):
        rec.encode_message(message, b"x", [QueueTarget(-1, 2**64)], 0)


@settings(max_examples=500)
@given(data=st.binary(max_size=300), position=st.integers(0, 2**40))
def test_garbage_yields_only_record_error(data: bytes, position: int) -> None:
    try:
        record = rec.decode(data, position)
        if isinstance(record, rec.MessageRecord):
            record.to_message()
    except rec.RecordError:
        pass
    with suppress(rec.RecordError):
        read_message(memoryview(data), position)


@settings(max_examples=500)
@given(
    prefix=st.sampled_from([GOLDEN_MESSAGE, GOLDEN_ACK, GOLDEN_METADATA]),
    edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.integers(0, 200),
)
def test_damaged_records_yield_only_record_error(
    prefix: bytes, edits: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(prefix)
    for at, value in edits:
        data[at % len(data)] = value
    position = {GOLDEN_ACK: 4096, GOLDEN_MESSAGE: 8}.get(prefix, 0)
    damaged = bytes(data[: len(data) - cut % len(data)])
    try:
        record = rec.decode(damaged, position)
        if isinstance(record, rec.MessageRecord):
            record.to_message()
    except rec.RecordError:
        pass
    with suppress(rec.RecordError):
        read_message(memoryview(damaged), position)


@settings(max_examples=200)
@given(
    body=st.binary(max_size=200),
    key=st.text(max_size=20),
    headers=st.none() | st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5)),
    targets=st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=4),
    position=st.integers(0, 2**50).map(lambda n: n * 8),
)
def test_messages_round_trip(
    body: bytes,
    key: str,
    headers: dict[str, object] | None,
    targets: list[tuple[int, int]],
    position: int,
) -> None:
    message = Message(protocol="amqp", raw=body, exchange="x", routing_key=key, body_size=len(body))
    message.headers = headers
    pending = rec.encode_message(message, body, [QueueTarget(q, o) for q, o in targets], 5)
    record = rec.decode(pending.to_bytes(position), position)
    assert isinstance(record, rec.MessageRecord)
    assert record.targets == tuple(targets)
    got = record.to_message()
    assert (got.raw, got.routing_key, got.headers) == (body, key, headers)
    assert same_fields(read_message(memoryview(pending.to_bytes(position)), position), got)


def same_fields(one: Message, other: Message) -> bool:
    names = [a.name for a in attrs.fields(Message)]
    return [getattr(one, n) for n in names] == [getattr(other, n) for n in names]


def test_read_message_reads_the_golden_record_as_decode_does() -> None:
    record = rec.decode(GOLDEN_MESSAGE, 8)
    assert isinstance(record, rec.MessageRecord)
    got = read_message(memoryview(GOLDEN_MESSAGE)[:122], 8)
    assert same_fields(got, record.to_message())
    expected = ("id", {"a": 1}, 500, b"HDRbody")
    assert (got.message_id, got.headers, got.expiration_ms, got.raw) == expected
    with pytest.raises(rec.RecordError, match="not a message record"):
        read_message(GOLDEN_ACK + bytes(100), 4096)
    with pytest.raises(rec.RecordError, match="found at"):
        read_message(GOLDEN_MESSAGE, 16)
