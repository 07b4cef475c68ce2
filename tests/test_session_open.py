"""The login flow every protocol shares (core/session_open.py), on a real embedded broker:
each way in, the loopback-only `guest`, the virtual host checks and the per-user limit
counted by the user's name. The protocols' own replies are tested in their e2e suites."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from herald.core.auth import PermissionKind
from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.errors import AccessRefused, NotAllowed
from herald.core.session_open import (
    Credentials,
    LoginRefused,
    LoginWay,
    Permissions,
    log_in,
    open_vhost,
)
from herald.storage.memory import MemoryStore

REMOTE = "192.0.2.7"  # TEST-NET-1: a peer address only, never dialled


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with embedded(
        data_dir=tmp_path,
        plugins=[],
        store=MemoryStore(),
        settings=["broker.max_connections_per_user=1"],
    ) as running:
        running.users.add_user("alice", "secret")
        running.users.set_permissions("alice", "/", ".*", "^alice", ".*")
        yield running


async def test_password_login(broker: Broker) -> None:
    connection = broker.connections.open("test", "127.0.0.1:1")
    user = await log_in(broker, connection, REMOTE, Credentials("alice", b"secret"))
    assert user.name == "alice"
    with pytest.raises(LoginRefused) as refused:
        await log_in(broker, connection, REMOTE, Credentials("alice", "wrong"))
    assert refused.value.way is LoginWay.PASSWORD
    assert isinstance(refused.value, AccessRefused)
    with pytest.raises(LoginRefused):  # not UTF-8: a wrong password, not an encoding error
        await log_in(broker, connection, REMOTE, Credentials("alice", b"\xff\xfe"))


async def test_guest_logs_in_only_from_loopback_whichever_way(broker: Broker) -> None:
    connection = broker.connections.open("test", "127.0.0.1:1")
    assert (
        await log_in(broker, connection, "127.0.0.1", Credentials("guest", "guest"))
    ).name == "guest"
    assert (
        await log_in(broker, connection, "::1", Credentials(None), anonymous_user="guest")
    ).name == "guest"
    with pytest.raises(LoginRefused) as password:
        await log_in(broker, connection, REMOTE, Credentials("guest", "guest"))
    assert password.value.way is LoginWay.PASSWORD
    with pytest.raises(LoginRefused) as anonymous:
        await log_in(broker, connection, REMOTE, Credentials(None), anonymous_user="guest")
    assert anonymous.value.way is LoginWay.ANONYMOUS


async def test_no_credentials_without_an_anonymous_user(broker: Broker) -> None:
    connection = broker.connections.open("test", "127.0.0.1:1")
    with pytest.raises(LoginRefused) as refused:
        await log_in(broker, connection, "127.0.0.1", Credentials(None))
    assert refused.value.way is None
    with pytest.raises(LoginRefused) as unknown:
        await log_in(broker, connection, "127.0.0.1", Credentials(None), anonymous_user="nobody")
    assert unknown.value.way is LoginWay.ANONYMOUS


async def test_open_vhost_checks_and_admits_by_user_name(broker: Broker) -> None:
    alice = await log_in(
        broker, broker.connections.open("t", "p"), REMOTE, Credentials("alice", "secret")
    )
    first, second = broker.connections.open("amqp", "a:1"), broker.connections.open("stomp", "b:2")
    with pytest.raises(NotAllowed, match="vhost '/nope' not found"):
        open_vhost(broker, first, alice, "/nope")
    broker.add_vhost("/other")
    with pytest.raises(NotAllowed, match="access to vhost '/other' refused"):
        open_vhost(broker, first, alice, "/other")
    assert open_vhost(broker, first, alice, "/").name == "/"
    assert first.vhost == "/" and first.user == "alice"
    with pytest.raises(NotAllowed, match="limit of 1 connections"):  # another protocol, same user
        open_vhost(broker, second, alice, "/")
    broker.connections.close(first)
    assert open_vhost(broker, second, alice, "/").name == "/"


async def test_permissions_are_checked_and_remembered(broker: Broker) -> None:
    alice = await log_in(
        broker, broker.connections.open("t", "p"), REMOTE, Credentials("alice", "secret")
    )
    permissions = Permissions(broker, alice, "/")
    permissions.authorize(PermissionKind.WRITE, "exchange", "alice.x")
    with pytest.raises(AccessRefused, match=r"exchange 'bob\.x'"):
        permissions.authorize(PermissionKind.WRITE, "exchange", "bob.x")
    broker.users.clear_permissions("alice", "/")
    permissions.authorize(PermissionKind.WRITE, "exchange", "alice.x")  # remembered
    with pytest.raises(AccessRefused):
        Permissions(broker, alice, "/").authorize(PermissionKind.WRITE, "exchange", "alice.x")
