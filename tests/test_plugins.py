"""The plugin system: discovery through real entry points, the facade's hook semantics, errors.

tests/example_plugin and tests/broken_plugin hold real distributions (`*.dist-info` with
entry_points.txt): putting their directory on sys.path is all importlib.metadata needs.
Tests that must not depend on herald's own entry points use `load_entrypoints=False`; the
kernel's own plugins (`DEFAULT_PLUGINS`, the queue types) are registered either way.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import cast

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from herald.core import hookimpl
from herald.core.auth import User
from herald.core.broker import Broker
from herald.core.config import HeraldConfig
from herald.core.errors import AccessRefused, ConfigError, PluginError
from herald.core.message import EMPTY_PROPERTIES, Content, Message
from herald.core.plugin_types import (
    ConfigSection,
    Listener,
    ManagementRoute,
    PluginInfo,
    ProtocolSpec,
    Service,
    StorageBackend,
)
from herald.core.plugins import DEFAULT_PLUGINS, Plugins, get_plugin_manager
from herald.storage.memory import MemoryStore

HERE = Path(__file__).parent
EXAMPLE_DIR = HERE / "example_plugin"
BROKEN_DIR = HERE / "broken_plugin"
EXAMPLE_MODULE = "herald_example_echo"
KERNEL = list(DEFAULT_PLUGINS)  # registered by every manager, before anything else


def _load_example() -> ModuleType:
    """The example plugin as a module object, without touching sys.path or sys.modules."""
    spec = importlib.util.spec_from_file_location(
        "herald_example_echo_direct", EXAMPLE_DIR / EXAMPLE_MODULE / "__init__.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


echo = _load_example()


def _on_path(monkeypatch: pytest.MonkeyPatch, *dirs: Path) -> Iterator[None]:
    for directory in dirs:
        monkeypatch.syspath_prepend(str(directory))
    importlib.invalidate_caches()
    monkeypatch.delitem(sys.modules, EXAMPLE_MODULE, raising=False)
    yield
    sys.modules.pop(EXAMPLE_MODULE, None)


@pytest.fixture
def example_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield from _on_path(monkeypatch, EXAMPLE_DIR)


@pytest.fixture
def both_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield from _on_path(monkeypatch, EXAMPLE_DIR, BROKEN_DIR)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HERALD_DISABLE_PLUGIN_AUTOLOAD", "HERALD_BLOCKED_PLUGINS", "HERALD_TRACE_PLUGINS"):
        monkeypatch.delenv(var, raising=False)


def make(*named: tuple[str, object]) -> Plugins:
    plugins = get_plugin_manager(load_entrypoints=False)
    for name, plugin in named:
        plugins.register(plugin, name)
    return plugins


# -- discovery ----------------------------------------------------------------------------------


def test_example_plugin_is_discovered_through_its_entry_point(example_on_path: None) -> None:
    plugins = get_plugin_manager()

    assert "echo" in plugins.names()
    assert PluginInfo("echo", "Line echo protocol (example plugin)", "0.1") in plugins.info()
    section = plugins.config_sections()["echo"]
    assert section.__name__ == "EchoConfig"
    assert section() == section(host="127.0.0.1", port=0)
    assert [spec.name for spec in plugins.protocols(["echo"])] == ["echo"]
    assert "echo" not in plugins.broken
    plugins.require(["echo"])


def test_autoload_can_be_disabled(example_on_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_plugin_manager(load_entrypoints=False).names() == KERNEL
    monkeypatch.setenv("HERALD_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins = get_plugin_manager()
    assert plugins.names() == KERNEL
    assert EXAMPLE_MODULE not in sys.modules
    monkeypatch.setenv("HERALD_DISABLE_PLUGIN_AUTOLOAD", "0")
    assert "echo" in get_plugin_manager().names()


def test_blocked_plugins_are_not_imported(
    example_on_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERALD_BLOCKED_PLUGINS", " echo , some_other")
    plugins = get_plugin_manager()

    assert "echo" not in plugins.names()
    assert EXAMPLE_MODULE not in sys.modules
    assert {"echo", "some_other"} <= plugins.blocked
    assert plugins.protocols(["echo"]) == []
    with pytest.raises(PluginError, match=r"^plugin 'echo' is blocked"):
        plugins.require(["echo"])
    # a blocked name is ignored by register() too
    plugins.register(echo, "echo")
    assert "echo" not in plugins.names()


def test_blocked_argument_blocks_like_the_env_var(both_on_path: None) -> None:
    plugins = get_plugin_manager(blocked=["broken"])
    assert "broken" not in plugins.broken
    assert "echo" in plugins.names()


def test_a_broken_plugin_is_recorded_not_fatal(both_on_path: None) -> None:
    plugins = get_plugin_manager()

    assert plugins.broken["broken"] == (
        "ImportError: herald_broken_plugin needs the 'frobnicate' package, which is not installed"
    )
    assert "broken" not in plugins.names()
    assert "echo" in plugins.names()  # the others still load
    plugins.require(["echo"])
    with pytest.raises(PluginError) as excinfo:
        plugins.require(["echo", "broken"])
    message = str(excinfo.value)
    assert message == (
        "plugin 'broken' cannot be loaded: ImportError: herald_broken_plugin needs the "
        "'frobnicate' package, which is not installed"
    )
    assert "\n" not in message


def test_require_names_the_installed_plugins_and_protocols() -> None:
    @attrs.frozen(eq=False)
    class Named:
        @hookimpl
        def herald_protocols(self) -> list[ProtocolSpec]:
            return [ProtocolSpec("beep", "", echo.serve)]

    plugins = make(("echo", echo), ("extra", Named()))
    plugins.require(["echo", "extra", "beep"])  # plugin names and protocol names both count
    plugins.require([])
    with pytest.raises(PluginError) as excinfo:
        plugins.require(["echo", "nope"])
    assert str(excinfo.value) == (
        "unknown plugin 'nope'; installed: beep, echo, extra, queue_types"
    )
    with pytest.raises(PluginError, match=r"installed: queue_types$"):
        make().require(["amqp"])


def test_builtins_register_under_their_module_name() -> None:
    plugins = get_plugin_manager(load_entrypoints=False, builtins=[echo])
    assert plugins.names() == [*KERNEL, "herald_example_echo_direct"]
    assert [spec.name for spec in plugins.protocols()] == ["echo"]


def test_an_entry_point_also_given_as_builtin_is_registered_once(example_on_path: None) -> None:
    module = importlib.import_module(EXAMPLE_MODULE)
    plugins = get_plugin_manager(builtins=[module])
    assert [spec.name for spec in plugins.protocols()].count("echo") == 1
    assert EXAMPLE_MODULE in plugins.names()


# -- validation ---------------------------------------------------------------------------------


class Misspelt:
    @hookimpl
    def herald_protocolz(self) -> list[ProtocolSpec]:
        return []


def test_a_misspelt_hook_fails_naming_plugin_and_hook() -> None:
    with pytest.raises(PluginError) as excinfo:
        get_plugin_manager(load_entrypoints=False, builtins=[Misspelt()])
    assert "implements unknown hook 'herald_protocolz'" in str(excinfo.value)
    assert "did you mean 'herald_protocols'?" in str(excinfo.value)

    plugins = make(("echo", echo))
    with pytest.raises(PluginError, match=r"^plugin 'typo' implements unknown hook"):
        plugins.register(Misspelt(), "typo")
    assert plugins.names() == [*KERNEL, "echo"]  # not left half-registered


def test_a_hook_without_the_marker_is_refused() -> None:
    class Unmarked:
        def herald_protocols(self) -> list[ProtocolSpec]:
            return []

    with pytest.raises(PluginError, match=r"herald_protocols is not marked with @hookimpl"):
        make(("unmarked", Unmarked()))


def test_a_hook_with_unknown_arguments_is_refused() -> None:
    class WrongArgs:
        @hookimpl
        def herald_authenticate(self, username: str, token: str) -> None:
            return None

    with pytest.raises(PluginError) as excinfo:
        make(("wrong", WrongArgs()))
    assert str(excinfo.value).startswith("plugin 'wrong': PluginValidationError:")
    assert "token" in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


def test_the_same_name_cannot_be_registered_twice() -> None:
    plugins = make(("echo", echo))
    with pytest.raises(PluginError, match="already registered"):
        plugins.register(Misspelt(), "echo")


@attrs.frozen(eq=False)
class SectionPlugin:
    section: str

    @hookimpl
    def herald_config_sections(self) -> list[ConfigSection]:
        return [ConfigSection(self.section, echo.EchoConfig)]


def test_duplicate_config_sections_name_both_plugins() -> None:
    plugins = make(("echo", echo), ("copycat", SectionPlugin("echo")), ("ok", SectionPlugin("x")))
    with pytest.raises(PluginError) as excinfo:
        plugins.config_sections()
    assert str(excinfo.value) == (
        "config section 'echo' is declared more than once, by 'copycat', 'echo'"
    )


def test_duplicate_protocols_are_refused() -> None:
    class Clone:
        @hookimpl
        def herald_protocols(self) -> list[ProtocolSpec]:
            return [ProtocolSpec("echo", "another echo", echo.serve)]

    with pytest.raises(PluginError, match=r"^protocol 'echo' is declared more than once"):
        make(("echo", echo), ("clone", Clone())).protocols()


def test_config_sections_need_attrs_classes_with_defaults() -> None:
    @attrs.frozen
    class NoDefault:
        port: int

    with pytest.raises(PluginError, match=r"NoDefault needs a default for port"):
        ConfigSection("x", NoDefault)
    with pytest.raises(PluginError, match=r"is not an attrs class"):
        ConfigSection("x", dict)
    with pytest.raises(PluginError, match=r"TOML bare key"):
        ConfigSection("a.b", echo.EchoConfig)


def test_list_hooks_must_return_lists_of_the_right_type() -> None:
    class NotAList:
        @hookimpl
        def herald_protocols(self) -> ProtocolSpec:
            return ProtocolSpec("x", "", echo.serve)

    class WrongItems:
        @hookimpl
        def herald_storage_backends(self) -> list[str]:
            return ["memory"]

    with pytest.raises(PluginError, match=r"herald_protocols must return a list"):
        make(("p", NotAList())).protocols()
    with pytest.raises(PluginError, match=r"returned 'memory', not a StorageBackend"):
        make(("p", WrongItems())).storage_backends()


def test_listener_transport_is_checked() -> None:
    assert Listener("amqp", "tcp", "127.0.0.1", 5672).port == 5672
    with pytest.raises(ValueError):
        Listener("amqp", "udp", "127.0.0.1", 5672)


# -- hook semantics -----------------------------------------------------------------------------


def test_info_falls_back_to_the_registration_name() -> None:
    plugins = make(("echo", echo), ("anon", SectionPlugin("anon")))
    assert plugins.info()[len(KERNEL) :] == [
        PluginInfo("echo", "Line echo protocol (example plugin)", "0.1"),
        PluginInfo("anon", ""),
    ]


@st.composite
def route_lists(draw: st.DrawFn) -> list[list[str]]:
    return draw(st.lists(st.lists(st.text(max_size=3), max_size=4), max_size=5))


@given(route_lists())
def test_list_hooks_concatenate_in_registration_order(paths: list[list[str]]) -> None:
    @attrs.frozen(eq=False)
    class Routes:
        paths: list[str]

        @hookimpl
        def herald_management_routes(self) -> list[ManagementRoute]:
            return [ManagementRoute("GET", path, print, "") for path in self.paths]

    plugins = make(*((f"p{i}", Routes(p)) for i, p in enumerate(paths)))
    got = [route.path for route in plugins.management_routes()]
    assert got == [path for plugin_paths in paths for path in plugin_paths]


def test_convert_message_stops_at_the_first_non_none_result() -> None:
    calls: list[str] = []

    @attrs.frozen(eq=False)
    class Converter:
        name: str
        result: bytes | None

        @hookimpl
        def herald_convert_message(self, message: Message, target_protocol: str) -> bytes | None:
            calls.append(self.name)
            return self.result

    message = Message.native(b"body")
    plugins = make()
    assert plugins.converter is None
    assert plugins.convert_message(message, "mqtt") is None

    plugins.register(Converter("never reached", b"old"), "first")
    plugins.register(Converter("answers", b"converted"), "second")
    plugins.register(Converter("passes", None), "third")  # registered last = asked first
    assert plugins.converter is not None
    assert plugins.convert_message(message, "mqtt") == b"converted"
    assert calls == ["passes", "answers"]
    assert plugins.converter(message, "stomp") == b"converted"


def test_authenticate_first_backend_that_knows_the_user_wins() -> None:
    class Directory:
        @hookimpl
        def herald_authenticate(self, username: str, password: str, peer_host: str) -> User | None:
            if username == "mallory":
                raise AccessRefused("mallory is banned")
            if username == "alice" and password == "secret":
                return User(username, tags={"directory-user", peer_host})
            return None

    class Fallback:
        @hookimpl(trylast=True)
        def herald_authenticate(self, username: str) -> User:
            return User(username, tags={"fallback-user"})

    plugins = make(("directory", Directory()))
    assert plugins.authenticate("alice", "secret", "10.0.0.1") == User(
        "alice", tags={"directory-user", "10.0.0.1"}
    )
    assert plugins.authenticate("bob", "x", "10.0.0.1") is None
    with pytest.raises(AccessRefused, match="banned"):
        plugins.authenticate("mallory", "x", "10.0.0.1")

    plugins.register(Fallback(), "fallback")
    assert plugins.authenticate("bob", "x", "h") == User("bob", tags={"fallback-user"})
    alice = plugins.authenticate("alice", "secret", "h")
    assert alice is not None and "directory-user" in alice.tags


def test_authorize_returns_the_first_opinion() -> None:
    class Secret:
        @hookimpl
        def herald_authorize(self, vhost: str, permission: str) -> bool | None:
            if vhost == "/secret":
                return permission == "read"
            return None

    plugins = make(("secret", Secret()))
    user = User("user")
    assert plugins.authorize(user, "/", "write", "queue", "q") is None
    assert plugins.authorize(user, "/secret", "write", "queue", "q") is False
    assert plugins.authorize(user, "/secret", "read", "queue", "q") is True


def test_interceptors_are_none_until_a_plugin_implements_them() -> None:
    seen: list[tuple[str, ...]] = []

    class Audit:
        @hookimpl
        def herald_on_publish(self, vhost: str, message: Message) -> None:
            seen.append(("publish", vhost, message.routing_key))

        @hookimpl
        def herald_on_ack(self, vhost: str, queue: str, message: Message) -> None:
            seen.append(("ack", vhost, queue))

    plugins = make(("echo", echo))
    assert (plugins.on_publish, plugins.on_deliver, plugins.on_ack) == (None, None, None)

    plugins.register(Audit(), "audit")
    assert plugins.on_deliver is None
    assert plugins.on_publish is not None and plugins.on_ack is not None
    message = Message.native(b"x", routing_key="rk")
    plugins.on_publish("/", message)
    plugins.on_ack("/", "q1", message)
    assert seen == [("publish", "/", "rk"), ("ack", "/", "q1")]

    built = get_plugin_manager(load_entrypoints=False, builtins=[Audit()])
    assert built.on_publish is not None and built.on_deliver is None


def test_configure_reaches_plugins_registered_later_and_may_refuse() -> None:
    configured: list[HeraldConfig] = []
    good = HeraldConfig(plugins={"strict": 1})
    bad = HeraldConfig(plugins={"strict": 9})

    class Strict:
        @hookimpl
        def herald_configure(self, config: HeraldConfig) -> None:
            if config.plugins["strict"] not in (1, 2, 3):
                raise ConfigError("strict.level: must be 1..3")
            configured.append(config)

    plugins = make(("strict", Strict()))
    plugins.configure(good)
    assert configured == [good]
    plugins.register(Strict(), "late")
    assert configured == [good, good]
    with pytest.raises(ConfigError, match=r"strict\.level"):
        make(("strict", Strict())).configure(bad)


def test_services_storage_codecs_and_shutdown() -> None:
    events: list[tuple[str, object]] = []

    async def run(broker: object, *, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()

    @attrs.define
    class Codec:  # a MessageCodec, whose `protocol` is a plain attribute
        protocol: str

        def decode(self, raw: bytes) -> Content:
            return Content(EMPTY_PROPERTIES, raw)

        def encode(self, content: Content, message: Message) -> bytes:
            return content.body

    class Lifecycle:
        @hookimpl
        def herald_services(self, broker: object) -> list[Service]:
            events.append(("services", broker))
            return [Service("ticker", run)]

        @hookimpl
        def herald_shutdown(self, broker: object) -> None:
            events.append(("shutdown", broker))

        @hookimpl
        def herald_storage_backends(self) -> list[StorageBackend]:
            return [StorageBackend("null", "never made", lambda config, data_dir: MemoryStore())]

        @hookimpl
        def herald_message_codecs(self) -> list[Codec]:
            return [Codec("echo")]

    plugins = make(("life", Lifecycle()))
    broker = cast(Broker, "broker")  # a stand-in: the hooks only hand it over
    assert plugins.services(broker) == [Service("ticker", run)]
    plugins.shutdown(broker)
    assert events == [("services", "broker"), ("shutdown", "broker")]
    assert list(plugins.storage_backends()) == ["null"]
    assert plugins.message_codecs() == [Codec("echo")]

    class SameCodec:
        @hookimpl
        def herald_message_codecs(self) -> list[Codec]:
            return [Codec("echo")]

    plugins.register(SameCodec(), "same")
    with pytest.raises(PluginError, match="two plugins provide a message codec for 'echo'"):
        plugins.message_codecs()
