"""The STOMP frame reader: buffered bytes in, frames and heart-beats out, limits enforced.

Parsing is lazy (`next_event` parses, `feed` only appends), so a session that sets the agreed
version after answering CONNECT has every later frame read under that version, even frames the
client pipelined behind its CONNECT. The buffer is one bytearray; the header end, the NUL and
the line count are found with C-level `find`/`count` calls that resume where the previous call
stopped, so a frame dribbled in byte by byte still costs O(n). Headers are decoded with one
`decode` and `split` per frame. Every limit is checked while the frame is still incomplete.

Line endings: STOMP 1.2 ends lines with LF or CR LF. The reader accepts CR LF in 1.0 as well,
because the CONNECT frame of a 1.2 client is read before the version is agreed; 1.0 also trims
blanks around header names and values, as RabbitMQ and ActiveMQ do for the padding old clients
send. STOMP 1.1 is LF-only: a CR there is header data, and values are never trimmed in 1.1/1.2.
A colon inside a header value is accepted (split at the first colon), since CONNECT values are
never escaped and 1.0 values never are. Errors are raised as LocalProtocolError (a broken
limit as `LimitExceeded`, naming it); the connection turns them into RemoteProtocolError.
A limit error says the size when the frame declared it (content-length), else only the limit:
the verdict, text included, never depends on how the bytes were split.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from herald.core.codec_kit import NEED_DATA, LocalProtocolError
from herald.plugins.stomp.codec.escaping import unescape
from herald.plugins.stomp.codec.events import (
    CLIENT_COMMANDS,
    HEARTBEAT,
    SERVER_COMMANDS,
    UNESCAPED_COMMANDS,
    Frame,
    Heartbeat,
    make_frame,
)
from herald.plugins.stomp.codec.limits import LimitExceeded, StompLimits

_LF: Final = 10
_CR: Final = 13
_ALL_COMMANDS: Final = CLIENT_COMMANDS | SERVER_COMMANDS
_MAX_COMMAND_LINE: Final = max(map(len, _ALL_COMMANDS)) + 1  # the longest command, then a CR
_COMMAND_PREFIXES: Final = frozenset(
    line[:end]
    for command in _ALL_COMMANDS
    for line in (command, command + "\r")
    for end in range(1, len(line) + 1)
)
"""Every start of a command line, so garbage is refused at its first impossible byte."""
_FIRST_WINDOW: Final = 512  # bytes searched for the end of the headers before widening
_CACHED_HEADS: Final = (b"SEND\n", b"SEND\r\n")
"""Frames whose parsed heads are kept by their bytes: a publisher's SENDs mostly repeat one
head, while ACKs and NACKs each name another message."""
_HEAD_CACHE_SIZE: Final = 16
_CACHED_HEAD_MAX: Final = 1024  # bytes: longer heads are parsed every time, never kept

_Head = tuple[str, tuple[tuple[str, str], ...], int, int]
"""A frame whose command and headers are parsed and whose body is still arriving: (command,
headers, body start, content-length or -1 when the body ends at the first NUL). A plain tuple:
one is made per frame, and a NamedTuple costs several times as much."""


_COMMAND_TABLES: dict[frozenset[str], dict[str, str]] = {}


def _command_table(commands: Iterable[str]) -> dict[str, str]:
    """Each command to itself (a read line maps to the interned name), one table per set of
    commands: every connection's reader shares it, since each would cost ~460 bytes."""
    key = frozenset(commands)
    table = _COMMAND_TABLES.get(key)
    if table is None:
        table = _COMMAND_TABLES[key] = {command: command for command in key}
    return table


