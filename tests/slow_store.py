"""A memory store whose appends become durable only when a test says so: for the tests of
what protocols do while they wait for the store (confirms, receipts, acks)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.storage.memory import MemoryStore


class SlowStore(MemoryStore):
    """A store whose appends become durable only when the test says (`flush`)."""

    def __init__(self) -> None:
        super().__init__()
        self.durable = 0
        self._flushed: trio.Event | None = None

    @property
    def durable_ticket(self) -> int:
        return self.durable

    async def wait_durable(self, ticket: int) -> None:
        while self.durable < ticket:
            if self._flushed is None:
                self._flushed = trio.Event()
            await self._flushed.wait()
        await trio.lowlevel.checkpoint()

    @property
    def appended(self) -> int:
        """The ticket of the last append."""
        return self._data.ticket

    def flush(self, upto: int | None = None) -> None:
        """Make every append durable, or those up to ticket `upto`."""
        self.durable = self._data.ticket if upto is None else upto
        if self._flushed is not None:
            self._flushed.set()
            self._flushed = None


@asynccontextmanager
async def broker_with(store: SlowStore, data_dir: Path, protocol: object) -> AsyncIterator[Broker]:
    """A broker on `store` with one protocol plugin registered (no entry points, no listener
    started by the tests: they drive a `ConnectionServer` over memory streams), and the
    memory monitor quiet."""
    async with embedded(
        plugins=[],
        settings=["memory.check_interval=3600"],
        data_dir=data_dir,
        load_entrypoints=False,
        extra_plugins=[protocol],
        store=store,
    ) as running:
        yield running
