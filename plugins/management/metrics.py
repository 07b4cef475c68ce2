"""Prometheus `/metrics`: a custom collector over the broker's live state.

Each broker gets its own `CollectorRegistry` (never the global one), so two brokers in one
process, as in tests, never mix their series. Nothing is counted on the hot path.

A scrape has two halves. On the broker's Trio thread the collector takes a `Snapshot`: plain
numbers read from the kernel (about 5 us per queue). In a worker thread prometheus_client
builds the metric families from it and writes the text format, which is the expensive part
(about 100 us per queue): with 10,000 queues that second is not spent on the broker's thread.
Scrapes run one at a time.

Series (all prefixed `herald_`): broker totals (connections, queues, consumers, messages,
published / delivered / acked counters, alarms, store), per queue (labelled vhost, queue),
per connection (labelled id, protocol, vhost, user), and on a cluster node its cluster and
replication gauges (`herald_cluster_fenced`; on a master `herald_ha_*`, see
cluster/api.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs
import trio
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector
from starlette.responses import Response

from herald.core.queue_entry import QueueStatistics
from herald.plugins.management.access import Level
from herald.plugins.management.endpoints import Ctx, EndpointTable

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from herald.core.broker import Broker
    from herald.plugins.management.rates import Rates

table = EndpointTable("metrics")

LabelledGauge = tuple[str, str, tuple[str, ...], tuple[tuple[tuple[str, ...], float], ...]]
"""(name, documentation, label names, samples of (label values, value)): a gauge family as
plain data, as another plugin's code gives it."""

_QUEUE_LABELS = ["vhost", "queue"]
_CONNECTION_LABELS = ["id", "protocol", "vhost", "user"]

_QUEUE_GAUGES = (
    ("herald_queue_messages_ready", "Ready messages", "messages_ready"),
    ("herald_queue_messages_unacked", "Unacknowledged messages", "messages_unacknowledged"),
    ("herald_queue_messages_ready_bytes", "Body bytes of ready messages", "message_bytes_ready"),
    ("herald_queue_consumers", "Consumers", "consumers"),
    ("herald_queue_messages_swapped", "Ready messages only in the store", "messages_swapped"),
    ("herald_queue_messages_swapped_bytes", "Body bytes swapped out", "message_bytes_swapped"),
)
_QUEUE_COUNTERS = (
    ("herald_queue_published", "Messages enqueued", "published"),
    ("herald_queue_delivered", "Messages delivered or got", "delivered"),
    ("herald_queue_acked", "Messages acknowledged", "acked"),
    ("herald_queue_expired", "Messages expired (TTL)", "expired"),
    ("herald_queue_dead_lettered", "Messages dead-lettered", "dead_lettered"),
)


@attrs.frozen
class Snapshot:
    """Everything one scrape reports, as plain data (safe to hand to another thread)."""

    version: str
    node: str
    gauges: tuple[tuple[str, str, float], ...]
    counters: tuple[tuple[str, str, float], ...]
    alarms: tuple[tuple[str, int], ...]
    queues: tuple[tuple[str, str, QueueStatistics], ...]
    connections: tuple[tuple[tuple[str, str, str, str], float, int | None], ...]
    labelled: tuple[LabelledGauge, ...] = ()


def cluster_gauges(broker: Broker) -> tuple[LabelledGauge, ...]:
    """The cluster node's gauges (cluster/api.py), asked only of a broker whose
    `[cluster]` is enabled, so a standalone broker imports nothing of the cluster for a
    scrape. There is no hook for plugins' series; this is its one caller-side seam."""
    section = broker.config.plugins.get("cluster")
    if not getattr(section, "enabled", False):
        return ()
    from herald.cluster.api import node_gauges

    return node_gauges(broker)


