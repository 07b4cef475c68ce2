"""AMQP 0-9-1 wire constants: frame types, sizes and reply codes (spec section 4.2 and 1.4)."""

from __future__ import annotations

import enum

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
"""What a 0-9-1 client sends first, and what a server answers to a header it can't speak."""

FRAME_END = 0xCE
FRAME_HEADER_SIZE = 7  # type octet, channel short, payload size long
FRAME_OVERHEAD = 8  # header + frame-end octet: a frame of payload n is n + 8 bytes

FRAME_MIN_SIZE = 4096
"""The smallest frame_max a peer may negotiate, and the limit 0-9-1 sets before tune-ok."""

DEFAULT_INITIAL_FRAME_MAX = 8192
"""The limit before connection.tune-ok. RabbitMQ's `initial_frame_max`: 4096 until 4.0, 8192
since 4.1 so that large JWT tokens fit in connection.start-ok (rabbitmq-server#13541)."""

FRAME_SIZE_FUDGE = FRAME_OVERHEAD
"""RabbitMQ accepts payloads up to frame_max instead of frame_max - 8, because clients that
are off by the 8 bytes of framing are common (rabbit_reader `FRAME_SIZE_FUDGE`)."""


class FrameType(enum.IntEnum):
    METHOD = 1
    HEADER = 2
    BODY = 3
    HEARTBEAT = 8


class ReplyCode(enum.IntEnum):
    """Reply codes used by connection.close / channel.close (spec 1.4.2)."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


def reply_text(code: int, text: str) -> str:
    """RabbitMQ's form, "NOT_FOUND - no queue 'q' in vhost '/'", cut to a shortstr. Here, not
    in the session, because the codec's `error_reply` words its connection.close the same."""
    try:
        name = ReplyCode(code).name
    except ValueError:
        name = "ERROR"
    full = f"{name} - {text}".encode()
    return full[:255].decode(errors="ignore")
