"""`herald admin users ...`: add, delete and tag users, set their permissions (issue 8's
user-management command, through the management API)."""

from __future__ import annotations

import click

from herald.plugins.management.admin_common import client, json_option, seg, vhost_option
from herald.plugins.management.admin_output import show_list


@click.group()
def users() -> None:
    """Add, delete and tag users, and set their permissions."""


def _tags(tags: tuple[str, ...]) -> list[str]:
    return [t.strip() for tag in tags for t in tag.split(",") if t.strip()]


@users.command(name="list")
@json_option
@click.pass_context
def users_list(ctx: click.Context, as_json: bool) -> None:
    """List users and their tags."""
    show_list("users", client(ctx).get("/api/users"), as_json)


@users.command(name="add")
@click.argument("name")
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True)
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable, or comma separated).")
@click.pass_context
def users_add(ctx: click.Context, name: str, password: str, tags: tuple[str, ...]) -> None:
    """Add user NAME, or set its password and tags."""
    body = {"password": password, "tags": _tags(tags)}
    client(ctx).request("PUT", f"/api/users/{seg(name)}", body)
    click.echo(f"user saved: {name}")


@users.command(name="delete")
@click.argument("name")
@click.pass_context
def users_delete(ctx: click.Context, name: str) -> None:
    """Delete user NAME and its permissions."""
    client(ctx).request("DELETE", f"/api/users/{seg(name)}")
    click.echo(f"user deleted: {name}")


@users.command(name="tags")
@click.argument("name")
@click.argument("tags", nargs=-1)
@click.pass_context
def users_tags(ctx: click.Context, name: str, tags: tuple[str, ...]) -> None:
    """Set NAME's tags (none: clear them), e.g. `users tags alice management`."""
    client(ctx).request("PUT", f"/api/users/{seg(name)}", {"tags": _tags(tags)})
    click.echo(f"tags of {name}: {', '.join(_tags(tags)) or '(none)'}")


@users.command(name="permissions")
@click.argument("name")
@vhost_option
@click.option("--configure", default=".*", show_default=True)
@click.option("--write", default=".*", show_default=True)
@click.option("--read", default=".*", show_default=True)
@click.option("--clear", is_flag=True, help="Remove NAME's permissions in the vhost instead.")
@click.pass_context
def users_permissions(
    ctx: click.Context, name: str, vhost: str, configure: str, write: str, read: str, clear: bool
) -> None:
    """Set (or --clear) NAME's permissions in a vhost (regular expressions)."""
    path = f"/api/permissions/{seg(vhost)}/{seg(name)}"
    if clear:
        client(ctx).request("DELETE", path)
        click.echo(f"permissions cleared: {name} in {vhost}")
        return
    body = {"configure": configure, "write": write, "read": read}
    client(ctx).request("PUT", path, body)
    click.echo(f"permissions set: {name} in {vhost}")
