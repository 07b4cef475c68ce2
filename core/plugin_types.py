"""The values plugin hooks return (see `herald.core.hookspecs`).

Hooks hand the kernel descriptions, not running things: a protocol is a name plus an async
`serve` callable the kernel starts in its own nursery, a storage backend is a factory, a
service is an async callable. The kernel decides when and where each one runs, so no plugin
starts a task of its own (STYLE.md item 15). The types are frozen: a description, once
returned, is what the kernel relies on. `NodeRunner` is the one protocol among them: an object
whose `run` the kernel starts in its nursery, as it starts a `Service.run`.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from herald.core.errors import PluginError

if TYPE_CHECKING:
    import click
    import trio

    from herald.core.broker import Broker
    from herald.core.queue import Queue
    from herald.core.queue_services import QueueDeclaration, QueueOwner, QueueServices
    from herald.core.store import Store

QueueFactory = Callable[["QueueOwner", "QueueServices", "QueueDeclaration"], "Queue"]
"""`factory(owner, services, declaration)`: a new queue of one type (see `QueueType`)."""

TRANSPORTS = frozenset({"tcp", "tls", "ws", "wss", "http", "https"})
"""What a `Listener` may say it speaks beneath its protocol."""

_SECTION_NAME = re.compile(r"[A-Za-z0-9_-]+\Z")


@attrs.frozen
class PluginInfo:
    """What `herald plugins` shows for one plugin."""

    name: str
    description: str
    version: str = ""


def _check_config_class(instance: ConfigSection, attribute: attrs.Attribute, value: type) -> None:
    if not (isinstance(value, type) and attrs.has(value)):
        raise PluginError(
            f"config section {instance.name!r}: {value!r} is not an attrs class; "
            "declare it with @attrs.frozen"
        )
    missing = [f.name for f in attrs.fields(value) if f.default is attrs.NOTHING]
    if missing:
        raise PluginError(
            f"config section {instance.name!r}: {value.__name__} needs a default for "
            f"{', '.join(missing)} (a section left out of the config file uses the defaults)"
        )


def _check_section_name(instance: ConfigSection, attribute: attrs.Attribute, value: str) -> None:
    if not _SECTION_NAME.match(value):
        raise PluginError(
            f"config section name {value!r} must be a TOML bare key (letters, digits, _ and -)"
        )


@attrs.frozen
class ConfigSection:
    """A plugin's section of the TOML config file (`[name]`) and the class it structures into.

    `config_class` is a frozen attrs class with a default for every field, so a config file
    without the section still yields a complete config.
    """

    name: str = attrs.field(validator=_check_section_name)
    config_class: type = attrs.field(validator=_check_config_class)


@attrs.frozen
class Listener:
    """One address a protocol listens on, as bound (the real port, never 0 once started)."""

    protocol: str
    transport: str = attrs.field(validator=attrs.validators.in_(TRANSPORTS))
    host: str
    port: int = attrs.field(validator=[attrs.validators.ge(0), attrs.validators.le(65535)])


@attrs.frozen
class ProtocolSpec:
    """A protocol a plugin serves.

    `serve(broker, config, *, task_status)` is run by the kernel as
    `await nursery.start(spec.serve, broker, config)`: it binds its listeners, calls
    `task_status.started(list[Listener])`, then serves until cancelled. `config` is the
    structured config section named like the protocol (None if the plugin declares none).

    `sniff(prefix)` (optional) recognises the protocol from a connection's first bytes, for a
    port shared by several protocols: True = this protocol, False = not this one, None = need
    more bytes. It never needs more than `sniff_bytes` bytes.
    """

    name: str
    description: str
    serve: Callable[..., Awaitable[None]]
    sniff: Callable[[bytes], bool | None] | None = None
    sniff_bytes: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    def __attrs_post_init__(self) -> None:
        if self.sniff is not None and self.sniff_bytes == 0:
            raise PluginError(f"protocol {self.name!r} has a sniff function but sniff_bytes=0")


@attrs.frozen
class StorageBackend:
    """A store implementation: `factory(config_or_None, data_dir)` returns an unopened Store."""

    name: str
    description: str
    factory: Callable[[Any, pathlib.Path], Store]


def _argument_names(value: Any) -> frozenset[str]:
    return frozenset((value,) if isinstance(value, str) else value)


@attrs.frozen
class QueueType:
    """A kind of queue, chosen by a declaration's `x-queue-type` argument.

    `factory(owner, services, declaration)` makes the queue: `owner` is the virtual host
    (`herald.core.queue_services.QueueOwner`), `services` the broker's `QueueServices`,
    `declaration` a `QueueDeclaration` whose arguments are already parsed and checked. It
    returns a `herald.core.queue.Queue` (the class itself is the classic type's factory; a
    type of its own subclasses it). `refused_arguments` are `x-` arguments this type does not
    support: declaring one answers 406 PRECONDITION_FAILED naming it, as for a bad value.
    """

    name: str
    description: str
    factory: QueueFactory
    refused_arguments: frozenset[str] = attrs.field(default=frozenset(), converter=_argument_names)
    available: Callable[[QueueServices], bool] | None = None
    """Whether this broker can make the type (None: always). A type only some brokers can
    make (the cluster's `shared`, on a cluster master) says so here, so a plugin choosing a
    type for its own queues (MQTT shared subscriptions) can ask first."""


@attrs.frozen
class ManagementRoute:
    """An HTTP route the management plugin mounts (e.g. "GET", "/api/echo/stats")."""

    method: str
    path: str
    handler: Callable[..., Any]
    description: str


@attrs.frozen
class Service:
    """A background task: the kernel runs `await nursery.start(service.run, broker)`.

    `run(broker, *, task_status)` calls `task_status.started()` once it is ready, then runs
    until the broker's nursery is cancelled.
    """

    name: str
    run: Callable[..., Awaitable[None]]


@runtime_checkable
class NodeRunner(Protocol):
    """What runs a node when a plugin takes its life over (hook `herald_node_runner`).

    `herald run` and `herald.core.embedded()` run it as `broker = await
    nursery.start(runner.run)`, in place of a bare `Broker` (a `Broker` is the trivial
    runner: its `run` reports itself and returns when it has stopped).

    - `run(*, task_status)` starts the node; once the node's `Broker` is running with its
      listeners bound it calls `task_status.started(broker)`, or `started(None)` once it runs
      without one (a cluster slave serves no client); it returns when the node has
      stopped. It returns too when that broker stops (`broker.stop()`, e.g. by an
      embedder), and it cleans up when cancelled (in shielded `finally` blocks).
    - `stop()` asks the node to stop gracefully (what SIGINT / SIGTERM do); it is
      idempotent, never blocks, and may come before `run` has reported the broker.
    """

    async def run(self, *, task_status: trio.TaskStatus[Broker | None] = ...) -> None: ...

    def stop(self) -> None: ...


@attrs.frozen
class CliCommand:
    """A `herald <name> ...` subcommand a plugin adds to the command line.

    `load()` returns the click command or group, and is called only when the subcommand runs
    or its help is shown, so a plugin's command-line dependencies are never imported by a
    broker (or by `herald run`). `help` is the one line `herald --help` lists it with.
    """

    name: str
    help: str
    load: Callable[[], click.Command]
