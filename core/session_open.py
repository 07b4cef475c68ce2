"""Opening a session, the same for every protocol: who logs in, into which virtual host, and
what the connection may then do.

1. `log_in`: a password (a user name was given), else the user a verified client certificate
   names (`tls.cert_login`, core/cert_login.py), else the protocol's anonymous user if it has
   one. A loopback-only user (`guest`) is refused from a remote peer whichever way it came.
   A refusal is `LoginRefused`, an AccessRefused that says which way was tried, since MQTT
   answers a wrong password (0x86) and a missing or unusable identity (0x87) differently.
2. `open_vhost`: the virtual host exists, the user has a permission entry there, and the
   per-user connection limit admits one more (counted by the user's name, for every
   protocol). Kernel errors: NotAllowed (530) for all three, as RabbitMQ at connection.open.
3. `Permissions`: the connection's cache of `authorize` answers.

Each protocol maps the kernel errors to its own reply (AMQP reply code, MQTT CONNACK reason,
STOMP ERROR frame) and keeps nothing else of this.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from herald.core import cert_login
from herald.core.errors import AccessRefused

if TYPE_CHECKING:
    from herald.core.auth import User
    from herald.core.broker import Broker
    from herald.core.connections import Connection
    from herald.core.vhost import VirtualHost

ANONYMOUS = "ANONYMOUS"
"""The SASL mechanism name (RFC 4505) a login without credentials is logged under."""


class LoginWay(enum.Enum):
    PASSWORD = "password"
    CERTIFICATE = "certificate"
    ANONYMOUS = "anonymous"


class LoginRefused(AccessRefused):
    """A login that failed (403); `way` is how it was tried, `None` when nothing could be."""

    def __init__(self, text: str, way: LoginWay | None) -> None:
        super().__init__(text)
        self.way = way


@attrs.frozen
class Credentials:
    """What a client presented. `username` None: no credentials (a certificate, or anonymous)."""

    username: str | None
    password: str | bytes = attrs.field(default="", repr=False)
    mechanism: str = "PLAIN"
    """How they came, for the log: PLAIN, AMQPLAIN, EXTERNAL, or the protocol's name."""


async def log_in(
    broker: Broker,
    connection: Connection,
    peer_host: str | None,
    credentials: Credentials,
    *,
    anonymous_user: str | None = None,
) -> User:
    """The user `credentials` log in as on `connection`; LoginRefused when they may not.
    `anonymous_user`: whom a client without credentials or certificate logs in as (None:
    such clients are refused)."""
    if credentials.username is not None:
        try:
            return await broker.authenticate(
                credentials.username, credentials.password, peer_host, credentials.mechanism
            )
        except AccessRefused as exc:
            raise LoginRefused(exc.reply_text, LoginWay.PASSWORD) from None
    name = certificate_user(broker, connection)
    way, mechanism = LoginWay.CERTIFICATE, cert_login.EXTERNAL
    if name is None:
        if anonymous_user is None:
            raise LoginRefused("a user name is required", None)
        name, way, mechanism = anonymous_user, LoginWay.ANONYMOUS, ANONYMOUS
    try:
        return cert_login.login(broker.users, name, peer_host, mechanism)
    except AccessRefused as exc:
        raise LoginRefused(exc.reply_text, way) from None


def certificate_user(broker: Broker, connection: Connection) -> str | None:
    """The user `connection`'s verified client certificate names, with `tls.cert_login` on
    (AMQP offers EXTERNAL only then)."""
    return cert_login.certificate_user(broker.config.tls, connection.tls)


def open_vhost(broker: Broker, connection: Connection, user: User, name: str) -> VirtualHost:
    """The virtual host `user` opens on `connection`, admitted against the per-user limit;
    NotAllowed (530) when it does not exist, the user has no access, or is at its limit."""
    vhost = broker.vhost(name)
    broker.users.check_vhost_access(user, name)
    broker.connections.admit(connection, user.name)
    connection.vhost = name
    return vhost


class Permissions:
    """`broker.authorize`, remembered for one connection (RabbitMQ caches per channel too):
    AccessRefused (403) when `user` may not. At most 256 answers are kept; then it starts
    over, so a client cycling through names cannot grow it."""

    __slots__ = ("_broker", "_cache", "_user", "_vhost")

    def __init__(self, broker: Broker, user: User, vhost: str) -> None:
        self._broker = broker
        self._user = user
        self._vhost = vhost
        self._cache: set[tuple[Any, str, str]] = set()

    def authorize(self, permission: Any, kind: str, name: str) -> None:
        key = (permission, kind, name)
        cache = self._cache
        if key in cache:
            return
        self._broker.authorize(self._user, self._vhost, permission, kind, name)
        if len(cache) >= 256:
            cache.clear()
        cache.add(key)


class CheckedLazily:
    """`authorize` for a session that checks permissions now and then (MQTT, STOMP): its
    `Permissions` are made at the first check, so an idle connection holds none. The session
    has `broker`, `user` and a `_permissions` slot (None until then) and names its vhost."""

    __slots__ = ()

    broker: Broker
    user: User | None
    _permissions: Permissions | None

    @property
    def permissions_vhost(self) -> str:
        raise NotImplementedError

    def authorize(self, permission: Any, kind: str, name: str) -> None:
        """`broker.authorize`, remembered for the connection; AccessRefused if not allowed."""
        permissions = self._permissions
        if permissions is None:
            assert self.user is not None, "authorize before login"
            permissions = Permissions(self.broker, self.user, self.permissions_vhost)
            session: _HoldsPermissions = self  # the slot is the session's, not this mixin's
            session._permissions = permissions
        permissions.authorize(permission, kind, name)


class _HoldsPermissions(Protocol):
    _permissions: Permissions | None
