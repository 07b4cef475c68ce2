"""Disk faults (issue 8, part 2), through the kernel on the commit-log store: a failed fsync
and a failed read. (A full disk: tests/storage/test_disk_alarm.py.)

After EIO from fsync the kernel may have dropped the dirty pages, so the store cannot tell
what is on disk: the publish waiting for it gets an error, every later publish too (the
store refuses writes until a restart, as PostgreSQL does since its fsync-gate), while
consumers keep receiving what is stored; after a restart on a healthy disk every message
confirmed before the fault is there. The fault is injected at the store's seam,
`MappedFile.flush` (the fdatasync); the store and the kernel are real.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from herald.core.embedding import embedded
from herald.core.errors import ResourceError
from herald.core.message import Message, Properties
from herald.storage.commitlog import CommitLogStore
from herald.storage.mapped_file import MappedFile
from tests.sinks import RecordingSink

SETTINGS = ['store.backend="commitlog"', "commitlog.segment_size=1048576"]
PERSISTENT = Properties(delivery_mode=2)


class FailingFlush:
    """fdatasync that fails with EIO while `failing` is set."""

    def __init__(self) -> None:
        self.failing = False
        self.failures = 0
        self._real = MappedFile.flush

    def __call__(self, file: MappedFile) -> None:
        if self.failing:
            self.failures += 1
            raise OSError(errno.EIO, "injected: fsync failed")
        self._real(file)


@pytest.fixture
def fault(monkeypatch: pytest.MonkeyPatch) -> Iterator[FailingFlush]:
    injected = FailingFlush()

    def flush(file: MappedFile) -> None:  # a plain function, so it binds as a method
        injected(file)

    monkeypatch.setattr(MappedFile, "flush", flush)
    yield injected


def message(n: int) -> Message:
    return Message.native(f"m{n}".encode(), routing_key="q", properties=PERSISTENT)


async def test_a_failed_fsync_refuses_writes_keeps_reads_and_loses_nothing_confirmed(
    tmp_path: Path, fault: FailingFlush, caplog: pytest.LogCaptureFixture
) -> None:
    confirmed = []
    delivered: list[bytes] = []
    async with embedded(data_dir=tmp_path, settings=SETTINGS, plugins=[]) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("q", durable=True)
        for n in range(10):
            result = vhost.publish(message(n))
            assert result.ticket is not None
            await broker.store.wait_durable(result.ticket)
            confirmed.append(f"m{n}".encode())
        fault.failing = True
        result = vhost.publish(message(10))  # appended, never confirmed
        assert result.ticket is not None
        with pytest.raises(ResourceError, match="could not be flushed"):
            await broker.store.wait_durable(result.ticket)
        assert fault.failures >= 1
        with pytest.raises(ResourceError):  # later publishes fail at once
            vhost.publish(message(11))
        sink = RecordingSink(auto_ack=True)  # consumers keep draining what is stored
        queue.add_consumer("c", sink, prefetch_count=5)
        delivered = [e.message.decoded(broker.codecs).body for e in sink.entries]
        assert delivered[:10] == confirmed
        fault.failing = False  # the disk is replaced; the broker still stops cleanly
    assert "commit log flush failed" in caplog.text
    async with embedded(data_dir=tmp_path, settings=SETTINGS, plugins=[]) as broker:
        queue = broker.default_vhost.queues["q"]
        sink = RecordingSink(auto_ack=True)
        queue.add_consumer("c", sink, prefetch_count=5)
        again = [e.message.decoded(broker.codecs).body for e in sink.entries]
        # Their acks could not be made durable: they may come back (at least once). Every
        # confirmed message was delivered before the restart or is delivered after it.
        assert set(confirmed) <= set(delivered) | set(again)
        assert b"m11" not in again


async def test_a_read_error_fails_one_delivery_attempt_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """EIO while reading a swapped queue's messages back: the read is retried later, no
    message is dropped, the broker keeps serving."""
    settings = [*SETTINGS, "queues.tail_buffer=100", "queues.load_batch=20"]
    async with embedded(data_dir=tmp_path, settings=settings, plugins=[]) as broker:
        vhost = broker.default_vhost
        queue = vhost.declare_queue("q", durable=True)
        ticket = 0
        for n in range(200):
            ticket = vhost.publish(message(n)).ticket or ticket
        await broker.store.wait_durable(ticket)
        assert queue.statistics().messages_swapped > 100
        assert isinstance(broker.store, CommitLogStore)
        log_files = broker.store.log
        real_read = log_files.read
        failing = [True]

        def read(offset: int, length: int) -> bytes | None:
            if failing[0]:
                raise OSError(errno.EIO, "injected: read failed")
            return real_read(offset, length)

        monkeypatch.setattr(log_files, "read", read)
        sink = RecordingSink(auto_ack=True)
        queue.add_consumer("c", sink, prefetch_count=10)  # the loaded head, then the error
        assert "injected: read failed" in caplog.text
        stalled = len(sink.entries)
        assert stalled < 200 and queue.message_count == 200 - stalled
        failing[0] = False
        with trio.fail_after(10):  # the queue retries the read by itself
            while len(sink.entries) < 200:
                await trio.sleep(0.1)
        bodies = [e.message.decoded(broker.codecs).body for e in sink.entries]
        assert bodies == [f"m{n}".encode() for n in range(200)]
