"""Vhosts, exchanges, queues and bindings through the API, with RabbitMQ's paths and codes,
and what bad input gets: a JSON error, and a broker that keeps serving."""

from __future__ import annotations

import httpx

from herald.core.broker import Broker
from tests.management.helpers import assert_error


async def test_vhost_lifecycle_grants_the_creator(broker: Broker, api: httpx.AsyncClient) -> None:
    assert (await api.put("/api/vhosts/tenant%2Fa")).status_code == 201
    assert "tenant/a" in broker.vhosts
    assert "tenant/a" in broker.users.permissions_for("guest")
    assert (await api.put("/api/vhosts/tenant%2Fa")).status_code == 204
    vhost = (await api.get("/api/vhosts/tenant%2Fa")).json()
    assert vhost["name"] == "tenant/a" and vhost["queues"] == 0
    assert (await api.delete("/api/vhosts/tenant%2Fa")).status_code == 204
    assert "tenant/a" not in broker.vhosts
    assert "tenant/a" not in broker.users.permissions_for("guest")
    assert_error(await api.get("/api/vhosts/tenant%2Fa"), 404)
    assert_error(await api.delete("/api/vhosts/tenant%2Fa"), 404)
    assert_error(await api.delete("/api/vhosts/%2F"), 400)  # the default vhost stays


async def test_exchanges(broker: Broker, api: httpx.AsyncClient) -> None:
    names = [e["name"] for e in (await api.get("/api/exchanges/%2F")).json()]
    assert names == ["", "amq.direct", "amq.fanout", "amq.headers", "amq.match", "amq.topic"]
    body = {"type": "topic", "durable": True, "arguments": {"alternate-exchange": "ae"}}
    assert (await api.put("/api/exchanges/%2F/events", json=body)).status_code == 201
    assert (await api.put("/api/exchanges/%2F/events", json=body)).status_code == 204
    got = (await api.get("/api/exchanges/%2F/events")).json()
    assert got["type"] == "topic" and got["arguments"] == {"alternate-exchange": "ae"}
    assert (await api.get("/api/exchanges/%2F/amq.default")).json()["name"] == ""
    inequivalent = await api.put("/api/exchanges/%2F/events", json={"type": "fanout"})
    assert "inequivalent" in assert_error(inequivalent, 400)["reason"]
    assert_error(await api.put("/api/exchanges/%2F/bad", json={"type": "nonsense"}), 400)
    assert_error(await api.put("/api/exchanges/%2F/notype", json={}), 400)
    assert_error(await api.put("/api/exchanges/%2F/amq.mine", json={"type": "direct"}), 403)
    assert (await api.delete("/api/exchanges/%2F/events")).status_code == 204
    assert_error(await api.get("/api/exchanges/%2F/events"), 404)
    assert_error(await api.delete("/api/exchanges/%2F/events"), 404)
    assert_error(await api.get("/api/exchanges/nowhere"), 404)


async def test_queue_lifecycle(broker: Broker, api: httpx.AsyncClient) -> None:
    body = {"durable": True, "arguments": {"x-max-length": 10}}
    assert (await api.put("/api/queues/%2F/orders", json=body)).status_code == 201
    queue = broker.default_vhost.queues["orders"]
    assert queue.durable and queue.args.max_length == 10
    assert (await api.put("/api/queues/%2F/orders", json=body)).status_code == 204
    assert_error(await api.put("/api/queues/%2F/orders", json={"durable": False}), 400)
    got = (await api.get("/api/queues/%2F/orders")).json()
    assert got["name"] == "orders" and got["vhost"] == "/" and got["durable"] is True
    assert got["arguments"] == {"x-max-length": 10}
    assert got["messages"] == 0 and got["consumer_details"] == []
    assert set(got["message_stats"]) >= {"publish", "publish_details", "ack", "deliver_get"}
    assert set(got["herald_swap"]) >= {"loaded", "swapped", "ranges", "bytes_in_memory"}
    assert_error(await api.put("/api/queues/%2F/excl", json={"exclusive": True}), 400)
    assert_error(await api.put("/api/queues/%2F/amq.q", json={}), 403)
    assert (await api.delete("/api/queues/%2F/orders")).status_code == 204
    assert "orders" not in broker.default_vhost.queues
    assert_error(await api.delete("/api/queues/%2F/orders"), 404)
    assert_error(await api.get("/api/queues/%2F/orders"), 404)


async def test_delete_if_empty_and_purge(broker: Broker, api: httpx.AsyncClient) -> None:
    await api.put("/api/queues/%2F/work", json={"durable": False})
    for i in range(3):
        await api.post(
            "/api/exchanges/%2F/amq.default/publish",
            json={"routing_key": "work", "payload": str(i), "payload_encoding": "string"},
        )
    assert_error(await api.delete("/api/queues/%2F/work?if-empty=true"), 400)
    assert (await api.delete("/api/queues/%2F/work/contents")).status_code == 204
    assert broker.default_vhost.queues["work"].message_count == 0
    assert (await api.delete("/api/queues/%2F/work?if-empty=true")).status_code == 204
    assert_error(await api.delete("/api/queues/%2F/work/contents"), 404)


