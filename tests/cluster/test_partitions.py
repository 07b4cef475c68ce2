"""A node's etcd link cut, and a node paused past its lease (CLUSTER.md §8.2), on real
processes: `herald cluster dev --nodes 1` (a `herald nameserver` and one `herald run` node)
against the session's etcd, judged by what the clients saw (pika, etcd, the name server).

- **etcd link blackholed / reset**: the node's `cluster.etcd` is a `ProxyThread` in front of
  the real etcd (`--etcd` names the proxy). A pika publisher (confirms, persistent,
  mandatory; one message at a time) publishes steadily while a consumer drains; the proxy is
  cut. Once the lease guard runs out (TTL 2 s - guard 1 s after the last answered
  keepalive's send) the node raises the `cluster` alarm: the publisher reads
  connection.blocked and its publishes are held; healed, the node renews its lease or
  (blackholed past the TTL: etcd dropped the key) joins again on a new one,
  connection.unblocked arrives and publishing goes on. The checker then finds every
  confirmed message consumed (and nothing from nowhere, bodies intact, in order), and
  `herald cluster status --json` lists the node.
- **node SIGSTOPped past its TTL, then SIGCONT**: etcd expires its lease (its key goes) and
  the name server drops it (expiry 2 s + scan 0.5 s); resumed, the node fences (a pika
  connection idle across the pause reads connection.blocked), joins on a new lease (its key
  is back, on another lease), unblocks, and the name server lists it again; pika publishes
  with confirms and consumes on it again, and nothing confirmed before the pause is lost.

What "held" means: once the alarm rose, nothing a publishing connection sends is taken until
it clears, not even what the read it was already waiting on brings
(`test_a_publish_sent_after_connection_blocked_is_held`): no publish sent after
connection.blocked is confirmed before connection.unblocked (`TAKEN_AFTER_BLOCKED`).

Every wait is a hang guard on a condition, never a timing assertion.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pika
import pytest

from herald.cluster import keys
from tests.cluster.checker import check, report
from tests.cluster.harness import (
    DevCluster,
    EtcdProcess,
    NodeProcess,
    cluster_view,
    etcd_get,
    node_names,
    wait_until,
)
from tests.cluster.nodes import cluster_name
from tests.cluster.proxy import Mode, ProxyThread
from tests.cluster.workload import (
    BODY_SIZE,
    AmqpConsumer,
    AmqpPublisher,
    History,
    amqp_parameters,
    run_id,
    run_workload,
)
from tests.crash.messages import make_body

NODE = "n1"
TIMERS = (
    "--lease-ttl-s", "2",  # guard 1 s (dev's min(1, TTL/2)): keepalive every 0.67 s
    "--nameserver-expiry-s", "2",
    "--nameserver-scan-s", "0.5",
    "--log-level", "info",
)  # fmt: skip
HANG_GUARD_S = 60.0
"""Bounds every wait and every worker: a hang guard, never a timing assertion."""
PROGRESS = 20
"""Confirms wanted before a cut, and again after the heal."""
PAUSE_S = 0.01
"""Between two publishes of the steady publisher."""
TAKEN_AFTER_BLOCKED = 0
"""Publishes sent after connection.blocked was read that the node may confirm before
connection.unblocked."""


# -- the cluster --------------------------------------------------------------------------------


class Node:
    """The node of a `herald cluster dev --nodes 1`, its etcd key and its name server."""

    def __init__(self, dev: DevCluster, cluster: str, etcd: str) -> None:
        self.dev = dev
        self.cluster = cluster
        self.etcd = etcd  # the real etcd, which the test reads directly
        self.process: NodeProcess = dev.node(NODE)
        (entry,) = dev.info["nodes"]
        host, _, port = entry["addrs"]["amqp"].rpartition(":")
        assert host == "127.0.0.1"  # loopback only
        self.amqp_port = int(port)
        self.key = keys.node_key(cluster, NODE)

    def lease(self) -> int | None:
        """The lease of its etcd node key, once the key has its addresses; None: no key."""
        kv = etcd_get(self.etcd, self.key)
        if kv is None or "amqp" not in json.loads(kv.value).get("addrs", {}):
            return None
        return kv.lease

    def key_gone(self) -> bool:
        return etcd_get(self.etcd, self.key) is None

    def listed(self) -> bool:
        """Whether the name server's /v1/cluster lists the node."""
        return NODE in node_names(cluster_view(self.dev.nameserver))

    def dropped(self) -> bool:
        """Whether the name server answers /v1/cluster without the node."""
        view = cluster_view(self.dev.nameserver)
        return view is not None and NODE not in node_names(view)

    def status(self) -> dict[str, Any]:
        """`herald cluster status --dir D --json`."""
        return self.dev.status(HANG_GUARD_S)


