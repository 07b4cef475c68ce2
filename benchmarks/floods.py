"""Floods: what the broker's memory does under 10,000 idle connections, a publisher with no
consumer, and a consumer that never reads its socket.

    python benchmarks/floods.py [--connections 10000] [--publish-mb 300] [--watermark-mb 250]
                                [--scenarios idle-amqp,idle-mqtt,idle-stomp,no-consumer,
                                             stuck-consumer]

Prints one JSON object. Each scenario starts its own `herald run` (commit-log store in a
temporary data dir, AMQP, MQTT and STOMP on free ports of 127.0.0.1, the memory high watermark
at `watermark_mb`, sampled every 0.2 s) and reads the broker's RSS with psutil:

- idle-amqp / idle-mqtt / idle-stomp: `connections` AMQP 0-9-1 clients (raw sockets, the
  handshake to connection.open-ok with heartbeat 600 s, then channel 1 opened), MQTT 3.1.1
  clients (CONNECT / CONNACK, keep alive 600 s), or STOMP 1.2 clients (CONNECT / CONNECTED),
  all held open; RSS before, with them all open, and per connection; how long opening them
  took.
- no-consumer: pika publishes `publish_mb` of transient 1 KiB messages to a queue nobody
  consumes, as fast as the broker lets it (paging and the memory alarm must hold RSS near the
  watermark: `connection.blocked` pauses the publisher); RSS sampled every 0.25 s.
- stuck-consumer: a STOMP client subscribes to a queue and never reads its socket while pika
  publishes `publish_mb` of transient 1 KiB messages to it; the broker must stop writing to
  the stuck socket past its write buffer (and page the backlog) instead of buffering it all.

Each reports max and final RSS; the issue's requirement is that they stay bounded (near the
watermark), not that they reach a number.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pika
import pika.frame
import pika.spec
import psutil
import trio

MB = 1_000_000
START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Herald:
    """`herald run` in a child process with the three protocols on free ports."""

    def __init__(self, data_dir: Path, watermark_mb: int) -> None:
        self.ports = {"amqp": free_port(), "mqtt": free_port(), "stomp": free_port()}
        settings = [
            "store.backend=commitlog",
            "broker.log_level=warning",
            f"memory.high_watermark={watermark_mb * MB}",
            "memory.check_interval=0.2",
            "amqp.host=127.0.0.1",
            f"amqp.port={self.ports['amqp']}",
            "mqtt.host=127.0.0.1",
            f"mqtt.port={self.ports['mqtt']}",
            "mqtt.ws_enabled=false",
            "stomp.host=127.0.0.1",
            f"stomp.port={self.ports['stomp']}",
            "stomp.ws_enabled=false",
        ]
        command = [sys.executable, "-m", "herald.core.cli", "run", "--plugins", "amqp,mqtt,stomp"]
        command += ["--data-dir", str(data_dir)]
        for setting in settings:
            command += ["--set", setting]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.ps = psutil.Process(self.process.pid)
        deadline = time.monotonic() + START_TIMEOUT
        while not all(self._up(port) for port in self.ports.values()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                assert self.process.stderr is not None  # stderr=PIPE
                raise RuntimeError(f"herald did not start: {self.process.stderr.read()!r}")
            time.sleep(0.1)

    @staticmethod
    def _up(port: int) -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- idle connections --------------------------------------------------------------------------
def mqtt_connect_packet(client_id: str) -> bytes:
    def text(value: str) -> bytes:
        data = value.encode()
        return len(data).to_bytes(2, "big") + data

    variable = text("MQTT") + bytes([4, 0xC2]) + (600).to_bytes(2, "big")
    payload = text(client_id) + text("guest") + text("guest")
    body = variable + payload
    return bytes([0x10, len(body)]) + body  # remaining length < 128 here


STOMP_CONNECT = b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0"

# What an AMQP client sends, each step after the server's answer (pika's encoder, not herald's).
AMQP_STEPS = [
    (b"AMQP\x00\x00\x09\x01", pika.spec.Connection.Start),
    (
        pika.frame.Method(
            0, pika.spec.Connection.StartOk({}, "PLAIN", b"\0guest\0guest", "en_US")
        ).marshal(),
        pika.spec.Connection.Tune,
    ),
    (
        pika.frame.Method(0, pika.spec.Connection.TuneOk(2047, 131072, 600)).marshal()
        + pika.frame.Method(0, pika.spec.Connection.Open("/")).marshal(),
        pika.spec.Connection.OpenOk,
    ),
    (pika.frame.Method(1, pika.spec.Channel.Open()).marshal(), pika.spec.Channel.OpenOk),
]


async def amqp_handshake(stream: trio.SocketStream) -> None:
    """connection.open-ok and channel 1 open, as an idle client leaves it."""
    buffer = b""
    for data, answer in AMQP_STEPS:
        await stream.send_all(data)
        while True:
            consumed, frame = pika.frame.decode_frame(buffer)
            if frame is None:
                chunk = await stream.receive_some(4096)
                assert chunk, "the server closed the connection"
                buffer += chunk
                continue
            buffer = buffer[consumed:]
            if isinstance(frame, pika.frame.Method) and isinstance(frame.method, answer):
                break


async def open_idle(port: int, count: int, protocol: str, held: list[trio.SocketStream]) -> None:
    limiter = trio.CapacityLimiter(200)  # connects in flight at once

    async def one(n: int) -> None:
        async with limiter:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            if protocol == "amqp":
                await amqp_handshake(stream)
            elif protocol == "mqtt":
                await stream.send_all(mqtt_connect_packet(f"idle-{n}"))
                reply = await stream.receive_some(4)
                assert reply[:1] == b"\x20" and reply[3:4] == b"\x00", reply
            else:
                await stream.send_all(STOMP_CONNECT)
                reply = await stream.receive_some(4096)
                assert reply.startswith(b"CONNECTED"), reply
            held.append(stream)

    async with trio.open_nursery() as nursery:
        for n in range(count):
            nursery.start_soon(one, n)


async def idle_scenario(herald: Herald, connections: int, protocol: str) -> dict[str, Any]:
    """`connections` idle clients of `protocol`, on a broker of their own (memory one
    protocol's clients freed would otherwise hide the other's cost)."""
    held: list[trio.SocketStream] = []
    await trio.sleep(2)
    before = herald.rss()
    start = time.perf_counter()
    await open_idle(herald.ports[protocol], connections, protocol, held)
    open_seconds = time.perf_counter() - start
    await trio.sleep(2)  # let the broker settle (keep alive timers, buffers)
    after = herald.rss()
    for stream in held:
        await stream.aclose()
    return {
        "connections": len(held),
        "open_seconds": round(open_seconds, 1),
        "rss_before_mb": round(before / MB, 1),
        "rss_with_them_mb": round(after / MB, 1),
        "rss_per_connection_kb": round((after - before) / connections / 1000, 1),
    }


# -- publishers ---------------------------------------------------------------------------------
def publish(port: int, queue: str, total_bytes: int, blocked: list[float]) -> float:
    """Publish 1 KiB transient messages until `total_bytes`; returns the seconds it took."""
    connection = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, blocked_connection_timeout=600)
    )
    connection.add_on_connection_blocked_callback(lambda *a: blocked.append(time.monotonic()))
    channel = connection.channel()
    channel.queue_declare(queue)
    body = b"x" * 1024
    start = time.perf_counter()
    for _ in range(total_bytes // len(body)):
        channel.basic_publish("", queue, body)
    connection.process_data_events(0)
    channel.queue_declare(queue, passive=True)  # a round trip: everything sent has arrived
    connection.close()
    return time.perf_counter() - start


def sample_while(herald: Herald, thread: threading.Thread) -> list[int]:
    samples = []
    while thread.is_alive():
        samples.append(herald.rss())
        thread.join(0.25)
    samples.append(herald.rss())
    return samples


def flood(herald: Herald, queue: str, total_bytes: int) -> dict[str, Any]:
    before = herald.rss()
    blocked: list[float] = []
    took: list[float] = []
    thread = threading.Thread(
        target=lambda: took.append(publish(herald.ports["amqp"], queue, total_bytes, blocked))
    )
    thread.start()
    samples = sample_while(herald, thread)
    if not took:
        raise RuntimeError("the publisher failed")
    return {
        "published_mb": round(total_bytes / MB),
        "publish_seconds": round(took[0], 1),
        "times_blocked": len(blocked),
        "rss_before_mb": round(before / MB, 1),
        "rss_max_mb": round(max(samples) / MB, 1),
        "rss_final_mb": round(samples[-1] / MB, 1),
    }


def stuck_consumer(herald: Herald, total_bytes: int) -> dict[str, Any]:
    stuck = socket.create_connection(("127.0.0.1", herald.ports["stomp"]))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(STOMP_CONNECT)
    assert stuck.recv(4096).startswith(b"CONNECTED")
    connection = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", herald.ports["amqp"])
    )
    connection.channel().queue_declare("stuck")
    connection.close()
    stuck.sendall(b"SUBSCRIBE\ndestination:/queue/stuck\nid:1\nack:client\n\n\0")
    result = flood(herald, "stuck", total_bytes)  # the subscriber never reads a byte
    stuck.close()
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for scenario in args.scenarios.split(","):
        base = Path(tempfile.mkdtemp(prefix="herald-floods-"))
        herald = Herald(base / "data", args.watermark_mb)
        try:
            if scenario in ("idle-amqp", "idle-mqtt", "idle-stomp"):
                protocol = scenario.removeprefix("idle-")
                results[scenario] = await idle_scenario(herald, args.connections, protocol)
            elif scenario == "no-consumer":
                results[scenario] = await trio.to_thread.run_sync(
                    flood, herald, "nobody", args.publish_mb * MB
                )
            elif scenario == "stuck-consumer":
                results[scenario] = await trio.to_thread.run_sync(
                    stuck_consumer, herald, args.publish_mb * MB
                )
            else:
                raise SystemExit(f"unknown scenario {scenario!r}")
        finally:
            herald.stop()
            shutil.rmtree(base, ignore_errors=True)
    return results


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--publish-mb", type=int, default=300)
    parser.add_argument("--watermark-mb", type=int, default=250)
    parser.add_argument(
        "--scenarios", default="idle-amqp,idle-mqtt,idle-stomp,no-consumer,stuck-consumer"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    output = {
        "benchmark": "floods",
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
        "watermark_mb": arguments.watermark_mb,
        **trio.run(run, arguments),
    }
    print(json.dumps(output, indent=2))
