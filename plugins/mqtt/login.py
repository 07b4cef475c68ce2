"""Who an MQTT CONNECT logs in as: a password, the client certificate, or the anonymous user.

RabbitMQ's order (rabbit_mqtt_processor's `creds`, with `mqtt.ssl_cert_login`):
1. a user name: a password login through `broker.authenticate`. Credentials the client sends
   take priority over its certificate; a user name without a password is refused like a wrong
   password (CONNACK 4 / 0x86);
2. no user name, over TLS (mqtts or wss) with a verified client certificate and
   `tls.cert_login` on: the user the certificate names, without a password
   (core/cert_login.py); a user herald does not know is refused with NOT_AUTHORIZED (5 / 0x87);
3. otherwise `anonymous_user` when `allow_anonymous` (the default), else NOT_AUTHORIZED. The
   anonymous user logs in like a certificate's user, without a password but under the rules
   of its name (`cert_login.login`, mechanism ANONYMOUS): it must exist, and a loopback-only
   user (`auth.loopback_users`: `guest` by default) only from a loopback peer, so anonymous
   clients work from this machine and are refused (NOT_AUTHORIZED, 5 / 0x87) from others.

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

ANONYMOUS = "ANONYMOUS"
"""The mechanism name anonymous logins are logged under (SASL's, RFC 4505)."""


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
    try:
        return cert_login.login(broker.users, config.anonymous_user, session.peer_host, ANONYMOUS)
    except AccessRefused:
        return Refusal(
            ReasonCode.NOT_AUTHORIZED, f"anonymous login as {config.anonymous_user} refused"
        )
