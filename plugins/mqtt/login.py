"""Who an MQTT CONNECT logs in as, and the CONNACK that refuses it when it may not.

The login itself is the one every protocol shares (core/session_open.py `log_in`), in
RabbitMQ's order (rabbit_mqtt_processor's `creds`, with `mqtt.ssl_cert_login`):
1. a user name: a password login. Credentials the client sends take priority over its
   certificate; a user name without a password is refused like a wrong password;
2. no user name, over TLS (mqtts or wss) with a verified client certificate and
   `tls.cert_login` on: the user the certificate names, without a password
   (core/cert_login.py);
3. otherwise `anonymous_user` when `allow_anonymous` (the default), else refused. The
   anonymous user logs in like a certificate's user, without a password but under the rules
   of its name: it must exist, and a loopback-only user (`auth.loopback_users`: `guest` by
   default) only from a loopback peer, so anonymous clients work from this machine and are
   refused from others.

What stays here is MQTT's answer: a refused password is CONNACK 4 (3.1.1) / 0x86 (MQTT 5, bad
user name or password); every other refusal (a certificate's or the anonymous user herald
does not know or refuses, no identity at all) is 5 / 0x87, not authorized. The virtual host,
its permission and the per-user connection limit come after login (connect.py, `open_vhost`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from herald.core.session_open import Credentials, LoginRefused, LoginWay, log_in
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
    config = session.config
    password = ""
    if packet.username is not None:  # else the password, if any, is not used
        try:
            # Strictly UTF-8 (MQTT 5.0 calls the password binary data, but herald's users
            # have text passwords): bytes that do not decode cannot be anyone's password.
            password = (packet.password or b"").decode()
        except UnicodeDecodeError:
            return Refusal(ReasonCode.BAD_USER_NAME_OR_PASSWORD, "login refused")
    try:
        return await log_in(
            session.broker,
            session.connection,
            session.peer_host,
            Credentials(packet.username, password),
            anonymous_user=config.anonymous_user if config.allow_anonymous else None,
        )
    except LoginRefused as exc:
        if exc.way is LoginWay.PASSWORD:
            return Refusal(ReasonCode.BAD_USER_NAME_OR_PASSWORD, exc.reply_text)
        return Refusal(ReasonCode.NOT_AUTHORIZED, exc.reply_text)
