"""Security: basic auth against the broker's users, RabbitMQ's tag rules, and a broker that
keeps serving whatever a caller gets wrong."""

from __future__ import annotations

import base64

import httpx

from herald.core.broker import Broker
from tests.management.helpers import add_user, assert_error, client


async def test_no_credentials_is_401_with_a_challenge(broker: Broker) -> None:
    async with client(broker, user=None) as anonymous:
        for path in ("/api/overview", "/api/queues", "/metrics", "/api/openapi.json"):
            response = await anonymous.get(path)
            assert_error(response, 401)
            assert response.headers["www-authenticate"].startswith("Basic realm=")


async def test_wrong_password_and_unknown_user_are_401(broker: Broker) -> None:
    async with client(broker, "guest", "wrong") as wrong:
        assert_error(await wrong.get("/api/overview"), 401)
    async with client(broker, "nobody", "x") as unknown:
        assert_error(await unknown.get("/api/overview"), 401)


async def test_malformed_authorization_headers_are_401(api: httpx.AsyncClient) -> None:
    bad = [
        "Bearer abc",
        "Basic !!!not-base64",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Basic " + base64.b64encode(b"\xff\xfe:x").decode(),
        "Basic",
    ]
    for header in bad:
        response = await api.get("/api/overview", headers={"Authorization": header}, auth=None)
        assert_error(response, 401)
    assert (await api.get("/api/overview")).status_code == 200  # still serving


async def test_user_without_a_management_tag_is_403(broker: Broker) -> None:
    add_user(broker, "plain", [], ["/"])
    async with client(broker, "plain", "plain") as plain:
        body = assert_error(await plain.get("/api/overview"), 403)
        assert "management tag" in body["reason"]


async def test_management_user_sees_only_its_vhosts(broker: Broker, api: httpx.AsyncClient) -> None:
    assert (await api.put("/api/vhosts/other")).status_code == 201
    assert (await api.put("/api/queues/other/secret", json={})).status_code == 201
    assert (await api.put("/api/queues/%2F/mine", json={})).status_code == 201
    add_user(broker, "mgr", ["management"], ["/"])
    async with client(broker, "mgr", "mgr") as mgr:
        vhosts = (await mgr.get("/api/vhosts")).json()
        assert [v["name"] for v in vhosts] == ["/"]
        queues = (await mgr.get("/api/queues")).json()
        assert [q["name"] for q in queues] == ["mine"]
        assert_error(await mgr.get("/api/queues/other/secret"), 403)
        assert_error(await mgr.get("/api/queues/other"), 403)
        assert_error(await mgr.get("/api/queues/nowhere/x"), 404)
        overview = (await mgr.get("/api/overview")).json()
        assert overview["object_totals"]["queues"] == 1
        # administrator-only and monitoring-only endpoints
        assert_error(await mgr.get("/api/users"), 403)
        assert_error(await mgr.get("/api/nodes"), 403)
        assert_error(await mgr.get("/metrics"), 403)
        assert_error(await mgr.get("/api/definitions"), 403)
        assert_error(await mgr.put("/api/vhosts/mine"), 403)


async def test_management_user_needs_resource_permissions_to_act(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    assert (await api.put("/api/queues/%2F/locked", json={})).status_code == 201
    add_user(broker, "reader", ["management"])
    broker.users.set_permissions("reader", "/", "^$", "^$", ".*")  # read only
    async with client(broker, "reader", "reader") as reader:
        assert (await reader.get("/api/queues/%2F/locked")).status_code == 200
        assert_error(await reader.put("/api/queues/%2F/new", json={}), 403)
        assert_error(await reader.delete("/api/queues/%2F/locked"), 403)
        publish = {"routing_key": "locked", "payload": "x", "payload_encoding": "string"}
        assert_error(await reader.post("/api/exchanges/%2F/amq.default/publish", json=publish), 403)
        got = await reader.post("/api/queues/%2F/locked/get", json={"count": 1})
        assert got.status_code == 200 and got.json() == []
    assert "locked" in broker.default_vhost.queues


async def test_monitoring_sees_everything_but_cannot_administer(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    assert (await api.put("/api/vhosts/other")).status_code == 201
    assert (await api.put("/api/queues/other/q", json={})).status_code == 201
    add_user(broker, "mon", ["monitoring"])
    async with client(broker, "mon", "mon") as mon:
        assert {v["name"] for v in (await mon.get("/api/vhosts")).json()} == {"/", "other"}
        assert [q["name"] for q in (await mon.get("/api/queues")).json()] == ["q"]
        assert (await mon.get("/api/nodes")).status_code == 200
        assert (await mon.get("/metrics")).status_code == 200
        assert_error(await mon.get("/api/users"), 403)
        assert_error(await mon.put("/api/users/x", json={"password": "x", "tags": []}), 403)
        assert_error(await mon.delete("/api/vhosts/other"), 403)
        # no permissions in "other": looking is fine, acting is not
        assert_error(await mon.delete("/api/queues/other/q"), 403)
    assert "q" in broker.vhosts["other"].queues


async def test_whoami(broker: Broker) -> None:
    add_user(broker, "mon", ["monitoring", "custom"])
    async with client(broker, "mon", "mon") as mon:
        assert (await mon.get("/api/whoami")).json() == {
            "name": "mon",
            "tags": ["custom", "monitoring"],
        }
