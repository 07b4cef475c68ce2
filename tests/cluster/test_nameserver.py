"""The name server over real HTTP on 127.0.0.1 (port 0), and its clients: `register_all`
with every name server, `resolve` moving on when one is down."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx
import pytest
import trio

import herald.cluster
from herald.cluster.nameserver.client import (
    NameServerUnavailable,
    NoRoute,
    register_all,
    resolve,
    resolve_sync,
    unregister_all,
)
from herald.cluster.nameserver.server import ServerAddress, run_nameserver
from tests.cluster.harness import free_port

TIMEOUT = 10


def payload(node: str = "n2", role: str = "master", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "cluster": "prod",
        "group": "g1",
        "node": node,
        "role": role,
        "epoch": 8,
        "data_version": 41,
        "addrs": {"amqp": "127.0.0.1:5672", "mqtt": "127.0.0.1:1883"},
        "queues": [
            {"vhost": "/", "name": "orders", "type": "shared", "durable": True},
            {"vhost": "a/b", "name": "q 1", "type": "classic", "durable": False},
        ],
        "offset": 18432,
    }
    body.update(changes)
    return body


class NameServer:
    """A name server in the test's nursery that the test can stop."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.address: ServerAddress | None = None

    async def run(self, task_status: trio.TaskStatus[ServerAddress], **options: Any) -> None:
        with self.scope:
            await run_nameserver("127.0.0.1", 0, task_status=task_status, **options)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self) -> None:
        self.scope.cancel()


async def start(nursery: trio.Nursery, **options: Any) -> NameServer:
    server = NameServer()
    server.address = await nursery.start(partial(server.run, **options))
    return server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as client:
        yield client


async def test_port_zero_reports_the_bound_port(
    nursery: trio.Nursery, http: httpx.AsyncClient
) -> None:
    server = await start(nursery)
    assert server.address is not None
    assert server.address.host == "127.0.0.1" and server.address.port > 0
    with trio.fail_after(TIMEOUT):
        response = await http.get(server.url + "/v1/cluster")
    assert response.status_code == 200 and response.json() == {"version": 0, "groups": []}


async def test_register_route_and_cluster(nursery: trio.Nursery, http: httpx.AsyncClient) -> None:
    server = await start(nursery)
    with trio.fail_after(TIMEOUT):
        heartbeat = payload(queues=None)
        first = await http.post(server.url + "/v1/register", json=heartbeat)
        assert first.json() == {"need_full": True}  # a fresh name server: send the queues
        full = await http.post(server.url + "/v1/register", json=payload())
        assert full.status_code == 200 and full.json() == {"need_full": False}
        slave = payload("n3", "slave", queues=None)
        del slave["offset"]  # a node from before the field: accepted, its offset null
        assert (await http.post(server.url + "/v1/register", json=slave)).status_code == 200

        route = await http.get(server.url + "/v1/route/%2F/orders", params={"protocol": "amqp"})
        assert route.status_code == 200
        assert route.json() == {
            "vhost": "/",
            "queue": "orders",
            "type": "shared",
            "groups": [
                {
                    "group": "g1",
                    "epoch": 8,
                    "master": {
                        "node": "n2",
                        "addr": "127.0.0.1:5672",
                        "addrs": {"amqp": "127.0.0.1:5672", "mqtt": "127.0.0.1:1883"},
                    },
                    "slaves": ["n3"],
                }
            ],
        }
        # Names with "/" and spaces travel percent-encoded.
        odd = await http.get(server.url + "/v1/route/a%2Fb/q%201?protocol=mqtt")
        assert odd.status_code == 200 and odd.json()["groups"][0]["master"]["addr"].endswith(
            ":1883"
        )
        missing = await http.get(server.url + "/v1/route/%2F/nope?protocol=amqp")
        assert missing.status_code == 404 and missing.json() == {"error": "no route"}

        cluster = (await http.get(server.url + "/v1/cluster")).json()
        (group,) = cluster["groups"]
        assert (group["group"], group["master"], group["epoch"], group["queues"]) == (
            "g1",
            "n2",
            8,
            2,
        )
        assert [(n["node"], n["role"], n["offset"]) for n in group["nodes"]] == [
            ("n2", "master", 18432),
            ("n3", "slave", None),
        ]
        assert all(n["last_seen_ms_ago"] >= 0 for n in group["nodes"])

        # Each registration, heartbeats too, replaces the offset: it is as of the last one.
        # The offset alone does not move `version`.
        later = payload(queues=None, offset=20480)
        assert (await http.post(server.url + "/v1/register", json=later)).json() == {
            "need_full": False
        }
        again = (await http.get(server.url + "/v1/cluster")).json()
        assert [n["offset"] for n in again["groups"][0]["nodes"]] == [20480, None]
        assert again["version"] == cluster["version"]

        gone = await http.post(server.url + "/v1/unregister", json={"node": "n2"})
        assert gone.json() == {"removed": True}
        route = await http.get(server.url + "/v1/route/%2F/orders?protocol=amqp")
        assert route.json()["groups"][0]["master"] is None


