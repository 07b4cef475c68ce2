"""Definitions export / import in RabbitMQ's format, and users and permissions CRUD."""

from __future__ import annotations

from pathlib import Path

import httpx

from herald.core.broker import Broker
from tests.management.helpers import assert_error, client, management_broker

RABBITMQ_EXPORT = {
    "rabbit_version": "3.13.0",
    "users": [
        {
            "name": "app",
            "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": "management",
        }
    ],
    "vhosts": [{"name": "shop"}],
    "permissions": [
        {"user": "app", "vhost": "shop", "configure": ".*", "write": ".*", "read": ".*"}
    ],
    "policies": [],
    "queues": [
        {
            "name": "orders",
            "vhost": "shop",
            "durable": True,
            "auto_delete": False,
            "arguments": {"x-queue-type": "classic", "x-max-length": 1000},
        }
    ],
    "exchanges": [
        {
            "name": "shop.events",
            "vhost": "shop",
            "type": "topic",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {},
        }
    ],
    "bindings": [
        {
            "source": "shop.events",
            "vhost": "shop",
            "destination": "orders",
            "destination_type": "queue",
            "routing_key": "order.*",
            "arguments": {},
        }
    ],
}


async def test_import_a_rabbitmq_export(broker: Broker, api: httpx.AsyncClient) -> None:
    response = await api.post("/api/definitions", json=RABBITMQ_EXPORT)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["imported"]["queues"] == 1 and result["imported"]["bindings"] == 1
    assert "rabbit_password_hashing_sha256" in result["warnings"][0]
    shop = broker.vhosts["shop"]
    assert shop.queues["orders"].args.max_length == 1000
    assert shop.exchanges["shop.events"].type == "topic"
    user = broker.users.get_user("app")
    assert user is not None and user.tags == {"management"} and user.password_hash is None


async def test_export_then_import_into_a_fresh_broker(
    broker: Broker, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    await api.post("/api/definitions", json=RABBITMQ_EXPORT)
    await api.put("/api/users/app", json={"password": "s3cret", "tags": "management,monitoring"})
    await api.put("/api/queues/%2F/plain", json={"durable": False})
    exported = (await api.get("/api/definitions")).json()
    assert {q["name"] for q in exported["queues"]} == {"orders", "plain"}
    assert all(not e["name"].startswith("amq.") and e["name"] for e in exported["exchanges"])
    assert exported["policies"] == [] and exported["parameters"] == []
    only_shop = (await api.get("/api/definitions/shop")).json()
    assert [q["name"] for q in only_shop["queues"]] == ["orders"]
    async with management_broker(tmp_path / "fresh") as fresh, client(fresh) as fresh_api:
        imported = await fresh_api.post("/api/definitions", json=exported)
        assert imported.status_code == 200 and imported.json()["warnings"] == []
        again = (await fresh_api.get("/api/definitions")).json()
        for kind in ("vhosts", "queues", "exchanges", "bindings", "permissions"):
            assert sorted(map(str, again[kind])) == sorted(map(str, exported[kind])), kind
        # the exported scrypt hash logs in on the new broker
        async with client(fresh, "app", "s3cret") as app:
            assert (await app.get("/api/whoami")).json()["tags"] == ["management", "monitoring"]


async def test_bad_definitions_are_400(api: httpx.AsyncClient) -> None:
    assert_error(await api.post("/api/definitions", json=[]), 400)
    assert_error(await api.post("/api/definitions", json={"queues": "nope"}), 400)
    bad_queue = {"queues": [{"name": "q", "vhost": "missing"}]}
    assert (
        "queues[0]"
        in assert_error(await api.post("/api/definitions", json=bad_queue), 400)["reason"]
    )
    bad_binding = {"bindings": [{"source": "x", "destination": "y", "destination_type": "z"}]}
    assert_error(await api.post("/api/definitions", json=bad_binding), 400)
    bad_hash = {"users": [{"name": "u", "password_hash": "zzz", "tags": []}]}
    assert_error(await api.post("/api/definitions", json=bad_hash), 400)
    assert (await api.get("/api/overview")).status_code == 200


async def test_users_and_permissions_crud(broker: Broker, api: httpx.AsyncClient) -> None:
    assert (
        await api.put("/api/users/carol", json={"password": "pw", "tags": ["management"]})
    ).status_code == 201
    assert (await api.get("/api/users/carol")).json()["tags"] == ["management"]
    assert (await api.get("/api/users/carol")).json()["hashing_algorithm"] == "herald_scrypt"
    assert (await api.put("/api/users/carol", json={"tags": "administrator"})).status_code == 204
    user = broker.users.get_user("carol")
    assert user is not None and user.tags == {"administrator"}
    assert "carol" in [u["name"] for u in (await api.get("/api/users")).json()]
    perms = {"configure": "^c", "write": ".*", "read": ".*"}
    assert (await api.put("/api/permissions/%2F/carol", json=perms)).status_code == 201
    assert (await api.put("/api/permissions/%2F/carol", json=perms)).status_code == 204
    assert (await api.get("/api/permissions/%2F/carol")).json()["configure"] == "^c"
    assert len((await api.get("/api/users/carol/permissions")).json()) == 1
    assert any(p["user"] == "carol" for p in (await api.get("/api/permissions")).json())
    assert any(p["user"] == "carol" for p in (await api.get("/api/vhosts/%2F/permissions")).json())
    async with client(broker, "carol", "pw") as carol:
        assert (await carol.get("/api/users")).status_code == 200
    assert (await api.delete("/api/permissions/%2F/carol")).status_code == 204
    assert_error(await api.get("/api/permissions/%2F/carol"), 404)
    assert_error(await api.delete("/api/permissions/%2F/carol"), 404)
    assert_error(await api.put("/api/permissions/%2F/carol", json={"configure": "("}), 400)
    assert_error(await api.put("/api/permissions/%2F/nobody", json=perms), 404)
    assert_error(await api.put("/api/permissions/nowhere/carol", json=perms), 404)
    assert_error(await api.put("/api/users/dave", json={"tags": []}), 400)
    assert_error(await api.put("/api/users/dave", json={"password": "", "tags": []}), 400)
    assert_error(await api.put("/api/users/dave", json={"password": 1}), 400)
    assert_error(await api.put("/api/users/dave", json={"password": "x", "tags": 5}), 400)
    assert (await api.delete("/api/users/carol")).status_code == 204
    assert_error(await api.get("/api/users/carol"), 404)
    assert_error(await api.delete("/api/users/carol"), 404)
