"""Declarations, bindings and routing through the virtual host (RabbitMQ's answers)."""

from __future__ import annotations

import pytest

from herald.core.errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked
from herald.core.vhost import RouteStatus, VirtualHost
from tests.sinks import RecordingSink, body, msg


def ready_bodies(vhost: VirtualHost, queue: str) -> list[bytes]:
    return [body(e.message) for e in vhost.queues[queue].browse()]


async def test_default_exchange_routes_by_queue_name(vhost: VirtualHost) -> None:
    vhost.declare_queue("orders")
    assert vhost.publish(msg("a", "orders")).status is RouteStatus.ROUTED
    assert vhost.publish(msg("b", "nobody")).status is RouteStatus.UNROUTABLE
    assert ready_bodies(vhost, "orders") == [b"a"]


async def test_predeclared_exchanges_exist(vhost: VirtualHost) -> None:
    for name, kind in [
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
    ]:
        assert vhost.get_exchange(name).type == kind


async def test_direct_fanout_topic_headers(vhost: VirtualHost) -> None:
    for q in ("d", "f1", "f2", "t", "h"):
        vhost.declare_queue(q)
    vhost.bind_queue("d", "amq.direct", "k")
    vhost.bind_queue("f1", "amq.fanout")
    vhost.bind_queue("f2", "amq.fanout")
    vhost.bind_queue("t", "amq.topic", "sensors.*.temp")
    vhost.bind_queue("h", "amq.headers", "", {"x-match": "all", "kind": "alert"})
    vhost.publish(msg("1", "k", "amq.direct"))
    vhost.publish(msg("2", "ignored", "amq.fanout"))
    vhost.publish(msg("3", "sensors.hall.temp", "amq.topic"))
    vhost.publish(msg("4", "sensors.hall.humidity", "amq.topic"))
    vhost.publish(msg("5", "", "amq.headers", headers={"kind": "alert"}))
    vhost.publish(msg("6", "", "amq.headers", headers={"kind": "info"}))
    assert ready_bodies(vhost, "d") == [b"1"]
    assert ready_bodies(vhost, "f1") == ready_bodies(vhost, "f2") == [b"2"]
    assert ready_bodies(vhost, "t") == [b"3"]
    assert ready_bodies(vhost, "h") == [b"5"]


async def test_one_message_is_shared_not_copied(vhost: VirtualHost) -> None:
    vhost.declare_queue("a")
    vhost.declare_queue("b")
    vhost.bind_queue("a", "amq.fanout")
    vhost.bind_queue("b", "amq.fanout")
    result = vhost.publish(msg("x", exchange="amq.fanout"))
    assert result.queues == 2
    assert vhost.queues["a"].browse()[0].message is vhost.queues["b"].browse()[0].message


async def test_exchange_to_exchange_bindings_route_once_per_queue(vhost: VirtualHost) -> None:
    vhost.declare_exchange("upstream", "topic")
    vhost.declare_exchange("downstream", "fanout")
    vhost.declare_queue("q")
    vhost.bind_exchange("downstream", "upstream", "logs.#")
    vhost.bind_queue("q", "downstream")
    vhost.bind_queue("q", "upstream", "logs.error")  # a second path to the same queue
    vhost.bind_exchange("upstream", "downstream")  # a cycle must not loop
    assert vhost.publish(msg("e", "logs.error", "upstream")).queues == 1
    assert vhost.publish(msg("i", "logs.info", "upstream")).queues == 1
    assert vhost.publish(msg("x", "other", "upstream")).status is RouteStatus.UNROUTABLE
    assert ready_bodies(vhost, "q") == [b"e", b"i"]
    vhost.unbind_exchange("downstream", "upstream", "logs.#")
    assert vhost.publish(msg("i2", "logs.info", "upstream")).status is RouteStatus.UNROUTABLE


async def test_alternate_exchange_takes_unroutable(vhost: VirtualHost) -> None:
    vhost.declare_exchange("unrouted", "fanout")
    vhost.declare_queue("lost")
    vhost.bind_queue("lost", "unrouted")
    vhost.declare_exchange("main", "direct", arguments={"alternate-exchange": "unrouted"})
    assert vhost.publish(msg("m", "nokey", "main")).status is RouteStatus.ROUTED
    assert ready_bodies(vhost, "lost") == [b"m"]


async def test_publish_to_missing_or_internal_exchange(vhost: VirtualHost) -> None:
    with pytest.raises(NotFound) as info:
        vhost.publish(msg("m", "k", "nope"))
    assert info.value.reply_code == 404
    vhost.declare_exchange("inner", "fanout", internal=True)
    with pytest.raises(AccessRefused):
        vhost.publish(msg("m", "k", "inner"))


async def test_redeclare_must_be_equivalent(vhost: VirtualHost) -> None:
    vhost.declare_exchange("e", "direct", durable=True)
    assert vhost.declare_exchange("e", "direct", durable=True) is vhost.exchanges["e"]
    with pytest.raises(PreconditionFailed) as info:
        vhost.declare_exchange("e", "topic", durable=True)
    assert info.value.reply_code == 406
    vhost.declare_queue("q", durable=True, arguments={"x-max-length": 5})
    vhost.declare_queue("q", durable=True, arguments={"x-max-length": 5})
    with pytest.raises(PreconditionFailed):
        vhost.declare_queue("q", durable=False)
    with pytest.raises(PreconditionFailed):
        vhost.declare_queue("q", durable=True, arguments={"x-max-length": 6})


