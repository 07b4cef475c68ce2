"""A Celery app and its tasks, for the Celery end-to-end tests (test_celery.py).

`make_app(url)` builds a fresh app per broker (each test's herald has its own port), with
herald as the broker and rpc:// as the result backend, so results come back over reply queues
on herald too. The module-level `app` is what `celery -A tests.amqp_e2e.celery_tasks worker`
runs in a subprocess; it reads the broker URL from HERALD_AMQP_URL.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.exceptions import Reject

DIED_EXIT_CODE = 3  # what a worker process killed by `die_unless_redelivered` exits with


def make_app(url: str) -> Celery:
    app = Celery("herald_e2e", broker=url, backend="rpc://", set_as_current=False)
    app.conf.update(
        task_default_queue="herald-e2e",
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=False,
        broker_connection_max_retries=1,
        broker_heartbeat=0,
        result_expires=60,
    )

    @app.task(name="e2e.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="e2e.flaky", shared=False, bind=True, max_retries=5, default_retry_delay=0)
    def flaky(self: Any, failures: int) -> dict[str, int]:
        """Fails `failures` times (each retry is a new message through herald), then succeeds."""
        if self.request.retries < failures:
            raise self.retry(exc=RuntimeError(f"attempt {self.request.retries} failed"))
        return {"retries": self.request.retries}

    @app.task(name="e2e.reject_once", shared=False, bind=True, acks_late=True)
    def reject_once(self: Any) -> bool:
        """Rejects (requeue) its first delivery unacked; herald must deliver it again."""
        redelivered = bool(self.request.delivery_info.get("redelivered"))
        if not redelivered:
            raise Reject("first delivery", requeue=True)
        return redelivered

    @app.task(name="e2e.die_unless_redelivered", shared=False, bind=True, acks_late=True)
    def die_unless_redelivered(self: Any) -> bool:
        """The worker process dies on the first delivery, before the late ack."""
        redelivered = bool(self.request.delivery_info.get("redelivered"))
        if not redelivered:
            os._exit(DIED_EXIT_CODE)
        return redelivered

    return app


app = make_app(os.environ.get("HERALD_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"))