def one_node_cluster(root: Path, etcd_url: str, real_etcd: str) -> Node:
    cluster = cluster_name()  # keys of its own in the shared etcd
    dev = DevCluster(root / "D", 1, (*TIMERS, "--etcd", etcd_url, "--name", cluster))
    dev.start(HANG_GUARD_S)
    return Node(dev, cluster, real_etcd)


def stop_cluster(node: Node) -> None:
    node.process.resume()  # a paused node would sit out its SIGTERM
    code = node.dev.stop()
    assert code == 0, node.dev.log_path.read_text(errors="replace")[-3000:]


@pytest.fixture
def proxied(etcd: EtcdProcess, tmp_path: Path) -> Iterator[tuple[Node, ProxyThread]]:
    """A one-node cluster whose only etcd endpoint is a proxy in front of the real etcd."""
    with ProxyThread(etcd.client_port) as proxy:
        node = one_node_cluster(tmp_path, f"http://{proxy.address}", etcd.endpoint)
        try:
            yield node, proxy
        finally:
            proxy.set_mode("pass")  # so that the node revokes its lease on the way out
            stop_cluster(node)


@pytest.fixture
def direct(etcd: EtcdProcess, tmp_path: Path) -> Iterator[Node]:
    """A one-node cluster on the real etcd."""
    node = one_node_cluster(tmp_path, etcd.endpoint, etcd.endpoint)
    try:
        yield node
    finally:
        stop_cluster(node)


# -- the clients ---------------------------------------------------------------------------------


def watch_blocking(connection: pika.BlockingConnection, on_change: Callable[[bool], None]) -> None:
    """Call `on_change(True)` / `on_change(False)` as connection.blocked / unblocked frames
    are read, in frame order with the confirms. (BlockingConnection's own callbacks run at
    its next dispatch, possibly after a confirm read behind them.)"""
    impl = connection._impl  # the frame-time callbacks live on the underlying connection
    impl.add_on_connection_blocked_callback(lambda _c, _f: on_change(True))
    impl.add_on_connection_unblocked_callback(lambda _c, _f: on_change(False))


class SteadyPublisher(AmqpPublisher):
    """`AmqpPublisher` (confirms, persistent, mandatory; one message at a time, reconnecting)
    that goes on until `halt` is set, and logs connection.blocked / unblocked to the history
    as their frames are read (f `blocked` / `unblocked`: the checker ignores them). A blocked
    connection is held, not closed, up to the hang guard."""

    def __init__(self, history: History, port: int, queue_name: str, run: str) -> None:
        super().__init__(
            history, port, queue_name, run, 0, 10**9, pause_s=PAUSE_S, deadline_s=HANG_GUARD_S
        )
        self.halt = threading.Event()
        self.changes: list[bool] = []  # True: blocked, False: unblocked

    def expired(self) -> bool:
        return self.halt.is_set() or super().expired()

    def connect(self) -> None:
        parameters = amqp_parameters(self.port)
        parameters.blocked_connection_timeout = HANG_GUARD_S
        self.connection = pika.BlockingConnection(parameters)
        watch_blocking(self.connection, self._changed)
        self.channel = self.connection.channel()
        self.channel.queue_declare(self.queue, durable=True)
        self.channel.confirm_delivery()

    def _changed(self, blocked: bool) -> None:
        self.history.log(self.process, "info", "blocked" if blocked else "unblocked", None)
        self.changes.append(blocked)  # after the entry: a waiter on it sees the entry too

    def blocks(self) -> int:
        return self.changes.count(True)

    def unblocks(self) -> int:
        return self.changes.count(False)


