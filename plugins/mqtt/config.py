"""The `[mqtt]` config section.

Defaults follow RabbitMQ's MQTT plugin where a client would notice: port 1883, WebSocket on
15675 at `/mqtt`, topics on `amq.topic` in vhost `/`, sessions that outlive their connection
for at most a day. Where herald differs it says so: the largest packet is 16 MiB (RabbitMQ
accepts 256 MiB, the wire's limit; 16 MiB matches herald's AMQP message limit), and the
in-flight window is 64 (RabbitMQ's prefetch is 10, Mosquitto's max_inflight 20: a larger window
keeps a client over a slow link busy, and MQTT 5 clients can ask for less).
"""

from __future__ import annotations

from typing import Any

import attrs

from herald.core import validators
from herald.core.config import InvalidValue
from herald.plugins.mqtt.codec import MAX_PACKET_SIZE
from herald.plugins.mqtt.codec.topics import TopicError, validate_topic_filter

SESSION_NEVER_EXPIRES = 0xFFFF_FFFF
"""MQTT 5's Session Expiry Interval for "never" (also what herald grants 3.1.1 persistent
sessions when `session_expiry_max` is this value)."""

RETAIN_STORES = ("metadata", "memory", "none")


def _path(_inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not value.startswith("/"):
        raise InvalidValue(f"must start with '/', got {value!r}", attribute.name)


def _retain_store(_inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in RETAIN_STORES:
        raise InvalidValue(
            f"expected one of {', '.join(RETAIN_STORES)}, got {value!r}", attribute.name
        )


def _topic_filters(_inst: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for text in value:
        try:
            validate_topic_filter(text)
        except TopicError as exc:
            raise InvalidValue(str(exc), attribute.name) from None


@attrs.frozen
class MQTTConfig:
    """`[mqtt]`: the MQTT listeners and what they grant clients."""

    host: str = "0.0.0.0"
    """Address of the TCP listener; "0.0.0.0" is every IPv4 interface."""
    port: int = attrs.field(default=1883, validator=validators.port)
    tls_port: int = attrs.field(default=8883, validator=validators.port)
    """MQTT over TLS, served on `host` when the broker's `[tls]` has a certificate."""
    ws_enabled: bool = True
    """Serve MQTT over WebSocket too (subprotocol "mqtt")."""
    ws_host: str = "0.0.0.0"
    ws_port: int = attrs.field(default=15675, validator=validators.port)
    """RabbitMQ's Web MQTT port."""
    wss_port: int = attrs.field(default=15676, validator=validators.port)
    """Web MQTT over TLS (RabbitMQ's `web_mqtt.ssl.port`), when `[tls]` has a certificate."""
    ws_path: str = attrs.field(default="/mqtt", validator=_path)
    """The only HTTP path that upgrades; others get 404."""
    max_packet_size: int = attrs.field(
        default=16 * 1024 * 1024, validator=validators.between(64, MAX_PACKET_SIZE)
    )
    """The largest packet a client may send; MQTT 5 clients learn it from CONNACK."""
    max_inflight: int = attrs.field(default=64, validator=validators.between(1, 65535))
    """Unacknowledged QoS 1/2 messages per direction and session: the Receive Maximum herald
    announces, and the most it sends before the client acks (less if the client asks)."""
    keepalive_max: int = attrs.field(default=65535, validator=validators.between(0, 65535))
    """The longest keep alive granted (seconds). MQTT 5 clients asking for more
    are told this value (Server Keep Alive); 0 leaves the client's choice. A client asking
    for none keeps none."""
    allow_anonymous: bool = True
    """Accept CONNECTs without a user name (paho-mqtt's and mosquitto_pub's default), as
    `anonymous_user`, under that user's rules: the default `guest` is loopback-only
    (`auth.loopback_users`), so anonymous clients work from this machine and are refused
    from others. False refuses every CONNECT without a user name."""
    anonymous_user: str = "guest"
    """The user anonymous clients act as: its permissions and loopback restriction apply."""
    vhost: str = "/"
    """The virtual host MQTT clients use."""
    exchange: str = "amq.topic"
    """The topic exchange MQTT publishes to and binds its subscriptions on."""
    retain_store: str = attrs.field(default="metadata", validator=_retain_store)
    """Where retained messages live: "metadata" (the store's metadata, survives restarts),
    "memory" (lost at restart) or "none" (retain not available)."""
    session_expiry_max: int = attrs.field(
        default=86400, validator=validators.between(0, SESSION_NEVER_EXPIRES)
    )
    """The longest a session outlives its connection (seconds); 3.1.1 persistent sessions
    (clean session 0) get this. 4294967295 means never."""
    topic_alias_maximum: int = attrs.field(default=16, validator=validators.between(0, 65535))
    """Topic aliases an MQTT 5 client may use towards herald."""
    handshake_timeout: float = attrs.field(default=10.0, validator=validators.positive)
    """Seconds a client has from connecting to sending CONNECT."""
    close_timeout: float = attrs.field(default=2.0, validator=validators.positive)
    """Seconds a closed connection's socket keeps reading (and discarding) after herald's last
    packet, so a client still sending gets the DISCONNECT or CONNACK rather than a reset."""
    subscribe_denied: tuple[str, ...] = attrs.field(default=(), validator=_topic_filters)
    """Topic filters no client may subscribe to: a requested filter equal to one of them or
    under it ("private/#" refuses "private/a/+") gets SUBACK 0x80, whatever the permissions."""
    write_buffer: int = attrs.field(
        default=1024 * 1024, validator=validators.between(4096, 1 << 31)
    )
    """Bytes waiting for the socket above which deliveries pause."""
