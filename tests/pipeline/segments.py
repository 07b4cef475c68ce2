"""Commit-log segments built record by record with record.py's encoders: the records a test
needs (acks, metadata, fan-out messages, a segment filled to its last byte), placed where it
wants them, and then damaged byte by byte (h2's `FrameFactory`, for the log)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from herald.core.message import CodecRegistry, Message, Properties
from herald.core.store import QueueTarget
from herald.storage import record
from herald.storage.mapped_file import file_name

QUEUES = {1: "alpha", 2: "beta", 3: "gamma"}
_CODECS = CodecRegistry()


def message(
    i: int,
    body: bytes = b"x" * 100,
    targets: Sequence[tuple[int, int]] | None = None,
    message_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> record.Pending:
    """The message record of the i-th message (to queue i % 3 + 1 unless `targets`)."""
    props = Properties(delivery_mode=2, message_id=message_id, headers=headers)
    msg = Message.native(body, routing_key=QUEUES[i % 3 + 1], properties=props)
    pairs = targets if targets is not None else [(i % 3 + 1, i // 3)]
    return record.encode_message(
        msg, msg.stored_bytes(_CODECS), [QueueTarget(q, o) for q, o in pairs], 1_000 + i
    )


def queue_metadata() -> list[record.Pending]:
    """The metadata records naming the three queues (as the store writes them)."""
    out = []
    for store_id, name in QUEUES.items():
        value = {"vhost": "/", "name": name, "auto_delete": False, "arguments": {}}
        value["store_id"] = store_id
        out.append(record.encode_metadata("queue", f'["/","{name}"]', json.dumps(value)))
    return out


class LogBuilder:
    """Segments of `segment_size` bytes, filled in order; a record that does not fit starts
    the next segment after an end-of-segment filler, as the store does."""

    def __init__(self, segment_size: int = 65536) -> None:
        self.segment_size = segment_size
        self.segments: list[bytearray] = [bytearray(segment_size)]
        self.at = 0  # the next record's position in the log

    def add(self, pending: record.Pending) -> int:
        """Place a record; returns its position."""
        rel = self.at % self.segment_size
        if rel + pending.space > self.segment_size:
            self.segments[-1][rel : rel + 8] = record.encode_end(self.segment_size - rel)
            self.at += self.segment_size - rel
            rel = 0
        while len(self.segments) <= self.at // self.segment_size:
            self.segments.append(bytearray(self.segment_size))
        position = self.at
        self.segments[-1][rel : rel + pending.space] = pending.to_bytes(position)
        self.at += pending.space
        return position

    def free(self) -> int:
        """Bytes left in the current segment."""
        return self.segment_size - self.at % self.segment_size

    def write(self, data_dir: Path) -> Path:
        """The segments as a data dir without checkpoint (read by scanning from its start)."""
        log = data_dir / "store" / "commitlog"
        log.mkdir(parents=True, exist_ok=True)
        for i, data in enumerate(self.segments):
            (log / file_name(i * self.segment_size)).write_bytes(bytes(data))
        return data_dir


def filling(free: int, i: int) -> record.Pending:
    """A message record whose space is exactly `free` bytes (at least a message's minimum)."""
    empty = message(i, b"")
    pending = message(i, b"f" * (free - empty.size))
    assert pending.space == free, (pending.space, free)
    return pending
