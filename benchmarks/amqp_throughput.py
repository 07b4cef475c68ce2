"""AMQP end-to-end throughput: pika publishers -> one queue -> pika consumers, over TCP.

    python benchmarks/amqp_throughput.py [--messages 40000] [--publishers 2] [--consumers 2]
        [--size 100] [--store memory|commitlog] [--repeat 3]

Prints one JSON object. The broker runs in its own process (this file with `--serve`, which
starts an embedded broker with the AMQP plugin registered programmatically), so its CPU time
can be read with psutil; publishers and consumers are separate processes, each with one
pika connection. Scenarios:
- transient: BlockingConnection publishers, no confirms, transient messages to a
  transient queue;
- persistent_confirms: SelectConnection publishers with publisher confirms (up to `--window`
  unconfirmed each), persistent messages to a durable queue on `--store`.
Consumers use prefetch 1000 and ack every message with `multiple` every 100 deliveries.
msgs_per_s counts from the publishers' start to the last delivery; broker_cpu_us_per_msg is
the broker process's user + system CPU time over the same span, divided by the messages.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import multiprocessing as mp
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pika
import psutil

TIMEOUT = 300.0


# -- the broker process ---------------------------------------------------------------------
def serve(data_dir: Path, store: str) -> None:
    import trio

    from herald.core.embedding import embedded
    from herald.plugins.amqp import plugin as amqp_plugin

    installed = importlib.metadata.entry_points(group="herald", name="amqp")
    extra = [] if installed else [amqp_plugin]

    async def main() -> None:
        settings = ["amqp.host=127.0.0.1", "amqp.port=0", f"store.backend={store}"]
        async with embedded(
            plugins=["amqp"], settings=settings, data_dir=data_dir, extra_plugins=extra
        ) as broker:
            port = next(lst.port for lst in broker.listeners if lst.protocol == "amqp")
            (data_dir / "port").write_text(str(port))
            await trio.sleep_forever()

    trio.run(main)


# -- clients --------------------------------------------------------------------------------
def params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", port, heartbeat=0, socket_timeout=30)


def consume(port: int, queue: str, total: int, counter: Any, end: Any, ready: Any) -> None:
    conn = pika.BlockingConnection(params(port))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=1000)
    pending = [0, 0]  # unacked deliveries, last delivery tag

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        pending[0] += 1
        pending[1] = method.delivery_tag
        if pending[0] >= 100:
            ch.basic_ack(method.delivery_tag, multiple=True)
            pending[0] = 0
        with counter.get_lock():
            counter.value += 1
            if counter.value == total:
                end.value = time.perf_counter()

    channel.basic_consume(queue, on_message)
    ready.release()
    deadline = time.monotonic() + TIMEOUT
    while counter.value < total and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    if pending[0]:
        channel.basic_ack(pending[1], multiple=True)
    conn.close()


def publish(port: int, queue: str, count: int, size: int, start: Any) -> None:
    conn = pika.BlockingConnection(params(port))
    channel = conn.channel()
    body = b"x" * size
    start.wait()
    for _ in range(count):
        channel.basic_publish("", queue, body)
    conn.close()


def publish_confirmed(
    port: int, queue: str, count: int, size: int, window: int, start: Any
) -> None:
    body = b"x" * size
    properties = pika.BasicProperties(delivery_mode=2)
    state: dict[str, Any] = {"sent": 0, "acked": 0}

    def send_more() -> None:
        channel = state["channel"]
        while state["sent"] < count and state["sent"] - state["acked"] < window:
            channel.basic_publish("", queue, body, properties)
            state["sent"] += 1

    def on_confirm(frame: Any) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            raise RuntimeError(f"publish nacked: {method}")
        state["acked"] = max(state["acked"], method.delivery_tag)
        if state["acked"] >= count:
            state["connection"].close()
        else:
            send_more()

    def on_channel(channel: Any) -> None:
        state["channel"] = channel
        channel.confirm_delivery(on_confirm, callback=lambda _frame: (start.wait(), send_more()))

    conn = pika.SelectConnection(
        params(port),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_close_callback=lambda c, exc: c.ioloop.stop(),
    )
    state["connection"] = conn
    conn.ioloop.start()


# -- one run --------------------------------------------------------------------------------
def run(args: argparse.Namespace, port: int, broker: psutil.Process, scenario: str, n: int) -> dict:
    queue = f"bench-{scenario}-{n}"
    durable = scenario == "persistent_confirms"
    setup = pika.BlockingConnection(params(port))
    setup.channel().queue_declare(queue, durable=durable)
    setup.close()
    total = args.messages
    counter, end = mp.Value("q", 0), mp.Value("d", 0.0)
    ready, start = mp.Semaphore(0), mp.Event()
    consumers = [
        mp.Process(target=consume, args=(port, queue, total, counter, end, ready))
        for _ in range(args.consumers)
    ]
    per_publisher = total // args.publishers
    publishers = []
    for i in range(args.publishers):
        count = per_publisher + (total % args.publishers if i == 0 else 0)
        if durable:
            target, extra = publish_confirmed, (port, queue, count, args.size, args.window, start)
        else:
            target, extra = publish, (port, queue, count, args.size, start)
        publishers.append(mp.Process(target=target, args=extra))
    for process in consumers:
        process.start()
    for _ in consumers:
        if not ready.acquire(timeout=TIMEOUT):
            raise TimeoutError("a consumer did not start")
    for process in publishers:
        process.start()
    time.sleep(0.5)  # let every publisher connect before the clock starts
    cpu_before = sum(broker.cpu_times()[:2])
    began = time.perf_counter()
    start.set()
    for process in publishers + consumers:
        process.join(TIMEOUT)
    cpu = sum(broker.cpu_times()[:2]) - cpu_before
    if counter.value != total:
        raise RuntimeError(f"{scenario}: consumed {counter.value} of {total}")
    seconds = end.value - began
    return {"msgs_per_s": total / seconds, "broker_cpu_us_per_msg": cpu / total * 1e6}


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", default="memory", choices=["memory", "commitlog"])
    parser.add_argument("--scenarios", default="transient,persistent_confirms")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.store)
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        command = [sys.executable, __file__, "--serve", str(data_dir), "--store", args.store]
        server = subprocess.Popen(command)
        try:
            deadline = time.monotonic() + 30
            while not (data_dir / "port").exists():
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the broker did not start")
                time.sleep(0.05)
            time.sleep(0.05)
            port = int((data_dir / "port").read_text())
            broker = psutil.Process(server.pid)
            scenarios = args.scenarios.split(",")
            results: dict[str, list[dict]] = {s: [] for s in scenarios}
            for n in range(args.repeat):  # interleaved, so machine noise hits both alike
                for scenario in scenarios:
                    results[scenario].append(run(args, port, broker, scenario, n))
        finally:
            server.terminate()
            server.wait(30)
    return {
        "benchmark": "amqp_throughput",
        "python": platform.python_version(),
        "cpus": psutil.cpu_count(),
        "messages": args.messages,
        "publishers": args.publishers,
        "consumers": args.consumers,
        "size": args.size,
        "store": args.store,
        "repeat": args.repeat,
        "scenarios": {
            name: {
                key: round(statistics.median(r[key] for r in runs), 1)
                for key in ("msgs_per_s", "broker_cpu_us_per_msg")
            }
            for name, runs in results.items()
        },
    }


if __name__ == "__main__":
    result = main(sys.argv[1:])
    if result:
        print(json.dumps(result, indent=2))
