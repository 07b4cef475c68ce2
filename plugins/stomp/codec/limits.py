"""The size limits the STOMP reader enforces on what a peer sends.

STOMP lets an implementation bound unconstrained input; the reader checks every bound while a
frame is still arriving, so a peer cannot make it buffer more than `max_frame_size` (plus one
receive) before it answers with an ERROR. The defaults follow ActiveMQ Apollo's STOMP
connector (1000 headers, 10 KiB header lines); the STOMP plugin's config maps onto this class.
"""

from __future__ import annotations

import attrs
from attrs import validators

from herald.core.codec_kit import LocalProtocolError

_positive = [validators.instance_of(int), validators.ge(1)]


@attrs.frozen
class StompLimits:
    """Bounds on one inbound frame; every size is in bytes as they appear on the wire."""

    max_frame_size: int = attrs.field(default=4 * 1024 * 1024, validator=_positive)
    """The bytes of one frame before its NUL: command line, headers, blank line and body."""

    max_headers: int = attrs.field(default=1000, validator=_positive)
    """Header lines in one frame, repeats included."""

    max_header_line: int = attrs.field(default=10 * 1024, validator=_positive)
    """One header line, escapes as sent, without its EOL."""

    max_body_size: int = attrs.field(
        default=attrs.Factory(lambda self: self.max_frame_size, takes_self=True),
        validator=_positive,
    )
    """The body: the largest content-length accepted, and the longest NUL-terminated body."""


class LimitExceeded(LocalProtocolError):
    """A peer's frame broke one of the `StompLimits`; `limit` names the field it broke, so
    that the caller can say which setting raises it. `StompConnection.next_event` raises it
    as the cause of its RemoteProtocolError."""

    def __init__(self, text: str, limit: str) -> None:
        super().__init__(text)
        self.limit = limit
