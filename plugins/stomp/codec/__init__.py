"""The STOMP 1.0 / 1.1 / 1.2 wire codec, server side, sans-IO.

No sockets, Trio or kernel here: `StompConnection` turns received bytes into `Frame` and
`Heartbeat` events and queued frames into bytes (h11/h2's shape). `encode_frame` and
`FrameReader` are the pure halves it is built from; `header_line` is one header as
`encode_frame` writes it, for callers that build frames from cached pieces (`send_encoded`).
`NEED_DATA`, `ConnectionClosed` (the client ended its stream between two frames), `Event` and
the error types it raises are core/codec_kit.py's, the same in every codec.
"""

from __future__ import annotations

from herald.core.codec_kit import NEED_DATA, ConnectionClosed, Event
from herald.plugins.stomp.codec.connection import StompConnection
from herald.plugins.stomp.codec.escaping import escape, unescape
from herald.plugins.stomp.codec.events import (
    CLIENT_COMMANDS,
    HEARTBEAT,
    SERVER_COMMANDS,
    VERSIONS,
    Frame,
    Heartbeat,
    error_frame,
)
from herald.plugins.stomp.codec.limits import LimitExceeded, StompLimits
from herald.plugins.stomp.codec.reader import FrameReader
from herald.plugins.stomp.codec.state import State
from herald.plugins.stomp.codec.writer import encode_frame, header_line

__all__ = [
    "CLIENT_COMMANDS",
    "HEARTBEAT",
    "NEED_DATA",
    "SERVER_COMMANDS",
    "VERSIONS",
    "ConnectionClosed",
    "Event",
    "Frame",
    "FrameReader",
    "Heartbeat",
    "LimitExceeded",
    "State",
    "StompConnection",
    "StompLimits",
    "encode_frame",
    "error_frame",
    "escape",
    "header_line",
    "unescape",
]
