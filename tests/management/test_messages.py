"""Publish, get (every ackmode), browse without consuming, the swap state of a long queue,
search by key through the commit-log index, and a message read by its store position."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import httpx
import trio

from herald.core.broker import Broker
from herald.storage import record as rec
from herald.storage.commitlog import CommitLogStore
from tests.management.helpers import assert_error, client, management_broker

PUBLISH = "/api/exchanges/%2F/amq.default/publish"


async def publish(api: httpx.AsyncClient, key: str, payload: str, **properties: object) -> dict:
    body = {
        "routing_key": key,
        "payload": payload,
        "payload_encoding": "string",
        "properties": properties,
    }
    response = await api.post(PUBLISH, json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_publish_then_get_with_every_ackmode(broker: Broker, api: httpx.AsyncClient) -> None:
    await api.put("/api/queues/%2F/inbox", json={"durable": False})
    answer = await publish(api, "inbox", "one", content_type="text/plain", headers={"h": 1})
    assert answer["routed"] is True
    assert (await publish(api, "nowhere", "lost"))["routed"] is False
    await publish(api, "inbox", "two")
    get = "/api/queues/%2F/inbox/get"
    peek = (await api.post(get, json={"count": 5, "ackmode": "ack_requeue_true"})).json()
    assert [m["payload"] for m in peek] == ["one", "two"]
    assert peek[0]["properties"] == {"content_type": "text/plain", "headers": {"h": 1}}
    assert peek[0]["redelivered"] is False and peek[0]["message_count"] == 1
    again = (await api.post(get, json={"count": 1, "ackmode": "reject_requeue_true"})).json()
    assert again[0]["payload"] == "one" and again[0]["redelivered"] is True
    taken = (await api.post(get, json={"count": 1, "ackmode": "ack_requeue_false"})).json()
    assert taken[0]["payload"] == "one"
    dropped = (await api.post(get, json={"count": 1, "ackmode": "reject_requeue_false"})).json()
    assert dropped[0]["payload"] == "two"
    assert (await api.post(get, json={"count": 1})).json() == []
    assert broker.default_vhost.queues["inbox"].message_count == 0


async def test_publish_base64_persistent_and_bad_bodies(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    await api.put("/api/queues/%2F/bin", json={"durable": True})
    body = {
        "routing_key": "bin",
        "payload": base64.b64encode(b"\x00\xff").decode(),
        "payload_encoding": "base64",
        "properties": {"delivery_mode": 2, "message_id": "m-1", "expiration": "60000"},
    }
    assert (await api.post(PUBLISH, json=body)).json()["routed"] is True
    got = (await api.post("/api/queues/%2F/bin/get", json={"count": 1, "encoding": "auto"})).json()
    assert got[0]["payload_encoding"] == "base64"
    assert base64.b64decode(got[0]["payload"]) == b"\x00\xff"
    assert got[0]["properties"]["delivery_mode"] == 2
    bad_bodies = [
        {"routing_key": "bin"},
        {"routing_key": 1, "payload": "x"},
        {"routing_key": "bin", "payload": "x", "payload_encoding": "rot13"},
        {"routing_key": "bin", "payload": "!!", "payload_encoding": "base64"},
        {"routing_key": "bin", "payload": "x", "properties": {"colour": "red"}},
        {"routing_key": "bin", "payload": "x", "properties": {"delivery_mode": 7}},
        {"routing_key": "bin", "payload": "x", "properties": {"priority": "high"}},
        {"routing_key": "bin", "payload": "x", "properties": {"user_id": "someone-else"}},
    ]
    for bad in bad_bodies:
        assert_error(await api.post(PUBLISH, json=bad), 400)
    assert_error(await api.post("/api/exchanges/%2F/nope/publish", json=bad_bodies[0]), 404)
    assert_error(await api.post("/api/queues/%2F/bin/get", json={"count": 0}), 400)
    assert_error(await api.post("/api/queues/%2F/bin/get", json={"ackmode": "maybe"}), 400)
    assert_error(await api.post("/api/queues/%2F/bin/get", json={"encoding": "hex"}), 400)


async def test_publish_is_refused_during_an_alarm(broker: Broker, api: httpx.AsyncClient) -> None:
    broker.alarms.set("memory", True)
    try:
        response = await api.post(PUBLISH, json={"routing_key": "x", "payload": "x"})
        assert "memory" in assert_error(response, 503)["reason"]
    finally:
        broker.alarms.set("memory", False)


async def test_browse_does_not_consume(broker: Broker, api: httpx.AsyncClient) -> None:
    await api.put("/api/queues/%2F/shelf", json={"durable": False})
    for i in range(5):
        await publish(api, "shelf", f"m{i}", priority=1)
    page = (await api.get("/api/queues/%2F/shelf/messages?offset=1&limit=2")).json()
    assert [m["payload"] for m in page["items"]] == ["m1", "m2"]
    assert [m["queue_offset"] for m in page["items"]] == [1, 2]
    assert page["messages_ready"] == 5
    truncated = (await api.get("/api/queues/%2F/shelf/messages?limit=1&truncate=1")).json()
    assert truncated["items"][0]["payload"] == "m" and truncated["items"][0]["payload_bytes"] == 2
    queue = broker.default_vhost.queues["shelf"]
    assert queue.message_count == 5 and queue.unacked_count == 0
    assert queue.statistics().delivered == 0
    assert_error(await api.get("/api/queues/%2F/shelf/messages?limit=0"), 400)
    assert_error(await api.get("/api/queues/%2F/shelf/messages?limit=100000"), 400)


async def test_swap_state_of_a_long_durable_queue(tmp_path: Path) -> None:
    settings = ["queues.tail_buffer=0", "queues.swap_range_size=10"]
    async with (
        management_broker(tmp_path / "data", settings=settings) as broker,
        client(broker) as api,
    ):
        await api.put("/api/queues/%2F/deep", json={"durable": True})
        for i in range(35):
            await publish(api, "deep", f"p{i:02d}", delivery_mode=2)
        swap = (await api.get("/api/queues/%2F/deep/swap")).json()
        assert swap["enabled"] is True
        assert swap["swapped"] + swap["loaded"] == 35
        assert swap["swapped"] >= 30 and swap["ranges"] >= 3
        assert sum(r["count"] for r in swap["range_list"]) == swap["swapped"]
        assert swap["bytes_in_memory"] < 35 * 3
        listed = (await api.get("/api/queues/%2F/deep")).json()
        assert listed["herald_swap"]["swapped"] == swap["swapped"]
        browsed = (await api.get("/api/queues/%2F/deep/messages?limit=35")).json()
        assert [m["payload"] for m in browsed["items"]] == [f"p{i:02d}" for i in range(35)]
        after = (await api.get("/api/queues/%2F/deep/swap")).json()
        assert after["swapped"] == swap["swapped"]  # browsing loaded nothing


def _positions(broker: Broker) -> dict[str, int]:
    """message id -> commit-log position, by walking the log's records."""
    assert isinstance(broker.store, CommitLogStore)
    log = broker.store.log
    found: dict[str, int] = {}
    position = log.min_offset
    while position < log.write_offset:
        head = log.read(position, rec.PREFIX.size)
        assert head is not None
        size, _ = rec.PREFIX.unpack(head)
        data = log.read(position, size)
        assert data is not None
        record = rec.decode(data, position)
        if isinstance(record, rec.MessageRecord) and record.message_id:
            found[record.message_id] = position
        position += rec.aligned(size)
    return found


