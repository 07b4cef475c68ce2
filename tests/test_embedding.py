"""The embedding API and the `herald_broker` pytest fixture, as another project uses them."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
import trio

import herald.core
from herald.core.broker import Broker
from herald.storage.memory import MemoryStore

EXAMPLE_PLUGIN = Path(__file__).parent / "example_plugin"


async def test_embedded_runs_a_broker_and_stops_it(tmp_path: Path) -> None:
    async with herald.core.embedded(data_dir=tmp_path, store=MemoryStore(), plugins=[]) as broker:
        assert isinstance(broker, Broker)
        assert broker.default_vhost.name == "/"
    with trio.fail_after(1):
        await broker.wait_stopped()


async def test_embedded_takes_settings_and_data(tmp_path: Path) -> None:
    async with herald.core.embedded(
        data_dir=tmp_path,
        settings=["broker.default_vhost=tenant", "broker.graceful_timeout=0.5"],
        data={"auth": {"default_user": "admin", "default_password": "s3cret"}},
        store=MemoryStore(),
        plugins=[],
    ) as broker:
        assert broker.default_vhost.name == "tenant"
        assert broker.config.broker.graceful_timeout == 0.5
        user = await broker.authenticate("admin", "s3cret", "127.0.0.1")
        broker.users.check_vhost_access(user, "tenant")


async def test_embedded_with_a_protocol_plugin_on_a_free_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE_PLUGIN))
    async with herald.core.embedded(
        data_dir=tmp_path, plugins=["echo"], settings=["echo.port=0"], store=MemoryStore()
    ) as broker:
        (listener,) = broker.listeners
        assert listener.protocol == "echo" and listener.port > 0
        stream = await trio.open_tcp_stream(listener.host, listener.port)
        with trio.fail_after(5):
            await stream.send_all(b"ECHO hi\n")
            assert await stream.receive_some(100) == b"ECHO hi\n"
        await stream.aclose()


def test_herald_broker_fixture_in_another_project(pytester: pytest.Pytester) -> None:
    """A project with herald installed gets `herald_broker` from the pytest11 entry point."""
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(
        test_uses_herald=textwrap.dedent(
            """
            import trio

            async def test_echo_through_the_fixture(herald_broker):
                (listener,) = [l for l in herald_broker.listeners if l.protocol == "echo"]
                assert listener.port > 0
                stream = await trio.open_tcp_stream(listener.host, listener.port)
                await stream.send_all(b"ECHO ping\\n")
                assert await stream.receive_some(100) == b"ECHO ping\\n"
                await stream.aclose()
                queue = herald_broker.default_vhost.declare_queue("q")
                assert queue.message_count == 0
            """
        )
    )
    env_path = os.pathsep.join(filter(None, [str(EXAMPLE_PLUGIN), os.environ.get("PYTHONPATH")]))
    pytester._monkeypatch.setenv("PYTHONPATH", env_path)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