@attrs.frozen
class Window:
    """A publisher's connection between a connection.blocked and the unblocked after it, as
    its history shows (entry indices: the order the frames were read in)."""

    start: int  # the `blocked` entry
    sent: list[str]  # publishes invoked after blocked was read
    taken: list[str]  # those of them confirmed before unblocked was read
    held: dict[str, int]  # outstanding when unblocked was read -> its invoke entry
    unblocked: bool  # ended by connection.unblocked, not by the connection's loss


def blocked_windows(entries: list[dict[str, Any]], process: str) -> list[Window]:
    windows: list[Window] = []
    outstanding: dict[str, int] = {}  # invoked, not answered yet -> invoke entry
    start = -1
    sent: list[str] = []
    taken: list[str] = []
    for index, entry in enumerate(entries):
        if entry["process"] != process:
            continue
        kind, f, mid = entry["type"], entry["f"], entry["value"]
        if f == "blocked":
            start, sent, taken = index, [], []
        elif f == "unblocked" and start >= 0:
            windows.append(Window(start, sent, taken, dict(outstanding), True))
            start = -1
        elif kind == "invoke":
            outstanding[mid] = index
            if start >= 0:
                sent.append(mid)
        elif mid in outstanding:  # ok, info or fail
            outstanding.pop(mid)
            if start >= 0 and kind == "ok" and mid in sent:
                taken.append(mid)
            elif start >= 0 and kind != "ok":  # the connection is gone, and its window
                windows.append(Window(start, sent, taken, {}, False))
                start = -1
    if start >= 0:
        windows.append(Window(start, sent, taken, dict(outstanding), False))
    return windows


def confirms_since(history: History, mark: int) -> int:
    """Confirms logged after the first `mark` entries of the history."""
    return sum(1 for e in history.snapshot()[mark:] if e["type"] == "ok" and e["f"] == "enqueue")


class IdleConnection:
    """A pika connection without heartbeats (so it lives through a paused node) that notes
    connection.blocked / unblocked; its I/O runs in `poll` and `publish`, on the caller's
    thread."""

    def __init__(self, port: int) -> None:
        parameters = amqp_parameters(port, heartbeat=0)
        parameters.blocked_connection_timeout = None  # held while blocked, never closed
        self.connection = pika.BlockingConnection(parameters)
        self.changes: list[bool] = []
        watch_blocking(self.connection, self.changes.append)
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def poll(self) -> list[bool]:
        self.connection.process_data_events(0)
        return self.changes

    def publish(self, history: History, queue: str, mid: str) -> None:
        """One confirmed publish (mandatory, persistent), logged as the workloads do."""
        history.log("idle", "invoke", "enqueue", mid)
        properties = pika.BasicProperties(delivery_mode=2, message_id=mid)
        body = make_body(mid, BODY_SIZE)
        self.channel.basic_publish("", queue, body, properties, mandatory=True)
        history.log("idle", "ok", "enqueue", mid)

    def write_messages_whole(self) -> None:
        """From now on send each message's frames (method, header, body) in one write, so
        the node reads a publish whole. pika writes frame by frame, and a node that has read
        only the method frame when it pauses holds the rest by chance, not by design."""
        impl = self.connection._impl

        def output(frames: Sequence[bytes]) -> None:
            data = b"".join(frames)
            impl.bytes_sent += len(data)
            impl.frames_sent += len(frames)
            impl._adapter_emit_data(data)

        impl._output_marshaled_frames = output

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()


