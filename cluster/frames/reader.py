"""The inbound buffer: cuts a byte stream into frames, refusing an oversized one from its prefix.

The length is checked as soon as its four bytes are in, and the type as soon as its byte is:
a frame announcing more than `MAX_FRAME` is refused before any of its body is waited for or
kept (STYLE rule 5). A chunk that arrives with nothing buffered is kept as received, so the
frames in it are sliced from it directly; only a frame split across chunks is gathered in a
bytearray first (consumed from the front, which bytearray does in O(1)).
"""

from __future__ import annotations

from herald.cluster.frames.events import Frame
from herald.cluster.frames.wire import CLASS_BY_TYPE, LENGTH, MAX_FRAME, decode_body, malformed
from herald.core.codec_kit import NEED_DATA, LocalProtocolError, RemoteProtocolError


class FrameReader:
    """Buffered inbound bytes and the frame boundaries in them.

    `header()` gives the next frame's class and end once its first five bytes are in, so the
    connection can check its table before the body arrives; `decode(cls, end)` then decodes a
    whole one. `next_frame()` does both, with no table, for tests and tools.
    """

    __slots__ = ("buffer", "pos")

    def __init__(self) -> None:
        self.buffer: bytes | bytearray = b""
        """The bytes received; offsets index it from `pos`. Read it, never change it."""
        self.pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed."""
        return len(self.buffer) - self.pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        buffer, pos = self.buffer, self.pos
        if pos == len(buffer):  # nothing pending: keep the chunk itself (bytes are immutable)
            self.buffer = data if type(data) is bytes else bytes(data)
        elif isinstance(buffer, bytearray):
            if pos:
                del buffer[:pos]
            buffer += data
        else:  # a frame goes on in this chunk: gather it from its start
            with memoryview(buffer) as view:
                gathered = bytearray(view[pos:])
            gathered += data
            self.buffer = gathered
        self.pos = 0

    def header(self) -> tuple[type[Frame], int] | None:
        """(class, end offset in `buffer`) of the next frame once its length and type are in,
        else None; raises LocalProtocolError for a length out of range or an unknown type."""
        buffer, pos = self.buffer, self.pos
        have = len(buffer) - pos
        if have < 4:
            return None
        length = LENGTH.unpack_from(buffer, pos)[0]
        if length > MAX_FRAME:
            raise LocalProtocolError(
                f"a frame of {length} bytes is longer than the largest frame ({MAX_FRAME})"
            )
        if not length:
            raise malformed("a frame of length 0 (it has no type)")
        if have < 5:
            return None
        cls = CLASS_BY_TYPE[buffer[pos + 4]]
        if cls is None:
            raise malformed(f"unknown frame type {buffer[pos + 4]:#04x}")
        return cls, pos + 4 + length

    def complete(self, end: int) -> bool:
        """Whether the frame ending at `end` (from `header`) is all here."""
        return end <= len(self.buffer)

    def decode(self, cls: type[Frame], end: int) -> Frame:
        """Decode the whole frame `header` found and consume it; raises LocalProtocolError."""
        frame = decode_body(cls, self.buffer, self.pos + 5, end)
        if end == len(self.buffer):
            self.buffer = b""  # drop the chunk: the next one is kept as received
            self.pos = 0
        else:
            self.pos = end
        return frame

    def next_frame(self) -> Frame | type[NEED_DATA]:
        """The next whole frame with no connection rules, or NEED_DATA; raises
        RemoteProtocolError for anything the peer got wrong."""
        try:
            head = self.header()
            if head is None or not self.complete(head[1]):
                return NEED_DATA
            return self.decode(*head)
        except LocalProtocolError as exc:
            raise RemoteProtocolError(exc.text, exc.code) from None
