"""The output side every protocol session shares (core/session_io.py), without an adapter:
the output signal (no event while nothing waits, a signal kept across a cancelled wait), the
write-buffer backpressure to consumers, and the lazily made pieces an idle session does not
hold. (The MQTT plugin's own copies of these were tested the same way before it moved onto
`SessionIO`.)"""

from __future__ import annotations

import trio
import trio.testing

from herald.core.session_io import SessionIO

BUFFER = 1000


class Codec:
    def __init__(self) -> None:
        self.out = bytearray()

    def data_to_send(self) -> bytes:
        data, self.out = bytes(self.out), bytearray()
        return data


class Session(SessionIO):
    __slots__ = ("changes",)

    def __init__(self) -> None:
        super().__init__(write_buffer=BUFFER)
        self.codec = Codec()
        self.changes: list[bool] = []

    def deliver(self, size: int) -> None:
        self.codec.out += b"x" * size
        self.queued(size)
        self.wake()

    def transport_full_changed(self, full: bool) -> None:
        self.changes.append(full)


def test_an_idle_session_holds_no_event_and_no_dict() -> None:
    session = Session()
    assert session._output is None and session.link is None
    assert not hasattr(session, "__dict__")  # slots all the way down


async def test_output_signal_without_a_waiter() -> None:
    session = Session()
    assert not session.output_pending()
    session.wake()  # no link: only the signal
    assert session.output_pending()
    with trio.testing.assert_checkpoints():
        await session.wait_output()  # at once, still a checkpoint
    assert not session.output_pending()
    assert session._output is None


async def test_output_signal_wakes_a_waiter() -> None:
    session = Session()
    woken = trio.Event()

    async def writer() -> None:
        await session.wait_output()
        woken.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        assert not woken.is_set()
        session.wake()
    assert woken.is_set() and not session.output_pending()
    assert session._output is None  # made for the wait only


async def test_output_signal_after_a_cancelled_wait_is_kept() -> None:
    session = Session()
    with trio.move_on_after(0):
        await session.wait_output()
    session.wake()
    assert session.output_pending()  # the writer's next check sees it
    await session.wait_output()
    assert not session.output_pending()


def test_deliveries_past_the_write_buffer_suspend_until_half_drained() -> None:
    session = Session()
    session.deliver(600)
    session.deliver(300)
    assert session.changes == [] and not session.transport_full
    session.deliver(200)  # 1100 queued > 1000
    assert session.changes == [True] and session.transport_full
    session.deliver(100)  # already suspended: said once
    assert session.changes == [True]
    assert len(session.data_to_send()) == 1200  # in flight now, not queued
    session.deliver(400)  # queued while the write runs; 1600 > 1000, still full
    assert session.changes == [True]
    session.written()  # 400 queued: below half the buffer
    assert session.changes == [True, False] and not session.transport_full


def test_a_backlog_above_half_the_buffer_keeps_them_suspended() -> None:
    session = Session()
    session.deliver(1100)
    session.data_to_send()
    session.deliver(700)  # the next write's worth, above half
    session.written()
    assert session.changes == [True] and session.transport_full
    session.data_to_send()
    session.written()
    assert session.changes == [True, False]


def test_reschedule_without_a_connection_does_nothing() -> None:
    session = Session()
    session.reschedule_timers()  # no link: a session tested on its own
    assert session.timer_at is None
