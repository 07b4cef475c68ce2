"""Logins and permissions on a slave, from the users its replicated store holds.

Users and permissions are metadata records in the commit log (core/auth.py), so a slave's
store has the master's, as of the last record it applied. `ReplicaUsers` keeps an
`AccessControl` loaded from them (again whenever those records change) and answers logins as
the broker does: `herald_authenticate` plugins first, then herald's scrypt users, with
`loopback_users` from this node's `[auth]`; permission checks ask `herald_authorize` plugins
first, then the users. Nothing is ever written: the control has no change hook, and a node
whose store holds no user yet (a new slave before its first stream) refuses every login.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from herald.core.auth import (
    PERMISSION_KIND,
    USER_KIND,
    AccessControl,
    PermissionKind,
    User,
)
from herald.core.broker import authorize

if TYPE_CHECKING:
    from herald.core.plugins import Plugins
    from herald.core.store import Store


class ReplicaUsers:
    """The users of a replicated store (call `refresh(store)` before each request)."""

    def __init__(self, plugins: Plugins, loopback_users: tuple[str, ...]) -> None:
        self.plugins = plugins
        self.users = AccessControl(loopback_users=loopback_users)
        self._loaded: dict[str, Mapping[str, Any]] | None = None

    def refresh(self, store: Store) -> None:
        """Load the store's user and permission records if they changed since the last call
        (loading clears the cache of verified passwords, so it is not done needlessly)."""
        metadata = store.load_metadata()
        records = {kind: metadata.get(kind, {}) for kind in (USER_KIND, PERMISSION_KIND)}
        if records != self._loaded:
            self.users.load_metadata(records)
            self._loaded = records

    async def authenticate(self, username: str, password: str, peer_host: str | None) -> User:
        """As `Broker.authenticate`: a plugin's user, else the replicated users'."""
        user = self.plugins.authenticate(username, password, peer_host or "")
        if user is not None:
            return user
        return await self.users.authenticate(username, password, peer_host)

    def authorize(
        self,
        user: User,
        vhost: str,
        permission: PermissionKind,
        resource_kind: str,
        resource_name: str,
    ) -> None:
        """As `Broker.authorize` (the same rule: `herald.core.broker.authorize`)."""
        authorize(self.plugins, self.users, user, vhost, permission, resource_kind, resource_name)

    def sees_vhost(self, user: User, vhost: str) -> bool:
        """A permission entry on `vhost` (monitoring and administrator users see all)."""
        return (user.name, vhost) in self.users.permissions()
