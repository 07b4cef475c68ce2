"""serve_tcp's accept loop (core/listeners.py): what trio.serve_listeners did, one frame less."""

from __future__ import annotations

import errno

import pytest
import trio
import trio.testing

from herald.core.listeners import _accept


class FlakyListener(trio.abc.Listener[trio.abc.Stream]):
    """Raises each of `errors` from `accept`, then hands out one memory stream, then waits."""

    def __init__(self, errors: list[OSError]) -> None:
        self.errors = errors
        self.served = False
        self.closed = False

    async def accept(self) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        if self.errors:
            raise self.errors.pop(0)
        if self.served:
            await trio.sleep_forever()
        self.served = True
        return trio.testing.memory_stream_pair()[0]

    async def aclose(self) -> None:
        self.closed = True


async def test_accept_retries_when_out_of_descriptors(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    handled: list[trio.abc.Stream] = []

    async def handler(stream: trio.abc.Stream) -> None:
        handled.append(stream)

    listener = FlakyListener([OSError(errno.EMFILE, "too many open files")])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_accept, listener, handler, "test", nursery)
        await trio.sleep(1)
        assert len(handled) == 1
        assert "accept failed (EMFILE)" in caplog.text
        nursery.cancel_scope.cancel()
    assert listener.closed


async def test_other_accept_errors_end_the_listener() -> None:
    async def handler(stream: trio.abc.Stream) -> None:
        raise AssertionError("no connection expected")

    listener = FlakyListener([OSError(errno.EINVAL, "invalid")])
    with pytest.RaisesGroup(OSError):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_accept, listener, handler, "test", nursery)
    assert listener.closed


async def test_each_handler_task_is_named_after_its_protocol() -> None:
    names: list[str] = []

    async def handler(stream: trio.abc.Stream) -> None:
        names.append(trio.lowlevel.current_task().name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_accept, FlakyListener([]), handler, "test", nursery)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert names == ["test connection"]
