"""Containers an idle MQTT connection does not need are made on first use (PERFORMANCE.md,
10,000 idle connections): `Session`'s permission cache, the QoS 2 id sets of `SessionState`, a
`SharedLimit`'s consumers. First use must behave as with eager ones. (The output event is
`SessionIO`'s: tests/test_session_io.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from herald.core.auth import PermissionKind
from herald.core.broker import Broker
from herald.core.consumer import SharedLimit
from herald.core.errors import AccessRefused
from herald.core.vhost import VirtualHost
from herald.plugins.mqtt.config import MQTTConfig
from herald.plugins.mqtt.context import MQTTContext
from herald.plugins.mqtt.registry import SessionState
from herald.plugins.mqtt.session import Session
from tests.sinks import RecordingSink


@pytest.fixture
def session(kernel: Broker) -> Iterator[Session]:
    """A session of a connection that has sent nothing yet."""
    connection = kernel.connections.open("mqtt", "127.0.0.1:1")
    yield Session(MQTTContext(kernel, MQTTConfig()), connection, None)
    kernel.connections.close(connection)


def test_qos2_id_sets_are_per_session_from_the_first_id() -> None:
    first, second = SessionState("a", 0), SessionState("b", 0)
    first.pubcomp_received(1)  # nothing awaited yet: nothing to do
    first.qos2_released(1)
    first.pubrel_sent(1)
    first.qos2_routed(2)
    assert first.awaiting_pubcomp == {1} and first.inbound_qos2 == {2}
    assert not second.awaiting_pubcomp and not second.inbound_qos2  # not shared
    second.pubrel_sent(3)
    assert first.awaiting_pubcomp == {1} and second.awaiting_pubcomp == {3}
    first.pubcomp_received(1)
    first.qos2_released(2)
    assert not first.awaiting_pubcomp and not first.inbound_qos2
    first.pubrel_sent(4)  # the emptied set is used again
    assert first.awaiting_pubcomp == {4}


async def test_shared_limit_consumers_from_the_first_consumer(vhost: VirtualHost) -> None:
    idle, used = SharedLimit(count_limit=1), SharedLimit(count_limit=1)
    queue = vhost.declare_queue("q")
    consumer = queue.add_consumer("c", RecordingSink(), limit=used)
    assert set(used.consumers) == {consumer} and not idle.consumers
    idle.discard(consumer)  # never added: nothing to do
    consumer.detach_limit()
    assert not used.consumers
    assert not idle.release(0)  # a window with no consumers dispatches nothing


async def test_a_session_has_slots_only(session: Session) -> None:
    """`Session` and `SessionIO` both declare `__slots__`: no per-connection `__dict__`."""
    assert not hasattr(session, "__dict__")
    assert session._output is None and session.link is None  # nothing made while idle


async def test_authorization_cache_from_the_first_check(kernel: Broker, session: Session) -> None:
    kernel.users.add_user("u", None)
    kernel.users.set_permissions("u", "/", configure="", write="^amq\\.topic$", read="")
    session.user = kernel.users.get_user("u")
    assert session._permissions is None  # made at the first check
    for _ in range(2):  # checked, then remembered
        session.authorize(PermissionKind.WRITE, "exchange", "amq.topic")
    for _ in range(2):  # a refusal is not remembered
        with pytest.raises(AccessRefused):
            session.authorize(PermissionKind.WRITE, "exchange", "other")
    kernel.users.clear_permissions("u", "/")
    session.authorize(PermissionKind.WRITE, "exchange", "amq.topic")  # remembered
