"""How a partition scenario of a replicated group runs and is judged (test_ha_partitions.py,
CLUSTER.md §8.2 scenarios 7, 8, 13).

`judged(group, watch, test, nemesis)` runs the kill loop's workload (test_ha_kill_loop.py:
two pika publishers with confirms, paho QoS 1, stomp.py with receipts, a consumer per
protocol, all following the master etcd names), except that the pika publishers also log
connection.blocked / unblocked as their frames are read (`BlockedAmqp`: f `blocked` /
`unblocked`, which the checker ignores), so the history shows when a master fenced. Once
PROGRESS publishes are confirmed it calls the nemesis, which cuts and heals and returns its
figures (`healed`: when the last heal was); then it waits for the group to be whole and every
publisher confirming again, halts the publishers, drains every queue on the final master and
asserts the checker's verdict: lost = 0, unexpected = 0, bodies intact, per-publisher order,
and no connection confirmed a publish it took after it sent connection.blocked. One JSON line
per run: the checker's summary and the figures.

The probes (`first`, `first_ok`) and tallies (`confirmed_after_invoked`, `infos`) read the
history for the nemeses' figures and assertions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pika

from tests.cluster.checker import Result, check, report
from tests.cluster.ha_cluster import WAIT_S, GroupWatch, HACluster
from tests.cluster.harness import wait_until
from tests.cluster.test_ha_kill_loop import (
    PROGRESS,
    Failover,
    HaltingAmqp,
    Workload,
    confirmed_since,
    final_drain,
    workload,
    write_gaps,
)
from tests.cluster.test_partitions import blocked_windows, watch_blocking
from tests.cluster.workload import History, amqp_parameters, run_workload

DEADLINE_S = 4 * WAIT_S
"""Each worker's hang guard."""

# -- the workload ------------------------------------------------------------------------------


class BlockedAmqp(HaltingAmqp):
    """The kill loop's pika publisher, logging connection.blocked / unblocked as read. A
    blocked connection is held (up to the hang guard), not closed after 5 s, so a fenced
    master that is not replaced unblocks it."""

    def connect(self) -> None:
        parameters = amqp_parameters(self.port)
        parameters.blocked_connection_timeout = WAIT_S
        self.connection = pika.BlockingConnection(parameters)
        watch_blocking(self.connection, self._blocked)
        self.channel = self.connection.channel()
        self.channel.queue_declare(self.queue, durable=True)
        self.channel.confirm_delivery()

    def _blocked(self, blocked: bool) -> None:
        self.history.log(self.process, "info", "blocked" if blocked else "unblocked", None)


def partition_workload(watch: GroupWatch) -> Workload:
    load = workload(watch, DEADLINE_S)
    load.publishers = [
        BlockedAmqp(load.history, watch.master_port("amqp"), p.queue, load.run, p.index, DEADLINE_S)
        if isinstance(p, HaltingAmqp)
        else p
        for p in load.publishers
    ]
    return load


def first(history: History, f: str, since: int) -> Callable[[], int | None]:
    """A probe: the time of the first entry with `f` logged after `since` (None: none yet)."""

    def probe() -> int | None:
        return next(
            (e["time"] for e in history.snapshot() if e["time"] > since and e["f"] == f), None
        )

    return probe


def first_ok(history: History, since: int) -> Callable[[], int | None]:
    def probe() -> int | None:
        return next(
            (
                e["time"]
                for e in history.snapshot()
                if e["time"] > since and e["type"] == "ok" and e["f"] == "enqueue"
            ),
            None,
        )

    return probe


def confirmed_after_invoked(entries: list[dict[str, Any]], start: int, end: int) -> list[str]:
    """Publishes invoked after `start` and confirmed before `end`."""
    invoked = {
        e["value"]: e["time"] for e in entries if e["type"] == "invoke" and e["f"] == "enqueue"
    }
    return [
        e["value"]
        for e in entries
        if e["type"] == "ok" and e["f"] == "enqueue" and e["time"] < end
        and invoked.get(e["value"], 0) > start
    ]  # fmt: skip


def infos(entries: list[dict[str, Any]], start: int, end: int) -> dict[str, int]:
    """Per publisher, the publishes answered `info` (nack, timeout, lost connection)."""
    out: dict[str, int] = {}
    for e in entries:
        if e["type"] == "info" and e["f"] == "enqueue" and start < e["time"] < end:
            out[e["process"]] = out.get(e["process"], 0) + 1
    return out


# -- a run -------------------------------------------------------------------------------------

Nemesis = Callable[[Workload], dict[str, Any]]


def settle(group: HACluster, watch: GroupWatch, load: Workload, since: int) -> None:
    """The group whole again, PROGRESS more confirms and one of every publisher since `since`."""
    watch.wait_full_sync_set(alive=list(group.processes))
    base = load.oks()
    wait_until(lambda: load.oks() >= base + PROGRESS, "publishing after the heal", WAIT_S)
    for publisher in load.publishers:
        wait_until(
            confirmed_since(load.history, publisher.process, since),
            f"{publisher.process} publishing after the heal",
            WAIT_S,
        )


def judged(
    group: HACluster,
    watch: GroupWatch,
    test: str,
    nemesis: Nemesis,
    failovers: list[Failover] | None = None,
    drain: Callable[[Workload], None] | None = None,
) -> tuple[Result, dict[str, Any], list[dict[str, Any]]]:
    """Workload + `nemesis` (which returns its figures, `healed` among them) + drains (the
    workload's queues, then `drain`'s); the checker's result, the figures (printed with it as
    one JSON line, with the write gap of each of `failovers`) and the history."""
    watch.wait_full_sync_set()
    load = partition_workload(watch)
    figures: dict[str, Any] = {"test": test, "run": load.run, "dir": str(group.dev.root)}

    def during() -> None:
        try:
            wait_until(lambda: load.oks() >= PROGRESS, "publishing before the nemesis", WAIT_S)
            figures.update(nemesis(load))
            settle(group, watch, load, figures["healed"])
        finally:
            load.halt()

    started = time.monotonic()
    run_workload(load.publishers, load.consumers, timeout=DEADLINE_S, during=during)
    final_drain(watch, load)
    if drain is not None:
        drain(load)
    entries = load.history.snapshot()
    result = check(entries)
    figures["seconds"] = round(time.monotonic() - started, 1)
    if failovers:
        figures["failovers"] = write_gaps(entries, failovers)
    figures["reconnects"] = {p.process: p.reconnects for p in load.publishers}
    report(result, **figures)
    why = f"{test} dir={figures['dir']}: {result.summary()}"
    assert result.lost.total() == 0, why
    assert result.unexpected.total() == 0, why
    assert not result.body_problems, why
    assert not result.order_problems, why
    # No connection confirmed a publish it took after it had sent connection.blocked.
    for publisher in load.publishers:
        for window in blocked_windows(entries, publisher.process):
            assert not window.taken, (publisher.process, window)
    return result, figures, entries
