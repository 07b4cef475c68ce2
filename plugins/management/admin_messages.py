"""`herald admin` commands for messages and definitions: publish, get, browse, purge,
export and import."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from herald.plugins.management.admin_common import client, json_option, pairs, seg, vhost_option
from herald.plugins.management.admin_output import show_list, show_object

ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")


@click.command()
@click.argument("queue")
@vhost_option
@click.pass_context
def purge(ctx: click.Context, queue: str, vhost: str) -> None:
    """Remove QUEUE's ready messages."""
    client(ctx).request("DELETE", f"/api/queues/{seg(vhost)}/{seg(queue)}/contents")
    click.echo(f"queue purged: {queue}")


# -- messages and definitions -------------------------------------------------------------------


@click.command()
@click.option("--exchange", default="amq.default", show_default=True)
@click.option("--routing-key", default="", help="Routing key (the queue's name for amq.default).")
@click.option("--payload", help="Message body as text (default: read from stdin).")
@click.option("--persistent", is_flag=True, help="delivery_mode 2.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE")
@vhost_option
@json_option
@click.pass_context
def publish(
    ctx: click.Context,
    exchange: str,
    routing_key: str,
    payload: str | None,
    persistent: bool,
    properties: tuple[str, ...],
    headers: tuple[str, ...],
    vhost: str,
    as_json: bool,
) -> None:
    """Publish one message (RabbitMQ's properties: --property content_type=text/plain)."""
    props = pairs(properties, "--property")
    if persistent:
        props["delivery_mode"] = 2
    if headers:
        props["headers"] = pairs(headers, "--header")
    body = {
        "routing_key": routing_key,
        "payload": sys.stdin.read() if payload is None else payload,
        "payload_encoding": "string",
        "properties": props,
    }
    path = f"/api/exchanges/{seg(vhost)}/{seg(exchange)}/publish"
    answer = client(ctx).request("POST", path, body)
    if as_json:
        show_object(answer, True)
    else:
        click.echo("routed" if answer.get("routed") else "not routed (no queue matched)")


@click.command()
@click.argument("queue")
@click.option("--count", default=1, show_default=True)
@click.option(
    "--ackmode", type=click.Choice(ACKMODES), default="ack_requeue_true", show_default=True
)
@vhost_option
@json_option
@click.pass_context
def get(
    ctx: click.Context, queue: str, count: int, ackmode: str, vhost: str, as_json: bool
) -> None:
    """Take messages from QUEUE (requeued unless --ackmode says otherwise)."""
    body = {"count": count, "ackmode": ackmode, "encoding": "auto"}
    answer = client(ctx).request("POST", f"/api/queues/{seg(vhost)}/{seg(queue)}/get", body)
    show_list("messages", answer, as_json)


@click.command()
@click.argument("queue")
@click.option("--offset", default=0, show_default=True)
@click.option("--limit", default=50, show_default=True)
@vhost_option
@json_option
@click.pass_context
def browse(
    ctx: click.Context, queue: str, offset: int, limit: int, vhost: str, as_json: bool
) -> None:
    """Show QUEUE's ready messages without consuming them."""
    path = f"/api/queues/{seg(vhost)}/{seg(queue)}/messages"
    answer = client(ctx).get(path, offset=offset, limit=limit)
    show_list("messages", answer["items"], as_json)


@click.command(name="export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--vhost", help="Only this virtual host's definitions.")
@click.pass_context
def export_command(ctx: click.Context, file: Path | None, vhost: str | None) -> None:
    """Write the broker's definitions (RabbitMQ's JSON) to FILE, or stdout."""
    path = "/api/definitions" + ("" if vhost is None else f"/{seg(vhost)}")
    text = json.dumps(client(ctx).get(path), indent=2)
    if file is None:
        click.echo(text)
    else:
        file.write_text(text + "\n", encoding="utf-8")
        click.echo(f"definitions exported to {file}")


@click.command(name="import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--vhost", help="Import into this virtual host only.")
@click.pass_context
def import_command(ctx: click.Context, file: Any, vhost: str | None) -> None:
    """Apply the definitions in FILE ('-' for stdin)."""
    try:
        definitions = json.load(file)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="FILE") from None
    path = "/api/definitions" + ("" if vhost is None else f"/{seg(vhost)}")
    answer = client(ctx).request("POST", path, definitions) or {}
    for warning in answer.get("warnings", []):
        click.echo(f"warning: {warning}", err=True)
    click.echo("definitions imported")