class FrameReader:
    """Frames and heart-beats from a byte stream, for the side that receives `commands`."""

    __slots__ = (
        "_buffer",
        "_commands",
        "_counted",
        "_head",
        "_heads",
        "_heads_version",
        "_last_head",
        "_last_key",
        "_limits",
        "_line_start",
        "_lines",
        "_peer",
        "_scan",
    )

    def __init__(
        self,
        limits: StompLimits,
        commands: Iterable[str] = CLIENT_COMMANDS,
        peer: str = "client",
    ) -> None:
        self._limits = limits
        self._commands = _command_table(commands)
        self._peer = peer
        self._buffer = bytearray()
        self._head: _Head | None = None
        self._scan = 0  # the header-end or NUL search resumes here
        self._counted = 0  # the bytes of an incomplete head before this offset were checked
        self._lines = 0  # header lines counted before `_counted`
        self._line_start = 0  # where the header line arriving at `_counted` starts
        self._heads: dict[bytes, _Head] = {}  # parsed SEND heads by their bytes, under...
        self._heads_version = ""  # ...this version
        self._last_key = b""  # the bytes of the last SEND head read, and the head
        self._last_head: _Head | None = None

    def feed(self, data: bytes) -> None:
        """Append received bytes; nothing is parsed until `next_event`."""
        self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as events."""
        return len(self._buffer)

    def next_event(self, version: str) -> Frame | Heartbeat | type[NEED_DATA]:
        """The next frame or heart-beat, read under `version`, or NEED_DATA."""
        head = self._head
        if head is None:
            buffer = self._buffer
            if not buffer:
                return NEED_DATA
            first = buffer[0]
            if first == _LF:
                del buffer[:1]
                return HEARTBEAT
            if first == _CR:
                if len(buffer) < 2:
                    return NEED_DATA
                if buffer[1] != _LF:
                    raise LocalProtocolError("a CR between frames must be followed by LF")
                del buffer[:2]
                return HEARTBEAT
            head = self._read_head(version)
            if head is None:
                return NEED_DATA
            self._head = head
            self._scan = head[2]
            if self._counted:  # the head arrived in pieces
                self._counted = self._lines = self._line_start = 0
        return self._read_body(head)

    # -- the command line and headers ------------------------------------------------------

    def _read_head(self, version: str) -> _Head | None:
        buffer = self._buffer
        last = self._last_key
        if last and buffer.startswith(last) and version == self._heads_version:
            # The same bytes up to the same first empty line: the same head, found by one
            # compare (a publisher's SENDs mostly repeat their head).
            return self._last_head
        size = len(buffer)
        crlf = version != "1.1"
        # The headers end at the first empty line: LF LF, or LF CR LF where CR LF is an EOL.
        # The search runs in windows that grow geometrically from where the last one stopped,
        # so it never scans on into later frames: the work stays linear in the frame's own
        # header size, whatever mix of line endings a peer sends.
        low = self._scan
        i = buffer.find(b"\n\n", low, low + _FIRST_WINDOW)
        if i >= 0 and (not crlf or buffer.find(b"\r", low, i) < 0):
            # The usual head: LF LF in the first window and no CR before it (so no LF CR LF).
            header_end, body_start = i, i + 2
        else:
            window = _FIRST_WINDOW
            j = -1
            while True:
                high = low + window
                i = buffer.find(b"\n\n", low, high)
                if i >= 0:
                    break
                if crlf:
                    j = buffer.find(b"\n\r\n", low, high)
                    if j >= 0:
                        break
                if high >= size:
                    self._check_incomplete_head(size, crlf)
                    self._scan = max(size - 2, 0)
                    return None
                low = high - 2
                window *= 2
            if i >= 0 and crlf:  # with CR LF lines, an LF CR LF before this LF LF ends them
                j = buffer.find(b"\n\r\n", low, i + 2)
            header_end, body_start = (j, j + 3) if j >= 0 else (i, i + 2)
        if body_start > _CACHED_HEAD_MAX or not buffer.startswith(_CACHED_HEADS):
            return self._parse_head(header_end, body_start, version, crlf)
        # The head is a function of its bytes and the version (the limits are the reader's).
        heads = self._heads
        if version != self._heads_version:
            heads.clear()
            self._heads_version = version
        key = bytes(buffer[:body_start])
        head = heads.get(key)
        if head is None:
            head = self._parse_head(header_end, body_start, version, crlf)
            if len(heads) >= _HEAD_CACHE_SIZE:
                heads.clear()
            heads[key] = head
        self._last_key, self._last_head = key, head
        return head

    def _parse_head(self, header_end: int, body_start: int, version: str, crlf: bool) -> _Head:
        try:
            text = self._buffer[: header_end + 1].decode("utf-8")
        except UnicodeDecodeError:
            text = self._decode_head(header_end, crlf)  # raises the protocol error
        if crlf and "\r" in text:
            text = text.replace("\r\n", "\n")
        lines = text.split("\n")
        lines.pop()  # the empty string after the last LF
        command = self._commands.get(lines[0])
        if command is None:
            command = self._command(lines[0], False)  # raises the protocol error
        del lines[0]
        limits = self._limits
        if (
            len(lines) > limits.max_headers
            or header_end >= limits.max_header_line
            or body_start > limits.max_frame_size
            or "\x00" in text
            or (version == "1.2" and "\r" in text)
        ):
            self._check_head(text, version, len(lines), body_start)

        headers: list[tuple[str, str]] = []
        append = headers.append
        if version == "1.0":
            for line in lines:
                name, colon, value = line.partition(":")
                name = name.strip(" \t")
                if not colon or not name:
                    raise _malformed(line)
                append((name, value.strip(" \t")))
        else:
            for line in lines:
                name, colon, value = line.partition(":")
                if not colon or not name:
                    raise _malformed(line)
                append((name, value))
            if "\\" in text and command not in UNESCAPED_COMMANDS:
                headers = [(unescape(name, version), unescape(v, version)) for name, v in headers]
        length = -1
        if "content-length" in text:
            for name, value in headers:
                if name == "content-length":
                    length = self._content_length(value, body_start)
                    break
        return (command, tuple(headers), body_start, length)

    def _decode_head(self, header_end: int, crlf: bool) -> str:
        """The command line and header lines (each with its LF) as text."""
        buffer = self._buffer
        try:
            return buffer[: header_end + 1].decode("utf-8")
        except UnicodeDecodeError as exc:
            self._command(buffer[: buffer.find(b"\n")].decode("latin-1"), crlf)  # that first
            raise LocalProtocolError(
                f"frame headers are not valid UTF-8 (byte {exc.start} of the frame)"
            ) from None

    def _command(self, line: str, crlf: bool) -> str:
        """The command `line` names; LocalProtocolError if it is not one the peer may send."""
        if crlf and line.endswith("\r"):
            line = line[:-1]
        command = self._commands.get(line)
        if command is None:
            if line in _ALL_COMMANDS:
                raise LocalProtocolError(f"a {self._peer} may not send a {line} frame")
            raise LocalProtocolError(f"unknown command {line!r}")
        return command

    def _check_head(self, text: str, version: str, count: int, body_start: int) -> None:
        """The octet rules and limits a complete head must meet (the slow path)."""
        limits = self._limits
        if "\x00" in text:
            raise _nul_in_headers()
        if version == "1.2" and "\r" in text:
            raise LocalProtocolError("a bare CR in a STOMP 1.2 header; send it escaped as \\r")
        if count > limits.max_headers:
            raise self._too_many_headers()
        if any(len(line) > limits.max_header_line for line in text.encode("utf-8").split(b"\n")):
            raise self._line_too_long()
        if body_start > limits.max_frame_size:
            raise self._frame_too_large()

    def _check_incomplete_head(self, size: int, crlf: bool) -> None:
        """Fail as soon as the part of a head received so far breaks a rule or a limit."""
        limits = self._limits
        buffer = self._buffer
        nl = buffer.find(b"\n", 0, _MAX_COMMAND_LINE + 1)
        if nl < 0:
            line = bytes(buffer[:_MAX_COMMAND_LINE]).decode("latin-1")
            if size > _MAX_COMMAND_LINE or line not in _COMMAND_PREFIXES:  # TLS, HTTP...
                raise LocalProtocolError(f"unknown command {line + '...'!r}")
            return
        self._command(bytes(buffer[:nl]).decode("latin-1"), crlf)
        if size > limits.max_frame_size:
            raise self._frame_too_large()
        start = max(self._counted, nl + 1)
        if buffer.find(b"\x00", start, size) >= 0:
            raise _nul_in_headers()
        lines = buffer.count(b"\n", start, size)
        self._lines += lines
        if self._lines > limits.max_headers:
            raise self._too_many_headers()
        # Every line completed since the last check, then the one still arriving, is measured
        # as the complete head will be (without the CR of a CR LF), so the verdict does not
        # depend on where the reads split the frame.
        line_start = max(self._line_start, nl + 1)
        for _ in range(lines):
            end = buffer.find(b"\n", line_start, size)
            self._check_line(line_start, end, crlf)
            line_start = end + 1
        self._check_line(line_start, size, crlf)
        self._line_start = line_start
        self._counted = size

    def _check_line(self, start: int, end: int, crlf: bool) -> None:
        length = end - start
        if crlf and length and self._buffer[end - 1] == _CR:
            length -= 1
        if length > self._limits.max_header_line:
            raise self._line_too_long()

    def _content_length(self, value: str, body_start: int) -> int:
        if not (value.isascii() and value.isdigit()):
            raise LocalProtocolError(
                f"invalid content-length {value!r}: expected a non-negative decimal integer"
            )
        limit = self._limits.max_body_size
        if len(value) > 18 or int(value) > limit:
            raise LimitExceeded(
                f"frame body of {value} bytes exceeds the limit of {limit} bytes",
                "max_body_size",
            )
        length = int(value)
        if body_start + length > self._limits.max_frame_size:
            raise self._frame_too_large(body_start + length)
        return length

    # -- the body ---------------------------------------------------------------------------

    def _read_body(self, head: _Head) -> Frame | type[NEED_DATA]:
        command, headers, start, length = head
        buffer = self._buffer
        if length >= 0:
            end = start + length
            if len(buffer) <= end:
                return NEED_DATA
            if buffer[end] != 0:
                raise LocalProtocolError(
                    f"frame body is not followed by a NUL after content-length {length} bytes"
                )
        else:
            end = buffer.find(b"\x00", self._scan)
            if end < 0:
                end = len(buffer)
                self._check_body_size(start, end)
                self._scan = end
                return NEED_DATA
            limits = self._limits
            if end - start > limits.max_body_size or end > limits.max_frame_size:
                self._check_body_size(start, end)
        body = bytes(buffer[start:end])
        del buffer[: end + 1]
        self._head = None
        self._scan = 0
        return make_frame(command, headers, body)

    def _check_body_size(self, start: int, end: int) -> None:
        """Refuse a body without content-length that reached `end` past a limit: the one its
        bytes crossed first, so the verdict is the same however they were split."""
        limit = self._limits.max_body_size
        body_end, frame_end = start + limit, self._limits.max_frame_size
        if end <= min(body_end, frame_end):
            return
        if body_end < frame_end:
            raise LimitExceeded(f"frame body exceeds the limit of {limit} bytes", "max_body_size")
        raise self._frame_too_large()

    # -- limit errors -----------------------------------------------------------------------

    def _frame_too_large(self, size: int | None = None) -> LimitExceeded:
        """`size`: the frame's, when its content-length tells it."""
        of = "" if size is None else f" of {size} bytes"
        return LimitExceeded(
            f"frame{of} exceeds the limit of {self._limits.max_frame_size} bytes",
            "max_frame_size",
        )

    def _line_too_long(self) -> LimitExceeded:
        return LimitExceeded(
            f"header line exceeds the limit of {self._limits.max_header_line} bytes",
            "max_header_line",
        )

    def _too_many_headers(self) -> LimitExceeded:
        return LimitExceeded(
            f"frame exceeds the limit of {self._limits.max_headers} header lines",
            "max_headers",
        )


def _nul_in_headers() -> LocalProtocolError:
    return LocalProtocolError(
        "a NUL in the frame headers (is the empty line before the body missing?)"
    )


def _malformed(line: str) -> LocalProtocolError:
    return LocalProtocolError(f"malformed header line {line!r}: expected name:value")
