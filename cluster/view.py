"""`herald cluster status`: the cluster as the name server sees it (its `/v1/cluster`).

`--nameserver HOST:PORT` (repeatable: the first that answers is used), or `--dir DIR` of a
`herald cluster dev` (the name server in `DIR/cluster.json`); neither: 127.0.0.1:9876.
`--json` prints `/v1/cluster` as received, with `nameserver` added; otherwise a table of
groups, nodes, roles, epochs, how long ago each node last registered, its commit-log offset
as of that registration (`-`: the node sent none) and its client addresses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import httpx

from herald.cluster.nameserver.client import NameServerUnavailable, base_url
from herald.core.errors import HeraldError

DEFAULT_NAMESERVER = "127.0.0.1:9876"


def nameservers_of(dir_: Path) -> list[str]:
    """The name server a `herald cluster dev` in `dir_` started."""
    path = dir_ / "cluster.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HeraldError(f"cannot read {path}: {exc}") from None
    found = info.get("nameserver") if isinstance(info, dict) else None
    if not isinstance(found, str) or not found:
        raise HeraldError(f"{path} names no name server")
    return [found]


def fetch_cluster(nameservers: Sequence[str], timeout: float = 3.0) -> dict[str, Any]:
    """`/v1/cluster` of the first name server that answers, plus `nameserver`: which."""
    problems = []
    for nameserver in nameservers:
        try:
            response = httpx.get(f"{base_url(nameserver)}/v1/cluster", timeout=timeout)
            response.raise_for_status()
            view = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            problems.append(f"{nameserver}: {exc}")
            continue
        if isinstance(view, dict):
            return {"nameserver": nameserver, **view}
        problems.append(f"{nameserver}: not a cluster view")
    raise NameServerUnavailable("no name server answered: " + "; ".join(problems))


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def status_table(view: Mapping[str, Any]) -> str:
    head = ["GROUP", "NODE", "ROLE", "EPOCH", "LAST SEEN", "OFFSET"]
    head += ["AMQP", "MQTT", "STOMP", "MANAGEMENT"]
    rows = []
    for group in view.get("groups", []):
        for node in group.get("nodes", []):
            addrs = node.get("addrs", {})
            rows.append(
                [
                    str(group.get("group")),
                    str(node.get("node")),
                    str(node.get("role")),
                    str(node.get("epoch")),
                    f"{node.get('last_seen_ms_ago', 0) / 1000:.1f} s ago",
                    _text(node.get("offset")),  # as of that registration
                    *(addrs.get(k, "-") for k in ("amqp", "mqtt", "stomp", "management")),
                ]
            )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"name server {view.get('nameserver')}: {len(rows)} node(s)"]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *rows]
    ]
    return "\n".join(lines)


@click.command(name="status")
@click.option(
    "--nameserver",
    "nameservers",
    multiple=True,
    metavar="HOST:PORT",
    help=f"A name server to ask (repeatable; default {DEFAULT_NAMESERVER}).",
)
@click.option(
    "--dir",
    "dir_",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The --dir of a `herald cluster dev`: ask the name server in its cluster.json.",
)
@click.option("--json", "as_json", is_flag=True, help="Print /v1/cluster as JSON.")
@click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), default=3.0, show_default=True
)
def status(nameservers: tuple[str, ...], dir_: Path | None, as_json: bool, timeout: float) -> None:
    """Groups, nodes, roles, epochs, last registration and offsets, from a name server."""
    if nameservers and dir_ is not None:
        raise click.UsageError("give --nameserver or --dir, not both")
    asked = list(nameservers) or (nameservers_of(dir_) if dir_ else [DEFAULT_NAMESERVER])
    view = fetch_cluster(asked, timeout)
    click.echo(json.dumps(view, indent=2) if as_json else status_table(view))
