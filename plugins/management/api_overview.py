"""The broker as a whole: overview, nodes, health checks, plugins, whoami.

Health checks answer 200 `{"status": "ok"}` or 503 `{"status": "failed", "reason": ...}`,
as RabbitMQ's /api/health/checks/* do, so load balancers and Kubernetes probes can use them.
"""

from __future__ import annotations

import platform
import time
from typing import Any

from starlette.responses import JSONResponse

from herald.core.flow import process_rss
from herald.core.version import herald_version
from herald.plugins.management.access import Level
from herald.plugins.management.endpoints import Ctx, EndpointTable
from herald.plugins.management.errors import not_found
from herald.plugins.management.shapes import message_stats, node_name

table = EndpointTable("overview")

_STARTED = time.time()


def listeners_json(ctx: Ctx) -> list[dict[str, Any]]:
    node = node_name(ctx.broker)
    return [
        {
            "node": node,
            "protocol": listener.protocol,
            "transport": listener.transport,
            "ip_address": listener.host,
            "port": listener.port,
        }
        for listener in ctx.broker.listeners
    ]


@table.get("/api/overview", "Versions, listeners, message rates, totals and alarms")
async def overview(ctx: Ctx) -> dict[str, Any]:
    access, rates = ctx.access, ctx.state.rates
    vhosts = access.visible_vhosts()
    queues = [q for v in vhosts for q in v.queues.values()]
    ready = sum(q.ready.count for q in queues)
    unacked = sum(q.unacked_count for q in queues)
    connections = [c for c in ctx.broker.connections if access.sees_connection(c)]
    if access.is_monitor:
        stats = message_stats(rates.totals, rates.rates)
    else:  # only the caller's vhosts: sums of their queues as of the last sample
        counts = [0, 0, 0]
        per_second = [0.0, 0.0, 0.0]
        for queue in queues:
            stats_now = queue.statistics()
            for i, value in enumerate((stats_now.published, stats_now.delivered, stats_now.acked)):
                counts[i] += value
            for i, rate in enumerate(rates.queue_rates(queue)):
                per_second[i] += rate
        stats = message_stats(
            (counts[0], counts[1], counts[2]), (per_second[0], per_second[1], per_second[2])
        )
    version = herald_version()
    return {
        "product_name": "herald",
        "product_version": version,
        "management_version": version,
        "herald_version": version,
        "python_version": platform.python_version(),
        "node": node_name(ctx.broker),
        "cluster_name": node_name(ctx.broker),
        "listeners": listeners_json(ctx),
        "message_stats": stats,
        "queue_totals": {
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
        },
        "object_totals": {
            "connections": len(connections),
            "channels": sum(len(c.channels()) for c in connections if c.channels is not None),
            "consumers": sum(len(q.consumers) for q in queues),
            "exchanges": sum(len(v.exchanges) for v in vhosts),
            "queues": len(queues),
            "vhosts": len(vhosts),
        },
        "alarms": sorted(ctx.broker.alarms.active),
        "sample_interval": ctx.state.config.sample_interval,
        "statistics_sampled_at": rates.sampled_at,
    }


def _node_json(ctx: Ctx) -> dict[str, Any]:
    broker = ctx.broker
    alarms = broker.alarms.active
    store = broker.store.statistics()
    return {
        "name": node_name(broker),
        "type": "disc",
        "running": True,
        "uptime": int((time.time() - _STARTED) * 1000),
        "mem_used": process_rss(),
        "mem_limit": broker.memory.high_watermark,
        "mem_alarm": "memory" in alarms,
        "disk_free_alarm": "disk" in alarms,
        "alarms": sorted(alarms),
        "partitions": [],
        "herald_store": {
            "backend": broker.config.store.backend,
            "implementation": type(broker.store).__name__,
            "messages": store.messages,
            "bytes": store.bytes,
            "appended_ticket": store.appended_ticket,
            "durable_ticket": store.durable_ticket,
        },
    }


@table.get(
    "/api/nodes", "This broker's node (herald runs one node per broker)", level=Level.MONITORING
)
async def nodes(ctx: Ctx) -> list[dict[str, Any]]:
    return [_node_json(ctx)]


@table.get("/api/nodes/{node}", "One node", level=Level.MONITORING)
async def node(ctx: Ctx) -> dict[str, Any]:
    if ctx.params["node"] != node_name(ctx.broker):
        raise not_found(f"node '{ctx.params['node']}'")
    return _node_json(ctx)


def _health(ok: bool, reason: str = "") -> JSONResponse:
    if ok:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "failed", "reason": reason}, status_code=503)


@table.get("/api/health/checks/alive", "The broker answers")
async def alive(ctx: Ctx) -> JSONResponse:
    return _health(True)


@table.get("/api/health/checks/ready", "The broker has started its listeners and is not stopping")
async def ready(ctx: Ctx) -> JSONResponse:
    state = ctx.state
    if state.broker_stopping():
        return _health(False, "the broker is stopping")
    if not state.broker_started():
        return _health(False, "the broker is starting")
    return _health(True)


@table.get("/api/health/checks/alarms", "No resource alarm is in effect")
async def alarms(ctx: Ctx) -> JSONResponse:
    active = sorted(ctx.broker.alarms.active)
    if active:
        return _health(False, "resource alarm(s) in effect: " + ", ".join(active))
    return _health(True)


@table.get("/api/plugins", "Plugins: registered, enabled, and those that failed to load")
async def plugins(ctx: Ctx) -> list[dict[str, Any]]:
    manager = ctx.broker.plugins
    selected = ctx.broker.config.broker.plugins
    selectable = {spec.name for spec in manager.protocols()} | {"management"}
    out = []
    for info in manager.info():
        # Protocols and this plugin are selected with --plugins; the others are always on.
        enabled = selected is None or info.name in selected or info.name not in selectable
        out.append(
            {
                "name": info.name,
                "version": info.version,
                "description": info.description,
                "enabled": enabled,
            }
        )
    for name, reason in sorted(manager.broken.items()):
        out.append({"name": name, "enabled": False, "broken": reason})
    return out


@table.get("/api/whoami", "The authenticated user and its tags")
async def whoami(ctx: Ctx) -> dict[str, Any]:
    user = ctx.access.user
    return {"name": user.name, "tags": sorted(user.tags)}


@table.get("/api/extensions", "Console extensions (none; kept for RabbitMQ tools)")
async def extensions(ctx: Ctx) -> list[Any]:
    return []
