"""The `[amqp]` config section.

Defaults follow RabbitMQ 4 so that clients tuned for it behave the same: port 5672 on every
interface, frame_max 128 KiB, 2047 channels, a 60 s heartbeat, a 10 s handshake timeout and a
16 MiB largest message. After its last frame the server lingers a few seconds, as RabbitMQ's
reader keeps reading after close-ok (up to 30 s there).
"""

from __future__ import annotations

import attrs

from herald.core import validators
from herald.plugins.amqp.codec.constants import FRAME_MIN_SIZE


@attrs.frozen
class AMQPConfig:
    """`[amqp]`: where the AMQP 0-9-1 listener binds and what it negotiates with clients."""

    host: str = "0.0.0.0"
    """Address to bind; "0.0.0.0" is every IPv4 interface (RabbitMQ's default)."""
    port: int = attrs.field(default=5672, validator=validators.port)
    tls_port: int = attrs.field(default=5671, validator=validators.port)
    """The AMQPS listener's port, served on `host` when `[tls]` has a certificate."""
    frame_max: int = attrs.field(default=131072, validator=validators.at_least(FRAME_MIN_SIZE))
    """The largest frame offered in connection.tune (clients may ask for less; the spec's
    smallest, 4096 bytes, is the floor)."""
    channel_max: int = attrs.field(default=2047, validator=validators.between(1, 65535))
    heartbeat: int = attrs.field(default=60, validator=validators.at_least(0))
    """Seconds offered in connection.tune; 0 disables heartbeats unless the client asks."""
    handshake_timeout: float = attrs.field(default=10.0, validator=validators.positive)
    """Seconds a client has from connecting to connection.open."""
    close_timeout: float = attrs.field(default=3.0, validator=validators.positive)
    """Seconds the server waits for close-ok after sending connection.close, and a connection
    that ended has to write its last frames."""
    close_linger: float = attrs.field(default=3.0, validator=validators.not_negative)
    """Seconds the socket stays open after the last frame (close-ok sent or received, or the
    connection.close of a frame that did not parse): the server shuts its sending side and
    drops what the client still sends until it closes; 0 closes at once."""
    max_message_size: int = attrs.field(default=16 * 1024 * 1024, validator=validators.at_least(1))
    """Bodies larger than this are refused with 406 (RabbitMQ 4's default, 16 MiB)."""
    default_prefetch: int = attrs.field(default=0, validator=validators.at_least(0))
    """Per-consumer prefetch of consumers created before any basic.qos (0 = unlimited)."""
    write_buffer: int = attrs.field(default=1024 * 1024, validator=validators.at_least(4096))
    """Bytes of deliveries waiting for the socket above which consumers are suspended."""
