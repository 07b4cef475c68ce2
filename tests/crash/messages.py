"""The crash tests' message format: ids that say who published what, bodies that prove they
are whole.

An id is `<cycle>.<publisher>.<seq>`: the child process of kill cycle `cycle`, its publisher
task `publisher`, the task's `seq`-th message. A body is a header naming the id, the payload's
length and its CRC32, then a payload derived from the id, so a body can be checked without
knowing anything but itself: a torn, shifted or swapped body fails.
"""

from __future__ import annotations

import hashlib
import zlib

MAIN = "main"  # every publisher's messages; only the parent acks here
WORK = "work"  # the shared publishers' messages too; the child consumes and acks them
BOTH = "both"  # fanout exchange to MAIN and WORK


def message_id(cycle: int, publisher: int, seq: int) -> str:
    return f"{cycle}.{publisher}.{seq}"


def parse_id(text: str) -> tuple[int, int, int]:
    """(cycle, publisher, seq); ValueError if `text` is not an id this harness makes."""
    cycle, publisher, seq = text.split(".")
    return int(cycle), int(publisher), int(seq)


def payload(mid: str, size: int) -> bytes:
    digest = hashlib.sha256(mid.encode()).digest()
    return (digest * (size // len(digest) + 1))[:size]


def make_body(mid: str, size: int) -> bytes:
    data = payload(mid, size)
    return f"{mid}|{size}|{zlib.crc32(data):08x}|".encode() + data


def body_problem(mid: str | None, body: bytes) -> str | None:
    """What is wrong with `body` as the body of message `mid`, or None if it is intact."""
    try:
        named, size, crc, data = body.split(b"|", 3)
        expected = (named.decode(), int(size), int(crc, 16))
    except ValueError:
        return f"body of {mid} has no valid header: {body[:40]!r}"
    if expected[0] != mid:
        return f"message {mid} carries the body of {expected[0]}"
    if len(data) != expected[1]:
        return f"body of {mid} is {len(data)} bytes, its header says {expected[1]}"
    if zlib.crc32(data) != expected[2] or data != payload(mid, expected[1]):
        return f"body of {mid} is damaged (CRC mismatch)"
    return None
