"""Loading plugins and calling their hooks.

`get_plugin_manager()` builds a `Plugins`: herald's hookspecs, the kernel's own plugins
(`DEFAULT_PLUGINS`: the queue types), the built-in plugins it is given, then every module of
the `herald` entry-point group (built-in protocols and stores are entry points too). Nothing
happens at import time, so tests and embedders build as many independent managers as they like.

The kernel calls hooks only through `Plugins`' typed methods, never `pm.hook.x` (tox's
`Plugin` facade): the hook names, the flattening of list results and the checks on what
plugins return live here and nowhere else.

An entry point whose import fails does not stop herald: it is recorded in `Plugins.broken`
and only an attempt to use it (`require`) fails. A plugin that implements a hook that does not
exist (a typo) fails at once, naming the plugin and the hook.

Environment: HERALD_DISABLE_PLUGIN_AUTOLOAD=1 skips entry points, HERALD_BLOCKED_PLUGINS=a,b
blocks plugins by name, HERALD_TRACE_PLUGINS=1 logs every hook call at DEBUG on the
"herald.plugins" logger.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import logging
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from herald.core import hookspecs
from herald.core.errors import PluginError
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
from herald.core.version import herald_version

if TYPE_CHECKING:
    from herald.core.auth import User
    from herald.core.broker import Broker
    from herald.core.config import Config
    from herald.core.message import Message, MessageCodec

logger = logging.getLogger("herald.plugins")

ENV_DISABLE_AUTOLOAD = "HERALD_DISABLE_PLUGIN_AUTOLOAD"
ENV_BLOCKED = "HERALD_BLOCKED_PLUGINS"
ENV_TRACE = "HERALD_TRACE_PLUGINS"

DEFAULT_PLUGINS: Mapping[str, str] = MappingProxyType({"queue_types": "herald.core.queue_plugin"})
"""The kernel's own plugins, name -> module: registered by every manager, entry points or not,
before anything else (pytest's `default_plugins`). They use the hooks any plugin uses, and a
name in `blocked` or HERALD_BLOCKED_PLUGINS keeps one out like any other."""

HOOK_NAMES = tuple(name for name in vars(hookspecs) if name.startswith("herald_"))

PublishInterceptor = Callable[[str, "Message"], None]
"""`on_publish(vhost, message)`."""
QueueInterceptor = Callable[[str, str, "Message"], None]
"""`on_deliver(vhost, queue, message)` and `on_ack(vhost, queue, message)`."""
Converter = Callable[["Message", str], "bytes | None"]
"""`convert_message(message, target_protocol)`."""


def get_plugin_manager(
    *,
    load_entrypoints: bool = True,
    builtins: Iterable[object] = (),
    blocked: Iterable[str] = (),
) -> Plugins:
    """Build the plugin set: hookspecs, `DEFAULT_PLUGINS`, `builtins`, the `herald` entry points.

    `builtins` are registered under their canonical name (a module's `__name__`); entry points
    under their entry-point name. Names in `blocked` or HERALD_BLOCKED_PLUGINS are not imported.

    :raises PluginError: a plugin implements an unknown hook or a hook with wrong arguments.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in [*blocked, *_env_list(ENV_BLOCKED)]:
        pm.set_blocked(name)
    if _env_flag(ENV_TRACE):
        pm.add_hookcall_monitoring(_trace_before, _trace_after)
    plugins = Plugins(pm)
    for name, module in DEFAULT_PLUGINS.items():
        if not pm.is_blocked(name):
            plugins._add(importlib.import_module(module), name)
            plugins._versions[name] = herald_version()
    for plugin in builtins:
        plugins._add(plugin, None)
    if load_entrypoints and not _env_flag(ENV_DISABLE_AUTOLOAD):
        plugins._load_entrypoints()
    plugins._check_pending()
    plugins._refresh()
    return plugins


class Plugins:
    """The loaded plugins, with one typed method per hook. Build it with `get_plugin_manager`.

    `on_publish`, `on_deliver`, `on_ack` and `converter` are None when no plugin implements
    the hook, so the kernel's hot path can skip them with one `is not None` test.
    """

    on_publish: PublishInterceptor | None
    on_deliver: QueueInterceptor | None
    on_ack: QueueInterceptor | None
    converter: Converter | None

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._pm = pm
        self._hook = pm.hook
        self._broken: dict[str, str] = {}
        self._versions: dict[str, str] = {}
        self._refresh()

    # -- the plugin set -------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Registered plugin names, in registration order."""
        return [name for name, plugin in self._pm.list_name_plugin() if plugin is not None]

    @property
    def broken(self) -> Mapping[str, str]:
        """Entry points that failed to import: name -> one-line reason ("ImportError: ...")."""
        return MappingProxyType(self._broken)

    @property
    def blocked(self) -> frozenset[str]:
        """Plugin names blocked from registering."""
        return frozenset(name for name, plugin in self._pm.list_name_plugin() if plugin is None)

    def register(self, plugin: object, name: str | None = None) -> None:
        """Add a plugin after start-up (tests, embedding). Ignored if `name` is blocked.

        :raises PluginError: the name is taken, or the plugin implements a hook wrongly.
        """
        registered = self._add(plugin, name)
        if registered is None:
            return
        try:
            self._check_pending()
        except PluginError:
            self._pm.unregister(name=registered)
            raise
        self._refresh()

    def require(self, names: Collection[str]) -> None:
        """Check that every name is a registered plugin or protocol (`herald run --plugins`).

        :raises PluginError: one line, for the first name that is broken, blocked or unknown.
        """
        known = {*self.names(), *(spec.name for spec in self.protocols())}
        for name in names:
            if name in self._broken:
                raise PluginError(f"plugin {name!r} cannot be loaded: {self._broken[name]}")
            if name in known:
                continue
            if self._pm.is_blocked(name):
                raise PluginError(f"plugin {name!r} is blocked ({ENV_BLOCKED})")
            installed = ", ".join(sorted(known)) or "none"
            raise PluginError(f"unknown plugin {name!r}; installed: {installed}")

    def info(self) -> list[PluginInfo]:
        """One `PluginInfo` per registered plugin, in registration order."""
        impls = {impl.plugin_name: impl for impl in self._hook.herald_plugin_info.get_hookimpls()}
        infos = []
        for name in self.names():
            impl = impls.get(name)
            info = impl.function() if impl is not None else PluginInfo(name, "")
            if not isinstance(info, PluginInfo):
                raise PluginError(f"plugin {name!r}: herald_plugin_info returned {info!r}")
            if not info.version and name in self._versions:
                info = attrs.evolve(info, version=self._versions[name])
            infos.append(info)
        return infos

    # -- declarations ---------------------------------------------------------------------------

    def config_sections(self) -> dict[str, type]:
        """Config section name -> its frozen attrs config class."""
        sections = self._unique("herald_config_sections", ConfigSection, "config section")
        return {section.name: section.config_class for section in sections}

    def protocols(self, enabled: Collection[str] | None = None) -> list[ProtocolSpec]:
        """The protocol specs whose name is in `enabled` (all of them when None)."""
        specs = self._unique("herald_protocols", ProtocolSpec, "protocol")
        return [spec for spec in specs if enabled is None or spec.name in enabled]

    def storage_backends(self) -> dict[str, StorageBackend]:
        """Storage backend name -> backend."""
        backends = self._unique("herald_storage_backends", StorageBackend, "storage backend")
        return {backend.name: backend for backend in backends}

    def queue_types(self) -> list[QueueType]:
        """Every plugin's queue types (`x-queue-type` names, unique across plugins)."""
        return self._unique("herald_queue_types", QueueType, "queue type")

    def cli_commands(self) -> list[CliCommand]:
        """Every plugin's `herald` subcommands (names unique across plugins)."""
        return self._unique("herald_cli_commands", CliCommand, "command")

    def message_codecs(self) -> list[MessageCodec]:
        """Every plugin's message codecs, at most one per protocol."""
        codecs = self._collect("herald_message_codecs", None)
        seen: set[str] = set()
        for codec in codecs:
            protocol = getattr(codec, "protocol", None)
            if not isinstance(protocol, str):
                raise PluginError(f"herald_message_codecs returned {codec!r}, not a MessageCodec")
            if protocol in seen:
                raise PluginError(f"two plugins provide a message codec for {protocol!r}")
            seen.add(protocol)
        return codecs

    def management_routes(self) -> list[ManagementRoute]:
        return self._collect("herald_management_routes", ManagementRoute)

    # -- calls ----------------------------------------------------------------------------------

    def convert_message(self, message: Message, target: str) -> bytes | None:
        """The first plugin conversion of `message` for protocol `target`, or None."""
        return self._hook.herald_convert_message(message=message, target_protocol=target)

    def authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        """The user a plugin authenticates, or None to use herald's own user registry.

        :raises herald.core.errors.AccessRefused: a plugin refused the login.
        """
        return self._hook.herald_authenticate(
            username=username, password=password, peer_host=peer_host
        )

    def authorize(
        self, user: User, vhost: str, permission: str, resource_kind: str, resource_name: str
    ) -> bool | None:
        """A plugin's decision on a permission check, or None if no plugin has an opinion."""
        return self._hook.herald_authorize(
            user=user,
            vhost=vhost,
            permission=permission,
            resource_kind=resource_kind,
            resource_name=resource_name,
        )

    def configure(self, config: Config) -> None:
        """Hand the loaded config to every plugin (and to any registered later).

        :raises herald.core.errors.ConfigError: a plugin rejected the config.
        """
        self._hook.herald_configure.call_historic(kwargs={"config": config})

    def node_runner(self, config: Config) -> NodeRunner | None:
        """The runner a plugin runs this node with (`herald_node_runner`), or None: a bare
        `Broker(config, self)` runs it.

        :raises PluginError: a plugin returned something that is not a `NodeRunner`.
        """
        runner = self._hook.herald_node_runner(config=config, plugins=self)
        if runner is not None and not isinstance(runner, NodeRunner):
            raise PluginError(
                f"herald_node_runner returned {runner!r}, not a NodeRunner (run and stop)"
            )
        return runner

    def services(self, broker: Broker) -> list[Service]:
        return self._collect("herald_services", Service, broker=broker)

    def shutdown(self, broker: Broker) -> None:
        self._hook.herald_shutdown(broker=broker)

    # -- internals ------------------------------------------------------------------------------

    def _add(self, plugin: object, name: str | None) -> str | None:
        name = name or self._pm.get_canonical_name(plugin)
        if self._pm.is_blocked(name):
            return None
        self._check_marked(plugin, name)
        try:
            return self._pm.register(plugin, name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {name!r}: {_one_line(exc)}") from exc
        except ValueError:
            raise PluginError(f"a plugin named {name!r} is already registered") from None

    def _load_entrypoints(self) -> None:
        for ep in importlib.metadata.entry_points(group=hookspecs.PROJECT):
            name = ep.name
            if self._pm.has_plugin(name) or self._pm.is_blocked(name) or name in self._broken:
                continue
            try:
                plugin = ep.load()
            except Exception as exc:
                self._broken[name] = _one_line(exc)
                logger.warning("plugin %r cannot be loaded: %s", name, self._broken[name])
                continue
            if self._pm.is_registered(plugin):
                continue  # also given as a built-in
            self._add(plugin, name)
            if ep.dist is not None:
                self._versions[name] = ep.dist.version

    def _check_marked(self, plugin: object, name: str) -> None:
        """A `herald_*` function without @hookimpl would be silently ignored: refuse it."""
        for attr in dir(plugin):
            if not attr.startswith("herald_") or not callable(getattr(plugin, attr, None)):
                continue
            if self._pm.parse_hookimpl_opts(plugin, attr) is None:
                raise PluginError(
                    f"plugin {name!r}: {attr} is not marked with @hookimpl "
                    "(from herald.core import hookimpl)"
                )

    def _check_pending(self) -> None:
        """Refuse implementations of hooks that do not exist (typos), naming plugin and hook."""
        for name, plugin in self._pm.list_name_plugin():
            if plugin is None:
                continue
            for caller in self._pm.get_hookcallers(plugin) or ():
                if caller.has_spec():
                    continue
                if any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls()):
                    close = difflib.get_close_matches(caller.name, HOOK_NAMES, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise PluginError(
                        f"plugin {name!r} implements unknown hook {caller.name!r}{hint}"
                    )
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(_one_line(exc)) from exc

    def _refresh(self) -> None:
        """Recompute the hot-path callables: None where no plugin implements the hook."""
        hook = self._hook
        publish, deliver, ack = hook.herald_on_publish, hook.herald_on_deliver, hook.herald_on_ack
        self.on_publish = _publish_interceptor(publish) if publish.get_hookimpls() else None
        self.on_deliver = _queue_interceptor(deliver) if deliver.get_hookimpls() else None
        self.on_ack = _queue_interceptor(ack) if ack.get_hookimpls() else None
        convert = hook.herald_convert_message.get_hookimpls()
        self.converter = self.convert_message if convert else None

    def _collect(self, hook_name: str, kind: type | None, **kwargs: Any) -> list[Any]:
        """Call a list-returning hook and concatenate the lists, in registration order."""
        items: list[Any] = []
        for result in reversed(getattr(self._hook, hook_name)(**kwargs)):
            if not isinstance(result, list | tuple):
                raise PluginError(f"{hook_name} must return a list, not {result!r}")
            for item in result:
                if kind is not None and not isinstance(item, kind):
                    raise PluginError(f"{hook_name} returned {item!r}, not a {kind.__name__}")
                items.append(item)
        return items

    def _unique(self, hook_name: str, kind: type, what: str) -> list[Any]:
        """`_collect` for declarations whose `name` must be unique across plugins."""
        items = self._collect(hook_name, kind)
        names = [item.name for item in items]
        for name in names:
            if names.count(name) > 1:
                owners = ", ".join(repr(o) for o in self._declared_by(hook_name, name))
                raise PluginError(f"{what} {name!r} is declared more than once, by {owners}")
        return items

    def _declared_by(self, hook_name: str, name: str) -> list[str]:
        """Which plugins declare `name` through a no-argument hook (for error messages)."""
        return sorted(
            impl.plugin_name
            for impl in getattr(self._hook, hook_name).get_hookimpls()
            if any(getattr(item, "name", None) == name for item in impl.function() or ())
        )


def _publish_interceptor(caller: pluggy.HookCaller) -> PublishInterceptor:
    def on_publish(vhost: str, message: Message) -> None:
        caller(vhost=vhost, message=message)

    return on_publish


def _queue_interceptor(caller: pluggy.HookCaller) -> QueueInterceptor:
    def intercept(vhost: str, queue: str, message: Message) -> None:
        caller(vhost=vhost, queue=queue, message=message)

    return intercept


def _one_line(exc: BaseException) -> str:
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _env_flag(var: str) -> bool:
    return os.environ.get(var, "").strip().lower() not in ("", "0", "false", "no", "off")


def _env_list(var: str) -> list[str]:
    return [part.strip() for part in os.environ.get(var, "").split(",") if part.strip()]


def _trace_before(
    hook_name: str, hook_impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, Any]
) -> None:
    plugins = [impl.plugin_name for impl in hook_impls]
    logger.debug("hook %s(%s) -> plugins %s", hook_name, ", ".join(kwargs), plugins)


def _trace_after(
    outcome: pluggy.Result[Any],
    hook_name: str,
    hook_impls: Sequence[pluggy.HookImpl],
    kwargs: Mapping[str, Any],
) -> None:
    if outcome.exception is not None:
        logger.debug("hook %s raised %r", hook_name, outcome.exception)
    else:
        logger.debug("hook %s returned %r", hook_name, outcome.get_result())
