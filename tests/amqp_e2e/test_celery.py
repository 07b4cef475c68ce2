"""A real Celery worker against herald: tasks run, results come back, retries, late acks.

The broker is the usual `BrokerThread`; the worker is Celery's own embedded test worker
(`celery.contrib.testing.worker.start_worker`, solo pool, in a thread), except where the worker
must die: that one is a `celery worker` subprocess that exits in the middle of a task. Results
use the rpc:// backend, so each result travels back over a reply queue on herald.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker

from tests.amqp_e2e import celery_tasks
from tests.amqp_e2e.conftest import BrokerThread

RESULT_TIMEOUT = 20.0
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def app(broker: BrokerThread) -> Iterator[Celery]:
    app = celery_tasks.make_app(broker.url)
    try:
        yield app
    finally:
        # Close the client's connections (the producer pool's, the rpc:// result consumer's)
        # so the broker's shutdown does not wait for close-oks that nobody would read.
        consumer = app.backend.result_consumer
        if consumer._connection is not None:
            consumer.stop()
        app.pool.force_close_all()
        app.close()


@pytest.fixture
def worker(app: Celery) -> Iterator[object]:
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=20) as running:
        yield running


def test_task_runs_and_its_result_comes_back_over_rpc(app: Celery, worker: object) -> None:
    results = [app.tasks["e2e.add"].delay(i, i) for i in range(5)]
    assert [r.get(timeout=RESULT_TIMEOUT) for r in results] == [0, 2, 4, 6, 8]


def test_retried_task_finally_succeeds(app: Celery, worker: object) -> None:
    result = app.tasks["e2e.flaky"].delay(2)
    assert result.get(timeout=RESULT_TIMEOUT) == {"retries": 2}
    assert result.state == "SUCCESS"


def test_late_ack_task_rejected_before_its_ack_is_redelivered(app: Celery, worker: object) -> None:
    result = app.tasks["e2e.reject_once"].delay()
    assert result.get(timeout=RESULT_TIMEOUT) is True  # ran again, with redelivered set


def test_late_ack_task_of_a_dead_worker_is_redelivered(broker: BrokerThread, app: Celery) -> None:
    result = app.tasks["e2e.die_unless_redelivered"].delay()
    env = dict(os.environ, HERALD_AMQP_URL=broker.url, PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "celery", "-A", "tests.amqp_e2e.celery_tasks", "worker"]
    options = ["--pool=solo", "--without-mingle", "--without-gossip", "--loglevel=WARNING"]
    doomed = subprocess.run(
        command + options,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert doomed.returncode == celery_tasks.DIED_EXIT_CODE, doomed.stderr
    assert not result.ready()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
        assert result.get(timeout=RESULT_TIMEOUT) is True  # the second worker saw redelivered


def test_remote_control_ping_is_answered_by_the_worker(app: Celery, worker: object) -> None:
    """Broadcast over the pidbox fanout exchange, replies over the reply exchange."""
    replies = app.control.ping(timeout=RESULT_TIMEOUT, limit=1)
    assert len(replies) == 1
    ((_name, reply),) = replies[0].items()
    assert reply == {"ok": "pong"}


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Celery's worker sets the root logger's level (to ERROR here); later tests read
    herald's INFO and WARNING records through caplog, so put the level back."""
    level = logging.root.level
    yield
    logging.root.setLevel(level)
