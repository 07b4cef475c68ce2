"""`herald nameserver` and `herald cluster ...`, added by the cluster plugin's
`herald_cli_commands` (core/cli.py imports nothing of the cluster).

- `herald nameserver [--host 127.0.0.1] [--port 9876] [--scan-s 10] [--expiry-s 120]` serves
  a name server (`run_nameserver`) until SIGINT or SIGTERM, then stops cleanly (exit 0).
- `herald cluster resolve QUEUE [--vhost /] [--protocol amqp] --nameserver HOST:PORT ...`
  prints the URL of the node serving QUEUE, asking each name server in turn.
- `herald cluster promote NODE [--force] (--dir D | --etcd URL --name CLUSTER) [--group G]`
  names NODE its group's master in etcd (`GroupController.promote`) and prints the new state.

`cluster` is a click group: `dev` (options here, the work in dev.py), `status` (view.py,
added with `cluster.add_command`, as admin_cli.py adds the commands of admin_messages.py and
admin_users.py to `herald admin`), `resolve` and `promote`.

A problem a user can fix (no route, no name server answered, etcd not answering) ends as one
line "herald: error: ..." and exit code 2 (the `herald` group does that for every
`HeraldError`); a port already in use ends as "herald: error: cannot start: ..." and exit
code 1, and so does a promotion etcd refused (not in the sync set, a live master without
`--force`) or whose outcome is unknown.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import click
import trio

from herald.cluster.controller import ControllerError, GroupController, GroupState
from herald.cluster.etcd import EtcdClient, EtcdError, EtcdUnavailable
from herald.cluster.nameserver.registry import EXPIRY_S, SCAN_S
from herald.cluster.view import ClusterKeys, GroupKeys, etcd_of, read_cluster_keys, status
from herald.core.errors import HeraldError
from herald.core.log import configure_logging, reset_logging

log = logging.getLogger("herald.cluster.cli")

_seconds = click.FloatRange(min=0, min_open=True)


@click.command(name="nameserver")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9876,
    show_default=True,
    help="Port to bind (0: any free port; the log line says which).",
)
@click.option(
    "--scan-s",
    type=_seconds,
    default=SCAN_S,
    show_default=True,
    help="Seconds between scans for silent nodes.",
)
@click.option(
    "--expiry-s",
    type=_seconds,
    default=EXPIRY_S,
    show_default=True,
    help="A node silent this long is dropped.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@click.pass_context
def nameserver(
    ctx: click.Context, host: str, port: int, scan_s: float, expiry_s: float, log_level: str
) -> None:
    """Run a name server until SIGINT or SIGTERM.

    Nodes register with it (cluster.nameservers) and applications ask it where a queue is
    (herald cluster resolve, herald.cluster.resolve). It keeps everything in memory and never
    talks to other name servers: run two, and list both on every node.
    """
    ctx.call_on_close(reset_logging)
    configure_logging(log_level)
    try:
        trio.run(_serve_nameserver, host, port, scan_s, expiry_s)
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was in place
        ctx.exit(128 + signal.SIGINT)
    except (BaseExceptionGroup, OSError) as exc:  # a port in use comes inside nurseries
        group = exc if isinstance(exc, BaseExceptionGroup) else BaseExceptionGroup("", [exc])
        os_errors, rest = group.split(OSError)
        if rest is not None or os_errors is None:
            raise
        reasons = "; ".join(str(error) for error in _leaves(os_errors))
        click.echo(f"herald: error: cannot start: {reasons}", err=True)
        ctx.exit(1)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


async def _serve_nameserver(host: str, port: int, scan_s: float, expiry_s: float) -> None:
    from herald.cluster.nameserver.server import run_nameserver

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            serve = partial(run_nameserver, host, port, scan_s=scan_s, expiry_s=expiry_s)
            await nursery.start(serve)
            async for signum in signals:
                log.info("%s: stopping the name server", signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()
    log.info("name server stopped")


@click.group(name="cluster")
def cluster() -> None:
    """Work with a herald cluster."""


cluster.add_command(status)


@cluster.command(name="dev")
@click.option("--nodes", type=click.IntRange(1, 64), required=True, help="How many nodes.")
@click.option(
    "--groups",
    type=click.IntRange(1, 64),
    default=None,
    help="Spread the nodes over this many groups (default: 1, a master and its slaves); "
    "--groups N with --nodes N gives N masters without slaves.",
)
@click.option(
    "--replication",
    type=click.Choice(["sync", "async"]),
    default=None,
    help="cluster.replication of every node: sync confirms once the sync set has a record, "
    "async after the master's own flush (the default).",
)
@click.option(
    "--dir",
    "root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("cluster"),
    show_default=True,
    help="Configs, data dirs, logs and cluster.json go here.",
)
@click.option(
    "--etcd",
    default=None,
    metavar="URL",
    help="Use the etcd at URL (it must answer /health) instead of starting one.",
)
@click.option("--name", default="dev", show_default=True, help="cluster.name of every node.")
@click.option(
    "--lease-ttl-s",
    type=click.IntRange(2),
    default=10,
    show_default=True,
    help="cluster.lease_ttl_s.",
)
@click.option(
    "--register-interval-s",
    type=_seconds,
    default=None,
    help="cluster.register_interval_s (default: 30, or a quarter of the name server's expiry "
    "when that is shorter).",
)
@click.option(
    "--nameserver-scan-s",
    type=_seconds,
    default=10.0,
    show_default=True,
    help="The name server's scan period (short values are for tests).",
)
@click.option(
    "--nameserver-expiry-s",
    type=_seconds,
    default=120.0,
    show_default=True,
    help="The name server drops a node silent this long (short values are for tests).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
    help="Of the nodes and the name server (their logs are DIR/<name>.log).",
)
@click.option(
    "--start-timeout-s", type=_seconds, default=60.0, show_default=True, help="Hang guard."
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="A setting for every node's config file (repeatable), e.g. "
    "commitlog.segment_size=16777216; NODE:SECTION.KEY=VALUE sets it for that node alone.",
)
def dev(root: Path, **kwargs: Any) -> None:
    """Run etcd, a name server and N nodes on loopback until Ctrl-C or SIGTERM.

    Writes DIR/nX.toml, data dirs DIR/nX/, logs DIR/*.log and DIR/cluster.json (where etcd,
    the name server and each node's AMQP/MQTT/STOMP/management/cluster ports are), prints
    the same as a table, and on Ctrl-C or SIGTERM stops every process it started.
    """
    from herald.cluster.dev import DevOptions, group_names, node_setting, run_dev

    options = DevOptions(root=root, **kwargs)
    group_names(options.nodes, options.groups)  # refuse before anything starts
    for setting in options.settings:
        node_setting(setting, options.nodes)
    run_dev(options, lambda line: click.echo(line, err=True), click.echo)


@cluster.command()
@click.argument("queue")
@click.option("--vhost", default="/", show_default=True, help="The queue's virtual host.")
@click.option(
    "--protocol",
    default="amqp",
    show_default=True,
    help="amqp, mqtt, stomp, their TLS forms (amqps, mqtts, stomps), or management.",
)
@click.option(
    "--nameserver",
    "nameservers",
    multiple=True,
    required=True,
    metavar="HOST:PORT",
    help="A name server to ask (repeatable: asked in order until one knows the queue).",
)
@click.option("--timeout", type=_seconds, default=6.0, show_default=True, help="Per request.")
def resolve(
    queue: str, vhost: str, protocol: str, nameservers: tuple[str, ...], timeout: float
) -> None:
    """Print the URL of the node serving QUEUE, e.g. amqp://10.0.0.2:5672/%2F."""
    from herald.cluster.nameserver.client import resolve_sync

    click.echo(resolve_sync(nameservers, vhost, queue, protocol, timeout=timeout))


@attrs.frozen
class Promotion:
    """What `herald cluster promote` did: the group's state before (as read first; None:
    no state) and after."""

    cluster: str
    group: str
    before: GroupKeys
    after: GroupState

    def to_json(self) -> dict[str, Any]:
        before, claim = self.before.state, self.before.claim
        return {
            "cluster": self.cluster,
            "group": self.group,
            "changed": before is None or before.epoch != self.after.epoch,
            "epoch": self.after.epoch,
            "master": self.after.master,
            "sync_set": list(self.after.sync_set),
            "master_addr": self.after.master_addr,
            "before": None
            if before is None
            else {
                "epoch": before.epoch,
                "master": before.master,
                "sync_set": list(before.sync_set),
                "master_alive": claim is not None and claim.node == before.master,
            },
        }

    def text(self) -> str:
        after, before = self.after, self.to_json()["before"]
        where = f"group {self.group} of cluster {self.cluster}"
        if not self.to_json()["changed"]:
            return f"{after.master} is master of {where} already (epoch {after.epoch})"
        was = ""
        if before is not None:
            alive = "alive" if before["master_alive"] else "not alive"
            was = f" (was epoch {before['epoch']}, master {before['master']}, {alive})"
        return (
            f"promoted {after.master}: {where} is at epoch {after.epoch}, master "
            f"{after.master}, sync set {','.join(after.sync_set)}{was}\n"
            f"{after.master} claims the group at its next look (one more epoch); the other "
            "members rejoin the sync set once caught up"
        )


class PromoteRefused(HeraldError):
    """etcd refused the promotion, or its outcome is unknown (exit code 1)."""


def _group_of(found: ClusterKeys, node: str) -> str:
    """The group `node` belongs to: its node key's, else the one whose state names it, else
    the cluster's only group."""
    named = found.nodes.get(node, {}).get("group")
    if isinstance(named, str) and named:
        return named
    groups = found.groups
    naming = [
        name
        for name, keys in groups.items()
        if keys.state is not None and (node in keys.state.sync_set or node == keys.state.master)
    ]
    if len(naming) == 1:
        return naming[0]
    if len(groups) == 1:
        return next(iter(groups))
    if not groups:
        raise HeraldError(f"cluster {found.cluster!r} has no group in etcd")
    raise HeraldError(f"cannot tell which group {node} is in ({', '.join(groups)}): give --group")


async def promote_node(
    endpoints: Sequence[str],
    cluster: str,
    node: str,
    group: str | None,
    *,
    force: bool,
    timeout: float,
) -> Promotion:
    """`GroupController.promote` of `node` in its group of `cluster`.

    :raises PromoteRefused: refused (not in the sync set, a live master and no `force`, the
        group changed meanwhile), or the outcome is unknown (etcd lost the answer).
    :raises HeraldError: etcd did not answer before anything was asked of it.
    """
    connect = min(1.0, timeout)
    async with EtcdClient(endpoints, timeout=timeout, connect_timeout=connect) as etcd:
        try:
            found = await read_cluster_keys(etcd, cluster)
        except EtcdError as exc:
            raise HeraldError(f"etcd {', '.join(endpoints)}: {exc}") from None
        group = group or _group_of(found, node)
        controller = GroupController(etcd, cluster, group, "operator")
        try:
            after = await controller.promote(node, force=force)
        except ControllerError as exc:
            raise PromoteRefused(str(exc)) from None
        except EtcdUnavailable as exc:
            raise PromoteRefused(
                f"etcd {', '.join(endpoints)}: {exc}; whether {node} was promoted is unknown: "
                "look with herald cluster status"
            ) from None
        except EtcdError as exc:
            raise PromoteRefused(f"etcd refused the promotion: {exc}") from None
    return Promotion(cluster, group, found.groups.get(group, GroupKeys()), after)


@cluster.command()
@click.argument("node")
@click.option(
    "--force",
    is_flag=True,
    help="Take over from a master that is alive (NODE must be in the sync set all the same).",
)
@click.option(
    "--dir",
    "dir_",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The --dir of a `herald cluster dev`: the etcd and cluster name of its cluster.json.",
)
@click.option("--etcd", multiple=True, metavar="URL", help="An etcd endpoint (repeatable).")
@click.option("--name", default=None, metavar="CLUSTER", help="The cluster's name (etcd prefix).")
@click.option(
    "--group",
    default=None,
    help="NODE's group (default: its node key's, else the group whose sync set names it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the new state as JSON.")
@click.option("--timeout", type=_seconds, default=5.0, show_default=True, help="Per request.")
@click.pass_context
def promote(
    ctx: click.Context,
    node: str,
    force: bool,
    dir_: Path | None,
    etcd: tuple[str, ...],
    name: str | None,
    group: str | None,
    as_json: bool,
    timeout: float,
) -> None:
    """Make NODE its group's master (CLUSTER.md §3.4): an operator's failover or handover.

    One etcd transaction sets the group's state to epoch+1, master NODE, sync set [NODE] and
    removes the old master's claim; the old master demotes itself, NODE claims the group.
    Refused (exit code 1) for a node outside the sync set (it may miss confirmed messages)
    and, without --force, while the master is alive.
    """
    endpoints, cluster_name = list(etcd), name
    if dir_ is not None:
        dev_etcd, dev_name = etcd_of(dir_)
        endpoints, cluster_name = endpoints or dev_etcd, cluster_name or dev_name
    if not endpoints or not cluster_name:
        raise click.UsageError("give --dir DIR, or --etcd URL and --name CLUSTER")
    ctx.call_on_close(reset_logging)
    configure_logging("error")  # the controller's own warning would repeat what is printed
    try:
        done = trio.run(
            partial(
                promote_node, endpoints, cluster_name, node, group, force=force, timeout=timeout
            )
        )
    except PromoteRefused as exc:
        click.echo(f"herald: error: {exc}", err=True)
        ctx.exit(1)
    click.echo(json.dumps(done.to_json(), indent=2) if as_json else done.text())
