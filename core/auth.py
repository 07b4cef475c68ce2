"""Users, logins and permissions: RabbitMQ's internal auth backend, in the kernel.

`AccessControl` holds the users and their permissions per virtual host and answers the three
questions the protocol sessions ask: may this client log in (`authenticate`), may it open this
virtual host (`check_vhost_access`), may it configure / write / read this exchange or queue
(`authorize`). Plugins may answer first (hooks `herald_authenticate`, `herald_authorize`); the
broker falls back to this class.

RabbitMQ's rules, kept so its users' expectations hold:
- a failed login says nothing about why (unknown user, wrong or empty password, no password,
  loopback-only user from a remote peer): one generic 403 text; the reason goes to the log;
- `loopback_users` (default `guest`) may log in only from 127.0.0.0/8 or ::1;
- no permission entry for a virtual host refuses `connection.open` with 530 NOT_ALLOWED;
- a permission is three regular expressions matched with a *search* (not a full match), so
  ".*" allows everything, "^amq\\.gen.*" allows server-named queues, and only the pattern's own
  `^` / `$` anchor it. The empty string means "no access" (RabbitMQ reads it as "^$", which can
  only match an empty name, and no name reaching a check is empty). Python's `re` syntax is used;
  the usual RabbitMQ (PCRE) patterns mean the same in it;
- the default exchange "" is checked under the name "amq.default".

Persistence: every change is reported to `on_change(kind, key, value | None)` (the broker
passes `store.put_metadata`), and `to_metadata` / `load_metadata` snapshot and restore.
Kinds and keys: "user" records are keyed by the user name; "permission" records by
`permission_key(vhost, user)`, the JSON text of `[vhost, user]` (unambiguous for any names,
printable); each record also carries its own fields, which is what loading reads.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

import attrs
import trio

from herald.core import passwords
from herald.core.errors import (
    AccessRefused,
    InternalError,
    NotAllowed,
    NotFound,
    PreconditionFailed,
)
from herald.core.store import MetadataValue

log = logging.getLogger(__name__)

USER_KIND = "user"
PERMISSION_KIND = "permission"
DEFAULT_EXCHANGE_ALIAS = "amq.default"

ChangeHook = Callable[[str, str, MetadataValue | None], object]


class PermissionKind(enum.StrEnum):
    """The three RabbitMQ permissions; the values are the names used on the wire and in hooks."""

    CONFIGURE = "configure"
    WRITE = "write"
    READ = "read"


def _frozen_tags(tags: Iterable[str]) -> frozenset[str]:
    """`frozenset` as a converter mypy's attrs plugin can type (it is generic)."""
    return frozenset(tags)


@attrs.frozen
class User:
    """A user of the internal database. `password_hash` None: no password login possible."""

    name: str
    password_hash: str | None = attrs.field(default=None, repr=False)
    tags: frozenset[str] = attrs.field(default=frozenset(), converter=_frozen_tags)


_INDEX = {kind: i for i, kind in enumerate(PermissionKind)}  # plain "read" etc. find theirs too
_DENY_ALL = re.compile(r"(?!)")


def _compile(field: str, pattern: str) -> re.Pattern[str]:
    if pattern == "":
        return _DENY_ALL
    try:
        return re.compile(pattern)
    except re.error as err:
        raise PreconditionFailed(
            f"invalid regular expression '{pattern}' for {field} permission: {err}"
        ) from None


@attrs.frozen
class Permission:
    """One user's permissions in one virtual host: three regexes, compiled once."""

    configure: str
    write: str
    read: str
    _patterns: tuple[re.Pattern[str], ...] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        compiled = tuple(_compile(kind.value, getattr(self, kind.value)) for kind in PermissionKind)
        object.__setattr__(self, "_patterns", compiled)

    def allows(self, kind: PermissionKind, resource_name: str) -> bool:
        """Whether the `kind` pattern matches `resource_name` (a search, as RabbitMQ's re:run)."""
        return self._patterns[_INDEX[kind]].search(resource_name) is not None


def permission_key(vhost: str, user: str) -> str:
    """The metadata key of a permission record."""
    return json.dumps([vhost, user], separators=(",", ":"), ensure_ascii=False)


def is_loopback(peer_host: str | None) -> bool:
    """Whether `peer_host` is this machine: 127.0.0.0/8, ::1 (also IPv4-mapped), or ""/None.

    ""/None is an in-process caller (CLI, tests, a unix socket), which is local by definition.
    Anything that is not an IP address (a name, garbage) is not loopback.
    """
    if not peer_host:
        return True
    host = peer_host.strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


