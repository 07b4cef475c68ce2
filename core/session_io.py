"""The output side every protocol session shares with the adapter (core/adapter.py).

A session queues frames into its sans-IO codec; the adapter's writer takes them all in one
write (`data_to_send`) and says when they are written (`written`). Deliveries count against
`write_buffer`: past it the session's consumers are suspended (`transport_full_changed`), and
once the backlog has drained below half they resume. That is the backpressure from a slow
reader's socket to the queues feeding it, the same in every protocol. An idle session holds
no event and no writer task: both are made when output comes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from herald.core.adapter import Link


class SessionIO:
    """Base of a protocol session: the adapter's half of it. A subclass sets `codec` (with
    `data_to_send()`), implements `receive`, `connection_lost`, `teardown`,
    `close_from_broker`, and may override `deadline`/`check_timers`, `reading_paused`,
    `lingers` and `transport_full_changed`."""

    __slots__ = (
        "_in_flight",
        "_output",
        "_queued",
        "_signalled",
        "close_reason",
        "codec",
        "done",
        "link",
        "timer_at",
        "transport_full",
        "write_buffer",
    )

    def __init__(self, write_buffer: int) -> None:
        self.codec: Any = None
        self.write_buffer = write_buffer
        self.link: Link | None = None  # set by the adapter while the connection runs
        self.done = False  # nothing more to read; the adapter flushes and closes
        self.close_reason = "client closed the connection"
        self.transport_full = False
        self.timer_at: float | None = None  # owned by ConnectionDeadlines
        self._output: trio.Event | None = None  # while `wait_output` waits
        self._signalled = False  # output since the last `wait_output`
        self._queued = self._in_flight = 0

    # -- for the adapter ---------------------------------------------------------------------
    def data_to_send(self) -> bytes:
        data: bytes = self.codec.data_to_send()
        self._in_flight = len(data)
        self._queued = 0
        return data

    def written(self) -> None:
        """The adapter wrote the last `data_to_send`: resume deliveries if the backlog drained."""
        self._in_flight = 0
        if self.transport_full and self._queued < self.write_buffer // 2:
            self.transport_full = False
            self.transport_full_changed(False)

    def output_pending(self) -> bool:
        """Whether output was signalled since the last `wait_output`."""
        return self._signalled

    async def wait_output(self) -> None:
        """Return once there is something to write, or the session is done."""
        if self._signalled:
            await trio.lowlevel.checkpoint()
        else:
            self._output = trio.Event()
            try:
                await self._output.wait()
            finally:
                self._output = None
        self._signalled = False

    @property
    def reading_paused(self) -> bool:
        return False

    @property
    def lingers(self) -> bool:
        return True

    def deadline(self) -> float:
        return math.inf

    def check_timers(self, now: float) -> None:
        pass

    # -- for the protocol --------------------------------------------------------------------
    def wake(self) -> None:
        """There is output, or the session is done: make sure a writer runs."""
        if not self._signalled:
            self._signalled = True
            if self._output is not None:
                self._output.set()
        link = self.link
        if link is not None:
            link.wake()

    def queued(self, size: int) -> None:
        """A delivery of `size` bytes was queued: past `write_buffer`, suspend consumers."""
        self._queued += size
        if not self.transport_full and self._queued + self._in_flight > self.write_buffer:
            self.transport_full = True
            self.transport_full_changed(True)

    def transport_full_changed(self, full: bool) -> None:
        """Suspend (or resume) the session's consumers."""

    def reschedule_timers(self) -> None:
        """Call when `deadline()` may have come nearer (a heartbeat was negotiated)."""
        if self.link is not None:
            self.link.reschedule()