# -- the etcd link cut ---------------------------------------------------------------------------


def cut_etcd_link(node: Node, proxy: ProxyThread, mode: Mode, *, past_ttl: bool) -> None:
    run = run_id()
    history = History()
    queue = f"cut-{mode}-{run}"
    publisher = SteadyPublisher(history, node.amqp_port, queue, run)
    consumer = AmqpConsumer(history, node.amqp_port, queue, deadline_s=HANG_GUARD_S)
    first_lease = wait_until(node.lease, "the node key with its addresses", HANG_GUARD_S)
    marks: dict[str, int] = {}

    def nemesis() -> None:
        wait_until(lambda: history.count("ok", "enqueue") >= PROGRESS, "publishing", HANG_GUARD_S)
        blocks = publisher.blocks()
        marks["cut"] = len(history.snapshot())
        proxy.set_mode(mode)
        wait_until(lambda: publisher.blocks() > blocks, "connection.blocked", HANG_GUARD_S)
        if past_ttl:  # etcd drops the lease and the key: the node must join again
            wait_until(node.key_gone, "the node key expired", HANG_GUARD_S)
        marks["heal"] = len(history.snapshot())
        proxy.set_mode("pass")
        wait_until(lambda: publisher.unblocks() == publisher.blocks(), "unblocked", HANG_GUARD_S)
        healed = len(history.snapshot())
        wait_until(
            lambda: confirms_since(history, healed) >= PROGRESS, "publishing again", HANG_GUARD_S
        )
        publisher.halt.set()

    run_workload([publisher], [consumer], timeout=HANG_GUARD_S, during=nemesis)

    entries = history.snapshot()
    result = check(entries)
    report(result, run=run, test=f"etcd-link-{mode}")
    windows = blocked_windows(entries, publisher.process)
    # Blocked while cut: the publisher read connection.blocked, and the same connection read
    # connection.unblocked after the heal.
    cut = [w for w in windows if w.start > marks["cut"]]
    assert cut, f"no connection.blocked after the cut: {windows}"
    assert cut[0].start < marks["heal"] and cut[0].unblocked, cut[0]
    # No progress while blocked, at any time (the cut, or a keepalive answered late under
    # load): of the publishes sent after connection.blocked was read, the node confirmed at
    # most the one its reader was waiting for when the alarm rose; the next one waited.
    for window in windows:
        assert len(window.taken) <= TAKEN_AFTER_BLOCKED, window
        assert len(window.sent) <= len(window.taken) + 1, window
    if past_ttl:  # cut for over a second: a publish sent before the heal waited for it
        held = [mid for mid, invoked in cut[0].held.items() if invoked < marks["heal"]]
        assert held and all(result.enqueues[mid] for mid in held), cut[0]
    assert publisher.unblocks() == publisher.blocks()
    # Nothing confirmed was lost, nothing came from nowhere; bodies intact and in order (one
    # publisher, a classic queue). Duplicates are not failures: `valid` allows them.
    assert result.valid, result.summary()
    assert result.ok, result.summary()
    assert result.enqueues.total() >= 2 * PROGRESS
    # A member again: the key is back (on a new lease after an expiry), the name server
    # lists the node, and the node process ran throughout.
    lease = wait_until(node.lease, "the node key back", HANG_GUARD_S)
    if past_ttl:
        assert lease != first_lease
    assert NODE in node_names(node.status())
    assert node.process.running


def test_etcd_link_blackholed_past_the_ttl(proxied: tuple[Node, ProxyThread]) -> None:
    """Blackholed until etcd has expired the lease: the node must join again on heal."""
    node, proxy = proxied
    cut_etcd_link(node, proxy, "blackhole", past_ttl=True)


