"""Routes contributed by other plugins through `herald_management_routes` are mounted with
the same auth, errors and OpenAPI listing as the built-in ones."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pika
import pytest
import trio

from herald.core.broker import Broker
from tests.management.contrib_plugin import SessionsPlugin
from tests.management.helpers import add_user, assert_error, client, management_broker, port
from tests.mqtt_e2e.helpers import Paho
from tests.stomp_e2e.helpers import Client as Stomp


@pytest.fixture
async def contrib_broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with management_broker(tmp_path / "data", extra_plugins=[SessionsPlugin()]) as broker:
        yield broker


async def test_contributed_routes_are_served(contrib_broker: Broker) -> None:
    broker = contrib_broker
    parameters = pika.ConnectionParameters("127.0.0.1", port(broker, "amqp"))
    with trio.fail_after(30):
        connection = await trio.to_thread.run_sync(pika.BlockingConnection, parameters)
        async with client(broker) as api:
            sessions = (await api.get("/api/demo/sessions?protocol=amqp")).json()
            assert len(sessions) == 1 and sessions[0]["user"] == "guest"
            client_id = sessions[0]["client_id"]
            one = (await api.get(f"/api/demo/sessions/{client_id}")).json()
            assert one["client_id"] == client_id
            assert_error(await api.get("/api/demo/sessions/404"), 404)
            assert (await api.get("/api/demo/vhost/%2F")).json() == {"vhost": "/", "user": "guest"}
            assert_error(
                await api.post(
                    f"/api/demo/sessions/{client_id}/kick",
                    content=b"{oops",
                    headers={"content-type": "application/json"},
                ),
                400,
            )
            kicked = await api.post(f"/api/demo/sessions/{client_id}/kick", json={"reason": "bye"})
            assert kicked.status_code == 204
            while len(broker.connections):
                await trio.sleep(0.01)
            # a clash keeps the built-in endpoint; a path outside /api/ is not mounted
            assert "product_name" in (await api.get("/api/overview")).json()
            assert_error(await api.get("/elsewhere"), 404)
            spec = (await api.get("/api/openapi.json")).json()
            assert "/api/demo/sessions/{client_id}" in spec["paths"]
            assert "/elsewhere" not in spec["paths"]
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="bye"):
            await trio.to_thread.run_sync(connection.close)


async def test_contributed_routes_check_tags(contrib_broker: Broker) -> None:
    add_user(contrib_broker, "mgr", ["management"], ["/"])
    add_user(contrib_broker, "mon", ["monitoring"])
    async with client(contrib_broker, "mgr", "mgr") as mgr:
        assert_error(await mgr.get("/api/demo/sessions"), 403)
    async with client(contrib_broker, "mon", "mon") as mon:
        assert (await mon.get("/api/demo/sessions")).status_code == 200
        assert_error(await mon.post("/api/demo/sessions/1/kick", json={}), 403)
    async with client(contrib_broker, user=None) as anonymous:
        assert_error(await anonymous.get("/api/demo/sessions"), 401)


async def test_the_stomp_plugin_contributes_its_subscriptions(tmp_path: Path) -> None:
    """A real contribution: the STOMP plugin's /api/stomp/subscriptions, and its subscriptions
    as the connection's channels in /api/channels."""
    settings = ["stomp.host=127.0.0.1", "stomp.port=0", "stomp.ws_enabled=false"]
    async with management_broker(
        tmp_path / "data", plugins=("stomp", "management"), settings=settings
    ) as broker:
        stomp = await Stomp.connect(broker)
        await stomp.subscribe("/queue/orders", "sub-1", ack="client-individual")
        await stomp.subscribe("/topic/news.#", "sub-2", receipt="r")
        await stomp.receipt("r")
        async with client(broker) as api:
            listed = (await api.get("/api/stomp/subscriptions")).json()
            assert [(s["id"], s["destination"], s["ack"]) for s in listed] == [
                ("sub-1", "/queue/orders", "client-individual"),
                ("sub-2", "/topic/news.#", "auto"),
            ]
            assert {s["user"] for s in listed} == {"guest"}
            channels = (await api.get("/api/channels")).json()
            items = channels["items"] if isinstance(channels, dict) else channels
            assert len(items) == 2
        await stomp.disconnect()


async def test_mqtt_sessions_show_as_channels(tmp_path: Path) -> None:
    settings = ["mqtt.host=127.0.0.1", "mqtt.port=0", "mqtt.ws_enabled=false"]
    async with management_broker(
        tmp_path / "data", plugins=("mqtt", "management"), settings=settings
    ) as broker:
        paho = Paho(broker, version=5, client_id="sensor-7")
        await paho.connect()
        await paho.subscribe("sensors/#", qos=1)
        async with client(broker) as api:
            channels = (await api.get("/api/channels")).json()
            items = channels["items"] if isinstance(channels, dict) else channels
            (session,) = [c for c in items if c.get("client_id") == "sensor-7"]
            assert session["subscriptions"] == [{"filter": "sensors/#", "qos": 1}]
            assert session["protocol_version"] == 5
        await paho.disconnect()


async def test_amqp_channels_are_listed(tmp_path: Path) -> None:
    async with management_broker(tmp_path / "data") as broker:
        parameters = pika.ConnectionParameters("127.0.0.1", port(broker, "amqp"))
        with trio.fail_after(30):
            connection = await trio.to_thread.run_sync(pika.BlockingConnection, parameters)
            channel = await trio.to_thread.run_sync(connection.channel)
            await trio.to_thread.run_sync(lambda: channel.basic_qos(prefetch_count=7))
            await trio.to_thread.run_sync(channel.confirm_delivery)
            async with client(broker) as api:
                listed = (await api.get("/api/channels")).json()
                items = listed["items"] if isinstance(listed, dict) else listed
                (one,) = items
                assert one["prefetch_count"] == 7 and one["confirm"] is True
            await trio.to_thread.run_sync(connection.close)
