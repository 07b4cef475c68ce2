"""A broker on a `SlowStore` (tests/slow_store.py) serving one protocol on 127.0.0.1 port 0,
and the bounded waits the tests of `NotMaster` / `ReplicationTimeout` need.

The broker runs in the test's Trio loop; the clients (pika, paho-mqtt, stomp.py) are blocking
or run threads of their own, so their calls go through `trio.to_thread.run_sync`
(`blocking`), and a call the test must not wait for yet (a publish whose confirm waits for the
store) runs in the background (`Background`) while the test makes the store fail it.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

import outcome
import trio

from herald.core.broker import Broker
from herald.core.embedding import embedded
from tests.slow_store import SlowStore

T = TypeVar("T")
WAIT = 10.0
"""Seconds any single wait may take before the test fails (never a timing assertion)."""

MASTER_TEXT = "n1 is no longer master of g1 (epoch 9: n2 is)"
"""What the cluster would say in a `NotMaster`: this node and why, no address."""


@asynccontextmanager
async def broker_on(store: SlowStore, data_dir: Path, protocol: str) -> AsyncIterator[Broker]:
    """A broker on `store` serving `protocol` ("amqp", "mqtt" or "stomp") on a free port of
    127.0.0.1 (no WebSocket listener), the memory monitor quiet."""
    plugin = importlib.import_module(f"herald.plugins.{protocol}.plugin")
    settings = [f"{protocol}.host=127.0.0.1", f"{protocol}.port=0", "memory.check_interval=3600"]
    if protocol != "amqp":
        settings += [f"{protocol}.ws_host=127.0.0.1", f"{protocol}.ws_port=0"]
    async with embedded(
        plugins=[protocol],
        settings=settings,
        data_dir=data_dir,
        load_entrypoints=False,
        extra_plugins=[plugin],
        store=store,
    ) as broker:
        yield broker


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A blocking client call, in a worker thread, bounded by `WAIT`."""
    with trio.fail_after(WAIT):
        return await trio.to_thread.run_sync(partial(fn, *args, **kwargs), abandon_on_cancel=True)


class Background(Generic[T]):
    """A call that runs while the test goes on: a blocking one in a worker thread
    (`Background.thread`) or an async one in a task (`Background.task`); `result()` waits for
    it and returns its value or raises its exception."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._outcome: outcome.Outcome[T] | None = None

    @classmethod
    def thread(
        cls, nursery: trio.Nursery, fn: Callable[..., T], *args: Any, **kwargs: Any
    ) -> Background[T]:
        call = partial(fn, *args, **kwargs)

        async def run() -> outcome.Outcome[T]:
            return await trio.to_thread.run_sync(outcome.capture, call, abandon_on_cancel=True)

        return cls()._start(nursery, run)

    @classmethod
    def task(
        cls, nursery: trio.Nursery, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any
    ) -> Background[T]:
        async def run() -> outcome.Outcome[T]:
            return await outcome.acapture(partial(fn, *args, **kwargs))

        return cls()._start(nursery, run)

    def _start(
        self, nursery: trio.Nursery, run: Callable[[], Awaitable[outcome.Outcome[T]]]
    ) -> Background[T]:
        async def runner() -> None:
            self._outcome = await run()
            self._done.set()

        nursery.start_soon(runner)
        return self

    async def result(self) -> T:
        with trio.fail_after(WAIT):
            await self._done.wait()
        assert self._outcome is not None
        return self._outcome.unwrap()


async def wait_until(predicate: Callable[[], bool], what: str) -> None:
    """Poll `predicate` until it holds; fail after `WAIT` seconds naming `what`."""
    with trio.move_on_after(WAIT):
        while not predicate():
            await trio.sleep(0.01)
        return
    raise AssertionError(f"timed out waiting for {what}")


async def appended(store: SlowStore, before: int, count: int = 1) -> None:
    """Wait until `count` messages were appended after the store's `appends` was `before` (a
    publish reached the store)."""
    await wait_until(lambda: store.appends >= before + count, f"{count} append(s)")
