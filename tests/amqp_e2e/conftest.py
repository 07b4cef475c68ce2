"""End-to-end fixtures: a real broker in a background thread, real clients in the test thread.

pika's BlockingConnection, kombu and aio-pika (under asyncio.run) are all blocking from the
caller's point of view, so the clean split is: the broker runs under `trio.run` in its own
thread (`BrokerThread`), and each test is an ordinary synchronous function that talks to it
over 127.0.0.1 like any application would. To touch the broker's state (raise an alarm, look at
a queue) a test calls `broker.call(fn, *args)`, which runs `fn` on the broker's Trio thread.

Every broker uses the memory store (or, with `commitlog=True`, the commit-log store in its
data directory); `MemoryStoreData` kept by a test and handed to a second `BrokerThread` is a
restart on the same data. Every client call is bounded by a timeout
(`CLIENT_TIMEOUT`), and starting or stopping a broker by `START_TIMEOUT`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pika
import pytest
import trio

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.testing import listener_port
from herald.plugins.amqp import plugin as amqp_plugin
from herald.storage import commitlog_plugin
from herald.storage.memory import MemoryStore, MemoryStoreData

CLIENT_TIMEOUT = 10.0
START_TIMEOUT = 20.0
T = TypeVar("T")


class BrokerThread:
    """An embedded broker with the AMQP plugin, served by `trio.run` in a daemon thread."""

    def __init__(
        self,
        data_dir: Path,
        data: MemoryStoreData | None = None,
        settings: Sequence[str] = (),
        *,
        commitlog: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.data = data if data is not None else MemoryStoreData()
        self.commitlog = commitlog
        self.settings = ["amqp.host=127.0.0.1", "amqp.port=0"]
        if commitlog:
            self.settings += ["store.backend=commitlog", "commitlog.segment_size=1048576"]
        self.settings += settings  # the test's own settings win
        self._broker: Broker | None = None
        self.port = 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="herald-broker", daemon=True)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the test thread
            self._error = exc
            self._started.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with embedded(
            plugins=["amqp"],
            settings=self.settings,
            data_dir=self.data_dir,
            load_entrypoints=False,
            extra_plugins=[amqp_plugin, commitlog_plugin] if self.commitlog else [amqp_plugin],
            store=None if self.commitlog else MemoryStore(self.data),
        ) as broker:
            self._broker = broker
            self.port = listener_port(broker, "amqp")
            self._started.set()
            await self._stop.wait()

    @property
    def broker(self) -> Broker:
        """The running broker (only between `__enter__` and `__exit__`)."""
        assert self._broker is not None, "the broker thread has not started"
        return self._broker

    def __enter__(self) -> BrokerThread:
        self._thread.start()
        if not self._started.wait(START_TIMEOUT):
            raise TimeoutError("broker did not start")
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._thread.is_alive() and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(START_TIMEOUT)
        if self._thread.is_alive():
            raise TimeoutError("broker did not stop")
        if self._error is not None:
            raise self._error

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the broker's Trio thread and return its result."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def parameters(self, **kwargs: Any) -> pika.ConnectionParameters:
        kwargs.setdefault("credentials", pika.PlainCredentials("guest", "guest"))
        kwargs.setdefault("socket_timeout", CLIENT_TIMEOUT)
        kwargs.setdefault("blocked_connection_timeout", CLIENT_TIMEOUT)
        kwargs.setdefault("connection_attempts", 1)
        port = kwargs.pop("port", self.port)  # another listener's (the any-protocol port)
        return pika.ConnectionParameters("127.0.0.1", port, **kwargs)

    def connect(self, **kwargs: Any) -> pika.BlockingConnection:
        return pika.BlockingConnection(self.parameters(**kwargs))


@pytest.fixture
def store_data() -> MemoryStoreData:
    return MemoryStoreData()


@pytest.fixture
def broker(tmp_path: Path, store_data: MemoryStoreData) -> Iterator[BrokerThread]:
    with BrokerThread(tmp_path / "data", store_data) as running:
        yield running


@pytest.fixture
def connection(broker: BrokerThread) -> Iterator[pika.BlockingConnection]:
    conn = broker.connect()
    try:
        yield conn
    finally:
        if conn.is_open:
            conn.close()


@pytest.fixture
def channel(connection: pika.BlockingConnection) -> Any:
    return connection.channel()
