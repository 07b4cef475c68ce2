"""`herald admin ...`: the management API from a shell (RabbitMQ's rabbitmqadmin, for herald).

Every command is one or a few HTTP requests (admin_client.py) to a running broker's
management plugin, so it works from any machine that reaches the API, with the same basic
auth and tag rules as the console. Tables by default, the API's JSON with --json. A refused
request prints the API's reason as "herald: error: <status> <error>: <reason>" and exits 2.
This module holds the group and the topology commands; admin_messages.py and admin_users.py
add the rest.
"""

from __future__ import annotations

import click

from herald.plugins.management import admin_messages, admin_users
from herald.plugins.management.admin_common import (
    AdminError,
    Target,
    client,
    json_option,
    pairs,
    seg,
    vhost_option,
)
from herald.plugins.management.admin_output import COLUMNS, show_list, show_object

LISTS_BY_VHOST = {
    "queues": "/api/queues/{}",
    "exchanges": "/api/exchanges/{}",
    "bindings": "/api/bindings/{}",
    "consumers": "/api/consumers/{}",
    "connections": "/api/vhosts/{}/connections",
    "permissions": "/api/vhosts/{}/permissions",
    "vhosts": "/api/vhosts/{}",
}
"""Where each list is narrowed to one vhost (users have no vhost)."""


@click.group(name="admin")
@click.option(
    "--url",
    envvar="HERALD_ADMIN_URL",
    default="http://127.0.0.1:15672",
    show_default=True,
    help="The management API's base URL (or $HERALD_ADMIN_URL).",
)
@click.option("--user", envvar="HERALD_ADMIN_USER", default="guest", show_default=True)
@click.option("--password", envvar="HERALD_ADMIN_PASSWORD", default="guest", show_default=True)
@click.option(
    "--cacert",
    type=click.Path(dir_okay=False, exists=True),
    help="PEM file of the CA that signed the broker's HTTPS certificate.",
)
@click.option("--insecure", is_flag=True, help="Do not verify the HTTPS certificate.")
@click.pass_context
def admin(
    ctx: click.Context, url: str, user: str, password: str, cacert: str | None, insecure: bool
) -> None:
    """Manage a running broker through its management API."""
    verify: str | bool = False if insecure else (cacert or True)
    ctx.obj = Target(url, user, password, verify)


@admin.command()
@json_option
@click.pass_context
def overview(ctx: click.Context, as_json: bool) -> None:
    """Versions, totals and message rates."""
    answer = client(ctx).get("/api/overview")
    if not as_json:
        stats = answer["message_stats"]
        answer = {
            "node": answer["node"],
            "version": answer["herald_version"],
            **answer["queue_totals"],
            **answer["object_totals"],
            **{f"{k}_rate": stats[f"{k}_details"]["rate"] for k in ("publish", "ack")},
            "alarms": answer["alarms"],
        }
    show_object(answer, as_json)


@admin.command(name="list")
@click.argument("kind", type=click.Choice(sorted(set(COLUMNS) - {"messages"})))
@click.option("--vhost", help="Only this virtual host (default: all you may see).")
@click.option("--name", "pattern", help="Only names matching this regular expression.")
@json_option
@click.pass_context
def list_command(
    ctx: click.Context, kind: str, vhost: str | None, pattern: str | None, as_json: bool
) -> None:
    """List queues, exchanges, connections, bindings, users, vhosts, permissions, consumers."""
    path = f"/api/{kind}"
    if vhost is not None:
        if kind not in LISTS_BY_VHOST:
            raise click.BadParameter(f"{kind} have no vhost", param_hint="--vhost")
        path = LISTS_BY_VHOST[kind].format(seg(vhost))
    params = {"name": pattern, "use_regex": "true"} if pattern else {}
    answer = client(ctx).get(path, **params)
    show_list(kind, answer if isinstance(answer, list) else [answer], as_json)


# -- declare / delete ---------------------------------------------------------------------------


@admin.group()
def declare() -> None:
    """Declare a queue, an exchange or a binding."""


@declare.command(name="queue")
@click.argument("name")
@vhost_option
@click.option("--durable/--transient", default=True, show_default=True)
@click.option("--auto-delete", is_flag=True)
@click.option("--argument", "arguments", multiple=True, metavar="KEY=VALUE")
@click.pass_context
def declare_queue(
    ctx: click.Context,
    name: str,
    vhost: str,
    durable: bool,
    auto_delete: bool,
    arguments: tuple[str, ...],
) -> None:
    """Declare queue NAME (x-arguments with --argument x-max-length=10)."""
    body = {
        "durable": durable,
        "auto_delete": auto_delete,
        "arguments": pairs(arguments, "--argument"),
    }
    client(ctx).request("PUT", f"/api/queues/{seg(vhost)}/{seg(name)}", body)
    click.echo(f"queue declared: {name}")


