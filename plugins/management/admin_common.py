"""What every `herald admin` command shares: where to talk (the group's options), the
client for it, path segments, KEY=VALUE options, and the error every failure becomes.

httpx is imported only when a command runs (admin_client.py), not when `herald` starts.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import attrs
import click

from herald.core.errors import HeraldError

if TYPE_CHECKING:
    from herald.plugins.management.admin_client import AdminClient


class AdminError(HeraldError):
    """The API refused a request, or could not be reached. The `herald` command prints it as
    one "herald: error: ..." line and exits 2."""


@attrs.frozen
class Target:
    """Where and as whom to talk, from the group's options."""

    url: str
    user: str
    password: str
    verify: str | bool


def client(ctx: click.Context) -> AdminClient:
    """A client for the group's target, closed when the command ends."""
    from herald.plugins.management.admin_client import AdminClient

    target = ctx.find_object(Target)
    assert target is not None
    http = AdminClient(target.url, target.user, target.password, verify=target.verify)
    ctx.call_on_close(http.close)
    return http


def seg(name: str) -> str:
    """One URL path segment: vhost "/" is %2F, as the API expects."""
    return quote(name, safe="")


def pairs(values: tuple[str, ...], what: str) -> dict[str, Any]:
    """KEY=VALUE options; a value that parses as JSON (10, true, "x") is taken as such."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out


json_option = click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
vhost_option = click.option("--vhost", default="/", show_default=True, help="Virtual host.")