async def test_bad_input_is_400_naming_the_field(
    nursery: trio.Nursery, http: httpx.AsyncClient
) -> None:
    server = await start(nursery)
    with trio.fail_after(TIMEOUT):
        bad_json = await http.post(server.url + "/v1/register", content=b"{not json")
        assert bad_json.status_code == 400 and bad_json.json()["field"] == "body"
        bad_epoch = await http.post(server.url + "/v1/register", json=payload(epoch="8"))
        assert bad_epoch.status_code == 400
        assert bad_epoch.json() == {"error": "a non-negative integer", "field": "epoch"}
        bad_offset = await http.post(server.url + "/v1/register", json=payload(offset=-5))
        assert bad_offset.json() == {"error": "a non-negative integer", "field": "offset"}
        bad_queue = await http.post(server.url + "/v1/register", json=payload(queues=[{}]))
        assert bad_queue.json()["field"] == "queues[0].vhost"
        unregister = await http.post(server.url + "/v1/unregister", json={"node": 3})
        assert unregister.status_code == 400 and unregister.json()["field"] == "node"
        path = await http.get(server.url + "/v1/route/only-one-part")
        assert path.status_code == 400 and path.json()["field"] == "path"
        assert (await http.get(server.url + "/v1/cluster")).json()["groups"] == []


async def test_silent_node_disappears(nursery: trio.Nursery, http: httpx.AsyncClient) -> None:
    """Test timers: scan 0.2 s, expiry 1 s. The node that keeps registering stays."""
    server = await start(nursery, scan_s=0.2, expiry_s=1.0)
    with trio.fail_after(TIMEOUT):
        await http.post(server.url + "/v1/register", json=payload("n1", group="g0"))
        await http.post(server.url + "/v1/register", json=payload("n2"))

        async def names() -> list[str]:
            cluster = (await http.get(server.url + "/v1/cluster")).json()
            return [n["node"] for g in cluster["groups"] for n in g["nodes"]]

        while "n1" in await names():
            await http.post(server.url + "/v1/register", json=payload("n2", queues=None))
            await trio.sleep(0.1)
        assert await names() == ["n2"]
        cluster = (await http.get(server.url + "/v1/cluster")).json()
        assert [g["group"] for g in cluster["groups"]] == ["g1"]  # g0 went with n1


async def test_register_all_reaches_every_name_server(nursery: trio.Nursery) -> None:
    one, two = await start(nursery), await start(nursery)
    down = f"127.0.0.1:{free_port()}"
    with trio.fail_after(TIMEOUT):
        outcomes = await register_all([str(one.address), down, two.url], payload(queues=None))
        assert [o.ok for o in outcomes] == [True, False, True]
        assert [o.nameserver for o in outcomes] == [str(one.address), down, two.url]
        assert outcomes[0].need_full and outcomes[2].need_full
        assert outcomes[1].error is not None
        outcomes = await register_all([str(one.address), two.url], payload())
        assert all(o.ok and not o.need_full for o in outcomes)
        refused = await register_all([str(one.address)], payload(epoch=-1))
        assert not refused[0].ok and refused[0].error is not None and "epoch" in refused[0].error
        for server in (one, two):
            assert await resolve([str(server.address)], "/", "orders") == (
                "amqp://127.0.0.1:5672/%2F"
            )
        await unregister_all([str(one.address), down], "n2")
        with pytest.raises(NoRoute):
            await resolve([str(one.address)], "/", "orders")


async def test_resolve_moves_to_the_next_name_server(nursery: trio.Nursery) -> None:
    first, second = await start(nursery), await start(nursery)
    servers = [str(first.address), str(second.address)]
    with trio.fail_after(TIMEOUT):
        await register_all(servers, payload())
        assert await herald.cluster.resolve(servers, "/", "orders") == "amqp://127.0.0.1:5672/%2F"
        assert await resolve(servers, "a/b", "q 1", "mqtt") == "mqtt://127.0.0.1:1883/a%2Fb"

        first.stop()
        while True:  # until its socket is closed
            try:
                async with httpx.AsyncClient() as http:
                    await http.get(first.url + "/v1/cluster")
            except httpx.TransportError:
                break
            await trio.sleep(0.05)
        assert await resolve(servers, "/", "orders") == "amqp://127.0.0.1:5672/%2F"
        url = await trio.to_thread.run_sync(partial(resolve_sync, servers, "/", "orders", "amqp"))
        assert url == "amqp://127.0.0.1:5672/%2F"

        with pytest.raises(NoRoute, match="stomp"):
            await resolve(servers, "/", "orders", "stomp")  # no master serves it
        with pytest.raises(NameServerUnavailable):
            await resolve([str(first.address)], "/", "orders")
