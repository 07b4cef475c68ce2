"""The opening of a connection: start, start-ok (login), tune, tune-ok, open.

Each step expects one method (`expected`); anything else before connection.open is refused
with 503 COMMAND_INVALID. The session-opening flow is the kernel's, shared by every protocol
(core/session_open.py); what stays here is AMQP's side of it: the SASL mechanisms and their
responses, and the replies. Login (`log_in`, with the peer's address, so loopback-only users
work) refused is answered with connection.close 403, which clients that advertise
`authentication_failure_close` (and pika, whatever it advertises) report as an authentication
error. connection.open (`open_vhost`: the vhost exists, the user may use it, the per-user
connection limit admits one more) refused is 530, where RabbitMQ checks them too.

With `tls.cert_login` on and a verified client certificate naming a user
(`certificate_user`), EXTERNAL is offered first (RabbitMQ's rabbitmq_auth_mechanism_ssl): its
start-ok, with an empty response, logs in as that user without a password. PLAIN and AMQPLAIN
stay on offer; a mechanism that was not offered is refused with 503, as an unknown one.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from herald.core.cert_login import EXTERNAL
from herald.core.errors import AccessRefused, KernelError, LocalProtocolError
from herald.core.session_open import (
    Credentials,
    Permissions,
    certificate_user,
    log_in,
    open_vhost,
)
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
_OFFERED = frozenset(CAPABILITIES)
_SHARED: dict[frozenset[str], frozenset[str]] = {}
"""One object per set of capabilities clients asked for (of ours: at most 2**9 sets), so
thousands of connections of the same client library share one."""


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

    __slots__ = ("expected", "mechanisms", "session")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.expected: type[Method] | None = None  # None: not started, or done
        self.mechanisms: tuple[bytes, ...] = MECHANISMS

    def start(self) -> None:
        session = self.session
        broker = session.broker
        properties = server_properties(broker.config.broker.node_name)
        # The protocol header came over TLS, so its handshake is done: the certificate is known.
        if certificate_user(broker, session.connection) is not None:
            self.mechanisms = (EXTERNAL.encode(), *MECHANISMS)
        mechanisms = b" ".join(self.mechanisms)
        session.send_method(0, ConnectionStart(0, 9, properties, mechanisms, b"en_US"))
        self.expected = ConnectionStartOk

    async def handle(self, method: Method) -> None:
        kind = type(method)
        if kind is not self.expected:
            self.session.close(503, f"unexpected {method.NAME} during the handshake", kind)
        elif isinstance(method, ConnectionStartOk):
            await self._start_ok(method)
        elif isinstance(method, ConnectionTuneOk):
            self._tune_ok(method)
        elif isinstance(method, ConnectionOpen):
            self._open(method)

    async def _start_ok(self, method: ConnectionStartOk) -> None:
        session = self.session
        client = method.client_properties
        capabilities = client.get("capabilities")
        if isinstance(capabilities, dict):
            asked = _OFFERED.intersection(k for k, v in capabilities.items() if v is True)
            session.capabilities = _SHARED.setdefault(asked, asked)
        product = client.get("product")
        session.connection.client = product if isinstance(product, str) else None
        mechanism = method.mechanism
        if mechanism.encode() not in self.mechanisms:
            reason = f"unknown authentication mechanism '{mechanism}'"
            session.close(ReplyCode.COMMAND_INVALID, reason, ConnectionStartOk)
            return
        try:
            if mechanism == EXTERNAL:  # offered: the certificate names the user
                given = Credentials(None, mechanism=EXTERNAL)
            else:
                username, password = credentials(mechanism, method.response)
                given = Credentials(username, password, mechanism)
            user = await log_in(session.broker, session.connection, session.peer_host, given)
        except AccessRefused:  # LoginRefused, or a response that does not parse
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
        session.start_heartbeats(method.heartbeat)
        self.expected = ConnectionOpen

    def _open(self, method: ConnectionOpen) -> None:
        session = self.session
        broker, name, user = session.broker, method.virtual_host, session.user
        assert user is not None  # start-ok logged in
        try:
            # Counted here, where RabbitMQ checks its limits too: a refusal then reads as 530
            # to clients, not as a failed login.
            vhost = open_vhost(broker, session.connection, user, name)
        except KernelError as exc:
            session.close(exc.reply_code, exc.reply_text, ConnectionOpen)
            return
        self.expected = None
        session.send_method(0, ConnectionOpenOk())
        session.opened(vhost, Permissions(broker, user, name))


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
