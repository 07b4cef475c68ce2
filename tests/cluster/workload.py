"""Client workloads that log Jepsen histories (CLUSTER.md §8.1).

Publishers: pika with publisher confirms (`AmqpPublisher`), paho-mqtt QoS 1
(`MqttPublisher`), stomp.py with receipts (`StompPublisher`). Each sends `count` messages
with ids `<run>.<publisher>.<seq>` and self-checking bodies (`make_body`), one at a time,
reconnecting (to the same address: a proxy in front of a node) after a lost connection,
and stops at `count` or `deadline_s`, whichever comes first.

Consumers (`AmqpConsumer`, `MqttConsumer`, `StompConsumer`) connect, consume and ack every
message, reconnect after a lost connection, and stop once `stop` is set (the publishers are
done) and nothing arrived for `idle_s` (a complete drain), or at `deadline_s`.

Every operation goes to a shared `History` as Jepsen entries
`{process, type: invoke|ok|fail|info, f: enqueue|dequeue, value, time}` (`time`: ns since
the history began). A publish is `ok` once confirmed / PUBACKed / receipted; `info` when the
outcome is unknown (a nack, a confirm timeout, a lost connection: it may still be
delivered); `fail` only when it was refused before it could be stored (the client was not
connected, or the message was returned as unroutable). A dequeue is `invoke` (value None)
then `ok` with the delivered id, plus `problem` when `body_problem` finds the body damaged.

`run_workload(publishers, consumers)` runs consumers first (their queues and MQTT session
exist before anything is published), then publishers, each on a thread, and joins them.
All of it is loopback only and bounded by `deadline_s`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pika.exceptions
import stomp
import stomp.exception
from paho.mqtt.enums import CallbackAPIVersion

from tests.crash.messages import body_problem, make_body

HOST = "127.0.0.1"
BODY_SIZE = 200
CONFIRM_TIMEOUT_S = 5.0
RECONNECT_PAUSE_S = 0.1
DEADLINE_S = 30.0

Port = int | Callable[[], int]


class History:
    """A thread-safe Jepsen history."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._start = time.monotonic_ns()

    def log(self, process: str, type_: str, f: str, value: str | None, **extra: Any) -> None:
        entry: dict[str, Any] = {"process": process, "type": type_, "f": f, "value": value}
        entry.update(extra)
        with self._lock:
            entry["time"] = time.monotonic_ns() - self._start
            self.entries.append(entry)

    def count(self, type_: str, f: str) -> int:
        with self._lock:
            return sum(1 for e in self.entries if e["type"] == type_ and e["f"] == f)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.entries)


class Refused(Exception):
    """The publish was refused before the broker could store it (history: `fail`)."""


class Unknown(Exception):
    """The publish's outcome is unknown (history: `info`)."""


def run_id() -> str:
    return uuid.uuid4().hex[:8]


def delivered(body: bytes) -> tuple[str, str | None]:
    """The id a delivered body names, and what is wrong with it (None when intact)."""
    try:
        mid = body.split(b"|", 1)[0].decode()
    except UnicodeDecodeError:
        mid = repr(body[:40])
    return mid, body_problem(mid, body)


