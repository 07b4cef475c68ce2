"""Who an MQTT CONNECT logs in as: a password, the client certificate, or the anonymous user.

RabbitMQ's order (rabbit_mqtt_processor's `creds`, with `mqtt.ssl_cert_login`):
1. a user name: a password login through `broker.authenticate`. Credentials the client sends
   take priority over its certificate; a user name without a password is refused like a wrong
   password (CONNACK 4 / 0x86);
2. no user name, over TLS (mqtts or wss) with a verified client certificate and
   `tls.cert_login` on: the user the certificate names, without a password
   (core/cert_login.py); a user herald does not know is refused with NOT_AUTHORIZED (5 / 0x87);
3. otherwise `anonymous_user` when `allow_anonymous`, else NOT_AUTHORIZED.

The virtual host permission is checked afterwards, the same for every way in (session.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from herald.core import cert_login
from herald.core.errors import AccessRefused
from herald.plugins.mqtt.codec import ReasonCode

if TYPE_CHECKING:
    from herald.core.auth import User
    from herald.plugins.mqtt.codec import Connect
    from herald.plugins.mqtt.session import Session


@attrs.frozen
class Refusal:
    """A CONNECT that may not log in: the CONNACK reason code and the text for the log."""

    code: int
    text: str


async def authenticate(session: Session, packet: Connect) -> User | Refusal:
    """The user `packet` logs in as on `session`'s connection, or why it may not."""
    broker, config = session.broker, session.config
    if packet.username is not None:
        try:
            password = (packet.password or b"").decode()
            return await broker.authenticate(packet.username, password, session.peer_host)
        except (AccessRefused, UnicodeDecodeError):
            return Refusal(ReasonCode.BAD_USER_NAME_OR_PASSWORD, "login refused")
    cert_user = cert_login.certificate_user(broker.config.tls, session.connection.tls)
    if cert_user is not None:
        try:
            return cert_login.login(broker.users, cert_user, session.peer_host)
        except AccessRefused:
            return Refusal(ReasonCode.NOT_AUTHORIZED, f"certificate login refused for {cert_user}")
    if not config.allow_anonymous:
        return Refusal(ReasonCode.NOT_AUTHORIZED, "a user name is required")
    user = broker.users.get_user(config.anonymous_user)
    if user is None:
        return Refusal(ReasonCode.NOT_AUTHORIZED, "anonymous access is not configured")
    return user
