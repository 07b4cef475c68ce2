"""A live-socket fuzzer shared by the protocol tests: hostile bytes at a real port.

Each protocol's test builds its own valid frames; this module mangles them (truncation, bit
flips, random bytes, huge length prefixes, one byte at a time) and reports what the broker
did with each attempt: what it sent back, and whether it closed the connection in time. The
protocol tests then assert the protocol-correct error and that a real client on another
connection never noticed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import attrs
import trio

RECEIVE_SIZE = 65536


@attrs.frozen
class Outcome:
    """What one hostile connection got back."""

    received: bytes
    closed: bool  # the broker closed (or reset) the connection before the deadline


async def attack(
    port: int,
    chunks: Sequence[bytes],
    *,
    pause: float = 0.0,
    timeout: float = 5.0,
    host: str = "127.0.0.1",
    half_close: bool = False,
) -> Outcome:
    """Send `chunks` (sleeping `pause` between them), then read until the broker closes.

    With `half_close`, the attacker then shuts its sending side (a client that sent its
    garbage and stopped): the broker must still answer what it read and close, without
    waiting for a timeout.
    """
    received = bytearray()
    stream = await trio.open_tcp_stream(host, port)
    closed = False
    try:
        with trio.move_on_after(timeout):
            try:
                for chunk in chunks:
                    await stream.send_all(chunk)
                    if pause:
                        await trio.sleep(pause)
                if half_close:
                    await stream.send_eof()  # type: ignore[attr-defined]  # a SocketStream
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the broker closed on us mid-send: read what it said before that
            try:
                while data := await stream.receive_some(RECEIVE_SIZE):
                    received += data
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            closed = True
    finally:
        await trio.aclose_forcefully(stream)
    return Outcome(bytes(received), closed)


def mangle(rng: random.Random, frame: bytes) -> bytes:
    """One damaged variant of a valid frame."""
    choice = rng.randrange(5)
    if choice == 0 and len(frame) > 1:  # truncated
        return frame[: rng.randrange(1, len(frame))]
    if choice == 1 and frame:  # bit flips
        data = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    if choice == 2:  # random bytes
        return rng.randbytes(rng.randint(1, 256))
    if choice == 3 and frame:  # a byte run spliced in
        at = rng.randrange(len(frame))
        return frame[:at] + bytes([rng.randrange(256)]) * rng.randint(1, 64) + frame[at:]
    return frame + rng.randbytes(rng.randint(1, 32))  # trailing garbage


def hostile_inputs(rng: random.Random, frames: Sequence[bytes], count: int) -> Iterator[bytes]:
    """`count` byte strings: valid frames followed by a mangled one, or pure garbage."""
    for _ in range(count):
        prefix = b"".join(rng.choice(frames) for _ in range(rng.randint(0, 2)))
        yield prefix + mangle(rng, rng.choice(frames))


def dribble(data: bytes) -> list[bytes]:
    """`data` one byte per chunk (for slowloris-style sends with `attack(..., pause=...)`)."""
    return [data[i : i + 1] for i in range(len(data))]
