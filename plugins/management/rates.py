"""Message rates: a sampler of the queues' publish / deliver / ack counters.

The kernel already counts, per queue, what was published into it, delivered (pushed or got)
and acked (`Queue.statistics()`); nothing is added to the hot path. Every `sample_interval`
seconds (RabbitMQ's `collect_statistics_interval`, 5 s) the sampler reads every queue's
counters once and keeps, per queue and for the broker, the counts and the rate over the last
interval. Counts of deleted queues stay in the broker totals, so totals only grow.

A message routed to three queues counts three publishes (RabbitMQ counts the channel's one
publish and three queue "publish_in"s; the kernel has no per-channel counter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from herald.core.broker import Broker
    from herald.core.queue import Queue

Counts = tuple[int, int, int]
"""(published, delivered, acked)."""
PerSecond = tuple[float, float, float]

_ZERO_RATES: PerSecond = (0.0, 0.0, 0.0)


def _counts(queue: Queue) -> Counts:
    stats = queue.statistics()
    return (stats.published, stats.delivered, stats.acked)


class Rates:
    """Counts and rates, as of the last sample."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.samples = 0
        self.sampled_at: float | None = None
        self._last: dict[Queue, Counts] = {}
        self._rates: dict[Queue, PerSecond] = {}
        self._seen: dict[Queue, Counts] = {}  # as of the last look, sample or scrape
        self._gone: list[int] = [0, 0, 0]  # counts of queues deleted since the start
        self.totals: Counts = (0, 0, 0)
        self.rates: PerSecond = _ZERO_RATES

    def queue_rates(self, queue: Queue) -> PerSecond:
        return self._rates.get(queue, _ZERO_RATES)

    def live_totals(self) -> Counts:
        """Broker totals now (not as of the last sample), for /metrics: they never go down,
        as Prometheus counters must not."""
        return self._account()[1]

    def _account(self) -> tuple[dict[Queue, Counts], Counts]:
        """Every queue's counts now, and the broker totals including deleted queues'."""
        current = {
            queue: _counts(queue)
            for vhost in self.broker.vhosts.values()
            for queue in vhost.queues.values()
        }
        gone = self._gone
        for queue, counts in self._seen.items():
            if queue not in current:
                for i in range(3):
                    gone[i] += counts[i]
        self._seen = current
        sums = list(gone)
        for counts in current.values():
            for i in range(3):
                sums[i] += counts[i]
        return current, (sums[0], sums[1], sums[2])

    def sample(self, now: float) -> None:
        """Read every queue's counters once; rates are per second since the last sample."""
        elapsed = None if self.sampled_at is None else now - self.sampled_at
        current, totals = self._account()
        rates: dict[Queue, PerSecond] = {}
        if elapsed:
            last = self._last
            for queue, counts in current.items():
                before = last.get(queue)
                if before is not None:
                    rates[queue] = (
                        (counts[0] - before[0]) / elapsed,
                        (counts[1] - before[1]) / elapsed,
                        (counts[2] - before[2]) / elapsed,
                    )
            self.rates = (
                max(0.0, (totals[0] - self.totals[0]) / elapsed),
                max(0.0, (totals[1] - self.totals[1]) / elapsed),
                max(0.0, (totals[2] - self.totals[2]) / elapsed),
            )
        self.totals = totals
        self._last = current
        self._rates = rates
        self.sampled_at = now
        self.samples += 1

    async def run(self, interval: float) -> None:
        """Sample every `interval` seconds until cancelled."""
        while True:
            self.sample(trio.current_time())
            await trio.sleep(interval)