def test_etcd_link_reset(proxied: tuple[Node, ProxyThread]) -> None:
    """Connections reset and refused until the publisher is blocked, then healed at once:
    the node renews its lease, or joins again if etcd expired it meanwhile."""
    node, proxy = proxied
    cut_etcd_link(node, proxy, "reset", past_ttl=False)


def test_a_publish_sent_after_connection_blocked_is_held(
    proxied: tuple[Node, ProxyThread],
) -> None:
    """A connection that has published, idle when the node fences (no heartbeats: nothing
    else to read), publishes once it has read connection.blocked: the confirm must come
    after connection.unblocked. The link stays blackholed until etcd expired the lease, so
    a node that takes the publish has time to confirm it before the heal."""
    node, proxy = proxied
    run = run_id()
    history = History()
    queue = f"after-blocked-{run}"
    wait_until(node.lease, "the node key with its addresses", HANG_GUARD_S)
    idle = IdleConnection(node.amqp_port)
    try:
        idle.channel.queue_declare(queue, durable=True)
        idle.publish(history, queue, f"{run}.0.0")  # a publisher now: paused by alarms
        idle.write_messages_whole()
        mark = len(idle.poll())
        proxy.set_mode("blackhole")
        wait_until(lambda: True in idle.poll()[mark:], "connection.blocked", HANG_GUARD_S)

        def heal() -> None:
            try:
                wait_until(node.key_gone, "the node key expired", HANG_GUARD_S)
            finally:
                proxy.set_mode("pass")  # the publish below waits for it

        healer = threading.Thread(target=heal, daemon=True)
        healer.start()
        idle.publish(history, queue, f"{run}.0.1")  # returns once confirmed
        unblocked_first = idle.changes[-1] is False
        healer.join(HANG_GUARD_S)
    finally:
        proxy.set_mode("pass")
        idle.close()
    assert unblocked_first, "confirmed while blocked"


# -- the node paused -----------------------------------------------------------------------------


def test_node_paused_past_its_lease(direct: Node) -> None:
    node = direct
    run = run_id()
    history = History()
    queue = f"paused-{run}"
    first_lease = wait_until(node.lease, "the node key with its addresses", HANG_GUARD_S)
    before = AmqpPublisher(history, node.amqp_port, queue, run, 0, 50, deadline_s=HANG_GUARD_S)
    before.start()
    before.join(HANG_GUARD_S)
    assert history.count("ok", "enqueue") == 50
    idle = IdleConnection(node.amqp_port)
    try:
        mark = len(idle.poll())
        node.process.pause()
        try:
            wait_until(node.key_gone, "the lease expired", HANG_GUARD_S)
            wait_until(node.dropped, "dropped by the name server", HANG_GUARD_S)
        finally:
            node.process.resume()
        # Resumed: it fences (its guard ran out long ago), joins on a new lease, unblocks.

        def unblocked_again() -> list[bool] | None:
            changes = idle.poll()[mark:]
            return changes if changes and changes[-1] is False else None

        changes = wait_until(unblocked_again, "connection.blocked, then unblocked", HANG_GUARD_S)
        assert changes[0] is True, changes
        lease = wait_until(node.lease, "the node key back", HANG_GUARD_S)
        assert lease != first_lease
        wait_until(node.listed, "listed by the name server again", HANG_GUARD_S)
        # The connection idle across the pause publishes with a confirm again.
        idle.publish(history, queue, f"{run}.2.0")
    finally:
        idle.close()
    # More, and a drain of everything on fresh connections: nothing confirmed is lost.
    after = AmqpPublisher(history, node.amqp_port, queue, run, 1, 50, deadline_s=HANG_GUARD_S)
    consumer = AmqpConsumer(history, node.amqp_port, queue, deadline_s=HANG_GUARD_S)
    run_workload([after], [consumer], timeout=HANG_GUARD_S)
    result = check(history.snapshot())
    report(result, run=run, test="node-paused")
    assert result.valid, result.summary()
    assert result.ok, result.summary()
    assert result.enqueues.total() == 101
    assert NODE in node_names(node.status())
