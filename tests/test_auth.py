"""Users, logins and permissions (core/auth.py, core/passwords.py), with RabbitMQ's rules."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.core import passwords
from herald.core.auth import (
    DEFAULT_EXCHANGE_ALIAS,
    AccessControl,
    Permission,
    PermissionKind,
    User,
    is_loopback,
    permission_key,
)
from herald.core.errors import AccessRefused, NotAllowed, NotFound, PreconditionFailed

FAST_N = 2**4  # the cheapest scrypt: these tests check behaviour, not cost
CONFIGURE, WRITE, READ = PermissionKind.CONFIGURE, PermissionKind.WRITE, PermissionKind.READ
GENERIC_REFUSAL = (
    "Login was refused using authentication mechanism PLAIN. For details see the broker logfile."
)


class Recorder:
    """Collects on_change calls, in the shape `Store.put_metadata` receives them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.records: dict[str, dict[str, Any]] = {}

    def __call__(self, kind: str, key: str, value: Any) -> int:
        self.calls.append((kind, key, value))
        if value is None:
            self.records.setdefault(kind, {}).pop(key, None)
        else:
            self.records.setdefault(kind, {})[key] = value
        return len(self.calls)


def make(**kwargs: Any) -> AccessControl:
    return AccessControl(scrypt_n=FAST_N, **kwargs)


# -- passwords ------------------------------------------------------------------------------


def test_default_hash_format_is_self_describing() -> None:
    stored = passwords.hash_password("s3cret")
    scheme, n, r, p, salt, digest = stored.split("$")
    assert (scheme, n, r, p) == ("scrypt", str(2**14), "8", "1")
    assert len(base64.b64decode(salt)) == 16
    assert len(base64.b64decode(digest)) == 32
    assert passwords.verify_password("s3cret", stored)
    assert not passwords.verify_password("s3cret ", stored)
    assert not passwords.needs_rehash(stored)


def test_same_password_gets_a_new_salt_each_time() -> None:
    assert passwords.hash_password("pw", n=FAST_N) != passwords.hash_password("pw", n=FAST_N)


@settings(max_examples=25, deadline=None)
@given(password=st.text(min_size=1, max_size=40), other=st.text(min_size=1, max_size=40))
def test_hash_round_trip(password: str, other: str) -> None:
    stored = passwords.hash_password(password, n=FAST_N)
    assert passwords.verify_password(password, stored)
    assert passwords.verify_password(password.encode(), stored)  # the bytes a PLAIN frame holds
    assert passwords.verify_password(other, stored) == (other == password)


@pytest.mark.parametrize(
    "stored",
    [
        "",
        "bcrypt$x",
        "scrypt$16$8$1$c2FsdA==",  # too few fields
        "scrypt$15$8$1$c2FsdHNhbHRzYWx0$" + "A" * 44,  # n not a power of two
        "scrypt$16$8$1$not*base64$" + "A" * 44,
        "scrypt$1099511627776$8$1$c2FsdHNhbHRzYWx0$" + "A" * 44,  # absurd cost
    ],
)
def test_malformed_hash_never_verifies(stored: str) -> None:
    assert not passwords.is_well_formed(stored)
    assert not passwords.verify_password("anything", stored)


def test_needs_rehash_when_parameters_change() -> None:
    stored = passwords.hash_password("pw", n=FAST_N)
    assert passwords.needs_rehash(stored)  # against the default n
    assert not passwords.needs_rehash(stored, n=FAST_N)


def test_verified_cache_is_bounded_lru_and_keyed_by_the_stored_hash() -> None:
    cache = passwords.VerifiedCache(maxsize=2)
    cache.remember("a", "pw", "H1")
    cache.remember("b", "pw", "H2")
    assert cache.hit("a", "pw", "H1")  # refreshes a
    cache.remember("c", "pw", "H3")  # evicts b, the least recently used
    assert len(cache) == 2
    assert not cache.hit("b", "pw", "H2")
    assert cache.hit("c", "pw", "H3")
    assert not cache.hit("a", "other", "H1")
    assert not cache.hit("a", "pw", "H-new")  # the password changed since
    assert "pw" not in repr(cache)