async def test_search_by_key_and_read_by_position(tmp_path: Path) -> None:
    async with (
        management_broker(tmp_path / "data", commitlog=True) as broker,
        client(broker) as api,
    ):
        await api.put("/api/queues/%2F/ledger", json={"durable": True})
        before = int(time.time() * 1000) - 1000
        for i in range(3):
            await publish(api, "ledger", f"entry {i}", delivery_mode=2, message_id=f"id-{i}")
        search = (await api.get("/api/messages?key=id-1")).json()
        assert [m["payload"] for m in search["items"]] == ["entry 1"]
        assert search["items"][0]["properties"]["message_id"] == "id-1"
        ranged = await api.get(f"/api/messages?key=id-1&from={before}&to={before + 1}")
        assert ranged.json()["items"] == []
        assert (await api.get("/api/messages?key=unknown")).json()["items"] == []
        assert_error(await api.get("/api/messages"), 400)
        assert_error(await api.get("/api/messages?key=a&from=5&to=1"), 400)
        position = _positions(broker)["id-2"]
        at = (await api.get(f"/api/messages/{position}")).json()
        assert at["payload"] == "entry 2" and at["position"] == position
        assert at["queues"] == [{"vhost": "/", "name": "ledger", "queue_offset": 2}]
        assert at["store_ms"] >= before
        assert_error(await api.get(f"/api/messages/{position + 8}"), 404)
        assert_error(await api.get(f"/api/messages/{position + 3}"), 404)
        assert_error(await api.get("/api/messages/999999999999"), 404)
        assert_error(await api.get("/api/messages/-1"), 400)


async def test_search_on_a_store_without_an_index_is_501(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    assert_error(await api.get("/api/messages?key=x"), 501)
    assert_error(await api.get("/api/messages/0"), 501)
    with trio.fail_after(5):
        assert (await api.get("/api/overview")).status_code == 200
