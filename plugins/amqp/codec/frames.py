"""Frames on the wire: the receive buffer that cuts the stream into frames, and frame writers.

A frame is `type octet, channel short, size long, payload, 0xCE` (spec 4.2.3). The reader
checks `size` against the frame limit as soon as the 7-byte frame header is in, before any of
the payload is waited for, so a peer cannot make the buffer grow past one frame plus what the
adapter read in one go. Payloads are not copied out: `next_frame` hands back offsets into the
buffer, and decoders read them with `struct.unpack_from`.

The buffer is a bytearray with a read offset; consumed bytes are dropped only when the reader
runs dry (`compact`), so a chunk holding many frames costs one append and one delete. Both
are amortised O(n) (CPython deletes a bytearray's prefix by moving its start), so feeding a
frame byte by byte stays linear (h11's receive buffer rule).
"""

from __future__ import annotations

import struct

from herald.core.errors import LocalProtocolError
from herald.plugins.amqp.codec.constants import (
    FRAME_END,
    FRAME_HEADER_SIZE,
    PROTOCOL_HEADER,
    FrameType,
    ReplyCode,
)
from herald.plugins.amqp.codec.methods import Method
from herald.plugins.amqp.codec.properties import EMPTY_RAW_PROPERTIES, HEADER_PREFIX

FRAME_HEADER = struct.Struct(">BHI")
HEARTBEAT_FRAME = FRAME_HEADER.pack(FrameType.HEARTBEAT, 0, 0) + bytes((FRAME_END,))
_END = bytes((FRAME_END,))
_METHOD, _HEADER, _BODY = int(FrameType.METHOD), int(FrameType.HEADER), int(FrameType.BODY)
_TAG = struct.Struct(">QB")  # basic.deliver's delivery-tag and redelivered
_TO_HEADER = struct.Struct(">BBHIHHQ")  # frame-end, header frame header, class, weight, size
_TO_BODY = struct.Struct(">BBHI")  # frame-end, body frame header
_BASIC = 60
_HEADER_PAYLOAD_MIN = HEADER_PREFIX.size + 2  # class-id, weight, body-size, property flags
_HEADER_FRAME_MIN = FRAME_HEADER_SIZE + _HEADER_PAYLOAD_MIN + 1


