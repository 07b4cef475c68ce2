"""The web console in headless Chromium (Debian's `chromium`, driven by Playwright).

A real pika client declares a queue and stays connected; the browser logs in, sees the
overview's totals and rate chart, finds the queue, publishes to it from the form, browses
the message without consuming it, closes the pika connection (pika is told the reason),
and falls back to the login form on a 401. A screenshot is saved under the test's tmp dir
and, when HERALD_ARTIFACTS is set, copied there.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
import trio

from herald.core.broker import Broker
from tests.management.helpers import port

WAIT_MS = 10_000
PUBLISHED = 60
PUBLISH_LOOP = """async ({count, pause}) => {
  const headers = {"Authorization": "Basic " + sessionStorage.getItem("herald.credentials"),
                   "Content-Type": "application/json"};
  const body = JSON.stringify({routing_key: "console-jobs", payload: "tick",
                               payload_encoding: "string", properties: {}});
  for (let i = 0; i < count; i += 1) {
    await fetch("/api/exchanges/%2F/amq.default/publish", {method: "POST", headers, body});
    await new Promise((done) => setTimeout(done, pause));
  }
}"""


def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(
            "the console tests need Debian's chromium: apt-get install -y chromium"
            " (.ci/run installs it; Playwright's own browser download is not used)"
        )
    return path


def _connect(broker: Broker) -> pika.BlockingConnection:
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        port(broker, "amqp"),
        credentials=pika.PlainCredentials("guest", "guest"),
        client_properties={"product": "console-test"},
        socket_timeout=10,
    )
    return pika.BlockingConnection(parameters)


def log_in(page: Any, user: str, password: str) -> None:
    """Fill the console's login form and send it."""
    page.fill("#login input[name=user]", user)
    page.fill("#login input[name=password]", password)
    page.click("#login button")


