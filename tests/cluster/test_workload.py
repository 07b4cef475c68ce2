"""End to end: the three workloads through proxies to one standalone broker process, the
proxies reset mid-run and healed, publishers reconnecting, a full drain, then the checker.

One `herald run` (commit-log store, AMQP + MQTT + STOMP on free ports) is the quickest broker
to start; each protocol's publishers go through a `ProxyThread` of their own, consumers
connect directly (the nemesis cuts the publishers' link only). Once a third of the messages
are confirmed every proxy switches to `reset` for 0.5 s, then back to `pass`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.checker import check, report
from tests.cluster.proxy import ProxyThread
from tests.cluster.workload import (
    AmqpConsumer,
    AmqpPublisher,
    History,
    MqttConsumer,
    MqttPublisher,
    Publisher,
    StompConsumer,
    StompPublisher,
    run_id,
    run_workload,
)
from tests.crash.protocols import BrokerProcess

PER_PUBLISHER = 100
PUBLISHERS = 2  # per protocol
WAIT_S = 30.0  # hang guard


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", tmp_path / "herald.log")
    process.start()
    yield process
    process.stop()


def test_reset_mid_run_loses_nothing_confirmed(broker: BrokerProcess) -> None:
    run = run_id()
    history = History()
    kinds = {
        "amqp": (AmqpPublisher, AmqpConsumer, f"wl-amqp-{run}"),
        "mqtt": (MqttPublisher, MqttConsumer, f"wl/mqtt/{run}"),
        "stomp": (StompPublisher, StompConsumer, f"wl-stomp-{run}"),
    }
    proxies = {kind: ProxyThread(broker.ports[kind]).start() for kind in kinds}
    try:
        consumers = [
            consumer(history, broker.ports[kind], name, deadline_s=WAIT_S)
            for kind, (_, consumer, name) in kinds.items()
        ]
        publishers = [
            publisher(
                history,
                proxies[kind].port,
                name,
                run,
                i * len(kinds) + k,
                PER_PUBLISHER,
                pause_s=0.004,
                deadline_s=WAIT_S,
            )
            for k, (kind, (publisher, _, name)) in enumerate(kinds.items())
            for i in range(PUBLISHERS)
        ]
        total = len(publishers) * PER_PUBLISHER

        def nemesis() -> None:
            deadline = time.monotonic() + WAIT_S
            while history.count("ok", "enqueue") < total // 3:
                assert time.monotonic() < deadline, "publishers made no progress"
                time.sleep(0.01)
            for proxy in proxies.values():
                proxy.set_mode("reset")
            time.sleep(0.5)
            for proxy in proxies.values():
                proxy.set_mode("pass")

        run_workload(publishers, consumers, timeout=WAIT_S, during=nemesis)
    finally:
        for proxy in proxies.values():
            proxy.stop()

    result = check(history.snapshot())
    report(result, run=run, test="reset-mid-run")
    assert result.valid, result.summary()
    assert result.ok, result.summary()
    assert result.lost.total() == 0 and result.unexpected.total() == 0
    # the nemesis did bite: every publisher kind lost its connection and came back
    assert all(p.reconnects or p.process in _interrupted(history) for p in publishers)
    assert result.enqueues.total() >= total * 0.8, result.summary()
    for kind in kinds:  # every protocol delivered
        assert any(mid.split(".")[1] in _indices(publishers, kind) for mid in result.dequeues)


def _interrupted(history: History) -> set[str]:
    return {e["process"] for e in history.snapshot() if e["type"] in ("info", "fail")}


def _indices(publishers: list[Publisher], kind: str) -> set[str]:
    return {str(p.index) for p in publishers if p.kind == kind}
