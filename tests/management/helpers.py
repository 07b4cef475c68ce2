"""A broker with the management plugin for the API tests, and HTTP clients for it.

The broker runs in the test's own Trio loop (pytest-trio), on 127.0.0.1 and free ports; httpx
talks real HTTP to it. Blocking clients (pika) run in worker threads, so the broker keeps
serving while they wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.testing import listener_port
from herald.storage.memory import MemoryStore

BASE_SETTINGS = (
    'management.host="127.0.0.1"',
    "management.port=0",
    "management.sample_interval=0.2",
    'amqp.host="127.0.0.1"',
    "amqp.port=0",
)


@asynccontextmanager
async def management_broker(
    data_dir: Path,
    *,
    plugins: Sequence[str] = ("amqp", "management"),
    settings: Sequence[str] = (),
    commitlog: bool = False,
    extra_plugins: Iterable[object] = (),
) -> AsyncIterator[Broker]:
    """A broker serving AMQP and the management API; memory store unless `commitlog`."""
    extra = ["store.backend=commitlog", "commitlog.segment_size=1048576"] if commitlog else []
    async with embedded(
        data_dir=data_dir,
        plugins=list(plugins),
        settings=[*BASE_SETTINGS, *extra, *settings],
        store=None if commitlog else MemoryStore(),
        extra_plugins=extra_plugins,
    ) as broker:
        yield broker


def port(broker: Broker, protocol: str = "management") -> int:
    """The management API's plain-HTTP port, or `protocol`'s TCP one (port(broker, "amqp"))."""
    return listener_port(broker, protocol, "http" if protocol == "management" else "tcp")


def client(
    broker: Broker, user: str | None = "guest", password: str = "guest"
) -> httpx.AsyncClient:
    """An HTTP client for the broker's API, as `user` (None: no credentials)."""
    auth = (user, password) if user is not None else None
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port(broker)}", auth=auth, timeout=10.0)


def add_user(broker: Broker, name: str, tags: Iterable[str], vhosts: Iterable[str] = ()) -> None:
    """A user `name` with password `name`, `tags`, and full permissions on `vhosts`."""
    broker.users.add_user(name, name, list(tags))
    for vhost in vhosts:
        broker.users.set_permissions(name, vhost, ".*", ".*", ".*")


def assert_error(response: httpx.Response, status: int) -> dict:
    """`response` is a JSON error of `status`, in RabbitMQ's {"error", "reason"} shape."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "reason"}, body
    assert body["reason"]
    return body
