"""How `herald admin` prints answers: aligned tables by default, JSON with --json.

Each listed kind has its columns here (a dotted path into the API's JSON); a table shows
them, JSON shows the API's answer unchanged, so scripts get every field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import click

COLUMNS: dict[str, tuple[str, ...]] = {
    "queues": (
        "vhost",
        "name",
        "messages_ready",
        "messages_unacknowledged",
        "consumers",
        "memory",
        "herald_swap.swapped",
    ),
    "exchanges": ("vhost", "name", "type", "durable", "auto_delete", "internal"),
    "connections": ("name", "protocol", "user", "vhost", "peer_host", "peer_port"),
    "bindings": ("vhost", "source", "destination", "destination_type", "routing_key"),
    "users": ("name", "tags"),
    "vhosts": ("name", "messages", "queues", "exchanges"),
    "permissions": ("user", "vhost", "configure", "write", "read"),
    "consumers": ("queue.vhost", "queue.name", "consumer_tag", "ack_required", "prefetch_count"),
    "messages": ("queue_offset", "exchange", "routing_key", "redelivered", "payload"),
}

HEADINGS = {
    "messages_ready": "ready",
    "messages_unacknowledged": "unacked",
    "herald_swap.swapped": "swapped",
    "queue.vhost": "vhost",
    "queue.name": "queue",
    "destination_type": "dest_type",
}


def field(item: Any, path: str) -> Any:
    for part in path.split("."):
        item = item.get(part) if isinstance(item, dict) else None
    return item


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(cell(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return " ".join(str(value).split())  # one line per row, whatever the payload holds


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def show_list(kind: str, items: Iterable[dict[str, Any]], as_json: bool) -> None:
    items = list(items)
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    columns = COLUMNS[kind]
    heading = [HEADINGS.get(c, c).upper() for c in columns]
    click.echo(table([heading] + [[cell(field(i, c)) for c in columns] for i in items]))


def show_object(answer: Any, as_json: bool) -> None:
    """A single answer: JSON, or `key  value` lines for a flat view."""
    if as_json or not isinstance(answer, dict):
        click.echo(json.dumps(answer, indent=2))
        return
    click.echo(table([[str(k), cell(v)] for k, v in answer.items()]))
