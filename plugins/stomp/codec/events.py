"""What the STOMP codec reads and writes: frames and heart-beats, core/codec_kit.py `Event`s.

A frame keeps its headers as an ordered tuple of pairs, repeats included, because STOMP 1.2
says the first of repeated entries wins and a relay must not reorder what it forwards; `get`
applies that rule. Header names and values are the decoded (unescaped) text; the codec alone
deals with the wire escapes of each version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, overload

import attrs

from herald.core.codec_kit import Event

VERSIONS: Final = ("1.0", "1.1", "1.2")
"""The protocol versions the codec speaks, oldest first."""

CLIENT_COMMANDS: Final = frozenset(
    {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    }
)
SERVER_COMMANDS: Final = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
UNESCAPED_COMMANDS: Final = frozenset({"CONNECT", "STOMP", "CONNECTED"})
"""Frames whose headers are never escaped: they are written before the version is agreed."""


Headers = tuple[tuple[str, str], ...]


def _as_pairs(headers: Iterable[tuple[str, str]] | Mapping[str, str]) -> Headers:
    """Headers as the tuple of pairs a Frame keeps (decoded frames pass through untouched)."""
    if type(headers) is tuple:
        return headers
    if isinstance(headers, Mapping):
        return tuple(headers.items())
    return tuple((name, value) for name, value in headers)


@attrs.frozen
class Frame(Event):
    """One STOMP frame; `headers` are (name, value) pairs in wire order, repeats kept."""

    command: str
    headers: Headers = attrs.field(default=(), converter=_as_pairs)
    body: bytes = b""

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...
    def get(self, name: str, default: str | None = None) -> str | None:
        """The value of the first `name` header (STOMP 1.2: the first repeated entry wins)."""
        for key, value in self.headers:
            if key == name:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        """Every value of `name`, in wire order."""
        return [value for key, value in self.headers if key == name]


_new = object.__new__
_set_command = Frame.__dict__["command"].__set__
_set_headers = Frame.__dict__["headers"].__set__
_set_body = Frame.__dict__["body"].__set__


def make_frame(command: str, headers: Headers, body: bytes) -> Frame:
    """`Frame(command, headers, body)` for headers already a tuple of pairs (the reader's),
    set through the slots: half the cost of the frozen class's `__init__`, once per frame."""
    frame = _new(Frame)
    _set_command(frame, command)
    _set_headers(frame, headers)
    _set_body(frame, body)
    return frame


@attrs.frozen
class Heartbeat(Event):
    """One end-of-line (LF or CR LF) received between frames: a heart-beat or frame padding."""


HEARTBEAT: Final = Heartbeat()


def error_frame(message: str, details: bytes = b"", receipt_id: str | None = None) -> Frame:
    """An ERROR frame: the short `message` header, and `details` as a plain-text body.

    `receipt_id` names the frame that caused the error when it asked for a receipt (1.2).
    """
    headers = [("message", message)]
    if receipt_id is not None:
        headers.append(("receipt-id", receipt_id))
    if details:
        headers.append(("content-type", "text/plain"))
    return Frame("ERROR", tuple(headers), details)
