"""`herald admin` against an embedded broker over real HTTP.

click's CliRunner runs the real `herald` command (core/cli.py's `main`) in a worker thread,
so the broker in the test's Trio loop keeps serving while the CLI's blocking httpx client
waits. Output is checked as a person reads it (tables) and as a script does (--json).
"""

from __future__ import annotations

import json
from pathlib import Path

import pika
import pytest
import trio
from click.testing import CliRunner, Result

from herald.core.broker import Broker
from herald.core.cli import main
from tests.management.helpers import add_user, port


async def herald(
    broker: Broker,
    *args: str,
    user: str | None = "guest",
    input: str | None = None,
    env: dict[str, str] | None = None,
) -> Result:
    """`herald admin --url <broker> [--user U --password U] ARGS...`, in a worker thread."""
    options = ["admin", "--url", f"http://127.0.0.1:{port(broker)}"]
    if user is not None:
        options += ["--user", user, "--password", user]

    def invoke() -> Result:
        return CliRunner().invoke(main, [*options, *args], input=input, env=env)

    with trio.fail_after(30):
        return await trio.to_thread.run_sync(invoke)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result.stdout


def refused(result: Result, *fragments: str) -> str:
    """Exit 2 with one "herald: error: ..." line naming every fragment."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    line = result.stderr.strip()
    assert line.startswith("herald: error: ") and "\n" not in line, line
    for fragment in fragments:
        assert fragment in line, line
    return line


async def test_declare_publish_browse_get_and_delete(broker: Broker) -> None:
    ok(await herald(broker, "declare", "exchange", "orders", "--type", "topic"))
    ok(await herald(broker, "declare", "queue", "eu", "--argument", "x-max-length=100"))
    ok(await herald(broker, "declare", "binding", "orders", "eu", "--routing-key", "eu.*"))
    assert broker.default_vhost.queues["eu"].arguments["x-max-length"] == 100

    table = ok(await herald(broker, "list", "queues"))
    heading, row = table.splitlines()
    assert heading.split() == [
        "VHOST",
        "NAME",
        "READY",
        "UNACKED",
        "CONSUMERS",
        "MEMORY",
        "SWAPPED",
    ]
    assert row.split()[:3] == ["/", "eu", "0"]
    bindings = ok(await herald(broker, "list", "bindings", "--vhost", "/"))
    assert any(
        line.split()[1:5] == ["orders", "eu", "queue", "eu.*"] for line in bindings.splitlines()
    )
    exchanges = json.loads(ok(await herald(broker, "list", "exchanges", "--json")))
    assert {"name": "orders", "type": "topic"}.items() <= next(
        e for e in exchanges if e["name"] == "orders"
    ).items()

    routed = await herald(
        broker, "publish", "--exchange", "orders", "--routing-key", "eu.paris",
        "--property", "message_id=m-1", "--header", "attempt=2", "--persistent",
        input="first order\n",
    )  # fmt: skip
    assert ok(routed).strip() == "routed"
    lost = await herald(
        broker, "publish", "--exchange", "orders", "--routing-key", "us.nyc", "--payload", "x"
    )
    assert "not routed" in ok(lost)

    browsed = ok(await herald(broker, "browse", "eu"))
    assert "first order" in browsed and "eu.paris" in browsed
    items = json.loads(ok(await herald(broker, "browse", "eu", "--json")))
    assert items[0]["properties"]["message_id"] == "m-1"
    assert items[0]["properties"]["headers"] == {"attempt": 2}
    assert items[0]["properties"]["delivery_mode"] == 2
    assert broker.default_vhost.queues["eu"].message_count == 1  # browsing consumed nothing

    got = json.loads(
        ok(await herald(broker, "get", "eu", "--ackmode", "ack_requeue_false", "--json"))
    )
    assert [m["payload"] for m in got] == ["first order\n"]
    assert broker.default_vhost.queues["eu"].message_count == 0

    ok(await herald(broker, "delete", "binding", "orders", "eu", "--routing-key", "eu.*"))
    assert "eu.*" not in ok(await herald(broker, "list", "bindings"))
    refused(
        await herald(broker, "delete", "binding", "orders", "eu", "--routing-key", "eu.*"),
        "no binding",
    )
    ok(await herald(broker, "publish", "--routing-key", "eu", "--payload", "direct"))
    ok(await herald(broker, "purge", "eu"))
    assert broker.default_vhost.queues["eu"].message_count == 0
    ok(await herald(broker, "delete", "queue", "eu"))
    ok(await herald(broker, "delete", "exchange", "orders"))
    assert "eu" not in broker.default_vhost.queues
    overview = ok(await herald(broker, "overview"))
    assert any(line.split() == ["queues", "0"] for line in overview.splitlines())


async def test_export_and_import_definitions(broker: Broker, tmp_path: Path) -> None:
    ok(await herald(broker, "declare", "queue", "kept"))
    ok(await herald(broker, "users", "add", "carol", "--password", "pw", "--tag", "monitoring"))
    saved = tmp_path / "definitions.json"
    ok(await herald(broker, "export", str(saved)))
    exported = json.loads(saved.read_text())
    assert "kept" in [q["name"] for q in exported["queues"]]
    ok(await herald(broker, "delete", "queue", "kept"))
    ok(await herald(broker, "users", "delete", "carol"))
    assert ok(await herald(broker, "import", str(saved))).strip() == "definitions imported"
    assert "kept" in broker.default_vhost.queues
    carol = broker.users.get_user("carol")
    assert carol is not None and carol.tags == {"monitoring"}
    assert json.loads(ok(await herald(broker, "export")))["queues"] == exported["queues"]
    broken = tmp_path / "broken.json"
    broken.write_text('{"queues": [{"name": 3}]}')
    refused(await herald(broker, "import", str(broken)), "400 bad_request", "queues[0]")


async def test_users_tags_and_permissions(broker: Broker) -> None:
    ok(await herald(broker, "users", "add", "alice", "--tag", "management", input="alice\nalice\n"))
    assert (await broker.authenticate("alice", "alice", "127.0.0.1")).tags == {"management"}
    ok(await herald(broker, "users", "permissions", "alice", "--configure", "^$", "--read", "^q"))
    permissions = json.loads(ok(await herald(broker, "list", "permissions", "--json")))
    mine = next(p for p in permissions if p["user"] == "alice")
    assert (mine["configure"], mine["write"], mine["read"]) == ("^$", ".*", "^q")

    # alice may list what management users see, but not users.
    assert (
        ok(await herald(broker, "list", "vhosts", user="alice")).splitlines()[1].split()[0] == "/"
    )
    refused(await herald(broker, "users", "list", user="alice"), "403", "administrator")
    ok(await herald(broker, "users", "tags", "alice", "monitoring,management"))
    listed = ok(await herald(broker, "users", "list"))
    assert any(line.split() == ["alice", "management,monitoring"] for line in listed.splitlines())
    ok(await herald(broker, "users", "tags", "alice"))
    refused(await herald(broker, "list", "queues", user="alice"), "403", "no management tag")
    ok(await herald(broker, "users", "permissions", "alice", "--clear"))
    assert ("alice", "/") not in broker.users.permissions()
    ok(await herald(broker, "users", "delete", "alice"))
    refused(await herald(broker, "users", "delete", "alice"), "404")


async def test_close_connection_with_a_reason(broker: Broker) -> None:
    def connect() -> pika.BlockingConnection:
        credentials = pika.PlainCredentials("guest", "guest")
        return pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", port(broker, "amqp"), credentials=credentials)
        )

    connection = await trio.to_thread.run_sync(connect)
    listed = ok(await herald(broker, "list", "connections"))
    row = listed.splitlines()[1].split()
    assert row[1:4] == ["amqp", "guest", "/"]
    ok(await herald(broker, "close", "connection", row[0], "--reason", "cli says bye"))

    def wait_for_close() -> pika.exceptions.ConnectionClosedByBroker:
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
            for _ in range(100):
                connection.process_data_events(time_limit=0.1)
        return caught.value

    error = await trio.to_thread.run_sync(wait_for_close)
    assert error.reply_code == 320 and "cli says bye" in error.reply_text
    refused(await herald(broker, "close", "connection", row[0]), "404 not_found")


async def test_errors_are_one_line_and_exit_2(broker: Broker) -> None:
    refused(await herald(broker, "browse", "missing"), "404 not_found", "missing")
    refused(await herald(broker, "list", "queues", "--vhost", "nope"), "404", "vhost 'nope'")
    refused(await herald(broker, "declare", "exchange", "amq.mine"), "403")
    bad_login = await herald(
        broker, "list", "queues", user=None, env={"HERALD_ADMIN_PASSWORD": "x"}
    )
    refused(bad_login, "401 not_authorised")
    add_user(broker, "envuser", ["administrator"])
    by_env = await herald(
        broker, "users", "list", user=None,
        env={"HERALD_ADMIN_USER": "envuser", "HERALD_ADMIN_PASSWORD": "envuser"},
    )  # fmt: skip
    assert "envuser" in ok(by_env)
    unreachable = await trio.to_thread.run_sync(
        lambda: CliRunner().invoke(main, ["admin", "--url", "http://127.0.0.1:1", "overview"])
    )
    refused(unreachable, "cannot reach the management API at http://127.0.0.1:1")
    usage = await herald(broker, "declare", "queue", "q", "--argument", "novalue")
    assert usage.exit_code == 2 and "expected KEY=VALUE" in usage.stderr
