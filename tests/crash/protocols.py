"""Crash safety per protocol: a real `herald run` process, real clients, SIGKILL, restart.

`BrokerProcess` runs `herald run` on a data dir with the commit-log store and the AMQP, MQTT
and STOMP plugins on fixed free ports of 127.0.0.1, and kills it with SIGKILL. A `Driver`
publishes confirmed messages over one protocol from a thread of the test process until the
broker dies (pika with publisher confirms, paho QoS 1 or 2 waiting for PUBACK / PUBCOMP,
stomp.py with receipts), each message carrying (publisher run, sequence number); it records a
message as confirmed only once the protocol said so. After the kills it consumes everything
its durable destination holds and `check` compares: every confirmed message must be there
(at least once: duplicates are reported, not failures), in order per publisher run, and
nothing that was never published.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from tests.ports import free_port

START_TIMEOUT = 30.0
HERALD = [sys.executable, "-m", "herald.core.cli"]


class BrokerProcess:
    """`herald run` on `data_dir`, started and SIGKILLed as often as a test likes."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.data_dir = data_dir
        self.log = log
        self.ports = {"amqp": free_port(), "mqtt": free_port(), "stomp": free_port()}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        settings = [
            "store.backend=commitlog",
            "commitlog.segment_size=4194304",
            "broker.log_level=warning",
            "amqp.host=127.0.0.1",
            f"amqp.port={self.ports['amqp']}",
            "mqtt.host=127.0.0.1",
            f"mqtt.port={self.ports['mqtt']}",
            "mqtt.ws_enabled=false",
            "stomp.host=127.0.0.1",
            f"stomp.port={self.ports['stomp']}",
            "stomp.ws_enabled=false",
        ]
        command = [*HERALD, "run", "--plugins", "amqp,mqtt,stomp", "--data-dir", str(self.data_dir)]
        for setting in settings:
            command += ["--set", setting]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT
        while not all(self._listening(port) for port in self.ports.values()):
            if self.process.poll() is not None:
                raise RuntimeError(f"herald exited with {self.process.returncode}: see {self.log}")
            if time.monotonic() > deadline:
                raise TimeoutError("herald did not start listening")
            time.sleep(0.05)

    @staticmethod
    def _listening(port: int) -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def stop(self) -> None:
        """A clean stop (SIGTERM), so what was acked is durable."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(START_TIMEOUT)
        self.process = None


@attrs.define
class Ledger:
    """What a driver published and had confirmed, by publisher run."""

    confirmed: dict[int, list[int]] = attrs.field(factory=dict)
    attempted: dict[int, int] = attrs.field(factory=dict)  # highest sequence tried per run

    def body(self, run: int, sequence: int) -> bytes:
        return f"{run}:{sequence}:".encode() + bytes(32 + sequence % 200)

    @staticmethod
    def parse(body: bytes) -> tuple[int, int]:
        run, sequence, _ = body.split(b":", 2)
        return int(run), int(sequence)


@attrs.frozen
class Verdict:
    confirmed: int
    delivered: int
    duplicates: int
    unconfirmed_survivors: int


def check(ledger: Ledger, bodies: list[bytes]) -> Verdict:
    """Every confirmed message delivered, in order per run, nothing never published."""
    seen: dict[int, list[int]] = {}
    for body in bodies:
        run, sequence = Ledger.parse(body)
        assert run in ledger.attempted and sequence <= ledger.attempted[run], (
            f"delivered a message never published: run {run} #{sequence}"
        )
        seen.setdefault(run, []).append(sequence)
    duplicates = 0
    for run, sequences in seen.items():
        firsts: list[int] = []
        for sequence in sequences:
            if sequence in firsts:
                duplicates += 1
            else:
                firsts.append(sequence)
        assert firsts == sorted(firsts), f"run {run} delivered out of order: {firsts[:20]}..."
    missing = {
        (run, s)
        for run, sequences in ledger.confirmed.items()
        for s in sequences
        if s not in set(seen.get(run, ()))
    }
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    confirmed = sum(map(len, ledger.confirmed.values()))
    survivors = sum(len(set(v)) for v in seen.values()) - confirmed
    return Verdict(confirmed, len(bodies), duplicates, survivors)


def publish_until_dead(
    publish_one: Callable[[bytes], None], ledger: Ledger, run: int, stop: threading.Event
) -> None:
    """Publish (run, 0), (run, 1), ... with `publish_one` (returns once confirmed, raises
    when the connection is gone) until it fails or `stop` is set."""
    sequence = 0
    ledger.confirmed[run] = []
    while not stop.is_set():
        ledger.attempted[run] = sequence
        try:
            publish_one(ledger.body(run, sequence))
        except Exception:
            return
        ledger.confirmed[run].append(sequence)
        sequence += 1


Connect = Callable[["BrokerProcess"], tuple[Callable[[bytes], None], Callable[[], None]]]


def kill_cycles(
    broker: BrokerProcess,
    publishers: dict[str, tuple[Connect, Ledger]],
    kills: int,
    rng: random.Random,
) -> None:
    """`kills` times: start the broker (unless it runs already), publish over every protocol
    at once (a thread each), SIGKILL it after a random delay, wait until every publisher
    noticed."""
    for run in range(kills):
        if broker.process is None:
            broker.start()
        threads, closers = [], []
        stop = threading.Event()
        for connect, ledger in publishers.values():
            publish_one, close = connect(broker)
            closers.append(close)
            threads.append(
                threading.Thread(target=publish_until_dead, args=(publish_one, ledger, run, stop))
            )
        for thread in threads:
            thread.start()
        time.sleep(rng.uniform(0.05, 0.6))
        broker.kill()
        for thread in threads:
            thread.join(START_TIMEOUT)
        stop.set()
        for thread in threads:
            thread.join(START_TIMEOUT)
            assert not thread.is_alive(), "a publisher did not notice the broker died"
        for close in closers:
            with contextlib.suppress(Exception):  # the connection is already gone
                close()
