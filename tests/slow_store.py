"""A memory store whose appends become durable only when a test says so: for the tests of
what protocols do while they wait for the store (confirms, receipts, acks), and of what they
answer when the store fails those waits, or refuses appends (`SlowStore.fail`: a replicated
store's ReplicationTimeout, a demoted master's NotMaster). Fault injection into the store; the
protocol code under test runs as it does in production."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from herald.core.broker import Broker
from herald.core.embedding import embedded
from herald.core.message import Message
from herald.core.store import QueueTarget
from herald.storage.memory import MemoryStore


class SlowStore(MemoryStore):
    """A store whose appends become durable only when the test says (`flush`), and whose waits
    for durability, or appends, fail when it says (`fail`)."""

    def __init__(self) -> None:
        super().__init__()
        self.durable = 0
        self._flushed: trio.Event | None = None
        self.failure: Exception | None = None
        """Raised by every wait for a ticket that is not durable (`fail`)."""
        self.refusal: Exception | None = None
        """Raised by every append (`fail(..., appends=True)`)."""
        self.waits_failed = 0
        """How many waits raised `failure`."""
        self.appends = 0
        """How many appends stored a message (a refused one does not count)."""

    @property
    def durable_ticket(self) -> int:
        return self.durable

    async def wait_durable(self, ticket: int) -> None:
        while self.durable < ticket:
            if self.failure is not None:
                self.waits_failed += 1
                raise copy.copy(self.failure)  # a copy each: one traceback per raise
            if self._flushed is None:
                self._flushed = trio.Event()
            await self._flushed.wait()
        await trio.lowlevel.checkpoint()

    def append(self, message: Message, targets: Sequence[QueueTarget]) -> int:
        if self.refusal is not None:
            raise copy.copy(self.refusal)
        ticket = super().append(message, targets)
        self.appends += 1
        return ticket

    @property
    def appended(self) -> int:
        """The ticket of the last append."""
        return self._data.ticket

    def flush(self, upto: int | None = None) -> None:
        """Make every append durable, or those up to ticket `upto`."""
        self.durable = self._data.ticket if upto is None else upto
        self._wake()

    def fail(self, error: Exception | None, *, appends: bool = False) -> None:
        """From now on every wait for a ticket not yet durable raises `error`, those waiting
        now included (a ReplicationTimeout: the sync replicas did not confirm in time; a
        NotMaster: the node was demoted meanwhile); with `appends`, every append raises it
        too, storing nothing (a node that is not master refuses writes). What was appended
        stays stored. `fail(None)` heals both."""
        self.failure = error
        self.refusal = error if appends else None
        self._wake()

    def _wake(self) -> None:
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
