"""The opening of a connection: start, start-ok (login), tune, tune-ok, open.

Each step expects one method (`expected`); anything else before connection.open is refused
with 503 COMMAND_INVALID. Login goes through `broker.authenticate` with the peer's address
(so loopback-only users work); a refusal is answered with connection.close 403, which clients
that advertise `authentication_failure_close` (and pika, whatever it advertises) report as an
authentication error. connection.open checks the vhost exists and the user may use it (530).

With `tls.cert_login` on and a verified client certificate naming a user, EXTERNAL is offered
first (RabbitMQ's rabbitmq_auth_mechanism_ssl): its start-ok, with an empty response, logs in
as that user without a password (core/cert_login.py). PLAIN and AMQPLAIN stay on offer; a
mechanism that was not offered is refused with 503, as an unknown one.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from herald.core import cert_login
from herald.core.errors import AccessRefused, KernelError, LocalProtocolError
from herald.core.version import herald_version
from herald.plugins.amqp.codec import ReplyCode
from herald.plugins.amqp.codec.fields import decode_table
from herald.plugins.amqp.codec.methods import (
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    Method,
)

if TYPE_CHECKING:
    from herald.plugins.amqp.session import Session

MECHANISMS = (b"PLAIN", b"AMQPLAIN")
CAPABILITIES = (
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
)


def server_properties(node_name: str) -> dict[str, Any]:
    return {
        "product": "herald",
        "version": herald_version(),
        "platform": f"Python {sys.version_info.major}.{sys.version_info.minor} / Trio",
        "information": "herald multi-protocol message broker",
        "cluster_name": node_name,
        "capabilities": {name: True for name in CAPABILITIES},
    }


class Handshake:
    """Drives one session from the protocol header to connection.open-ok."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.expected: type[Method] | None = None  # None: not started, or done
        self.mechanisms = MECHANISMS
        self.cert_user: str | None = None  # the user a verified client certificate names

    def start(self) -> None:
        session = self.session
        broker = session.broker
        properties = server_properties(broker.config.broker.node_name)
        # The protocol header came over TLS, so its handshake is done: the certificate is known.
        self.cert_user = cert_login.certificate_user(broker.config.tls, session.connection.tls)
        if self.cert_user is not None:
            self.mechanisms = (cert_login.EXTERNAL.encode(), *MECHANISMS)
        mechanisms = b" ".join(self.mechanisms)
        session.send_method(0, ConnectionStart(0, 9, properties, mechanisms, b"en_US"))
        self.expected = ConnectionStartOk

    async def handle(self, method: Method) -> None:
        kind = type(method)
        if kind is not self.expected:
            self.session.close(503, f"unexpected {method.NAME} during the handshake", kind)
        elif kind is ConnectionStartOk:
            await self._start_ok(method)  # type: ignore[arg-type]
        elif kind is ConnectionTuneOk:
            self._tune_ok(method)  # type: ignore[arg-type]
        else:
            self._open(method)  # type: ignore[arg-type]

    async def _start_ok(self, method: ConnectionStartOk) -> None:
        session = self.session
        client = method.client_properties
        capabilities = client.get("capabilities")
        if isinstance(capabilities, dict):
            session.capabilities = frozenset(k for k, v in capabilities.items() if v is True)
        product = client.get("product")
        session.connection.client = product if isinstance(product, str) else None
        mechanism = method.mechanism
        if mechanism.encode() not in self.mechanisms:
            reason = f"unknown authentication mechanism '{mechanism}'"
            session.close(ReplyCode.COMMAND_INVALID, reason, ConnectionStartOk)
            return
        try:
            if mechanism == cert_login.EXTERNAL and self.cert_user is not None:
                user = cert_login.login(session.broker.users, self.cert_user, session.peer_host)
            else:
                username, password = credentials(mechanism, method.response)
                user = await session.broker.authenticate(username, password, session.peer_host)
        except AccessRefused:
            session.close(
                ReplyCode.ACCESS_REFUSED,
                f"Login was refused using authentication mechanism {mechanism}."
                " For details see the broker logfile.",
                ConnectionStartOk,
            )
            return
        session.user = user
        session.user_name = user.name
        config = session.config
        tune = ConnectionTune(config.channel_max, config.frame_max, config.heartbeat)
        session.send_method(0, tune)
        self.expected = ConnectionTuneOk

    def _tune_ok(self, method: ConnectionTuneOk) -> None:
        session = self.session
        if method.channel_max:
            session.channel_max = min(method.channel_max, session.config.channel_max)
        session.heartbeat = method.heartbeat
        self.expected = ConnectionOpen

    def _open(self, method: ConnectionOpen) -> None:
        session = self.session
        broker, name = session.broker, method.virtual_host
        try:
            vhost = broker.vhost(name)
            assert session.user is not None
            broker.users.check_vhost_access(session.user, name)
            # Counted at connection.open, where RabbitMQ checks its limits too: a refusal
            # then reads as 530 to clients, not as a failed login.
            broker.connections.admit(session.connection, session.user.name)
        except KernelError as exc:
            session.close(exc.reply_code, exc.reply_text, ConnectionOpen)
            return
        self.expected = None
        session.vhost = vhost
        session.connection.vhost = name
        session.send_method(0, ConnectionOpenOk())
        session.opened()


def credentials(mechanism: str, response: bytes) -> tuple[str, str]:
    """(username, password) from a PLAIN or AMQPLAIN response; AccessRefused if malformed."""
    try:
        if mechanism == "PLAIN":
            _authzid, username, password = response.split(b"\0")
            return username.decode(), password.decode()
        table, _ = decode_table(len(response).to_bytes(4, "big") + response, 0, len(response) + 4)
        login, secret = table.get("LOGIN"), table.get("PASSWORD")
        if isinstance(login, bytes):
            login = login.decode()
        if isinstance(secret, bytes):
            secret = secret.decode()
        if not isinstance(login, str) or not isinstance(secret, str):
            raise ValueError("LOGIN and PASSWORD must be strings")
        return login, secret
    except (ValueError, LocalProtocolError) as exc:
        raise AccessRefused(f"malformed {mechanism} response: {exc}") from None