class _Verification:
    """One scrypt verification in progress, shared by the logins that wait for it."""

    __slots__ = ("done", "ok")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.ok: bool | None = None


class AccessControl:
    """The internal user database, authenticator and authoriser (RabbitMQ semantics)."""

    def __init__(
        self,
        *,
        loopback_users: Iterable[str] = ("guest",),
        on_change: ChangeHook | None = None,
        scrypt_n: int = passwords.SCRYPT_N,
        verified_cache_size: int = 1024,
        authorize_cache_size: int = 4096,
        hash_concurrency: int = 4,
    ) -> None:
        self.loopback_users = frozenset(loopback_users)
        self._on_change = on_change
        self._scrypt_n = scrypt_n
        self._users: dict[str, User] = {}
        self._permissions: dict[tuple[str, str], Permission] = {}  # (user, vhost)
        self._verified_cache_size = verified_cache_size
        self._verified = passwords.VerifiedCache(verified_cache_size)
        self._hash_limiter = trio.CapacityLimiter(hash_concurrency)  # scrypt takes 16 MiB each
        self._verifying: dict[tuple[str, bytes, str], _Verification] = {}
        self._dummy_hash: str | None = None
        self._allowed = functools.lru_cache(maxsize=authorize_cache_size)(self._allowed_uncached)

    def __repr__(self) -> str:
        return f"AccessControl({len(self._users)} users, {len(self._permissions)} permissions)"

    # -- users ------------------------------------------------------------------------------
    def add_user(self, name: str, password: str | None, tags: Iterable[str] = ()) -> User:
        """Create a user; `password` None makes one that cannot log in with a password."""
        if not name:
            raise PreconditionFailed("user name must not be empty")
        if name in self._users:
            raise PreconditionFailed(f"user '{name}' already exists")
        user = User(name, self._hash(password), frozenset(tags))
        self._put_user(user)
        return user

    def change_password(self, name: str, password: str | None) -> User:
        """Replace the password (None: no password login); earlier cached logins stop counting."""
        user = attrs.evolve(self._user(name), password_hash=self._hash(password))
        self._verified.forget_user(name)
        self._put_user(user)
        return user

    def set_tags(self, name: str, tags: Iterable[str]) -> User:
        user = attrs.evolve(self._user(name), tags=frozenset(tags))
        self._put_user(user)
        return user

    def import_user(self, name: str, password_hash: str | None, tags: Iterable[str] = ()) -> User:
        """Create or replace a user from an already-made hash (definitions import, management
        API): PreconditionFailed unless `password_hash` is a hash `passwords` can verify."""
        if not name:
            raise PreconditionFailed("user name must not be empty")
        if password_hash is not None and not passwords.is_well_formed(password_hash):
            raise PreconditionFailed(f"user '{name}': password_hash is not a herald scrypt hash")
        user = User(name, password_hash, frozenset(tags))
        self._verified.forget_user(name)
        self._put_user(user)
        return user

    def delete_user(self, name: str) -> None:
        """Delete a user and every permission it had."""
        self._user(name)
        del self._users[name]
        self._verified.forget_user(name)
        self._emit(USER_KIND, name, None)
        for user, vhost in [key for key in self._permissions if key[0] == name]:
            self._drop_permission(user, vhost)

    def get_user(self, name: str) -> User | None:
        return self._users.get(name)

    def users(self) -> list[User]:
        return sorted(self._users.values(), key=lambda u: u.name)

    def ensure_default_user(
        self,
        name: str = "guest",
        password: str = "guest",
        tags: Iterable[str] = ("administrator",),
        vhost: str = "/",
    ) -> User | None:
        """On first boot (no users at all), create the default user with full access to `vhost`.

        Returns the user created, or None when users already exist (deleting `guest` sticks).
        """
        if self._users:
            return None
        user = self.add_user(name, password, tags)
        self.set_permissions(name, vhost, ".*", ".*", ".*")
        return user

    # -- permissions ------------------------------------------------------------------------
    def set_permissions(
        self, user: str, vhost: str, configure: str, write: str, read: str
    ) -> Permission:
        """Grant `user` access to `vhost` with these three regexes (replacing earlier ones)."""
        self._user(user)
        permission = Permission(configure, write, read)
        self._permissions[(user, vhost)] = permission
        self._allowed.cache_clear()
        self._emit(
            PERMISSION_KIND,
            permission_key(vhost, user),
            _permission_record(user, vhost, permission),
        )
        return permission

    def clear_permissions(self, user: str, vhost: str) -> None:
        if (user, vhost) not in self._permissions:
            raise NotFound(f"no permissions for user '{user}' in vhost '{vhost}'")
        self._drop_permission(user, vhost)

    def clear_vhost(self, vhost: str) -> None:
        """Drop every permission in a deleted virtual host (RabbitMQ does so on vhost delete)."""
        for user, host in [key for key in self._permissions if key[1] == vhost]:
            self._drop_permission(user, host)

    def permissions_for(self, user: str) -> dict[str, Permission]:
        """`user`'s permissions by virtual host."""
        return {vhost: p for (name, vhost), p in self._permissions.items() if name == user}

    def permissions(self) -> dict[tuple[str, str], Permission]:
        """Every permission, keyed by (user, vhost)."""
        return dict(self._permissions)

    # -- the three checks -------------------------------------------------------------------
    async def authenticate(
        self,
        username: str,
        password: str | bytes,
        peer_host: str | None,
        *,
        mechanism: str = "PLAIN",
    ) -> User:
        """The user whose credentials these are, or AccessRefused with a text that tells nothing.

        scrypt runs in a worker thread (at most `hash_concurrency` at once) so the Trio thread
        keeps serving; a login already verified with this password returns from the cache.
        """
        user = self._users.get(username)
        stored = user.password_hash if user is not None else None
        if user is not None and stored is not None and password:
            if self._verified.hit(username, password, stored):
                await trio.lowlevel.checkpoint()
                ok = True
            else:
                ok = await self._verify_once(username, password, stored)
        else:
            # Spend the same time on an unknown user as on a known one: no existence oracle.
            await trio.to_thread.run_sync(self._burn, password, limiter=self._hash_limiter)
            ok = False
        if not ok or user is None or stored is None:
            reason = (
                "user does not exist"
                if user is None
                else "user has no password"
                if stored is None
                else "invalid credentials"
            )
            self._refuse_login(username, peer_host, mechanism, reason)
        self._verified.remember(username, password, stored)
        if username in self.loopback_users and not is_loopback(peer_host):
            self._refuse_login(
                username, peer_host, mechanism, "user can only connect via localhost"
            )
        current = self._users.get(username)
        if current is None or current.password_hash != stored:
            # Deleted, or its password changed, while we were hashing: the newer state wins.
            self._refuse_login(username, peer_host, mechanism, "user changed during login")
        if passwords.needs_rehash(stored, n=self._scrypt_n):
            # The cost parameters were raised since this hash was made: upgrade it now.
            secret = password if isinstance(password, str) else password.decode()
            current = attrs.evolve(current, password_hash=self._hash(secret))
            self._put_user(current)
            self._verified.remember(username, password, current.password_hash or "")
        return current

    async def _verify_once(self, username: str, password: str | bytes, stored: str) -> bool:
        """scrypt in a worker thread, once for concurrent logins with the same credentials:
        a burst of clients logging in as one user (a fleet reconnecting) waits for one
        verification instead of each spending 16 MiB and a core's 20 ms on its own."""
        key = (username, self._verified.digest(password), stored)
        while (running := self._verifying.get(key)) is not None:
            await running.done.wait()
            if running.ok is not None:
                return running.ok
        running = _Verification()
        self._verifying[key] = running
        try:
            running.ok = await trio.to_thread.run_sync(
                passwords.verify_password, password, stored, limiter=self._hash_limiter
            )
            return running.ok
        finally:  # a cancelled leader leaves ok None: the next waiter verifies itself
            del self._verifying[key]
            running.done.set()

    def check_vhost_access(self, user: User | str, vhost: str) -> None:
        """NotAllowed (530, as RabbitMQ at connection.open) unless `user` has a permission entry.

        Whether `vhost` exists is the broker's question; ask it first ("vhost '/x' not found").
        """
        name = user.name if isinstance(user, User) else user
        if (name, vhost) not in self._permissions:
            raise NotAllowed(f"access to vhost '{vhost}' refused for user '{name}'")

    def authorize(
        self,
        user: User | str,
        vhost: str,
        permission: PermissionKind,
        resource_kind: str,  # "queue" or "exchange"
        resource_name: str,
    ) -> None:
        """AccessRefused (403) unless `user` has `permission` on the resource. Cached."""
        if not self.is_allowed(user, vhost, permission, resource_kind, resource_name):
            name = user.name if isinstance(user, User) else user
            shown = (
                resource_name or DEFAULT_EXCHANGE_ALIAS
                if resource_kind == "exchange"
                else resource_name
            )
            raise AccessRefused(
                f"access to {resource_kind} '{shown}' in vhost '{vhost}' refused for user '{name}'"
            )

    def is_allowed(
        self,
        user: User | str,
        vhost: str,
        permission: PermissionKind,
        resource_kind: str,  # "queue" or "exchange"
        resource_name: str,
    ) -> bool:
        """`authorize` as a bool, for callers that filter (e.g. the management API's lists)."""
        name = user.name if isinstance(user, User) else user
        if resource_kind == "exchange" and resource_name == "":
            resource_name = DEFAULT_EXCHANGE_ALIAS
        return self._allowed(name, vhost, permission, resource_name)

    # -- persistence ------------------------------------------------------------------------
    def to_metadata(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Every user and permission as {kind: {key: record}}, as `Store.put_metadata` takes."""
        return {
            USER_KIND: {u.name: _user_record(u) for u in self._users.values()},
            PERMISSION_KIND: {
                permission_key(vhost, user): _permission_record(user, vhost, p)
                for (user, vhost), p in self._permissions.items()
            },
        }

    def load_metadata(self, metadata: Mapping[str, Mapping[str, MetadataValue]]) -> None:
        """Replace users and permissions with the "user" / "permission" records of `metadata`.

        Other kinds are ignored, so the store's whole `load_metadata()` can be passed. Nothing
        is reported to `on_change`: the records came from the store.
        """
        users: dict[str, User] = {}
        for key, record in metadata.get(USER_KIND, {}).items():
            try:
                user = User(record["name"], record["password_hash"], frozenset(record["tags"]))
            except (KeyError, TypeError) as err:
                raise InternalError(f"malformed user record '{key}': {err!r}") from None
            if user.password_hash is not None and not passwords.is_well_formed(user.password_hash):
                raise InternalError(f"user record '{key}' has an unreadable password hash")
            users[user.name] = user
        permissions: dict[tuple[str, str], Permission] = {}
        for key, record in metadata.get(PERMISSION_KIND, {}).items():
            try:
                user_name, vhost = record["user"], record["vhost"]
                permission = Permission(record["configure"], record["write"], record["read"])
            except (KeyError, TypeError, PreconditionFailed) as err:
                raise InternalError(f"malformed permission record '{key}': {err!r}") from None
            if user_name not in users:
                log.warning("ignoring permission record %r of unknown user %r", key, user_name)
                continue
            permissions[(user_name, vhost)] = permission
        self._users = users
        self._permissions = permissions
        self._allowed.cache_clear()
        self._verified = passwords.VerifiedCache(self._verified_cache_size)

    # -- internals --------------------------------------------------------------------------
    def _user(self, name: str) -> User:
        user = self._users.get(name)
        if user is None:
            raise NotFound(f"user '{name}' does not exist")
        return user

    def _hash(self, password: str | None) -> str | None:
        if password is None:
            return None
        if password == "":
            # RabbitMQ refuses blank passwords at login; refuse to store one that cannot work.
            raise PreconditionFailed(
                "password must not be empty; use None for a user without password login"
            )
        return passwords.hash_password(password, n=self._scrypt_n)

    def _burn(self, password: str | bytes) -> None:
        """Verify against a dummy hash: the cost of a real check, for logins that must fail."""
        if self._dummy_hash is None:  # a race makes two dummies; harmless
            self._dummy_hash = passwords.hash_password("dummy", n=self._scrypt_n)
        passwords.verify_password(password or "x", self._dummy_hash)

    def _put_user(self, user: User) -> None:
        self._users[user.name] = user
        self._emit(USER_KIND, user.name, _user_record(user))

    def _drop_permission(self, user: str, vhost: str) -> None:
        del self._permissions[(user, vhost)]
        self._allowed.cache_clear()
        self._emit(PERMISSION_KIND, permission_key(vhost, user), None)

    def _emit(self, kind: str, key: str, value: MetadataValue | None) -> None:
        if self._on_change is not None:
            self._on_change(kind, key, value)

    def _allowed_uncached(
        self, user: str, vhost: str, permission: PermissionKind, resource_name: str
    ) -> bool:
        entry = self._permissions.get((user, vhost))
        return entry is not None and entry.allows(permission, resource_name)

    def _refuse_login(
        self, username: str, peer_host: str | None, mechanism: str, reason: str
    ) -> NoReturn:
        peer = peer_host or "localhost"
        log.info("%s login refused for user '%s' from %s: %s", mechanism, username, peer, reason)
        raise AccessRefused(
            f"Login was refused using authentication mechanism {mechanism}. "
            "For details see the broker logfile."
        )


def _user_record(user: User) -> dict[str, Any]:
    return {"name": user.name, "password_hash": user.password_hash, "tags": sorted(user.tags)}


def _permission_record(user: str, vhost: str, permission: Permission) -> dict[str, Any]:
    return {
        "user": user,
        "vhost": vhost,
        "configure": permission.configure,
        "write": permission.write,
        "read": permission.read,
    }