class Worker:
    """A thread of the workload with its own history process name."""

    _port: Port

    def __init__(self, history: History, process: str, deadline_s: float) -> None:
        self.history = history
        self.process = process
        self.deadline = time.monotonic() + deadline_s
        self.thread = threading.Thread(target=self._guarded, name=process, daemon=True)
        self.error: BaseException | None = None

    @property
    def port(self) -> int:
        """The port to connect to now: a fixed one, or what a callable says (the master of
        a group, which moves at a failover)."""
        port = self._port
        return port() if callable(port) else port

    def _guarded(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # surfaced by join()
            self.error = exc

    def run(self) -> None:
        raise NotImplementedError

    def expired(self) -> bool:
        return time.monotonic() > self.deadline

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError(f"{self.process} still running")
        if self.error is not None:
            raise self.error


# -- publishers ---------------------------------------------------------------------------------
class Publisher(Worker):
    """Publishes `<run>.<index>.<seq>` for seq in range(count); subclasses connect/publish."""

    def __init__(
        self,
        history: History,
        port: Port,
        queue_name: str,
        run: str,
        index: int,
        count: int,
        *,
        pause_s: float = 0.0,
        deadline_s: float = DEADLINE_S,
    ) -> None:
        super().__init__(history, f"{self.kind}-pub-{index}", deadline_s)
        self._port, self.queue, self.run_id, self.index = port, queue_name, run, index
        self.count, self.pause_s = count, pause_s
        self.connected = False
        self.reconnects = 0

    kind = "?"

    def connect(self) -> None:
        raise NotImplementedError

    def publish(self, mid: str, body: bytes) -> None:
        """Return once acknowledged; raise Refused or Unknown (or any error: Unknown)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        seq = 0
        try:
            while seq < self.count and not self.expired():
                if not self.connected:
                    try:
                        self.connect()
                        self.connected = True
                    except Exception:
                        self.reconnects += 1
                        time.sleep(RECONNECT_PAUSE_S)
                        continue
                mid = f"{self.run_id}.{self.index}.{seq}"
                seq += 1
                self.history.log(self.process, "invoke", "enqueue", mid)
                try:
                    self.publish(mid, make_body(mid, BODY_SIZE))
                except Refused as exc:
                    self.history.log(self.process, "fail", "enqueue", mid, error=str(exc))
                    self._drop()
                except Exception as exc:  # nack, timeout, lost connection
                    self.history.log(self.process, "info", "enqueue", mid, error=repr(exc))
                    self._drop()
                else:
                    self.history.log(self.process, "ok", "enqueue", mid)
                if self.pause_s:
                    time.sleep(self.pause_s)
        finally:
            self._drop()

    def _drop(self) -> None:
        if self.connected:
            self.connected = False
            with contextlib.suppress(Exception):
                self.close()


def amqp_parameters(port: int, heartbeat: int = 2) -> pika.ConnectionParameters:
    """A lost (blackholed) connection is noticed by heartbeat within about 2 x heartbeat."""
    return pika.ConnectionParameters(
        HOST,
        port,
        credentials=pika.PlainCredentials("guest", "guest"),
        socket_timeout=CONFIRM_TIMEOUT_S,
        blocked_connection_timeout=CONFIRM_TIMEOUT_S,
        connection_attempts=1,
        heartbeat=heartbeat,
    )


class AmqpPublisher(Publisher):
    kind = "amqp"
    arguments: dict[str, Any] | None = None
    """The queue's declaration arguments (a subclass's: x-queue-type)."""

    def connect(self) -> None:
        self.connection = pika.BlockingConnection(amqp_parameters(self.port))
        self.channel = self.connection.channel()
        self.channel.queue_declare(self.queue, durable=True, arguments=self.arguments)
        self.channel.confirm_delivery()

    def publish(self, mid: str, body: bytes) -> None:
        properties = pika.BasicProperties(delivery_mode=2, message_id=mid)
        try:
            self.channel.basic_publish("", self.queue, body, properties, mandatory=True)
        except pika.exceptions.UnroutableError as exc:
            raise Refused("returned unroutable") from exc
        except pika.exceptions.NackError as exc:
            raise Unknown("nacked") from exc

    def close(self) -> None:
        self.connection.close()


def mqtt_client(client_id: str, clean: bool) -> mqtt.Client:
    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=clean,
        reconnect_on_failure=False,
    )
    client.username_pw_set("guest", "guest")
    return client


class MqttPublisher(Publisher):
    """QoS 1 to topic `queue`; a clean session per connection (an unacked message is `info`
    and is not retransmitted by a later connection)."""

    kind = "mqtt"

    def connect(self) -> None:
        self.client = mqtt_client(f"{self.process}-{self.run_id}", clean=True)
        connected = threading.Event()
        self.client.on_connect = lambda *args: connected.set()
        self.client.connect(HOST, self.port, keepalive=5)
        self.client.loop_start()
        if not connected.wait(CONFIRM_TIMEOUT_S):
            self.close()
            raise ConnectionError("no CONNACK")

    def publish(self, mid: str, body: bytes) -> None:
        info = self.client.publish(self.queue, body, qos=1)
        if info.rc == mqtt.MQTT_ERR_NO_CONN:
            raise Refused("not connected: never sent")
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        # paho does not wake this wait when the connection drops: look between short waits.
        while not info.is_published():
            if not self.client.is_connected():
                raise Unknown("connection lost before PUBACK")
            if time.monotonic() > deadline:
                raise Unknown("no PUBACK in time")
            info.wait_for_publish(0.05)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


class _StompListener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.receipts: queue.Queue[str] = queue.Queue()
        self.messages: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()
        self.gone = threading.Event()

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])

    def on_error(self, frame: Any) -> None:
        self.receipts.put("")

    def on_message(self, frame: Any) -> None:
        body = frame.body
        self.messages.put((frame.headers, body.encode() if isinstance(body, str) else body))

    def on_disconnected(self) -> None:
        self.gone.set()
        self.receipts.put("")  # wake a waiting publisher


def stomp_connection(port: int) -> tuple[stomp.Connection12, _StompListener]:
    connection = stomp.Connection12(
        [(HOST, port)], vhost="/", reconnect_attempts_max=1, auto_decode=False
    )
    connection.set_listener("workload", listener := _StompListener())
    connection.connect("guest", "guest", wait=True)
    return connection, listener


class StompPublisher(Publisher):
    kind = "stomp"

    def connect(self) -> None:
        self.connection, self.listener = stomp_connection(self.port)

    def publish(self, mid: str, body: bytes) -> None:
        if not self.connection.is_connected():
            raise Refused("not connected: never sent")
        try:
            self.connection.send(
                f"/queue/{self.queue}", body, persistent="true", receipt=mid, message_id=mid
            )
        except stomp.exception.NotConnectedException as exc:
            raise Refused("not connected: never sent") from exc
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        while True:
            try:
                receipt = self.listener.receipts.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise Unknown("no receipt in time") from None
            if receipt == mid:
                return
            if receipt == "":
                raise Unknown("ERROR frame or lost connection before the receipt")

    def close(self) -> None:
        self.connection.disconnect()


# -- consumers ----------------------------------------------------------------------------------
class Consumer(Worker):
    """Consumes and acks `queue` until `stop` is set and it was idle for `idle_s`."""

    kind = "?"

    def __init__(
        self,
        history: History,
        port: Port,
        queue_name: str,
        *,
        index: int = 0,
        idle_s: float = 1.0,
        deadline_s: float = DEADLINE_S,
    ) -> None:
        super().__init__(history, f"{self.kind}-sub-{index}", deadline_s)
        self._port, self.queue, self.idle_s = port, queue_name, idle_s
        self.stop = threading.Event()
        self.ready = threading.Event()  # subscribed once: publishing may begin
        self.last = time.monotonic()
        self.reconnects = 0

    def done(self) -> bool:
        return self.expired() or (
            self.stop.is_set() and time.monotonic() - self.last >= self.idle_s
        )

    def received(self, body: bytes) -> None:
        self.last = time.monotonic()
        mid, problem = delivered(body)
        self.history.log(self.process, "invoke", "dequeue", None)
        extra = {"problem": problem} if problem else {}
        self.history.log(self.process, "ok", "dequeue", mid, **extra)

    def consume(self) -> None:
        """Connect, subscribe (set `ready`), deliver to `received` and ack until `done()`."""
        raise NotImplementedError

    def run(self) -> None:
        while not self.done():
            try:
                self.consume()
            except Exception:
                self.reconnects += 1
                time.sleep(RECONNECT_PAUSE_S)


class AmqpConsumer(Consumer):
    kind = "amqp"
    arguments: dict[str, Any] | None = None
    """The queue's declaration arguments (a subclass's: x-queue-type)."""

    def noted(self, method: Any, properties: Any) -> None:
        """Each delivery, before its ack (a subclass notes its flags)."""

    def consume(self) -> None:
        connection = pika.BlockingConnection(amqp_parameters(self.port))
        try:
            channel = connection.channel()
            channel.queue_declare(self.queue, durable=True, arguments=self.arguments)
            channel.basic_qos(prefetch_count=50)
            self.ready.set()
            for method, props, body in channel.consume(self.queue, inactivity_timeout=0.1):
                if method is not None:
                    self.received(body)
                    self.noted(method, props)
                    channel.basic_ack(method.delivery_tag)
                if self.done():
                    break
            with contextlib.suppress(Exception):
                channel.cancel()
        finally:
            with contextlib.suppress(Exception):
                connection.close()


class MqttConsumer(Consumer):
    """A persistent session (clean_session False) subscribed to topic `queue` at QoS 1;
    paho sends PUBACK once the callback returned."""

    kind = "mqtt"

    def consume(self) -> None:
        client = mqtt_client(f"{self.process}-{self.queue}", clean=False)
        subscribed = threading.Event()
        client.on_subscribe = lambda *args: subscribed.set()
        client.on_message = lambda c, u, message: self.received(bytes(message.payload))
        client.connect(HOST, self.port, keepalive=5)
        client.loop_start()
        try:
            client.subscribe(self.queue, qos=1)
            if not subscribed.wait(CONFIRM_TIMEOUT_S):
                raise ConnectionError("no SUBACK")
            self.ready.set()
            while not self.done():
                if not client.is_connected():
                    raise ConnectionError("connection lost")
                time.sleep(0.05)
        finally:
            client.loop_stop()
            with contextlib.suppress(Exception):
                client.disconnect()


class StompConsumer(Consumer):
    kind = "stomp"

    def consume(self) -> None:
        connection, listener = stomp_connection(self.port)
        try:
            connection.subscribe(f"/queue/{self.queue}", id="workload", ack="client-individual")
            self.ready.set()
            while not self.done():
                if listener.gone.is_set():
                    raise ConnectionError("connection lost")
                try:
                    headers, body = listener.messages.get(timeout=0.1)
                except queue.Empty:
                    continue
                self.received(body)
                connection.ack(headers["ack"] if "ack" in headers else headers["message-id"])
        finally:
            with contextlib.suppress(Exception):
                connection.disconnect()


def run_workload(
    publishers: Sequence[Publisher],
    consumers: Sequence[Consumer],
    *,
    timeout: float = DEADLINE_S,
    during: Callable[[], None] | None = None,
) -> None:
    """Start consumers (wait until each subscribed), then publishers; call `during` (the
    nemesis: it runs while they publish); join the publishers, then tell consumers to drain
    and join them. Worker errors are re-raised."""
    for consumer in consumers:
        consumer.start()
    for consumer in consumers:
        if not consumer.ready.wait(timeout):
            raise TimeoutError(f"{consumer.process} never subscribed")
    for publisher in publishers:
        publisher.start()
    if during is not None:
        during()
    for publisher in publishers:
        publisher.join(timeout)
    for consumer in consumers:
        consumer.stop.set()
    for consumer in consumers:
        consumer.join(timeout)