@declare.command(name="exchange")
@click.argument("name")
@click.option("--type", "kind", default="direct", show_default=True)
@vhost_option
@click.option("--durable/--transient", default=True, show_default=True)
@click.option("--auto-delete", is_flag=True)
@click.option("--internal", is_flag=True)
@click.pass_context
def declare_exchange(
    ctx: click.Context,
    name: str,
    kind: str,
    vhost: str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
) -> None:
    """Declare exchange NAME."""
    body = {"type": kind, "durable": durable, "auto_delete": auto_delete, "internal": internal}
    client(ctx).request("PUT", f"/api/exchanges/{seg(vhost)}/{seg(name)}", body)
    click.echo(f"exchange declared: {name}")


destination_type = click.option(
    "--destination-type",
    type=click.Choice(["queue", "exchange"]),
    default="queue",
    show_default=True,
)


def _pair_path(vhost: str, source: str, kind: str, destination: str) -> str:
    letter = "q" if kind == "queue" else "e"
    return f"/api/bindings/{seg(vhost)}/e/{seg(source)}/{letter}/{seg(destination)}"


@declare.command(name="binding")
@click.argument("source")
@click.argument("destination")
@destination_type
@click.option("--routing-key", default="", help="Routing key (binding key).")
@vhost_option
@click.pass_context
def declare_binding(
    ctx: click.Context,
    source: str,
    destination: str,
    destination_type: str,
    routing_key: str,
    vhost: str,
) -> None:
    """Bind DESTINATION (a queue, or an exchange) to exchange SOURCE."""
    path = _pair_path(vhost, source, destination_type, destination)
    client(ctx).request("POST", path, {"routing_key": routing_key, "arguments": {}})
    click.echo(f"binding declared: {source} -> {destination} ({routing_key!r})")


@admin.group()
def delete() -> None:
    """Delete a queue, an exchange or a binding."""


@delete.command(name="queue")
@click.argument("name")
@vhost_option
@click.option("--if-empty", is_flag=True)
@click.option("--if-unused", is_flag=True)
@click.pass_context
def delete_queue(
    ctx: click.Context, name: str, vhost: str, if_empty: bool, if_unused: bool
) -> None:
    """Delete queue NAME."""
    params = {"if-empty": "true"} if if_empty else {}
    if if_unused:
        params["if-unused"] = "true"
    client(ctx).request("DELETE", f"/api/queues/{seg(vhost)}/{seg(name)}", params=params)
    click.echo(f"queue deleted: {name}")


@delete.command(name="exchange")
@click.argument("name")
@vhost_option
@click.option("--if-unused", is_flag=True)
@click.pass_context
def delete_exchange(ctx: click.Context, name: str, vhost: str, if_unused: bool) -> None:
    """Delete exchange NAME."""
    params = {"if-unused": "true"} if if_unused else {}
    client(ctx).request("DELETE", f"/api/exchanges/{seg(vhost)}/{seg(name)}", params=params)
    click.echo(f"exchange deleted: {name}")


@delete.command(name="binding")
@click.argument("source")
@click.argument("destination")
@destination_type
@click.option("--routing-key", default="")
@vhost_option
@click.pass_context
def delete_binding(
    ctx: click.Context,
    source: str,
    destination: str,
    destination_type: str,
    routing_key: str,
    vhost: str,
) -> None:
    """Delete the bindings from SOURCE to DESTINATION with this routing key."""
    http = client(ctx)
    path = _pair_path(vhost, source, destination_type, destination)
    found = [b for b in http.get(path) if b["routing_key"] == routing_key]
    if not found:
        raise AdminError(f"no binding {source} -> {destination} with key {routing_key!r}")
    for binding in found:
        http.request("DELETE", f"{path}/{binding['properties_key']}")  # already URL-safe
    click.echo(f"binding deleted: {source} -> {destination} ({routing_key!r})")


@admin.group()
def close() -> None:
    """Close a connection."""


@close.command(name="connection")
@click.argument("name")
@click.option("--reason", default="closed by herald admin", show_default=True)
@click.pass_context
def close_connection(ctx: click.Context, name: str, reason: str) -> None:
    """Close connection NAME (its id, as `list connections` shows it)."""
    headers = {"X-Reason": reason}
    client(ctx).request("DELETE", f"/api/connections/{seg(name)}", headers=headers)
    click.echo(f"connection closed: {name}")


admin.add_command(admin_messages.publish)
admin.add_command(admin_messages.get)
admin.add_command(admin_messages.browse)
admin.add_command(admin_messages.purge)
admin.add_command(admin_messages.export_command)
admin.add_command(admin_messages.import_command)
admin.add_command(admin_users.users)