def save_shot(shot: Path) -> None:
    """Keep a screenshot: copied to $HERALD_ARTIFACTS when that is set."""
    artifacts = os.environ.get("HERALD_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / shot.name)


def _drive(base: str, executable: str, shots: Path) -> None:
    """The browser session, run in a worker thread (Playwright's sync API blocks)."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(base + "/")

            # A wrong password keeps the login form up and says why.
            login = page.locator("#login")
            expect(login).to_be_visible()
            login.locator("input[name=user]").fill("guest")
            login.locator("input[name=password]").fill("wrong")
            login.locator("button").click()
            expect(page.locator("#flash")).to_contain_text("log in")
            expect(login).to_be_visible()
            login.locator("input[name=password]").fill("guest")
            login.locator("button").click()

            # Overview: totals, listeners, and the rate chart drawn from polled samples.
            expect(login).to_be_hidden()
            expect(page.locator("#whoami")).to_contain_text("guest (administrator)")
            expect(page.locator("#totals")).to_contain_text("Queues1")
            expect(page.locator("#view table")).to_contain_text("amqp")
            page.wait_for_function("document.getElementById('rates').width > 0")

            # Queues: the queue pika declared, with its consumer-less depth.
            page.click("#nav >> text=Queues")
            expect(page.locator("#queue-list")).to_contain_text("console-jobs")

            # Publish from the form, then browse: the message is shown and stays queued.
            page.click("#nav >> text=Messages")
            publish = page.locator("#publish")
            publish.locator("input[name=routing_key]").fill("console-jobs")
            publish.locator("textarea[name=payload]").fill("hello from the console")
            publish.locator("button").click()
            expect(page.locator("#publish-result")).to_have_text("routed")
            browse = page.locator("#browse")
            browse.locator("input[name=queue]").fill("console-jobs")
            browse.locator("button").click()
            expect(page.locator("#browse-result")).to_contain_text("hello from the console")
            expect(page.locator("#browse-result")).to_contain_text("1 ready")

            # The queue's own page shows the message still there, with swap state.
            page.click("#nav >> text=Queues")
            page.click("#queue-list >> text=console-jobs")
            expect(page.locator("#view h1")).to_have_text("Queue console-jobs")
            expect(page.locator("#view")).to_contain_text("Swapped")
            page.locator("#browse-queue button").click()
            expect(page.locator("#browse-result")).to_contain_text("hello from the console")

            page.click("#nav >> text=Overview")
            expect(page.locator("#totals")).to_contain_text("Ready1")
            # Traffic while the overview polls, so the chart has something to draw.
            page.evaluate(PUBLISH_LOOP, {"count": PUBLISHED, "pause": 50})
            page.wait_for_timeout(2500)
            shot = shots / "console-overview.png"
            page.screenshot(path=str(shot), full_page=True)
            save_shot(shot)

            # Connections: close pika's connection with a reason.
            page.click("#nav >> text=Connections")
            connections = page.locator("#connection-list")
            expect(connections).to_contain_text("console-test")
            page.locator("input[name=reason]").fill("closed by the console test")
            connections.locator("button", has_text="Close").click()
            expect(connections).to_contain_text("no connections")

            # Credentials that stop working (here: replaced) send the console to its login.
            page.evaluate("sessionStorage.setItem('herald.credentials', btoa('guest:nope'))")
            page.click("#nav >> text=Exchanges")
            expect(login).to_be_visible()
            expect(page.locator("#flash")).to_contain_text("log in")
            assert errors == [], errors
        finally:
            browser.close()


async def test_console_in_headless_chromium(broker: Broker, tmp_path: Path) -> None:
    executable = chromium_path()
    with trio.fail_after(90):
        connection = await trio.to_thread.run_sync(_connect, broker)
        channel = await trio.to_thread.run_sync(connection.channel)
        await trio.to_thread.run_sync(lambda: channel.queue_declare("console-jobs"))
        base = f"http://127.0.0.1:{port(broker)}"
        await trio.to_thread.run_sync(_drive, base, executable, tmp_path)
        assert (tmp_path / "console-overview.png").stat().st_size > 10_000

        def wait_for_close() -> pika.exceptions.ConnectionClosedByBroker:
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
                for _ in range(100):
                    connection.process_data_events(time_limit=0.1)
            return caught.value

        error = await trio.to_thread.run_sync(wait_for_close)
        assert error.reply_code == 320 and "closed by the console test" in error.reply_text
        queue = broker.default_vhost.queues["console-jobs"]
        assert queue.message_count == 1 + PUBLISHED  # browsing consumed nothing


async def test_console_files_are_served_without_a_cdn(broker: Broker) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port(broker)}") as http:
        page = await http.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "http" not in page.text.replace("http-equiv", "")  # nothing from elsewhere
        script = await http.get("/static/console.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        assert (await http.get("/static/nope.js")).status_code == 404
        # The page is public; the data is not: the console's 401 carries no browser challenge.
        bare = await http.get("/api/overview", headers={"X-Requested-With": "XMLHttpRequest"})
        assert bare.status_code == 401 and "www-authenticate" not in bare.headers
        assert "www-authenticate" in (await http.get("/api/overview")).headers


def _drive_admin_views(base: str, executable: str) -> None:
    """Exchanges, bindings and users: the forms that change the broker."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(WAIT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(base + "/#/exchanges")
            log_in(page, "guest", "guest")

            declare = page.locator("#declare-exchange")
            declare.locator("input[name=name]").fill("audit")
            declare.locator("select[name=type]").select_option("fanout")
            declare.locator("button").click()
            expect(page.locator("#exchange-list")).to_contain_text("audit")
            page.click("#nav >> text=Queues")
            page.fill("#declare-queue input[name=name]", "audit-log")
            page.click("#declare-queue button")
            expect(page.locator("#queue-list")).to_contain_text("audit-log")

            page.click("#nav >> text=Exchanges")
            bind = page.locator("#add-binding")
            bind.locator("input[name=source]").fill("audit")
            bind.locator("input[name=destination]").fill("audit-log")
            bind.locator("input[name=routing_key]").fill("all.*")
            bind.locator("button").click()
            bindings = page.locator("#binding-list")
            expect(bindings).to_contain_text("all.*")
            bindings.locator("button", has_text="Unbind").click()
            expect(bindings).not_to_contain_text("all.*")

            # A refused action shows the API's reason and leaves the console usable.
            declare.locator("input[name=name]").fill("amq.forbidden")
            declare.locator("button").click()
            expect(page.locator("#flash")).to_contain_text("403")

            page.click("#nav >> text=Users")
            add = page.locator("#add-user")
            add.locator("input[name=name]").fill("dora")
            add.locator("input[name=password]").fill("dora-pw")
            add.locator("input[name=tags]").fill("monitoring")
            add.locator("button").click()
            expect(page.locator("#user-list")).to_contain_text("dora")
            permit = page.locator("#set-permission")
            permit.locator("input[name=user]").fill("dora")
            permit.locator("input[name=read]").fill("^audit")
            permit.locator("button").click()
            expect(page.locator("#permission-list")).to_contain_text("^audit")

            # dora (monitoring) sees no Users menu.
            page.click("#logout")
            log_in(page, "dora", "dora-pw")
            expect(page.locator("#whoami")).to_contain_text("dora (monitoring)")
            expect(page.locator("#nav-users")).to_be_hidden()
            assert errors == [], errors
        finally:
            browser.close()


async def test_console_exchanges_bindings_and_users(broker: Broker) -> None:
    executable = chromium_path()
    with trio.fail_after(60):
        await trio.to_thread.run_sync(
            _drive_admin_views, f"http://127.0.0.1:{port(broker)}", executable
        )
    assert broker.default_vhost.exchanges["audit"].type == "fanout"
    user = broker.users.get_user("dora")
    assert user is not None and user.tags == {"monitoring"}
    assert broker.users.permissions()[("dora", "/")].read == "^audit"