async def test_passive_declares(vhost: VirtualHost) -> None:
    with pytest.raises(NotFound):
        vhost.declare_queue("missing", passive=True)
    with pytest.raises(NotFound):
        vhost.declare_exchange("missing", passive=True)
    vhost.declare_queue("here")
    assert vhost.declare_queue("here", passive=True).name == "here"


async def test_reserved_names_and_default_exchange(vhost: VirtualHost) -> None:
    with pytest.raises(AccessRefused):
        vhost.declare_exchange("amq.mine", "direct")
    with pytest.raises(AccessRefused):
        vhost.declare_queue("amq.mine")
    with pytest.raises(AccessRefused):
        vhost.bind_queue(vhost.declare_queue("q").name, "", "q")
    with pytest.raises(AccessRefused):
        vhost.delete_exchange("amq.topic")
    with pytest.raises(AccessRefused):
        vhost.declare_exchange("", "direct")


async def test_server_named_queue(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("", exclusive=True, owner="conn-1")
    assert queue.name.startswith("amq.gen-")
    assert queue.name in vhost.queues


async def test_bind_errors(vhost: VirtualHost) -> None:
    vhost.declare_queue("q")
    with pytest.raises(NotFound):
        vhost.bind_queue("q", "no-such-exchange", "k")
    with pytest.raises(NotFound):
        vhost.bind_queue("no-such-queue", "amq.direct", "k")


async def test_delete_queue_conditions(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    vhost.publish(msg("m", "q"))
    with pytest.raises(PreconditionFailed):
        vhost.delete_queue("q", if_empty=True)
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=0)
    with pytest.raises(PreconditionFailed):
        vhost.delete_queue("q", if_unused=True)
    assert vhost.delete_queue("q") == 0  # the message was with the consumer
    assert sink.cancelled and "q" not in vhost.queues
    assert vhost.delete_queue("q") == 0  # deleting a missing queue succeeds, as in RabbitMQ


async def test_delete_queue_removes_its_bindings(vhost: VirtualHost) -> None:
    vhost.declare_queue("q")
    vhost.bind_queue("q", "amq.topic", "#")
    vhost.delete_queue("q")
    vhost.declare_queue("q")
    assert vhost.publish(msg("m", "a.b", "amq.topic")).status is RouteStatus.UNROUTABLE


async def test_auto_delete_exchange_goes_with_its_last_binding(vhost: VirtualHost) -> None:
    vhost.declare_exchange("temp", "fanout", auto_delete=True)
    vhost.declare_queue("q")
    vhost.bind_queue("q", "temp")
    vhost.unbind_queue("q", "temp")
    assert "temp" not in vhost.exchanges


async def test_deleting_a_bound_auto_delete_exchange_deletes_it_once(vhost: VirtualHost) -> None:
    """Its bindings go with it; their removal must not delete it a second time (KeyError)."""
    vhost.declare_exchange("temp", "fanout", auto_delete=True)
    vhost.declare_exchange("upstream", "fanout")
    vhost.declare_queue("q")
    vhost.bind_queue("q", "temp")
    vhost.bind_exchange("temp", "upstream")
    vhost.delete_exchange("temp")
    assert "temp" not in vhost.exchanges
    assert vhost.publish(msg("m", "", "upstream")).status is RouteStatus.UNROUTABLE
    vhost.declare_exchange("temp", "fanout", auto_delete=True)  # the name is free again
    assert vhost.publish(msg("m", "", "temp")).status is RouteStatus.UNROUTABLE


async def test_exchange_delete_if_unused(vhost: VirtualHost) -> None:
    vhost.declare_exchange("e", "fanout")
    vhost.declare_queue("q")
    vhost.bind_queue("q", "e")
    with pytest.raises(PreconditionFailed):
        vhost.delete_exchange("e", if_unused=True)
    vhost.delete_exchange("e")
    assert "e" not in vhost.exchanges
    vhost.delete_exchange("e")  # missing: fine


async def test_exclusive_queue_belongs_to_its_connection(vhost: VirtualHost) -> None:
    owner, other = object(), object()
    vhost.declare_queue("mine", exclusive=True, owner=owner)
    with pytest.raises(ResourceLocked) as info:
        vhost.declare_queue("mine", exclusive=True, owner=other)
    assert info.value.reply_code == 405
    with pytest.raises(ResourceLocked):
        vhost.get_queue("mine", owner=other).add_consumer("c", RecordingSink())
    vhost.owner_closed(owner)
    assert "mine" not in vhost.queues


async def test_purge_keeps_unacked(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    for i in range(5):
        vhost.publish(msg(str(i), "q"))
    sink = RecordingSink()
    queue.add_consumer("c", sink, prefetch_count=2)
    assert vhost.purge_queue("q") == 3
    assert queue.statistics().messages_unacknowledged == 2
    for entry in sink.take():
        queue.reject(entry, requeue=True)
    assert sink.bodies == [b"0", b"1"]  # requeued and redelivered