# -- users and logins -----------------------------------------------------------------------


async def test_login_with_right_password_and_refusal_with_wrong_one() -> None:
    access = make()
    created = access.add_user("alice", "wonderland", tags=["management"])
    assert await access.authenticate("alice", "wonderland", "10.0.0.5") == created
    assert created.tags == frozenset({"management"})
    with pytest.raises(AccessRefused) as wrong:
        await access.authenticate("alice", "Wonderland", "10.0.0.5")
    with pytest.raises(AccessRefused) as unknown:
        await access.authenticate("nobody", "wonderland", "10.0.0.5")
    # The same text whether or not the user exists: no user enumeration.
    assert wrong.value.reply_text == unknown.value.reply_text == GENERIC_REFUSAL
    assert wrong.value.reply_code == 403


async def test_a_burst_of_logins_shares_one_verification(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fleet logging in as one user at once costs one scrypt, not one each (nor 16 MiB
    each); a wrong password in the same burst is still refused."""
    access = make()
    access.add_user("fleet", "secret")
    real = passwords.verify_password
    calls: list[str] = []

    def counted(password: str | bytes, stored: str) -> bool:
        calls.append(str(password))
        return real(password, stored)

    monkeypatch.setattr(passwords, "verify_password", counted)
    results: list[object] = []

    async def login(password: str) -> None:
        try:
            results.append(await access.authenticate("fleet", password, "127.0.0.1"))
        except AccessRefused as exc:
            results.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(login, "secret")
        for _ in range(5):
            nursery.start_soon(login, "wrong")
    assert sorted(calls) == ["secret", "wrong"]
    assert sum(isinstance(r, AccessRefused) for r in results) == 5
    assert sum(getattr(r, "name", None) == "fleet" for r in results) == 20


async def test_refusals_are_logged_with_the_reason_but_never_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    access = make()
    access.add_user("alice", "wonderland")
    caplog.set_level(logging.INFO, logger="herald.core.auth")
    with pytest.raises(AccessRefused):
        await access.authenticate("alice", "hunter2-typo", "10.0.0.5")
    assert "alice" in caplog.text and "invalid credentials" in caplog.text
    assert "hunter2" not in caplog.text


async def test_empty_password_and_passwordless_user_cannot_log_in() -> None:
    access = make()
    access.add_user("svc", None)
    access.add_user("bob", "builder")
    for username, password in [("svc", "anything"), ("svc", ""), ("bob", "")]:
        with pytest.raises(AccessRefused):
            await access.authenticate(username, password, "127.0.0.1")
    with pytest.raises(PreconditionFailed):
        access.add_user("carol", "")


async def test_password_change_invalidates_cached_login() -> None:
    access = make()
    access.add_user("alice", "old")
    await access.authenticate("alice", "old", "10.0.0.5")  # now cached
    await access.authenticate("alice", "old", "10.0.0.5")  # served from the cache
    access.change_password("alice", "new")
    with pytest.raises(AccessRefused):
        await access.authenticate("alice", "old", "10.0.0.5")
    assert (await access.authenticate("alice", "new", "10.0.0.5")).name == "alice"
    access.change_password("alice", None)
    with pytest.raises(AccessRefused):
        await access.authenticate("alice", "new", "10.0.0.5")


async def test_deleted_user_cannot_log_in_even_when_cached() -> None:
    access = make()
    access.add_user("alice", "pw")
    await access.authenticate("alice", "pw", "10.0.0.5")
    access.delete_user("alice")
    with pytest.raises(AccessRefused):
        await access.authenticate("alice", "pw", "10.0.0.5")
    # Re-created with the same password: a new salt, a new hash; the login works again.
    access.add_user("alice", "pw")
    assert (await access.authenticate("alice", "pw", "10.0.0.5")).name == "alice"


async def test_old_parameters_are_rehashed_on_login() -> None:
    recorder = Recorder()
    old = make()
    old.add_user("alice", "pw")
    access = AccessControl(scrypt_n=2 * FAST_N, on_change=recorder)
    access.load_metadata(old.to_metadata())
    user = await access.authenticate("alice", "pw", "")
    assert user.password_hash is not None
    assert user.password_hash.split("$")[1] == str(2 * FAST_N)
    assert recorder.calls == [("user", "alice", recorder.records["user"]["alice"])]
    assert (await access.authenticate("alice", "pw", "")) == user


@pytest.mark.parametrize("peer", ["10.1.2.3", "2001:db8::1", "192.168.0.1", "localhost", "junk"])
async def test_guest_is_refused_from_a_remote_peer(peer: str) -> None:
    access = make()
    access.ensure_default_user()
    with pytest.raises(AccessRefused) as refused:
        await access.authenticate("guest", "guest", peer)
    assert refused.value.reply_text == GENERIC_REFUSAL


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.10.20.30", "::1", "[::1]", "::ffff:127.0.0.1"])
async def test_guest_is_accepted_from_loopback(peer: str) -> None:
    access = make()
    access.ensure_default_user()
    assert (await access.authenticate("guest", "guest", peer)).name == "guest"


async def test_in_process_callers_count_as_local() -> None:
    access = make()
    access.ensure_default_user()
    assert (await access.authenticate("guest", "guest", "")).name == "guest"
    assert (await access.authenticate("guest", "guest", None)).name == "guest"


async def test_other_users_may_log_in_from_anywhere_and_loopback_users_are_configurable() -> None:
    access = make(loopback_users=["ops"])
    access.ensure_default_user()
    access.add_user("ops", "pw")
    assert (await access.authenticate("guest", "guest", "2001:db8::1")).name == "guest"
    with pytest.raises(AccessRefused):
        await access.authenticate("ops", "pw", "2001:db8::1")


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("")
    assert not is_loopback("10.1.2.3") and not is_loopback("::2") and not is_loopback("0.0.0.0")


def test_reprs_do_not_leak_secrets() -> None:
    access = make()
    user = access.add_user("alice", "hunter2")
    assert user.password_hash is not None
    for text in (repr(user), str(user), repr(access)):
        assert "hunter2" not in text
        assert user.password_hash not in text
        assert "scrypt" not in text
    assert "alice" in repr(user)


def test_user_management() -> None:
    access = make()
    access.add_user("bob", "pw")
    access.add_user("alice", None, tags=("monitoring",))
    with pytest.raises(PreconditionFailed):
        access.add_user("bob", "again")
    assert [u.name for u in access.users()] == ["alice", "bob"]
    assert access.set_tags("alice", ["administrator", "management"]).tags == {
        "administrator",
        "management",
    }
    assert access.get_user("alice") == User(
        "alice", None, frozenset({"administrator", "management"})
    )
    assert access.get_user("nobody") is None
    with pytest.raises(NotFound):
        access.change_password("nobody", "pw")
    with pytest.raises(NotFound):
        access.delete_user("nobody")
    with pytest.raises(NotFound):
        access.set_permissions("nobody", "/", ".*", ".*", ".*")


# -- virtual hosts and permissions ----------------------------------------------------------


def test_vhost_access_needs_a_permission_entry() -> None:
    access = make()
    user = access.add_user("alice", "pw")
    access.set_permissions("alice", "/", "", "", "")  # deny-all still opens the vhost
    access.check_vhost_access(user, "/")
    access.check_vhost_access("alice", "/")
    with pytest.raises(NotAllowed) as refused:
        access.check_vhost_access(user, "/other")
    assert refused.value.reply_code == 530
    assert refused.value.reply_text == "access to vhost '/other' refused for user 'alice'"
    access.clear_permissions("alice", "/")
    with pytest.raises(NotAllowed):
        access.check_vhost_access(user, "/")
    with pytest.raises(NotFound):
        access.clear_permissions("alice", "/")


def test_permission_patterns_are_searches_anchored_only_by_themselves() -> None:
    access = make()
    access.add_user("u", "pw")
    access.set_permissions("u", "/", r"^amq\.gen.*", "orders", "^$")
    assert access.is_allowed("u", "/", CONFIGURE, "queue", "amq.gen-JzTY20BRgKO")
    assert not access.is_allowed("u", "/", CONFIGURE, "queue", "my.amq.gen")
    assert not access.is_allowed("u", "/", CONFIGURE, "queue", "work")
    # Unanchored: "orders" matches anywhere in the name, as RabbitMQ's re:run does.
    assert access.is_allowed("u", "/", WRITE, "exchange", "orders")
    assert access.is_allowed("u", "/", WRITE, "exchange", "eu.orders.v2")
    assert not access.is_allowed("u", "/", WRITE, "exchange", "ord")
    assert not access.is_allowed("u", "/", READ, "queue", "anything")
    # Permissions belong to one vhost.
    assert not access.is_allowed("u", "/other", WRITE, "exchange", "orders")


@settings(max_examples=50)
@given(name=st.text(min_size=1, max_size=30))
def test_dot_star_allows_every_name_and_empty_denies_every_name(name: str) -> None:
    assert Permission(".*", ".*", ".*").allows(READ, name)
    assert not Permission("", "", "").allows(READ, name)
    assert not Permission("", "", "").allows(CONFIGURE, "")


def test_each_kind_uses_its_own_pattern_and_plain_strings_work_too() -> None:
    permission = Permission(configure="c", write="w", read="r")
    assert [permission.allows(kind, "c") for kind in PermissionKind] == [True, False, False]
    assert [permission.allows(kind, "w") for kind in PermissionKind] == [False, True, False]
    assert [permission.allows(kind, "r") for kind in PermissionKind] == [False, False, True]
    assert permission.allows("write", "w")  # type: ignore[arg-type]  # as hooks pass it


def test_authorize_raises_rabbitmq_text() -> None:
    access = make()
    user = access.add_user("u", "pw")
    access.set_permissions("u", "/", "", ".*", "^reports$")
    access.authorize(user, "/", READ, "queue", "reports")
    with pytest.raises(AccessRefused) as refused:
        access.authorize(user, "/", READ, "queue", "x")
    assert refused.value.reply_text == "access to queue 'x' in vhost '/' refused for user 'u'"
    with pytest.raises(AccessRefused):
        access.authorize("u", "/", CONFIGURE, "exchange", "logs")
    with pytest.raises(AccessRefused):
        access.authorize("stranger", "/", WRITE, "exchange", "logs")


def test_default_exchange_is_checked_as_amq_default() -> None:
    access = make()
    user = access.add_user("u", "pw")
    access.set_permissions("u", "/", "", r"^amq\.default$", "")
    access.authorize(user, "/", WRITE, "exchange", "")
    access.set_permissions("u", "/", "", "^$", "")  # "^$" would match "" but not amq.default
    with pytest.raises(AccessRefused) as refused:
        access.authorize(user, "/", WRITE, "exchange", "")
    assert refused.value.reply_text == (
        f"access to exchange '{DEFAULT_EXCHANGE_ALIAS}' in vhost '/' refused for user 'u'"
    )
    # Only exchanges: a queue called "" (never authorised in practice) is not renamed.
    assert access.is_allowed(user, "/", WRITE, "queue", "")


def test_permission_changes_take_effect_despite_the_result_cache() -> None:
    access = make()
    access.add_user("u", "pw")
    access.set_permissions("u", "/", ".*", ".*", ".*")
    assert access.is_allowed("u", "/", READ, "queue", "q")
    access.set_permissions("u", "/", ".*", ".*", "^other$")
    assert not access.is_allowed("u", "/", READ, "queue", "q")
    access.set_permissions("u", "/", ".*", ".*", ".*")
    assert access.is_allowed("u", "/", READ, "queue", "q")
    access.clear_permissions("u", "/")
    assert not access.is_allowed("u", "/", READ, "queue", "q")


def test_invalid_regex_is_refused() -> None:
    access = make()
    access.add_user("u", "pw")
    with pytest.raises(PreconditionFailed, match="write"):
        access.set_permissions("u", "/", ".*", "(unclosed", ".*")
    assert access.permissions_for("u") == {}


def test_delete_user_removes_their_permissions() -> None:
    access = make()
    access.add_user("u", "pw")
    access.add_user("v", "pw")
    access.set_permissions("u", "/", ".*", ".*", ".*")
    access.set_permissions("u", "/dev", ".*", ".*", ".*")
    access.set_permissions("v", "/", ".*", ".*", ".*")
    assert set(access.permissions_for("u")) == {"/", "/dev"}
    access.delete_user("u")
    assert access.permissions_for("u") == {}
    assert list(access.permissions()) == [("v", "/")]
    with pytest.raises(NotAllowed):
        access.check_vhost_access("u", "/")
    access.add_user("u", "pw")  # a new user of the same name starts with nothing
    assert not access.is_allowed("u", "/", READ, "queue", "q")


def test_clear_vhost_drops_only_that_vhosts_permissions() -> None:
    access = make()
    access.add_user("u", "pw")
    access.set_permissions("u", "/", ".*", ".*", ".*")
    access.set_permissions("u", "/dev", ".*", ".*", ".*")
    access.clear_vhost("/dev")
    assert set(access.permissions_for("u")) == {"/"}


def test_ensure_default_user_only_on_first_boot() -> None:
    access = make()
    guest = access.ensure_default_user()
    assert guest is not None and guest.name == "guest"
    assert guest.tags == {"administrator"}
    assert access.permissions_for("guest") == {"/": Permission(".*", ".*", ".*")}
    assert access.ensure_default_user() is None
    access.delete_user("guest")
    access.add_user("admin", "pw")
    assert access.ensure_default_user() is None  # deleting guest sticks across restarts
    assert access.get_user("guest") is None


# -- persistence ----------------------------------------------------------------------------


def test_on_change_reports_every_change_with_kind_and_key() -> None:
    recorder = Recorder()
    access = make(on_change=recorder)
    access.add_user("u", "pw", tags=["management"])
    access.set_permissions("u", "/", ".*", "w", "r")
    access.set_tags("u", ["monitoring"])
    access.change_password("u", "pw2")
    access.delete_user("u")
    key = permission_key("/", "u")
    assert json.loads(key) == ["/", "u"]
    assert [(kind, k, v is None) for kind, k, v in recorder.calls] == [
        ("user", "u", False),
        ("permission", key, False),
        ("user", "u", False),
        ("user", "u", False),
        ("user", "u", True),
        ("permission", key, True),
    ]
    added, granted = recorder.calls[0][2], recorder.calls[1][2]
    assert added["name"] == "u" and added["tags"] == ["management"]
    assert added["password_hash"].startswith("scrypt$")
    assert granted == {"user": "u", "vhost": "/", "configure": ".*", "write": "w", "read": "r"}
    assert recorder.calls[2][2]["tags"] == ["monitoring"]
    assert recorder.calls[3][2]["password_hash"] != added["password_hash"]
    assert recorder.records == {"user": {}, "permission": {}}


async def test_metadata_round_trip_survives_a_restart() -> None:
    recorder = Recorder()
    before = make(on_change=recorder)
    before.ensure_default_user()
    before.add_user("alice", "wonderland", tags=["management"])
    before.add_user("svc", None)
    before.set_permissions("alice", "/", r"^amq\.gen.*", ".*", "")
    before.set_permissions("alice", "a\x00b", ".*", "", "")  # any vhost name keys safely
    assert json.loads(json.dumps(before.to_metadata())) == before.to_metadata()
    assert recorder.records == before.to_metadata()  # the change log equals the snapshot

    after = make()
    after.load_metadata({**json.loads(json.dumps(recorder.records)), "vhost": {"/": {}}})
    assert after.users() == before.users()
    assert after.permissions() == before.permissions()
    assert (await after.authenticate("alice", "wonderland", "10.0.0.5")).tags == {"management"}
    assert after.is_allowed("alice", "/", CONFIGURE, "queue", "amq.gen-1")
    assert not after.is_allowed("alice", "/", READ, "queue", "q")
    assert after.is_allowed("alice", "a\x00b", CONFIGURE, "queue", "q")


def test_load_metadata_skips_permissions_of_unknown_users() -> None:
    orphan = {"user": "ghost", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    access = make()
    access.load_metadata({"permission": {permission_key("/", "ghost"): orphan}})
    assert access.permissions() == {}
