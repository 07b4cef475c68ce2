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

import attrs
import pytest

from herald.core import hookimpl
from herald.core.errors import PluginError
from herald.core.plugin_types import (
    ConfigSection,
    Listener,
    PluginInfo,
    ProtocolSpec,
)
from herald.core.plugins import DEFAULT_PLUGINS, Plugins, get_plugin_manager

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