class FrameReader:
    """A receive buffer that yields whole frames as (type, channel, start, end) offsets.

    `max_payload` is the largest payload accepted (0 = no limit); a larger frame is
    FRAME_ERROR 501 before its payload is buffered.
    """

    __slots__ = ("buf", "max_payload", "pos")

    def __init__(self, max_payload: int) -> None:
        self.buf = bytearray()
        self.pos = 0
        self.max_payload = max_payload

    def feed(self, data: bytes) -> None:
        self.buf += data

    def compact(self) -> None:
        """Drop consumed bytes; called when the reader has no whole frame left."""
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed."""
        return len(self.buf) - self.pos

    def read_protocol_header(self) -> bytes | None:
        """The 8-byte protocol header, None if incomplete. Fails early on bytes that can't
        start one, so a client speaking another protocol is refused without waiting."""
        buf = self.buf
        have = bytes(buf[self.pos : self.pos + 8])
        if have[:4] != PROTOCOL_HEADER[: min(4, len(have))]:
            return have
        if len(have) < 8:
            return None
        self.pos += 8
        return have

    def next_frame(self) -> tuple[int, int, int, int] | None:
        """The next whole frame as (type, channel, payload start, payload end), or None.

        Raises LocalProtocolError 501 for an oversized frame or a bad frame-end octet.
        """
        buf = self.buf
        pos = self.pos
        if len(buf) - pos < FRAME_HEADER_SIZE:
            return None
        frame_type, channel, size = FRAME_HEADER.unpack_from(buf, pos)
        if self.max_payload and size > self.max_payload:
            raise LocalProtocolError(
                f"frame of {size} bytes exceeds frame_max {self.max_payload}",
                ReplyCode.FRAME_ERROR,
            )
        end = pos + FRAME_HEADER_SIZE + size
        if len(buf) <= end:
            return None
        if buf[end] != FRAME_END:
            raise LocalProtocolError(
                f"frame-end octet is 0x{buf[end]:02x}, not 0xce", ReplyCode.FRAME_ERROR
            )
        self.pos = end + 1
        return frame_type, channel, pos + FRAME_HEADER_SIZE, end

    def next_content(
        self, channel: int, class_id: int, max_body: int
    ) -> tuple[int, int, int, int] | None:
        """A publish's header and single body frame when both are buffered and unremarkable.

        Returns (properties start, properties end, body start, body end) and consumes both
        frames; returns None, consuming nothing, for anything else (partial frames, another
        frame type or channel, a bad class or weight, a body over `max_body` or split across
        frames, a bad frame-end octet), which the frame-by-frame path then handles and
        reports. This is the common case of a small publish: one call instead of two frames'
        worth of state-machine steps.
        """
        buf = self.buf
        pos = self.pos
        have = len(buf)
        if have - pos < _HEADER_FRAME_MIN:
            return None
        frame_type, frame_channel, size = FRAME_HEADER.unpack_from(buf, pos)
        limit = self.max_payload
        if frame_type != _HEADER or frame_channel != channel or size < _HEADER_PAYLOAD_MIN:
            return None
        header_end = pos + FRAME_HEADER_SIZE + size
        if (limit and size > limit) or have <= header_end or buf[header_end] != FRAME_END:
            return None
        klass, weight, body_size = HEADER_PREFIX.unpack_from(buf, pos + FRAME_HEADER_SIZE)
        if klass != class_id or weight or body_size > max_body:
            return None
        props_start = pos + FRAME_HEADER_SIZE + HEADER_PREFIX.size
        if not body_size:
            self.pos = header_end + 1
            return props_start, header_end, header_end, header_end
        body_pos = header_end + 1
        if have - body_pos < FRAME_HEADER_SIZE:
            return None
        frame_type, frame_channel, size = FRAME_HEADER.unpack_from(buf, body_pos)
        body_end = body_pos + FRAME_HEADER_SIZE + size
        if (
            frame_type != _BODY
            or frame_channel != channel
            or size != body_size
            or (limit and size > limit)
            or have <= body_end
            or buf[body_end] != FRAME_END
        ):
            return None
        self.pos = body_end + 1
        return props_start, header_end, body_pos + FRAME_HEADER_SIZE, body_end


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    """One whole frame around `payload`."""
    return FRAME_HEADER.pack(frame_type, channel, len(payload)) + payload + _END


def deliver_frames(
    channel: int,
    prefix: bytes,
    delivery_tag: int,
    redelivered: bool,
    tail: bytes,
    raw_properties: bytes,
    body: bytes,
) -> bytes:
    """basic.deliver's frames in one bytes, from its payload's cached parts: `prefix` (class
    and method ids, consumer tag) and `tail` (exchange, routing key). The body fits one frame.
    """
    raw = raw_properties or EMPTY_RAW_PROPERTIES
    size = len(body)
    return b"".join(
        (
            FRAME_HEADER.pack(_METHOD, channel, len(prefix) + len(tail) + _TAG.size),
            prefix,
            _TAG.pack(delivery_tag, 1 if redelivered else 0),
            tail,
            _TO_HEADER.pack(FRAME_END, _HEADER, channel, len(raw) + 12, _BASIC, 0, size),
            raw,
            _TO_BODY.pack(FRAME_END, _BODY, channel, size) if size else _END,
            body,
            _END if size else b"",
        )
    )


def method_frame(channel: int, method: Method) -> bytes:
    return frame(_METHOD, channel, method.encode())


def content_frames(
    parts: list[bytes],
    channel: int,
    method: Method,
    raw_properties: bytes,
    body: bytes,
    max_body_frame: int,
) -> None:
    """Append the method, header and body frames of one content to `parts`.

    Bodies are cut into frames of at most `max_body_frame` bytes (frame_max - 8; 0 = one
    frame); an empty body has no body frame (spec 4.2.6.2).
    """
    payload = method.encode()
    size = len(body)
    header = HEADER_PREFIX.pack(method.CLASS_ID, 0, size) + (raw_properties or EMPTY_RAW_PROPERTIES)
    parts.append(
        b"".join(
            (
                FRAME_HEADER.pack(_METHOD, channel, len(payload)),
                payload,
                _END,
                FRAME_HEADER.pack(_HEADER, channel, len(header)),
                header,
                _END,
            )
        )
    )
    if not size:
        return
    if not max_body_frame or size <= max_body_frame:
        parts.append(FRAME_HEADER.pack(_BODY, channel, size))
        parts.append(body)
        parts.append(_END)
        return
    view = memoryview(body)
    for start in range(0, size, max_body_frame):
        chunk = view[start : start + max_body_frame]
        parts.append(FRAME_HEADER.pack(_BODY, channel, len(chunk)))
        parts.append(bytes(chunk))
        parts.append(_END)
