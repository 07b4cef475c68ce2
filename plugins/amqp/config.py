"""The `[amqp]` config section.

Defaults follow RabbitMQ 4 so that clients tuned for it behave the same: port 5672 on every
interface, frame_max 128 KiB, 2047 channels, a 60 s heartbeat, a 10 s handshake timeout and a
16 MiB largest message. After its last frame the server lingers a few seconds, as RabbitMQ's
reader keeps reading after close-ok (up to 30 s there).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from herald.core.config import InvalidValue
from herald.plugins.amqp.codec.constants import FRAME_MIN_SIZE


def _port(_inst: object, attribute: attrs.Attribute, value: int) -> None:
    if not 0 <= value <= 65535:
        raise InvalidValue(f"expected 0..65535, got {value!r}", attribute.name)


def _at_least(minimum: int) -> Callable[[object, attrs.Attribute, int], None]:
    def check(_inst: object, attribute: attrs.Attribute, value: int) -> None:
        if value < minimum:
            raise InvalidValue(f"must be at least {minimum}, got {value!r}", attribute.name)

    return check


def _frame_max(_inst: object, attribute: attrs.Attribute, value: int) -> None:
    if value < FRAME_MIN_SIZE:
        raise InvalidValue(f"must be at least {FRAME_MIN_SIZE}, got {value!r}", attribute.name)


def _positive(_inst: object, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise InvalidValue(f"must be more than 0, got {value!r}", attribute.name)


def _not_negative(_inst: object, attribute: attrs.Attribute, value: float) -> None:
    if not value >= 0:
        raise InvalidValue(f"must be 0 or more, got {value!r}", attribute.name)


@attrs.frozen
class AMQPConfig:
    """`[amqp]`: where the AMQP 0-9-1 listener binds and what it negotiates with clients."""

    host: str = "0.0.0.0"
    """Address to bind; "0.0.0.0" is every IPv4 interface (RabbitMQ's default)."""
    port: int = attrs.field(default=5672, validator=_port)
    tls_port: int = attrs.field(default=5671, validator=_port)
    """The AMQPS listener's port, served on `host` when `[tls]` has a certificate."""
    frame_max: int = attrs.field(default=131072, validator=_frame_max)
    """The largest frame offered in connection.tune (clients may ask for less)."""
    channel_max: int = attrs.field(default=2047, validator=[_at_least(1), _port])
    heartbeat: int = attrs.field(default=60, validator=_at_least(0))
    """Seconds offered in connection.tune; 0 disables heartbeats unless the client asks."""
    handshake_timeout: float = attrs.field(default=10.0, validator=_positive)
    """Seconds a client has from connecting to connection.open."""
    close_timeout: float = attrs.field(default=3.0, validator=_positive)
    """Seconds the server waits for close-ok after sending connection.close."""
    close_linger: float = attrs.field(default=3.0, validator=_not_negative)
    """Seconds the socket stays open after the last frame (close-ok sent or received, or the
    connection.close of a frame that did not parse): the server shuts its sending side and
    drops what the client still sends until it closes; 0 closes at once."""
    max_message_size: int = attrs.field(default=16 * 1024 * 1024, validator=_at_least(1))
    """Bodies larger than this are refused with 406 (RabbitMQ 4's default, 16 MiB)."""
    default_prefetch: int = attrs.field(default=0, validator=_at_least(0))
    """Per-consumer prefetch of consumers created before any basic.qos (0 = unlimited)."""
    write_buffer: int = attrs.field(default=1024 * 1024, validator=_at_least(4096))
    """Bytes of deliveries waiting for the socket above which consumers are suspended."""
