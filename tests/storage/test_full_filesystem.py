"""Disk full on a real filesystem (issue 8 part 2, issue 3 part 7): a `herald run` process
(tests/crash/protocols.py `BrokerProcess`) keeps its data dir on a 16 MiB tmpfs the test
mounts, with 4 MiB segments (the helper's) and small consume-queue and index files, set through
a config file in $HERALD_CONFIG. Filler files take the rest of the space and are deleted to
give it back. Publishers use pika with publisher confirms (persistent messages, a durable
queue) and MQTT 5 QoS 1; every message carries its own id, and after each restart (clean stop
and SIGKILL) every confirmed message that was not consumed is in the queue exactly once.

- ENOSPC (`disk_free_limit = 0`): once the filesystem has no byte left, publishes still land
  in the preallocated segment, until one needs a new consume-queue file: that publish is
  refused (AMQP connection.close 506, MQTT 5 PUBACK 0x83), a consumer drains meanwhile, and the
  broker restarts on the full disk (after SIGKILL and after a clean stop whose checkpoint the
  disk refused); deleting the fillers lets publishing resume.
- The `disk` alarm (a small limit): the third segment is due and cannot be created, so the
  publisher gets connection.blocked; a consumer drains meanwhile, retention deletes the drained
  first segment, and the publisher is released and finishes.

Mounting needs root (or CAP_SYS_ADMIN); where it is refused the tests skip:
tests/storage/test_disk_alarm.py covers the same ground through the store's seams.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pika
import pika.exceptions
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from herald.storage.mapped_file import MappedFile, file_name
from tests.crash.protocols import BrokerProcess

MIB = 1 << 20
FS_SIZE = 16 * MIB
SEGMENT = 4 * MIB  # BrokerProcess runs with commitlog.segment_size = 4 MiB
BODY = 32_000
QUEUE = "full"
MQTT_TOPIC = "full/mqtt"  # routed through amq.topic as "full.mqtt"
WAIT = 20.0
PERSISTENT = pika.BasicProperties(delivery_mode=2)
SMALL_FILES = {
    "cq_entries_per_file": 1024,  # 32 KiB consume-queue files
    "index_slots": 256,
    "index_entries": 1024,  # 21 KiB index files
    "checkpoint_bytes": MIB,
    "flush_interval_ms": 100,
}


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs, unmounted afterwards whatever happened."""
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command; tests/storage/test_disk_alarm.py covers full disks")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(
            f"cannot mount a tmpfs here ({mounted.stderr.strip() or mounted.returncode}); "
            "tests/storage/test_disk_alarm.py covers full disks through the store's seams"
        )
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], check=True)


@pytest.fixture
def broker(small_fs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Herald]:
    config = tmp_path / "herald.toml"
    monkeypatch.setenv("HERALD_CONFIG", str(config))  # `herald run` inherits it
    process = BrokerProcess(small_fs / "data", tmp_path / "herald.log")
    try:
        yield Herald(process, config, small_fs)
    finally:
        process.kill()


class Herald:
    """The broker process, its config file and its filesystem."""

    def __init__(self, process: BrokerProcess, config: Path, fs: Path) -> None:
        self.process = process
        self.config = config
        self.fs = fs

    def configure(self, **commitlog: int) -> None:
        """The `[commitlog]` section of the next start."""
        lines = ["[commitlog]"] + [f"{k} = {v}" for k, v in {**SMALL_FILES, **commitlog}.items()]
        self.config.write_text("\n".join(lines) + "\n")

    def alive(self) -> bool:
        return self.process.process is not None and self.process.process.poll() is None

    def free(self) -> int:
        stats = os.statvfs(self.fs)
        return stats.f_bavail * stats.f_frsize

    def fill(self, name: str, size: int | None = None) -> None:
        fill(self.fs / name, size)


