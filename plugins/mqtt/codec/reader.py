"""The inbound buffer: cuts a byte stream into packets, refusing an oversized one from its header.

The limit is checked as soon as the fixed header (at most 5 bytes) is in: a header announcing
more than `max_packet_size` raises 0x95 before any of its payload is waited for or kept
(STYLE rule 5). The buffer is a bytearray consumed from the front; bytearray deletes a prefix
in O(1), so feeding a packet byte by byte stays linear.
"""

from __future__ import annotations

from typing import Final

from herald.core.codec_kit import NEED_DATA, LocalProtocolError, RemoteProtocolError
from herald.plugins.mqtt.codec.decode import decode_body
from herald.plugins.mqtt.codec.packets import Packet
from herald.plugins.mqtt.codec.reasons import ReasonCode
from herald.plugins.mqtt.codec.wire import malformed

MAX_PACKET_SIZE: Final = 268_435_460
"""The largest packet the wire can express: 1 type byte, 4 length bytes, 268,435,455 bytes."""
DEFAULT_MAX_PACKET_SIZE: Final = 1 << 24
"""herald's default inbound limit (16 MiB), well below the wire's 256 MiB."""


class PacketReader:
    """Buffered inbound bytes and the packet boundaries in them.

    `next_frame()` finds the next whole packet without decoding it, so the connection can check
    its state table against the packet type first; `next_packet(version)` also decodes it.
    """

    __slots__ = ("_pos", "buffer", "max_packet_size")

    def __init__(self, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE) -> None:
        if not 2 <= max_packet_size <= MAX_PACKET_SIZE:
            raise ValueError(f"max_packet_size must be in 2..{MAX_PACKET_SIZE}")
        self.buffer = bytearray()
        """The bytes received; `next_frame`'s offsets index it. Read it, never change it."""
        self._pos = 0
        self.max_packet_size = max_packet_size

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed."""
        return len(self.buffer) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos:
            del self.buffer[: self._pos]
            self._pos = 0
        self.buffer += data

    def next_frame(self) -> tuple[int, int, int] | None:
        """(first byte, body start, body end) of the next whole packet, or None if it is not
        all here yet; raises LocalProtocolError for a bad length or an oversized packet."""
        buf = self.buffer
        pos = self._pos
        have = len(buf)
        if have - pos < 2:
            return None
        length = buf[pos + 1]
        start = pos + 2
        if length >= 0x80:
            length &= 0x7F
            shift = 7
            while True:
                if start == pos + 5:
                    raise malformed("remaining length longer than 4 bytes")
                if start >= have:
                    return None
                byte = buf[start]
                start += 1
                if not byte:  # a final group of zero: the value fits in fewer bytes
                    raise malformed("remaining length not in its shortest form")
                length |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
        if start - pos + length > self.max_packet_size:
            raise LocalProtocolError(
                f"packet of {start - pos + length} bytes exceeds the limit of "
                f"{self.max_packet_size}",
                ReasonCode.PACKET_TOO_LARGE,
            )
        end = start + length
        if end > have:
            return None
        return buf[pos], start, end

    def consume(self, end: int) -> None:
        """Drop the bytes before `end` (a frame's body end)."""
        if end == len(self.buffer):
            self.buffer.clear()
            self._pos = 0
        else:
            self._pos = end

    def next_packet(self, version: int | None) -> Packet | type[NEED_DATA]:
        """Decode the next packet at protocol level `version`, without any connection rules;
        raises RemoteProtocolError for anything the peer got wrong."""
        try:
            frame = self.next_frame()
            if frame is None:
                return NEED_DATA
            first, start, end = frame
            packet = decode_body(first, self.buffer, start, end, version)
            self.consume(end)
            return packet
        except LocalProtocolError as exc:
            raise RemoteProtocolError(exc.text, exc.code) from None
