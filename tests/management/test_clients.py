"""Connections, channels and consumers, with a real AMQP client (pika): the API lists the
connection, closes it with a reason, and pika is told that reason."""

from __future__ import annotations

from functools import partial

import httpx
import pika
import pytest
import trio

from herald.core.broker import Broker
from tests.management.helpers import add_user, assert_error, client, port


def _connect(broker: Broker, user: str = "guest") -> pika.BlockingConnection:
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        port(broker, "amqp"),
        credentials=pika.PlainCredentials(user, user),
        client_properties={"product": "management-test"},
        blocked_connection_timeout=10,
        socket_timeout=10,
    )
    return pika.BlockingConnection(parameters)


async def test_pika_connection_is_listed_and_closed_with_a_reason(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    with trio.fail_after(30):
        connection = await trio.to_thread.run_sync(_connect, broker)
        channel = await trio.to_thread.run_sync(connection.channel)
        await trio.to_thread.run_sync(lambda: channel.queue_declare("jobs"))
        await trio.to_thread.run_sync(
            lambda: channel.basic_consume("jobs", lambda *a: None, consumer_tag="worker-1")
        )
        listed = (await api.get("/api/connections")).json()
        assert len(listed) == 1
        entry = listed[0]
        assert entry["protocol"] == "amqp" and entry["user"] == "guest"
        assert entry["vhost"] == "/" and entry["peer_host"] == "127.0.0.1"
        assert entry["client_properties"] == {"product": "management-test"}
        name = entry["name"]
        assert (await api.get(f"/api/connections/{name}")).json()["id"] == entry["id"]
        assert len((await api.get("/api/vhosts/%2F/connections")).json()) == 1
        consumers = (await api.get("/api/consumers")).json()
        assert [c["consumer_tag"] for c in consumers] == ["worker-1"]
        assert consumers[0]["queue"] == {"name": "jobs", "vhost": "/"}
        details = (await api.get("/api/queues/%2F/jobs")).json()
        assert details["consumers"] == 1
        assert details["consumer_details"][0]["consumer_tag"] == "worker-1"

        closed = await api.delete(
            f"/api/connections/{name}", headers={"X-Reason": "maintenance window"}
        )
        assert closed.status_code == 204

        def wait_for_close() -> pika.exceptions.ConnectionClosedByBroker:
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
                for _ in range(100):
                    connection.process_data_events(time_limit=0.1)
            return caught.value

        error = await trio.to_thread.run_sync(wait_for_close)
        assert error.reply_code == 320
        assert "maintenance window" in error.reply_text
        while len(broker.connections):
            await trio.sleep(0.01)
        assert (await api.get("/api/connections")).json() == []
        assert_error(await api.get(f"/api/connections/{name}"), 404)
        assert_error(await api.delete(f"/api/connections/{name}"), 404)
        assert_error(await api.get("/api/connections/not-a-number"), 404)


async def test_management_users_see_and_close_only_their_own_connections(
    broker: Broker,
) -> None:
    add_user(broker, "alice", ["management"], ["/"])
    add_user(broker, "bob", ["management"], ["/"])
    with trio.fail_after(30):
        alices = await trio.to_thread.run_sync(_connect, broker, "alice")
        bobs = await trio.to_thread.run_sync(_connect, broker, "bob")
        try:
            async with client(broker, "alice", "alice") as alice:
                mine = (await alice.get("/api/connections")).json()
                assert [c["user"] for c in mine] == ["alice"]
                bob_id = next(c.id for c in broker.connections if c.user == "bob")
                assert_error(await alice.delete(f"/api/connections/{bob_id}"), 404)
            assert len(broker.connections) == 2
        finally:
            await trio.to_thread.run_sync(alices.close)
            await trio.to_thread.run_sync(bobs.close)


async def test_channels_are_what_the_protocol_reports(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    connection = broker.connections.open("demo", "127.0.0.1:4000")
    try:
        connection.user, connection.vhost = "guest", "/"
        assert (await api.get("/api/channels")).json() == []
        connection.channels = lambda: [{"number": 1, "prefetch_count": 10}, {"number": 2}]
        channels = (await api.get("/api/channels")).json()
        assert [c["number"] for c in channels] == [1, 2]
        assert channels[0]["prefetch_count"] == 10
        assert channels[0]["connection_details"]["name"] == str(connection.id)
        own = (await api.get(f"/api/connections/{connection.id}/channels")).json()
        assert len(own) == 2
        assert len((await api.get("/api/vhosts/%2F/channels")).json()) == 2
        assert (await api.get(f"/api/connections/{connection.id}")).json()["channels"] == 2
        assert (await api.get("/api/overview")).json()["object_totals"]["channels"] == 2
    finally:
        broker.connections.close(connection)


async def test_a_queue_reports_the_type_it_was_declared_with(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    declared = {"votes": "quorum", "explicit": "classic", "plain": None}
    with trio.fail_after(30):
        connection = await trio.to_thread.run_sync(_connect, broker)
        try:
            channel = await trio.to_thread.run_sync(connection.channel)
            for name, queue_type in declared.items():
                arguments = {"x-queue-type": queue_type} if queue_type else None
                declare = partial(channel.queue_declare, name, durable=True, arguments=arguments)
                await trio.to_thread.run_sync(declare)
        finally:
            await trio.to_thread.run_sync(connection.close)
        for name, queue_type in declared.items():
            got = (await api.get(f"/api/queues/%2F/{name}")).json()
            assert got["type"] == (queue_type or "classic"), got
        listed = {q["name"]: q["type"] for q in (await api.get("/api/queues/%2F")).json()}
        assert listed == {"votes": "quorum", "explicit": "classic", "plain": "classic"}
        body = {"durable": True, "arguments": {"x-queue-type": "quorum"}}
        assert (await api.put("/api/queues/%2F/via-api", json=body)).status_code == 201
        assert (await api.get("/api/queues/%2F/via-api")).json()["type"] == "quorum"