def fill(path: Path, size: int | None = None) -> None:
    """Write a file of `size` bytes, or until the filesystem refuses (None)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    chunk = bytes(64 * 1024)
    try:
        written = 0
        while size is None or written < size:
            written += os.write(fd, chunk[: None if size is None else size - written])
    except OSError as exc:
        if size is not None or exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


# -- clients ---------------------------------------------------------------------------------
def amqp(broker: Herald) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            broker.process.ports["amqp"],
            credentials=pika.PlainCredentials("guest", "guest"),
            socket_timeout=WAIT,
            blocked_connection_timeout=WAIT,
            connection_attempts=1,
            heartbeat=0,
        )
    )


def body(message_id: str) -> bytes:
    return message_id.encode().ljust(BODY, b".")


def declare(broker: Herald) -> None:
    connection = amqp(broker)
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True)
    channel.queue_bind(QUEUE, "amq.topic", "full.mqtt")
    connection.close()


class Publisher:
    """Confirmed publishing of "<run>:<n>" over one connection, with what the broker said."""

    def __init__(self, broker: Herald, run: str) -> None:
        self.run = run
        self.attempted: list[str] = []
        self.confirmed: list[str] = []
        self.error: Exception | None = None
        self.blocked = threading.Event()
        self.unblocked = threading.Event()
        self.stop = threading.Event()
        self.connection = amqp(broker)
        # On the underlying connection: BlockingConnection queues these events until the call
        # in progress returns, and a publish waiting for its confirm returns only once unblocked.
        impl = self.connection._impl
        impl.add_on_connection_blocked_callback(lambda *_: self.blocked.set())
        impl.add_on_connection_unblocked_callback(lambda *_: self.unblocked.set())
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def publish(self, count: int | None = None) -> None:
        """Until `count` are confirmed, the broker refuses one, or `stop` is set."""
        while not self.stop.is_set() and (count is None or len(self.confirmed) < count):
            message_id = f"{self.run}:{len(self.attempted)}"
            self.attempted.append(message_id)
            try:
                self.channel.basic_publish("", QUEUE, body(message_id), PERSISTENT, mandatory=True)
            except Exception as exc:  # a nack, a closed connection, a blocked-timeout
                self.error = exc
                return
            self.confirmed.append(message_id)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # maybe closed by the broker already
            self.connection.close()


def mqtt_publish(broker: Herald, message_id: str) -> int:
    """One MQTT 5 QoS 1 publish; returns the PUBACK reason code (0: stored)."""
    connected, acked = threading.Event(), queue.Queue[int]()
    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id="full-fs",
        protocol=mqtt.MQTTv5,
    )
    client.username_pw_set("guest", "guest")
    client.on_connect = lambda *_: connected.set()
    client.on_publish = lambda c, u, mid, reason, props: acked.put(reason.value)
    client.connect("127.0.0.1", broker.process.ports["mqtt"], keepalive=60)
    client.loop_start()
    try:
        assert connected.wait(WAIT)
        client.publish(MQTT_TOPIC, body(message_id), qos=1)
        return acked.get(timeout=WAIT)
    finally:
        client.disconnect()
        client.loop_stop()


def take(broker: Herald, limit: int | None = None, *, ack: bool) -> list[str]:
    """Up to `limit` messages from the queue, acked or (on `ack=False`) put back at close."""
    connection = amqp(broker)
    channel = connection.channel()
    taken: list[str] = []
    while limit is None or len(taken) < limit:
        method, _, data = channel.basic_get(QUEUE)
        if method is None:
            break
        taken.append(data.rstrip(b".").decode())
        if ack:
            channel.basic_ack(method.delivery_tag)
    connection.close()
    return taken


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT}s for {what}"
        time.sleep(0.02)


def allocated(path: Path) -> bool:
    """Whether the segment at `path` has all its blocks (its creation is over)."""
    try:
        return os.stat(path).st_blocks * 512 >= SEGMENT
    except FileNotFoundError:
        return False


def check(broker: Herald, confirmed: list[str], consumed: list[str], attempted: list[str]) -> None:
    """Every confirmed message not consumed is in the queue once; nothing twice; nothing that
    was never published. A consumed message may be back: its ack may not have reached disk."""
    counts = collections.Counter(take(broker, ack=False))
    assert set(counts) <= set(attempted), f"never published: {set(counts) - set(attempted)}"
    twice = [m for m, n in counts.items() if n > 1]
    assert not twice, f"duplicated: {twice[:5]}"
    lost = [m for m in confirmed if m not in counts and m not in set(consumed)]
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {lost[:5]}"


# -- the tests -------------------------------------------------------------------------------
def test_enospc_refuses_the_publish_and_the_broker_survives_a_full_disk(broker: Herald) -> None:
    broker.fill("filler", 3 * MIB)
    # No free-space limit, and no checkpoint due while the disk fills (a refused checkpoint
    # raises the alarm too): the first write the disk refuses is a publish's.
    broker.configure(
        disk_free_limit=0,
        disk_check_interval_ms=100,
        cq_entries_per_file=64,
        checkpoint_bytes=64 * MIB,
    )
    broker.process.start()
    declare(broker)
    first = Publisher(broker, "a")
    first.publish(140)  # into the second segment, made ahead; the third is not due yet
    assert first.error is None, first.error
    segments = broker.fs / "data" / "store" / "commitlog"
    wait_for(lambda: sum(map(allocated, segments.iterdir())) == 2, "the second segment")

    broker.fill("top")  # another process takes every byte left
    assert broker.free() == 0
    first.publish()  # into the preallocated segment, until a consume-queue file is needed
    assert isinstance(first.error, pika.exceptions.ConnectionClosedByBroker), first.error
    assert first.error.reply_code == 506 and "disk full" in first.error.reply_text
    assert len(first.confirmed) == 192  # 64 entries per consume-queue file: the 4th is refused
    assert broker.alive()
    assert mqtt_publish(broker, "mqtt:refused") == 0x83  # refused, not stored

    consumed = take(broker, 100, ack=True)  # another connection drains while the disk is full
    assert consumed == first.confirmed[:100]
    again = Publisher(broker, "b")  # and a new publisher is refused the same way
    again.publish()
    assert isinstance(again.error, pika.exceptions.ConnectionClosedByBroker)
    assert again.error.reply_code == 506 and again.confirmed == []
    assert broker.alive()

    attempted = [*first.attempted, *again.attempted, "mqtt:refused"]
    broker.process.kill()
    broker.fill("top-2")  # whatever the broker gave back meanwhile
    broker.process.start()  # recovery on a full disk: it cannot write a checkpoint
    check(broker, first.confirmed, consumed, attempted)
    time.sleep(0.3)  # the background service has tried the due checkpoint, and failed
    assert broker.alive()
    broker.process.stop()  # a clean stop whose checkpoint the disk refuses
    broker.fill("top-3")
    broker.process.start()
    check(broker, first.confirmed, consumed, attempted)

    for name in ("top", "top-2", "top-3", "filler"):
        (broker.fs / name).unlink()
    late = Publisher(broker, "c")  # blocked until the monitor sees the space, then confirmed
    late.publish(20)
    late.close()
    assert late.error is None, late.error
    assert mqtt_publish(broker, "mqtt:stored") == 0
    confirmed = [*first.confirmed, *late.confirmed, "mqtt:stored"]
    attempted += [*late.attempted, "mqtt:stored"]
    broker.process.kill()
    broker.process.start()
    check(broker, confirmed, consumed, attempted)
    rest = take(broker, ack=True)
    assert set(rest) | set(consumed) >= set(confirmed)
    broker.process.stop()
    broker.process.start()
    assert take(broker, ack=False) == []  # every ack reached the disk by the clean stop
    broker.process.stop()


def test_disk_alarm_blocks_the_publisher_until_retention_frees_a_segment(broker: Herald) -> None:
    broker.fill("filler", 4 * MIB)  # 12 MiB left: two segments, and a third is out of reach
    broker.configure(disk_free_limit=1_000_000, disk_check_interval_ms=100)
    broker.process.start()
    declare(broker)

    publisher = Publisher(broker, "a")
    thread = threading.Thread(target=publisher.publish, args=(280,))
    thread.start()
    try:
        # At 75 % of the second segment the third is due and cannot fit: connection.blocked.
        assert publisher.blocked.wait(WAIT), "the publisher was never blocked"
        time.sleep(0.2)  # what was already on its way is confirmed; then nothing more
        held_at = len(publisher.confirmed)
        assert 1.5 * SEGMENT // BODY < held_at < 2 * SEGMENT // BODY
        assert not publisher.unblocked.is_set() and broker.alive()
        consumed: list[str] = []
        deadline = time.monotonic() + WAIT
        while not publisher.unblocked.is_set():  # a consumer drains meanwhile
            assert time.monotonic() < deadline, "never unblocked"
            taken = take(broker, 50, ack=True)
            consumed += taken
            if len(publisher.confirmed) > held_at:
                assert publisher.unblocked.is_set(), "published while blocked"
            if not taken:
                time.sleep(0.02)
        # Draining emptied the first segment; retention deleted it and the alarm cleared.
        thread.join(WAIT)
        assert not thread.is_alive()
    finally:
        publisher.stop.set()
        thread.join(WAIT)
        publisher.close()
    assert publisher.error is None, publisher.error
    assert len(publisher.confirmed) == 280
    assert consumed == publisher.confirmed[: len(consumed)]

    broker.process.stop()
    broker.process.start()
    check(broker, publisher.confirmed, consumed, publisher.attempted)
    assert len(take(broker, ack=False)) == 280 - len(consumed)  # acks durable after a clean stop

    killed = Publisher(broker, "b")
    thread = threading.Thread(target=killed.publish, args=(None,))
    thread.start()
    while len(killed.confirmed) < 30 and thread.is_alive():
        thread.join(0.01)
    broker.process.kill()
    thread.join(WAIT)
    assert isinstance(killed.error, pika.exceptions.AMQPConnectionError)
    broker.process.start()
    confirmed = [*publisher.confirmed, *killed.confirmed]
    check(broker, confirmed, consumed, [*publisher.attempted, *killed.attempted])
    broker.process.stop()


def test_a_sparse_segment_is_allocated_before_it_is_mapped(small_fs: Path) -> None:
    """Writing through a map into a hole of a full tmpfs is SIGBUS, which kills the broker:
    a segment restored sparse (its zeros punched out by a copying tool) is allocated when it
    is opened, so a full disk refuses it there, with ENOSPC."""
    size = 256 * 1024
    sparse = small_fs / file_name(0)
    with sparse.open("wb") as out:
        out.truncate(size)
    assert os.stat(sparse).st_blocks == 0
    fill(small_fs / "filler")
    with pytest.raises(OSError) as refused:
        MappedFile.open(sparse, 0, size)
    assert refused.value.errno == errno.ENOSPC

    (small_fs / "filler").unlink()
    segment = MappedFile.open(sparse, 0, size)
    try:
        assert os.stat(sparse).st_blocks * 512 >= size
        fill(small_fs / "filler")  # full again: the segment's pages are its own
        segment.map[size - 8 :] = b"writable"
        segment.flush()
        assert segment.pread(size - 8, 8) == b"writable"
    finally:
        segment.close()