def take_snapshot(broker: Broker, rates: Rates) -> Snapshot:
    """Read the broker's state (on its Trio thread)."""
    from herald.plugins.management.api_overview import herald_version

    vhosts = list(broker.vhosts.values())
    queues = [(v.name, q.name, q.statistics()) for v in vhosts for q in v.queues.values()]
    store = broker.store.statistics()
    gauges = (
        ("herald_vhosts", "Virtual hosts", len(vhosts)),
        ("herald_connections", "Open client connections", len(broker.connections)),
        ("herald_queues", "Queues", len(queues)),
        ("herald_exchanges", "Exchanges", sum(len(v.exchanges) for v in vhosts)),
        ("herald_consumers", "Consumers", sum(s.consumers for _, _, s in queues)),
        (
            "herald_messages_ready",
            "Messages ready for delivery, in all queues",
            sum(s.messages_ready for _, _, s in queues),
        ),
        (
            "herald_messages_unacked",
            "Messages delivered and not yet acknowledged, in all queues",
            sum(s.messages_unacknowledged for _, _, s in queues),
        ),
        (
            "herald_memory_high_watermark_bytes",
            "Memory above which publishers are blocked",
            broker.memory.high_watermark,
        ),
        ("herald_store_messages", "Messages in the store", store.messages),
        ("herald_store_bytes", "Bytes of messages in the store", store.bytes),
    )
    published, delivered, acked = rates.live_totals()
    counters = (
        ("herald_published", "Messages enqueued into queues, since start", published),
        ("herald_delivered", "Messages delivered or got from queues, since start", delivered),
        ("herald_acked", "Messages acknowledged, since start", acked),
    )
    active = broker.alarms.active
    alarms = tuple((name, int(name in active)) for name in sorted({"memory", "disk", *active}))
    connections = tuple(
        (
            (str(c.id), c.protocol, c.vhost or "", c.user or ""),
            c.opened_at,
            len(c.channels()) if c.channels is not None else None,
        )
        for c in broker.connections
    )
    return Snapshot(
        herald_version(),
        broker.config.broker.node_name,
        gauges,
        counters,
        alarms,
        tuple(queues),
        connections,
        cluster_gauges(broker),
    )


class HeraldCollector(Collector):
    """Turns the `snapshot` of the scrape in progress into metric families."""

    def __init__(self, broker: Broker, rates: Rates) -> None:
        self.broker = broker
        self.rates = rates
        self.snapshot: Snapshot | None = None
        self.lock = trio.Lock()

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        if snapshot is None:  # called outside `scrape` (on the Trio thread): read live
            snapshot = take_snapshot(self.broker, self.rates)
        info = InfoMetricFamily("herald_build", "The broker's version and node")
        info.add_metric([], {"version": snapshot.version, "node": snapshot.node})
        yield info
        for name, documentation, value in snapshot.gauges:
            yield GaugeMetricFamily(name, documentation, value=value)
        for name, documentation, value in snapshot.counters:
            yield CounterMetricFamily(name, documentation, value=value)
        alarm = GaugeMetricFamily(
            "herald_alarm", "1 while a resource alarm is set", labels=["alarm"]
        )
        for name, active in snapshot.alarms:
            alarm.add_metric([name], active)
        yield alarm
        for name, documentation, labels, samples in snapshot.labelled:
            family = GaugeMetricFamily(name, documentation, labels=list(labels))
            for values, value in samples:
                family.add_metric(list(values), value)
            yield family
        yield from self._queue_metrics(snapshot)
        yield from self._connection_metrics(snapshot)

    def _queue_metrics(self, snapshot: Snapshot) -> Iterator[Metric]:
        for name, documentation, field in _QUEUE_GAUGES:
            family = GaugeMetricFamily(name, documentation, labels=_QUEUE_LABELS)
            for vhost, queue, stats in snapshot.queues:
                family.add_metric([vhost, queue], getattr(stats, field))
            yield family
        for name, documentation, field in _QUEUE_COUNTERS:
            counter = CounterMetricFamily(name, documentation, labels=_QUEUE_LABELS)
            for vhost, queue, stats in snapshot.queues:
                counter.add_metric([vhost, queue], getattr(stats, field))
            yield counter

    def _connection_metrics(self, snapshot: Snapshot) -> Iterator[Metric]:
        opened = GaugeMetricFamily(
            "herald_connection_opened_timestamp_seconds",
            "When the connection was opened (one series per open connection)",
            labels=_CONNECTION_LABELS,
        )
        channels = GaugeMetricFamily(
            "herald_connection_channels",
            "Channels or sessions the connection's protocol reports",
            labels=_CONNECTION_LABELS,
        )
        for labels, opened_at, channel_count in snapshot.connections:
            opened.add_metric(list(labels), opened_at)
            if channel_count is not None:
                channels.add_metric(list(labels), channel_count)
        yield opened
        yield channels

    async def scrape(self, registry: CollectorRegistry) -> bytes:
        """The exposition text: snapshot here, format in a worker thread."""
        async with self.lock:
            self.snapshot = take_snapshot(self.broker, self.rates)
            try:
                return await trio.to_thread.run_sync(generate_latest, registry)
            finally:
                self.snapshot = None


def make_registry(broker: Broker, rates: Rates) -> tuple[CollectorRegistry, HeraldCollector]:
    registry = CollectorRegistry(auto_describe=False)
    collector = HeraldCollector(broker, rates)
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry, collector


@table.get("/metrics", "Prometheus metrics (text exposition format)", level=Level.MONITORING)
async def metrics(ctx: Ctx) -> Response:
    text = await ctx.state.collector.scrape(ctx.state.registry)
    return Response(text, media_type=CONTENT_TYPE_LATEST)