async def test_bindings(broker: Broker, api: httpx.AsyncClient) -> None:
    await api.put("/api/exchanges/%2F/logs", json={"type": "topic"})
    await api.put("/api/exchanges/%2F/audit", json={"type": "fanout"})
    await api.put("/api/queues/%2F/errors", json={})
    created = await api.post("/api/bindings/%2F/e/logs/q/errors", json={"routing_key": "*.error"})
    assert created.status_code == 201
    location = created.headers["location"]
    assert location == "/api/bindings/%2F/e/logs/q/errors/%2A.error"
    one = (await api.get(location)).json()
    assert one["source"] == "logs" and one["destination"] == "errors"
    assert one["destination_type"] == "queue" and one["routing_key"] == "*.error"
    with_args = await api.post(
        "/api/bindings/%2F/e/logs/q/errors", json={"routing_key": "", "arguments": {"k": 1}}
    )
    assert with_args.status_code == 201 and "~" in with_args.headers["location"]
    e2e = await api.post("/api/bindings/%2F/e/logs/e/audit", json={"routing_key": "#"})
    assert e2e.status_code == 201
    pair = (await api.get("/api/bindings/%2F/e/logs/q/errors")).json()
    assert sorted(b["routing_key"] for b in pair) == ["", "*.error"]
    assert len((await api.get("/api/bindings/%2F")).json()) == 3
    assert len((await api.get("/api/queues/%2F/errors/bindings")).json()) == 2
    assert len((await api.get("/api/exchanges/%2F/logs/bindings/source")).json()) == 3
    assert len((await api.get("/api/exchanges/%2F/audit/bindings/destination")).json()) == 1
    # the binding routes
    await api.post(
        "/api/exchanges/%2F/logs/publish",
        json={"routing_key": "db.error", "payload": "x", "payload_encoding": "string"},
    )
    assert broker.default_vhost.queues["errors"].message_count == 1
    assert (await api.delete(location)).status_code == 204
    assert_error(await api.get(location), 404)
    assert_error(await api.post("/api/bindings/%2F/e/logs/x/errors", json={}), 404)
    assert_error(await api.post("/api/bindings/%2F/e/nope/q/errors", json={}), 404)
    assert_error(await api.post("/api/bindings/%2F/e/logs/q/nope", json={}), 404)
    assert_error(await api.post("/api/bindings/%2F/e/amq.default/q/errors", json={}), 403)
    assert_error(await api.post("/api/bindings/%2F/e/logs/q/errors", json={"routing_key": 5}), 400)


async def test_paging_sorting_and_filtering(broker: Broker, api: httpx.AsyncClient) -> None:
    for i in range(25):
        broker.default_vhost.declare_queue(f"q{i:02d}")
    page = (await api.get("/api/queues?page=2&page_size=10")).json()
    assert page["page"] == 2 and page["page_count"] == 3 and page["total_count"] == 25
    assert [q["name"] for q in page["items"]] == [f"q{i:02d}" for i in range(10, 20)]
    filtered = (await api.get("/api/queues?page=1&name=q1&page_size=100")).json()
    assert filtered["filtered_count"] == 10
    regex = (await api.get("/api/queues?page=1&name=%5Eq0%5B12%5D&use_regex=true")).json()
    assert [q["name"] for q in regex["items"]] == ["q01", "q02"]
    reverse = (await api.get("/api/queues?page=1&page_size=1&sort_reverse=true")).json()
    assert reverse["items"][0]["name"] == "q24"
    by_field = (await api.get("/api/queues?page=1&page_size=2&sort=messages")).json()
    assert len(by_field["items"]) == 2
    assert len((await api.get("/api/queues")).json()) == 25  # no page: a plain list
    assert_error(await api.get("/api/queues?page=9&page_size=10"), 400)
    assert_error(await api.get("/api/queues?page=x"), 400)
    assert_error(await api.get("/api/queues?page=1&page_size=100000"), 400)
    assert_error(await api.get("/api/queues?page=1&name=(&use_regex=true"), 400)


async def test_bad_input_gets_json_errors_and_the_broker_keeps_serving(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    headers = {"content-type": "application/json"}
    assert_error(await api.put("/api/queues/%2F/q", content=b"{not json", headers=headers), 400)
    assert_error(await api.put("/api/queues/%2F/q", content=b"[1, 2]", headers=headers), 400)
    assert_error(await api.put("/api/exchanges/%2F/e", content=b"\xff\xfe", headers=headers), 400)
    assert_error(await api.put("/api/queues/%2F/q", json={"durable": "yes"}), 400)
    assert_error(await api.put("/api/queues/%2F/q", json={"arguments": [1]}), 400)
    assert_error(
        await api.put("/api/queues/%2F/q", json={"arguments": {"x-max-length": "lots"}}), 400
    )
    assert_error(await api.get("/api/queues/nowhere"), 404)
    assert_error(await api.get("/api/queues/%2F/nowhere"), 404)
    assert_error(await api.get("/api/no/such/endpoint"), 404)
    assert_error(await api.patch("/api/queues/%2F/q", json={}), 405)
    huge = b'{"payload": "' + b"x" * (17 * 1024 * 1024) + b'"}'
    assert_error(
        await api.post("/api/exchanges/%2F/amq.default/publish", content=huge, headers=headers),
        413,
    )
    assert (await api.get("/api/overview")).status_code == 200
    assert (await api.put("/api/queues/%2F/q", json={})).status_code == 201
