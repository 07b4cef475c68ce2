"""Passwords never reach the log: logins (right and wrong) over every protocol at debug level,
user management, and the configuration's repr."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import pika
import pika.exceptions
import pytest
import trio

from herald.core.config import HeraldConfig
from herald.core.embedding import embedded
from herald.core.tls import TLSSection
from tests.mqtt_e2e.helpers import Paho
from tests.stomp_e2e.helpers import Client as Stomp
from tests.test_permission_matrix import SETTINGS, amqp_port

SECRET = "S3cr3t-do-not-log"
WRONG = "Wr0ng-do-not-log"


def amqp_login(port: int, password: str) -> bool:
    try:
        connection = pika.BlockingConnection(
            pika.ConnectionParameters(
                "127.0.0.1",
                port,
                credentials=pika.PlainCredentials("alice", password),
                socket_timeout=10,
                connection_attempts=1,
            )
        )
    except pika.exceptions.ProbableAuthenticationError:
        return False
    connection.close()
    return True


async def test_logins_do_not_log_passwords(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = [*SETTINGS, 'broker.log_level="debug"']
    async with embedded(
        plugins=["amqp", "stomp", "mqtt"], settings=settings, data_dir=tmp_path / "data"
    ) as broker:
        broker.users.add_user("alice", SECRET)
        broker.users.set_permissions("alice", "/", ".*", ".*", ".*")
        broker.users.change_password("alice", SECRET)
        with trio.fail_after(30):
            port = amqp_port(broker)
            assert await trio.to_thread.run_sync(partial(amqp_login, port, SECRET))
            assert not await trio.to_thread.run_sync(partial(amqp_login, port, WRONG))
            stomp = await Stomp.connect(broker, login="alice", passcode=SECRET)
            await stomp.disconnect()
            refused = await Stomp.connect(broker, login="alice", passcode=WRONG, wait=False)
            await refused.wait(lambda: bool(refused.frames.errors))
            for password, expected in ((SECRET, 0), (WRONG, 0x86)):
                client = Paho(broker, version=5, username="alice", password=password)
                assert (await client.connect()).reason_code == expected
                if expected == 0:
                    await client.disconnect()
    # Only herald's own loggers: stomp.py logs the frames it sends, passcode included.
    ours = [record for record in caplog.records if record.name.startswith("herald")]
    logged = "\n".join(f"{record.getMessage()} {record.args!r}" for record in ours)
    assert "alice" in logged  # the logins were logged, without their passwords
    assert SECRET not in logged and WRONG not in logged


def test_the_configuration_repr_hides_passwords() -> None:
    config = HeraldConfig().with_overrides(
        f"auth.default_password={SECRET}", f"tls.password={SECRET}"
    )
    assert config.auth.default_password == SECRET
    assert SECRET not in repr(config)
    assert SECRET not in repr(TLSSection(password=SECRET))
