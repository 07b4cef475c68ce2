"""Users and permissions (administrators only, as in RabbitMQ).

`PUT /api/users/{name}` takes `password` (hashed here with herald's scrypt) or
`password_hash` (a herald hash, e.g. from an export), and `tags` as a list or RabbitMQ's
comma-separated string. Permissions are RabbitMQ's three regular expressions per vhost.
"""

from __future__ import annotations

from typing import Any

from herald.plugins.management.access import Level
from herald.plugins.management.endpoints import Ctx, EndpointTable, Reply
from herald.plugins.management.errors import bad_request, not_found
from herald.plugins.management.paging import PAGING_QUERY, listing
from herald.plugins.management.shapes import permission_json, user_json

table = EndpointTable("users")

ADMIN = Level.ADMINISTRATOR


def parse_tags(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return [t.strip() for t in value if t.strip()]
    raise bad_request("'tags' must be a list of strings or a comma-separated string")


@table.get("/api/users", "Users", level=ADMIN, query=PAGING_QUERY)
async def list_users(ctx: Ctx) -> Any:
    return listing(ctx, ctx.broker.users.users(), lambda u: u.name, user_json)


def _user_name(ctx: Ctx) -> str:
    name = ctx.params["user"]
    if ctx.broker.users.get_user(name) is None:
        raise not_found(f"user '{name}'")
    return name


@table.get("/api/users/{user}", "One user", level=ADMIN)
async def get_user(ctx: Ctx) -> dict[str, Any]:
    user = ctx.broker.users.get_user(_user_name(ctx))
    assert user is not None
    return user_json(user)


@table.put(
    "/api/users/{user}",
    "Create or update a user",
    level=ADMIN,
    body='{"password": "secret", "tags": ["management"]}',
)
async def put_user(ctx: Ctx) -> Reply:
    name = ctx.params["user"]
    body = await ctx.json_object()
    tags = parse_tags(body.get("tags"))
    password = body.get("password")
    password_hash = body.get("password_hash")
    if password is not None and not isinstance(password, str):
        raise bad_request("'password' must be a string")
    if password_hash is not None and not isinstance(password_hash, str):
        raise bad_request("'password_hash' must be a string")
    users = ctx.broker.users
    existing = users.get_user(name)
    if password is not None:
        if existing is None:
            users.add_user(name, password, tags)
        else:
            users.change_password(name, password)
            users.set_tags(name, tags)
    elif password_hash is not None:
        users.import_user(name, password_hash or None, tags)
    elif existing is None:
        raise bad_request("a new user needs 'password' or 'password_hash'")
    else:
        users.set_tags(name, tags)
    return Reply(204 if existing is not None else 201)


@table.delete("/api/users/{user}", "Delete a user and its permissions", level=ADMIN)
async def delete_user(ctx: Ctx) -> Reply:
    ctx.broker.users.delete_user(_user_name(ctx))
    return Reply(204)


@table.get("/api/users/{user}/permissions", "One user's permissions", level=ADMIN)
async def user_permissions(ctx: Ctx) -> list[dict[str, Any]]:
    name = _user_name(ctx)
    granted = ctx.broker.users.permissions_for(name)
    return [permission_json(name, vhost, p) for vhost, p in sorted(granted.items())]


def _all_permissions(ctx: Ctx) -> list[dict[str, Any]]:
    return [
        permission_json(user, vhost, p)
        for (user, vhost), p in sorted(ctx.broker.users.permissions().items())
    ]


@table.get("/api/permissions", "Every permission", level=ADMIN)
async def list_permissions(ctx: Ctx) -> list[dict[str, Any]]:
    return _all_permissions(ctx)


@table.get("/api/vhosts/{vhost}/permissions", "Permissions in one vhost", level=ADMIN)
async def vhost_permissions(ctx: Ctx) -> list[dict[str, Any]]:
    vhost = ctx.access.vhost(ctx.params["vhost"])
    return [p for p in _all_permissions(ctx) if p["vhost"] == vhost.name]


@table.get("/api/permissions/{vhost}/{user}", "One user's permissions in one vhost", level=ADMIN)
async def get_permission(ctx: Ctx) -> dict[str, Any]:
    vhost = ctx.access.vhost(ctx.params["vhost"]).name
    name = _user_name(ctx)
    permission = ctx.broker.users.permissions_for(name).get(vhost)
    if permission is None:
        raise not_found(f"permissions of user '{name}' in vhost '{vhost}'")
    return permission_json(name, vhost, permission)


@table.put(
    "/api/permissions/{vhost}/{user}",
    "Set a user's permissions in a vhost",
    level=ADMIN,
    body='{"configure": ".*", "write": ".*", "read": ".*"}',
)
async def put_permission(ctx: Ctx) -> Reply:
    vhost = ctx.access.vhost(ctx.params["vhost"]).name
    name = _user_name(ctx)
    body = await ctx.json_object()
    patterns = []
    for kind in ("configure", "write", "read"):
        value = body.get(kind)
        if not isinstance(value, str):
            raise bad_request(f"'{kind}' is required and must be a string (a regular expression)")
        patterns.append(value)
    existed = vhost in ctx.broker.users.permissions_for(name)
    ctx.broker.users.set_permissions(name, vhost, *patterns)
    return Reply(204 if existed else 201)


@table.delete(
    "/api/permissions/{vhost}/{user}", "Clear a user's permissions in a vhost", level=ADMIN
)
async def delete_permission(ctx: Ctx) -> Reply:
    vhost = ctx.access.vhost(ctx.params["vhost"]).name
    ctx.broker.users.clear_permissions(_user_name(ctx), vhost)
    return Reply(204)
