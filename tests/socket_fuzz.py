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
    handshake: bytes | None = None,
) -> Outcome:
    """Send `chunks` (sleeping `pause` between them), then read until the broker closes.

    With `half_close`, the attacker then shuts its sending side (a client that sent its
    garbage and stopped): the broker must still answer what it read and close, without
    waiting for a timeout.

    With `handshake`, the attacker reads after the first chunk until the broker's answer
    holds those bytes, and only then sends the rest (a WebSocket client waits for the
    101 response before it sends frames).
    """
    received = bytearray()
    stream = await trio.open_tcp_stream(host, port)
    closed = False
    try:
        with trio.move_on_after(timeout):
            try:
                for number, chunk in enumerate(chunks):
                    await stream.send_all(chunk)
                    if number == 0 and handshake is not None:
                        while handshake not in received:
                            data = await stream.receive_some(RECEIVE_SIZE)
                            if not data:
                                break
                            received += data
                    if pause:
                        await trio.sleep(pause)
                if half_close:
                    await stream.send_eof()
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


# -- WebSocket (RFC 6455), for protocols that also listen behind an HTTP upgrade ------------


def websocket_upgrade(path: str, subprotocols: Sequence[str] = ()) -> bytes:
    """A client's opening handshake for `path`."""
    lines = [
        f"GET {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    if subprotocols:
        lines.append("Sec-WebSocket-Protocol: " + ", ".join(subprotocols))
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def websocket_frame(
    payload: bytes, opcode: int = 2, *, fin: bool = True, mask: bool = True
) -> bytes:
    """One WebSocket frame (binary by default), masked as a client must send it."""
    head = bytes([(0x80 if fin else 0) | opcode])
    size = len(payload)
    bit = 0x80 if mask else 0
    if size < 126:
        head += bytes([bit | size])
    elif size < 65536:
        head += bytes([bit | 126]) + size.to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + size.to_bytes(8, "big")
    if not mask:
        return head + payload
    key = b"\x37\xfa\x21\x3d"
    return head + key + bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))


def websocket_messages(received: bytes) -> tuple[bytes, list[tuple[int, bytes]]]:
    """What a server sent: its HTTP response head, then each complete unmasked frame as
    (opcode, payload), continuation frames joined to their message."""
    head, _, data = received.partition(b"\r\n\r\n")
    messages: list[tuple[int, bytes]] = []
    partial: tuple[int, bytes] | None = None
    while len(data) >= 2:
        fin, opcode, size, at = data[0] & 0x80, data[0] & 0x0F, data[1] & 0x7F, 2
        if size >= 126:
            width = 2 if size == 126 else 8
            size, at = int.from_bytes(data[2 : 2 + width], "big"), 2 + width
        if len(data) < at + size:
            break
        payload, data = data[at : at + size], data[at + size :]
        if opcode == 0 and partial is not None:
            partial = (partial[0], partial[1] + payload)
        else:
            partial = (opcode, payload)
        if fin:
            messages.append(partial)
            partial = None
    return head, messages
