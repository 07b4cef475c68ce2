"""The `[stomp]` config section.

Defaults follow RabbitMQ's STOMP and Web-STOMP plugins, so clients written for it connect
unchanged: port 61613 on every interface, WebSocket on 15674 at `/ws`, virtual host `/`,
unlimited consumer prefetch, and heart-beats only when the client asks for them. One
exception: a `host` header naming no virtual host means the default one (ActiveMQ's rule,
`strict_host`), because STOMP 1.2 requires the header and clients fill it with the server's
address. The size limits are the STOMP codec's (`StompLimits`, after ActiveMQ Apollo); a
frame over one is refused with an ERROR naming the key that raises it (`limit_key`).

Heart-beats: RabbitMQ answers a CONNECT's `heart-beat: cx,cy` with `cy,cx`, i.e. it agrees to
whatever the client wants and asks nothing of its own. herald does the same, with two floors
(`heartbeat_send_min`, `heartbeat_receive_min`, in ms) so a client cannot ask for a flood of
EOLs; RabbitMQ's floor is one second (it counts in whole seconds), and so is herald's.
"""

from __future__ import annotations

from typing import Any

import attrs

from herald.core import validators
from herald.core.errors import InvalidValue, show_value
from herald.plugins.stomp.codec import StompLimits


def _ws_path(_inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
    """An HTTP path: STOMP's only validator of its own (the others are core/validators.py)."""
    if not value.startswith("/"):
        raise InvalidValue(f"must start with '/', got {show_value(value)}", attribute.name)


@attrs.frozen
class StompConfig:
    """`[stomp]`: where the STOMP listeners bind and what they negotiate with clients."""

    host: str = "0.0.0.0"
    """Address of the TCP listener; "0.0.0.0" is every IPv4 interface (RabbitMQ's default)."""
    port: int = attrs.field(default=61613, validator=validators.port)
    tls_port: int = attrs.field(default=61614, validator=validators.port)
    """The STOMP-over-TLS listener's port, served on `host` when `[tls]` has a certificate."""
    ws_enabled: bool = True
    """Serve STOMP over WebSocket as well (RabbitMQ's Web-STOMP)."""
    ws_host: str = "0.0.0.0"
    ws_port: int = attrs.field(default=15674, validator=validators.port)
    wss_port: int = attrs.field(default=15673, validator=validators.port)
    """Web-STOMP over TLS (RabbitMQ's web_stomp.ssl port), when `[tls]` has a certificate."""
    ws_path: str = attrs.field(default="/ws", validator=_ws_path)
    """The only HTTP path the WebSocket listener upgrades; others get 404."""
    default_vhost: str = "/"
    """The virtual host of a CONNECT without a `host` header, or (unless `strict_host`) whose
    `host` names no virtual host."""
    strict_host: bool = False
    """False (ActiveMQ): a `host` header naming no virtual host gets `default_vhost`, since
    STOMP 1.2 clients such as stomp.py put the server's host name there unless told a virtual
    host. True (RabbitMQ): such a CONNECT is refused with an ERROR. A `host` naming a virtual
    host selects it either way."""
    allow_anonymous: bool = False
    """Let a CONNECT without `login` log in as `default_login` / `default_passcode`
    (RabbitMQ's `default_user`); when False such a CONNECT is refused."""
    default_login: str = "guest"
    default_passcode: str = attrs.field(default="guest", repr=False)
    heartbeat_send_min: int = attrs.field(default=1000, validator=validators.at_least(0))
    """The shortest interval (ms) at which the server agrees to send heart-beats."""
    heartbeat_receive_min: int = attrs.field(default=1000, validator=validators.at_least(0))
    """The shortest interval (ms) at which the server agrees to expect them; a client silent
    for twice the agreed interval is disconnected."""
    default_prefetch: int = attrs.field(default=0, validator=validators.at_least(0))
    """Unacknowledged messages per subscription without a `prefetch-count` header (0 = no
    limit, RabbitMQ's default)."""
    handshake_timeout: float = attrs.field(default=10.0, validator=validators.positive)
    """Seconds a client has from connecting to sending a complete CONNECT frame."""
    close_timeout: float = attrs.field(default=3.0, validator=validators.positive)
    """Seconds to flush a final ERROR or RECEIPT, then as long again for the client to read
    them (the socket half-closed and drained) before it is closed."""
    max_frame_size: int = attrs.field(default=4 * 1024 * 1024, validator=validators.at_least(64))
    """Command, headers and body of one inbound frame (ERROR and close beyond it)."""
    max_headers: int = attrs.field(default=1000, validator=validators.at_least(1))
    max_header_line: int = attrs.field(default=10 * 1024, validator=validators.at_least(64))
    write_buffer: int = attrs.field(default=1024 * 1024, validator=validators.at_least(4096))
    """Bytes of deliveries waiting for the socket above which subscriptions are paused."""

    def limit_key(self, limit: str) -> str:
        """The setting that raises the `StompLimits` field `limit`, as limit errors name it
        (the body may be as large as the frame: `max_body_size` follows `max_frame_size`)."""
        return "stomp." + ("max_frame_size" if limit == "max_body_size" else limit)

    @property
    def limits(self) -> StompLimits:
        return StompLimits(
            max_frame_size=self.max_frame_size,
            max_headers=self.max_headers,
            max_header_line=self.max_header_line,
        )
