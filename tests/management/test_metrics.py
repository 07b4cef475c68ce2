"""`/metrics` parses with Prometheus' own text parser and carries broker totals, per-queue and
per-connection series; each broker has its own registry."""

from __future__ import annotations

from pathlib import Path

import httpx
import pika
import trio
from prometheus_client.parser import text_string_to_metric_families

from herald.core.broker import Broker
from tests.management.helpers import client, management_broker, port


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def scrape(api: httpx.AsyncClient) -> dict:
    response = await api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


async def test_metrics_parse_and_carry_totals_queues_and_connections(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    await api.put("/api/queues/%2F/metered", json={"durable": False})
    for i in range(3):
        await api.post(
            "/api/exchanges/%2F/amq.default/publish",
            json={"routing_key": "metered", "payload": str(i), "payload_encoding": "string"},
        )
    await api.post("/api/queues/%2F/metered/get", json={"count": 1, "ackmode": "ack_requeue_false"})
    parameters = pika.ConnectionParameters("127.0.0.1", port(broker, "amqp"))
    with trio.fail_after(30):
        connection = await trio.to_thread.run_sync(pika.BlockingConnection, parameters)
        try:
            found = await scrape(api)
        finally:
            await trio.to_thread.run_sync(connection.close)
    queue = (("queue", "metered"), ("vhost", "/"))
    assert found[("herald_queue_messages_ready", queue)] == 2
    assert found[("herald_queue_published_total", queue)] == 3
    assert found[("herald_queue_delivered_total", queue)] == 1
    assert found[("herald_queue_acked_total", queue)] == 1  # ack_requeue_false acks
    assert found[("herald_queues", ())] == 1
    assert found[("herald_connections", ())] == 1
    assert found[("herald_published_total", ())] == 3
    assert found[("herald_alarm", (("alarm", "memory"),))] == 0
    connection_series = [k for k in found if k[0] == "herald_connection_opened_timestamp_seconds"]
    assert len(connection_series) == 1
    labels = dict(connection_series[0][1])
    assert labels["protocol"] == "amqp" and labels["user"] == "guest" and labels["vhost"] == "/"
    assert ("process_resident_memory_bytes", ()) in found or ("herald_vhosts", ()) in found


async def test_counters_do_not_go_down_when_a_queue_is_deleted(
    broker: Broker, api: httpx.AsyncClient
) -> None:
    await api.put("/api/queues/%2F/brief", json={"durable": False})
    await api.post(
        "/api/exchanges/%2F/amq.default/publish",
        json={"routing_key": "brief", "payload": "x", "payload_encoding": "string"},
    )
    before = (await scrape(api))[("herald_published_total", ())]
    await api.delete("/api/queues/%2F/brief")
    after = (await scrape(api))[("herald_published_total", ())]
    assert after == before == 1


async def test_each_broker_has_its_own_registry(tmp_path: Path) -> None:
    async with (
        management_broker(tmp_path / "a") as first,
        management_broker(tmp_path / "b") as second,
    ):
        first.default_vhost.declare_queue("only-in-first")
        async with client(first) as api_first, client(second) as api_second:
            in_first = await scrape(api_first)
            in_second = await scrape(api_second)
    key = ("herald_queue_messages_ready", (("queue", "only-in-first"), ("vhost", "/")))
    assert key in in_first and key not in in_second
