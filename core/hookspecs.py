"""Every extension point of herald, in one place.

A plugin is a module (or any object) with functions named like the hooks below and marked
with `@hookimpl` (`from herald.core import hookimpl`), registered through the `herald`
entry-point group; herald's own protocols and stores register the same way. The kernel calls
hooks only through `herald.core.plugins.Plugins`, never through pluggy directly.

Rules for every hook (STYLE.md item 15):
- hooks are synchronous and must not block; for I/O, return an async callable (a
  `ProtocolSpec.serve`, a `Service.run`) that the kernel runs in its own nursery;
- a hook returning a list may return an empty list; the kernel concatenates every plugin's list;
- for a *firstresult* hook the first non-None result wins; plugins registered later are
  asked first (third-party entry points before built-ins), `@hookimpl(tryfirst=True)` /
  `trylast=True` adjust that;
- a wrapper is `@hookimpl(wrapper=True)` around `result = yield` (not `hookwrapper=True`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from herald.core.auth import User
    from herald.core.broker import Broker
    from herald.core.config import Config
    from herald.core.message import Message, MessageCodec
    from herald.core.plugin_types import (
        CliCommand,
        ConfigSection,
        ManagementRoute,
        NodeRunner,
        PluginInfo,
        ProtocolSpec,
        QueueType,
        Service,
        StorageBackend,
    )
    from herald.core.plugins import Plugins

PROJECT = "herald"
"""The pluggy project name, which is also the entry-point group."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- describing a plugin ------------------------------------------------------------------------


@hookspec
def herald_plugin_info() -> PluginInfo:
    """Describe this plugin for `herald plugins`.

    Implement it once per plugin module. Without it the plugin is listed under its
    registration (entry-point) name with an empty description.

    .. versionadded:: 0.1
    """


@hookspec
def herald_config_sections() -> list[ConfigSection]:
    """Declare this plugin's sections of the TOML config file.

    :returns: one `ConfigSection(name, config_class)` per `[name]` table the plugin reads;
        `config_class` is a frozen attrs class with a default for every field. The loader
        structures the table into it and rejects unknown keys. Two plugins declaring the
        same section name is an error at start-up.

    .. versionadded:: 0.1
    """


@hookspec(historic=True)
def herald_configure(config: Config) -> None:
    """Called once, after the whole config is loaded and validated, before anything starts.

    Historic: a plugin registered later is called at registration with the same config.

    :param config: the broker's loaded config, including each plugin's structured section.
    :raises herald.core.errors.ConfigError: if the combination of settings is unusable;
        the message must name the key.

    .. versionadded:: 0.1
    """


# -- what a plugin provides ---------------------------------------------------------------------


@hookspec
def herald_protocols() -> list[ProtocolSpec]:
    """Declare the wire protocols this plugin serves.

    :returns: `ProtocolSpec`s. The kernel starts the enabled ones with
        `await nursery.start(spec.serve, broker, config_section)`; `serve` must call
        `task_status.started(list_of_Listener)` once bound and serve until cancelled.
        A failure in one connection must close only that connection.

    .. versionadded:: 0.1
    """


@hookspec
def herald_storage_backends() -> list[StorageBackend]:
    """Declare storage backends (the `[storage] backend = "name"` choices).

    :returns: `StorageBackend`s whose `factory(config_section_or_None, data_dir)` returns an
        unopened `herald.core.store.Store`. Names must be unique across plugins.

    .. versionadded:: 0.1
    """


@hookspec
def herald_queue_types() -> list[QueueType]:
    """Declare queue types: what a queue declared with `x-queue-type = name` is made by.

    :returns: `QueueType(name, description, factory, refused_arguments)`s. When a queue of
        that type is declared (or recovered at start), its virtual host calls
        `factory(owner, services, declaration)` (`herald.core.queue_services`: the virtual
        host as `QueueOwner`, the broker's shared `QueueServices`, the parsed
        `QueueDeclaration`); the factory returns a `herald.core.queue.Queue`. A declaration
        naming a type nobody declared, or an argument in the type's `refused_arguments`, is
        refused with 406 PRECONDITION_FAILED. Names must be unique across plugins. Read once,
        when the broker is built.

    herald's own `classic` type (the default) and `quorum` (accepted, served with classic
    semantics on one node) are declared this way, by the kernel's built-in plugin
    `herald.core.queue_plugin`.

    .. versionadded:: 0.1
    """


