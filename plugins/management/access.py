"""Who may see and do what through the API: HTTP basic auth and RabbitMQ's user tags.

- No credentials, or wrong ones: 401 with `WWW-Authenticate` (browsers and CLIs then ask).
- A user without one of the management tags: 403. The tags, as in RabbitMQ:
  `management` (and `policymaker`) see the vhosts they have permissions on and their own
  connections; `monitoring` sees everything (all vhosts, all connections, the node) and acts
  like `management` where it acts; `administrator` sees and does everything, and alone manages
  users, permissions, vhosts and definitions.
- Acting on a resource (declare, delete, publish, get, purge, bind) needs the same
  configure / write / read permission as over AMQP, checked through the broker (so
  `herald_authorize` plugins decide here too). Administrators are not checked.
"""

from __future__ import annotations

import base64
import binascii
import enum
from typing import TYPE_CHECKING, Protocol

from herald.core.auth import PermissionKind
from herald.core.errors import AccessRefused
from herald.plugins.management.errors import ApiError, not_found, unauthorised

if TYPE_CHECKING:
    from herald.core.auth import User
    from herald.core.broker import Broker
    from herald.core.connections import Connection
    from herald.core.vhost import VirtualHost

ADMINISTRATOR = "administrator"
MONITORING = "monitoring"
MANAGEMENT = "management"
POLICYMAKER = "policymaker"
MANAGEMENT_TAGS = frozenset({ADMINISTRATOR, MONITORING, MANAGEMENT, POLICYMAKER})

CONFIGURE, WRITE, READ = PermissionKind.CONFIGURE, PermissionKind.WRITE, PermissionKind.READ


class Level(enum.Enum):
    """The least an endpoint asks of its caller."""

    MANAGEMENT = "management"  # any management tag; what is listed is filtered
    MONITORING = "monitoring"  # monitoring or administrator
    ADMINISTRATOR = "administrator"


def parse_basic(header: str | None) -> tuple[str, str]:
    """(user, password) from an `Authorization: Basic ...` header; 401 when absent or bad."""
    if not header:
        raise unauthorised("authentication required")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic" or not encoded:
        raise unauthorised("only HTTP basic authentication is supported")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise unauthorised("malformed basic credentials") from None
    user, sep, password = decoded.partition(":")
    if not sep or not user:
        raise unauthorised("malformed basic credentials")
    return user, password


class Authenticator(Protocol):
    """Who checks logins: the broker, or a slave's replicated users (replica_auth.py)."""

    async def authenticate(self, username: str, password: str, peer_host: str | None) -> User:
        """The user, or AccessRefused."""
        ...


async def authenticate(users: Authenticator, header: str | None, peer_host: str | None) -> User:
    """The user behind these credentials (scrypt runs off the Trio thread)."""
    name, password = parse_basic(header)
    try:
        return await users.authenticate(name, password, peer_host)
    except AccessRefused:
        raise unauthorised() from None


class Caller:
    """An authenticated user and the level its tags reach (needs no broker: a slave's
    read-only API checks its callers with it too)."""

    def __init__(self, user: User) -> None:
        self.user = user
        tags = user.tags
        self.is_admin = ADMINISTRATOR in tags
        self.is_monitor = self.is_admin or MONITORING in tags
        self.is_management = bool(tags & MANAGEMENT_TAGS)

    def require(self, level: Level) -> None:
        """403 unless the user's tags reach `level`."""
        if not self.is_management:
            raise ApiError(403, f"user '{self.user.name}' has no management tag")
        if level is Level.MONITORING and not self.is_monitor:
            raise ApiError(403, "this needs the 'monitoring' or 'administrator' tag")
        if level is Level.ADMINISTRATOR and not self.is_admin:
            raise ApiError(403, "this needs the 'administrator' tag")


class Access(Caller):
    """One authenticated caller's view of the broker."""

    def __init__(self, broker: Broker, user: User) -> None:
        super().__init__(user)
        self.broker = broker

    def sees_vhost(self, name: str) -> bool:
        if self.is_monitor:
            return True
        return (self.user.name, name) in self.broker.users.permissions()

    def visible_vhosts(self) -> list[VirtualHost]:
        if self.is_monitor:
            return list(self.broker.vhosts.values())
        mine = {vhost for _, vhost in self._own_permissions()}
        return [v for name, v in self.broker.vhosts.items() if name in mine]

    def _own_permissions(self) -> list[tuple[str, str]]:
        return [key for key in self.broker.users.permissions() if key[0] == self.user.name]

    def vhost(self, name: str) -> VirtualHost:
        """The vhost `name`: 404 if it does not exist, 403 if the user may not see it."""
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise not_found(f"vhost '{name}'")
        if not self.sees_vhost(name):
            raise ApiError(403, f"access to vhost '{name}' refused for user '{self.user.name}'")
        return vhost

    def sees_connection(self, connection: Connection) -> bool:
        return self.is_monitor or connection.user == self.user.name

    def may_close(self, connection: Connection) -> bool:
        return self.is_admin or connection.user == self.user.name

    def check(self, vhost: str, permission: PermissionKind, kind: str, name: str) -> None:
        """403 unless the user may `permission` the resource (administrators always may)."""
        if self.is_admin:
            return
        self.broker.authorize(self.user, vhost, permission, kind, name)
