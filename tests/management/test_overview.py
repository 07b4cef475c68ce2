"""Overview, message rates, nodes, health checks, plugins, the OpenAPI document, and the
plugin's selection with `--plugins`."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from herald.core.broker import Broker
from herald.core.plugins import get_plugin_manager
from tests.management.helpers import assert_error, management_broker


async def test_overview_shape_and_message_rates(broker: Broker, api: httpx.AsyncClient) -> None:
    await api.put("/api/queues/%2F/rated", json={"durable": False})
    for i in range(20):
        await api.post(
            "/api/exchanges/%2F/amq.default/publish",
            json={"routing_key": "rated", "payload": str(i), "payload_encoding": "string"},
        )
    with trio.fail_after(10):
        while True:
            overview = (await api.get("/api/overview")).json()
            if overview["message_stats"]["publish"] == 20:
                break
            await trio.sleep(0.05)
    stats = overview["message_stats"]
    assert stats["publish_details"]["rate"] > 0
    assert overview["queue_totals"] == {
        "messages": 20,
        "messages_ready": 20,
        "messages_unacknowledged": 0,
    }
    totals = overview["object_totals"]
    assert totals["queues"] == 1 and totals["vhosts"] == 1 and totals["exchanges"] == 6
    protocols = {listener["protocol"] for listener in overview["listeners"]}
    assert protocols == {"amqp", "management"}
    assert overview["node"] == broker.config.broker.node_name
    assert overview["product_name"] == "herald" and overview["alarms"] == []
    queue = (await api.get("/api/queues/%2F/rated")).json()
    assert queue["message_stats"]["publish"] == 20
    with trio.fail_after(10):  # the queue's rate shows once two samples saw it
        while queue["message_stats"]["publish_details"]["rate"] == 0:
            await api.post(
                "/api/exchanges/%2F/amq.default/publish",
                json={"routing_key": "rated", "payload": "more", "payload_encoding": "string"},
            )
            await trio.sleep(0.05)
            queue = (await api.get("/api/queues/%2F/rated")).json()


async def test_nodes(broker: Broker, api: httpx.AsyncClient) -> None:
    (node,) = (await api.get("/api/nodes")).json()
    assert node["name"] == broker.config.broker.node_name and node["running"] is True
    assert node["mem_used"] > 0 and node["herald_store"]["implementation"] == "MemoryStore"
    assert (await api.get(f"/api/nodes/{node['name']}")).json()["name"] == node["name"]
    assert_error(await api.get("/api/nodes/other@host"), 404)


async def test_health_checks(broker: Broker, api: httpx.AsyncClient) -> None:
    for check in ("alive", "ready", "alarms"):
        response = await api.get(f"/api/health/checks/{check}")
        assert response.status_code == 200 and response.json() == {"status": "ok"}
    broker.alarms.set("memory", True)
    try:
        failed = await api.get("/api/health/checks/alarms")
        assert failed.status_code == 503
        assert failed.json()["status"] == "failed" and "memory" in failed.json()["reason"]
        assert (await api.get("/api/overview")).json()["alarms"] == ["memory"]
    finally:
        broker.alarms.set("memory", False)
    assert (await api.get("/api/health/checks/alarms")).status_code == 200


async def test_ready_fails_once_the_broker_is_stopping(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    # A connection that ignores the polite close keeps the broker in its graceful phase
    # (closing connections, listeners still up) until the test lets it go.
    lingering = broker.connections.open("demo", "127.0.0.1:4000")
    broker.stop()
    try:
        with trio.fail_after(5):
            while not broker.stopping:
                await trio.sleep(0.01)
        ready = await api.get("/api/health/checks/ready")
        assert ready.status_code == 503
        assert ready.json() == {"status": "failed", "reason": "the broker is stopping"}
        assert (await api.get("/api/health/checks/alive")).status_code == 200
    finally:
        broker.connections.close(lingering)


async def test_plugins_list(api: httpx.AsyncClient) -> None:
    plugins = {p["name"]: p for p in (await api.get("/api/plugins")).json()}
    assert plugins["management"]["enabled"] is True
    assert plugins["amqp"]["enabled"] is True
    assert plugins["stomp"]["enabled"] is False  # not selected in these tests
    assert (await api.get("/api/extensions")).json() == []


async def test_openapi_lists_every_served_endpoint(api: httpx.AsyncClient) -> None:
    spec = (await api.get("/api/openapi.json")).json()
    assert spec["openapi"].startswith("3.")
    paths = spec["paths"]
    for path in (
        "/api/overview",
        "/api/queues/{vhost}/{queue}",
        "/api/queues/{vhost}/{queue}/contents",
        "/api/exchanges/{vhost}/{exchange}/publish",
        "/api/queues/{vhost}/{queue}/get",
        "/api/queues/{vhost}/{queue}/messages",
        "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
        "/api/definitions",
        "/api/health/checks/alive",
        "/metrics",
    ):
        assert path in paths, path
    operation_ids = [op["operationId"] for item in paths.values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))
    # every GET without path parameters answers without a server error
    for path, item in paths.items():
        if "get" in item and "{" not in path:
            response = await api.get(path)
            assert response.status_code < 500, (path, response.text)


async def test_the_plugin_serves_only_when_selected(tmp_path: Path) -> None:
    async with management_broker(tmp_path / "a", plugins=["amqp"]) as without:
        assert {lst.protocol for lst in without.listeners} == {"amqp"}
    async with management_broker(tmp_path / "b", plugins=["amqp", "management"]) as with_it:
        assert {lst.protocol for lst in with_it.listeners} == {"amqp", "management"}
    assert "management" not in {lst.protocol for lst in with_it.listeners}  # gone once stopped
    info = {i.name: i for i in get_plugin_manager().info()}
    assert "management API" in info["management"].description
