"""What each kind of hook means when several plugins answer (pluggy's firstresult, list
concatenation, interceptors only when implemented), and a plugin's node runner under
`embedded()` and `herald run`; discovery and validation of plugins are tests/test_plugins.py."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import cast

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from herald.core import hookimpl
from herald.core.auth import User
from herald.core.broker import Broker
from herald.core.cli import _serve
from herald.core.config import HeraldConfig, load_config
from herald.core.embedding import embedded
from herald.core.errors import AccessRefused, ConfigError, PluginError
from herald.core.message import EMPTY_PROPERTIES, Content, Message
from herald.core.plugin_types import (
    ManagementRoute,
    NodeRunner,
    PluginInfo,
    Service,
    StorageBackend,
)
from herald.core.plugins import Plugins, get_plugin_manager
from herald.storage.memory import MemoryStore
from tests.test_plugins import (  # _clean_env: an autouse fixture
    KERNEL,
    SectionPlugin,
    _clean_env,  # noqa: F401
    echo,
    make,
)

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


# -- herald_node_runner -------------------------------------------------------------------------


@attrs.define(eq=False)
class WrappingNode:
    """A NodeRunner as a cluster node is one: work before its broker runs and after it stops."""

    config: HeraldConfig
    plugins: Plugins
    events: list[str]
    broker: Broker | None = None
    stopping: bool = False

    def stop(self) -> None:
        self.events.append("stop")
        self.stopping = True
        if self.broker is not None:
            self.broker.stop()

    async def run(self, *, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
        self.events.append("joined")
        self.broker = broker = Broker(self.config, self.plugins)
        if self.stopping:
            broker.stop()
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            self.events.append("started")
            task_status.started(broker)
        self.events.append("left")


@attrs.frozen(eq=False)
class RunsNodes:
    events: list[str]
    answer: bool = True

    @hookimpl
    def herald_node_runner(self, config: HeraldConfig, plugins: Plugins) -> WrappingNode | None:
        self.events.append(f"asked {self.answer}")
        return WrappingNode(config, plugins, self.events) if self.answer else None


MEMORY_STORE = ['store.backend="memory"', "broker.plugins=[]"]


def test_node_runner_stops_at_the_first_runner_and_is_checked() -> None:
    events: list[str] = []
    plugins = make()
    config = HeraldConfig()
    assert plugins.node_runner(config) is None  # no plugin: a bare Broker runs the node

    plugins.register(RunsNodes(events), "runs")
    plugins.register(RunsNodes(events, answer=False), "passes")  # registered last = asked first
    runner = plugins.node_runner(config)
    assert isinstance(runner, WrappingNode) and isinstance(runner, NodeRunner)
    assert runner.config is config and runner.plugins is plugins
    assert events == ["asked False", "asked True"]

    class Wrong:
        @hookimpl(tryfirst=True)
        def herald_node_runner(self) -> object:
            return "a broker, honestly"

    plugins.register(Wrong(), "wrong")
    with pytest.raises(PluginError, match="herald_node_runner returned 'a broker, honestly', not"):
        plugins.node_runner(config)


async def test_embedded_runs_the_node_through_the_plugins_runner(tmp_path: Path) -> None:
    events: list[str] = []
    async with embedded(
        data_dir=tmp_path, settings=MEMORY_STORE, extra_plugins=[RunsNodes(events)]
    ) as broker:
        assert events == ["asked True", "joined", "started"]
        assert broker.default_vhost.name == "/"  # the runner's broker, running
    assert events[-2:] == ["stop", "left"]
    assert broker.stopping
    with trio.fail_after(1):
        await broker.wait_stopped()

    with pytest.raises(ConfigError, match=r"embedded\(store=...\): this node is run by a plugin"):
        async with embedded(
            data_dir=tmp_path, store=MemoryStore(), extra_plugins=[RunsNodes(events)]
        ):
            pass


async def test_herald_run_runs_the_plugins_runner_and_signals_stop_it(tmp_path: Path) -> None:
    """`herald run`'s own path (cli._serve): the runner's broker is the one announced, and
    SIGTERM reaches the runner, which stops its broker."""
    events: list[str] = []
    plugins = get_plugin_manager()
    plugins.register(RunsNodes(events), "runs")
    config = load_config(
        overrides=[*MEMORY_STORE, f"broker.data_dir={json.dumps(str(tmp_path))}"],
        plugin_sections=plugins.config_sections(),
    )
    started = trio.Event()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, config, plugins, started)
            await started.wait()
            assert events == ["asked True", "joined", "started"]
            os.kill(os.getpid(), signal.SIGTERM)  # _serve's signal receiver takes it
    assert events[-2:] == ["stop", "left"]
