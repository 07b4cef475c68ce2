"""The read-back fast paths make what the ordinary ones make: `read_back_factory` what
`QueueEntry(...)` makes (TTL included), and `read_run` the `Message` that `record.decode`
reads (every field, set without the class call), however a run's shapes vary."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import attrs
import pytest

from herald.core.message import Message
from herald.core.queue_entry import QueueEntry, read_back_factory
from herald.core.store import QueueTarget, StoredEntry
from herald.storage import record as rec
from herald.storage.message_read import read_run

Entry = tuple[int, int, int, int, int, int]


def fields(message: Message) -> list[Any]:
    return [getattr(message, a.name) for a in attrs.fields(Message)]


def slots(entry: QueueEntry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in QueueEntry.__slots__}


class FakeQueue:
    name = "q"


@pytest.mark.parametrize("expiration", [None, 2500])
def test_read_back_entries_are_the_constructors_with_their_ttl(expiration: int | None) -> None:
    queue: Any = FakeQueue()
    message = Message("herald", b"xy", "", "q", 2, expiration_ms=expiration, timestamp=100.0)
    expiring = [False]
    got = read_back_factory(queue, 9, 50.0, expiring)(17, message, 3)
    expected = QueueEntry(queue, 9, 17, message, 3)
    if expiration is not None:
        expected.expires_at = 100.0 + 50.0 + 2.5
    assert slots(got) == slots(expected)
    assert expiring == [expiration is not None]


def message(exchange: str, key: str, body: bytes, **extra: Any) -> Message:
    return Message("amqp", body, exchange, key, len(body), timestamp=1700000000.5, **extra)


def run_of(messages: list[Message], base: int = 4096) -> tuple[bytes, list[Entry]]:
    """The messages' records written one after another from log offset `base`, and the
    consume-queue entries (log offset, size, ..., queue offset) of each."""
    data, wanted, position = b"", [], base
    for offset, msg in enumerate(messages):
        pending = rec.encode_message(msg, msg.raw or b"", [QueueTarget(1, offset)], 1)
        data += pending.to_bytes(position)
        wanted.append((position, pending.size, 0, 0, 0, offset))
        position += pending.space
    return data, wanted


def decoded(data: bytes, base: int, entry: Entry) -> Message:
    start = entry[0] - base
    record = rec.decode(data[start : start + entry[1]], entry[0])
    assert isinstance(record, rec.MessageRecord)
    return record.to_message()


# Same record size, names bytes alike ("ab" joined) but split differently; optional fields
# coming and going between records of one shape.
MIXED = [
    message("a", "b", b"1234"),
    message("ab", "", b"1234"),
    message("", "ab", b"1234"),
    message("", "ab", b"1234"),
    message("", "ab", b"5678", message_id="m"),
    message("", "ab", b"5678", headers={"h": "v"}, expiration_ms=10, persistent=True),
    message("", "ab", b"5678", annotations={"n": 1}, message_id="m2"),
    message("", "ab", b"567"),
    message("", "ab", b"5678", priority=4),
    message("", "ab", b"5678"),
]


def test_read_run_reads_every_shape_as_decode_does() -> None:
    data, wanted = run_of(MIXED)
    out: list[StoredEntry] = []
    assert read_run(data, 4096, wanted, {3: 2}, out) == []
    assert [e.queue_offset for e in out] == list(range(len(MIXED)))
    assert [e.delivery_count for e in out] == [0, 0, 0, 2, 0, 0, 0, 0, 0, 0]
    for entry, stored in zip(wanted, out, strict=True):
        assert fields(stored.message) == fields(decoded(data, 4096, entry))
    assert [(m.exchange, m.routing_key) for m in (e.message for e in out[:3])] == [
        ("a", "b"),
        ("ab", ""),
        ("", "ab"),
    ]


def damage(data: bytes, at: int, value: bytes) -> bytes:
    return data[:at] + value + data[at + len(value) :]


def recrc(data: bytes, start: int, size: int) -> bytes:
    """The record at `start` with its CRC made right again (a damage the CRC cannot see)."""
    crc = zlib.crc32(data[start + rec.COMMON.size : start + size])
    return damage(data, start + 8, struct.pack(">I", crc))


def test_a_bad_record_costs_only_itself_and_its_shape_is_not_kept() -> None:
    messages = [message("", "q", b"abcd") for _ in range(5)]
    data, wanted = run_of(messages)
    second, third = wanted[1][0] - 4096, wanted[2][0] - 4096
    data = damage(data, second + 60, b"\xff")  # its body size: the CRC no longer matches
    # the third's routing key length grown by one, CRC made right: its lengths do not add up
    data = recrc(damage(data, third + 62, struct.pack(">I", 2)), third, wanted[2][1])
    out: list[StoredEntry] = []
    failed = read_run(data, 4096, wanted, None, out)
    assert [(offset, str(exc)) for _, offset, exc in failed] == [
        (1, "CRC mismatch"),
        (2, "record lengths do not add up to its size"),
    ]
    assert [e.queue_offset for e in out] == [0, 3, 4]
    for stored, entry in zip(out, [wanted[0], wanted[3], wanted[4]], strict=True):
        assert fields(stored.message) == fields(decoded(data, 4096, entry))


def test_a_truncated_run_reports_truncated_records() -> None:
    data, wanted = run_of([message("", "q", b"abcd"), message("", "q", b"abcd")])
    cut = data[: wanted[1][0] - 4096 + 50]
    out: list[StoredEntry] = []
    failed = read_run(cut, 4096, wanted, None, out)
    assert [(offset, str(exc)) for _, offset, exc in failed] == [(1, "truncated message record")]
    assert len(out) == 1