@hookspec
def herald_message_codecs() -> list[MessageCodec]:
    """Declare message codecs: how this plugin's protocol's stored bytes map to neutral
    `Content` and back (`herald.core.message.MessageCodec`), used to convert a message for a
    consumer of another protocol.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def herald_convert_message(message: Message, target_protocol: str) -> bytes | None:
    """Convert `message` straight to `target_protocol`'s bytes, bypassing the codecs.

    firstresult: stops at the first non-None result. Return None to let the next plugin, and
    finally the two protocols' message codecs, do it. The result is cached on the message.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def herald_authenticate(username: str, password: str, peer_host: str) -> User | None:
    """Check a client's credentials (AMQP PLAIN, MQTT CONNECT, STOMP login/passcode).

    firstresult: stops at the first non-None result.

    :returns: the authenticated `User`, or None if this backend does not know `username`
        (the next backend, and finally herald's own user registry, decide).
    :raises herald.core.errors.AccessRefused: to refuse the login outright.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def herald_authorize(
    user: User, vhost: str, permission: str, resource_kind: str, resource_name: str
) -> bool | None:
    """Decide whether `user` may use a resource (RabbitMQ's permission model).

    firstresult: stops at the first non-None result.

    :param permission: "configure", "write" or "read".
    :param resource_kind: "exchange" or "queue".
    :returns: True to allow, False to refuse, None for no opinion (herald's own permissions
        decide).

    .. versionadded:: 0.1
    """


@hookspec
def herald_management_routes() -> list[ManagementRoute]:
    """Declare HTTP routes for the management plugin to mount.

    :returns: `ManagementRoute(method, path, handler, description)`s. `path` starts with
        "/api/" and may hold `{name}` parameters (percent-decoded before the call). The
        management plugin calls `handler(broker, request)` on the broker's Trio thread, where
        `request` has `method`, `path_params`, `query`, `user` and `body` (parsed JSON or
        None); the handler may be async, returns JSON-able data (None answers 204) and raises
        a `herald.core.errors.KernelError` to fail (NotFound answers 404). GET routes need the
        `monitoring` or `administrator` tag, other methods `administrator`. See
        docs/management.md.

    .. versionadded:: 0.1
    """


@hookspec
def herald_cli_commands() -> list[CliCommand]:
    """Declare subcommands of the `herald` command (the management plugin's `herald admin`).

    :returns: `CliCommand(name, help, load)`s. `herald --help` lists each `name` with its
        one-line `help`; `load()` returns the click command or group and is called only when
        the subcommand runs or shows its help, so import its module there, not at the top of
        the plugin. Names must be unique across plugins and must not be one of herald's own
        commands (`run`, `plugins`, `config`).

    .. versionadded:: 0.1
    """


# -- lifecycle ----------------------------------------------------------------------------------


@hookspec(firstresult=True)
def herald_node_runner(config: Config, plugins: Plugins) -> NodeRunner | None:
    """Run this node as something other than a bare broker (a cluster node: CLUSTER.md §3.5).

    Asked once by `herald run` and by `herald.core.embedded()`, after the config is loaded
    and before any broker is built. The runner owns the node's life: the broker is something
    it builds (`Broker(config, plugins)`, which calls `herald_configure`) and starts, and may
    stop and build again (a node that changes roles); see `NodeRunner` for what its `run` and
    `stop` must do. The process's signals, its `listening:` and `herald started` lines, and
    `embedded()`'s yielded broker are the same either way.

    firstresult: stops at the first non-None result.

    :param config: the loaded config, each plugin's section structured; `herald_configure`
        has not been called yet (the broker the runner builds calls it).
    :param plugins: the loaded plugins, to build the broker with.
    :returns: a `herald.core.plugin_types.NodeRunner`, or None when this plugin does not run
        this node (e.g. its section is not enabled): the next plugin is asked and, when none
        answers, a bare `Broker` runs, at no cost beyond this call.

    .. versionadded:: 0.1
    """


@hookspec
def herald_services(broker: Broker) -> list[Service]:
    """Declare background tasks to run while the broker runs.

    Called once the broker is open. The kernel runs each with
    `await nursery.start(service.run, broker)` in the broker's nursery and cancels them at
    shutdown; a service cleans up in `finally`.

    .. versionadded:: 0.1
    """


@hookspec
def herald_shutdown(broker: Broker) -> None:
    """Called once when the broker stops, after listeners and services are cancelled and
    before the store is closed. Must not block.

    .. versionadded:: 0.1
    """


# -- interceptors (the hot path) ----------------------------------------------------------------
# The kernel calls these only when at least one plugin implements them: with none, the publish,
# deliver and ack paths pay nothing. They run on every message, so keep them cheap.


@hookspec
def herald_on_publish(vhost: str, message: Message) -> None:
    """A message was accepted for routing in `vhost`, before it reaches any queue.

    Treat `message` as read-only. Raising a `herald.core.errors.KernelError` (e.g.
    `AccessRefused`) refuses the publish; the publisher is told as for any kernel error.

    .. versionadded:: 0.1
    """


@hookspec
def herald_on_deliver(vhost: str, queue: str, message: Message) -> None:
    """`message` is being delivered from `queue` to a consumer. Read-only; must not raise.

    .. versionadded:: 0.1
    """


@hookspec
def herald_on_ack(vhost: str, queue: str, message: Message) -> None:
    """A consumer acknowledged `message`, which has left `queue`. Read-only; must not raise.

    .. versionadded:: 0.1
    """
