"""Talking to name servers: nodes register with all of them, applications resolve a queue.

Name servers share nothing, so a node registers with **every** one, in parallel, and one
that is down delays nobody (RocketMQ `registerBrokerAll`, timeout 6 s). An application asks
one name server at a time and moves to the next when one is down or does not know the queue
(a name server restarted less than a register period ago knows nothing yet).

Addresses are `host:port` (or a full `http://` URL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext, suppress
from functools import partial
from typing import Any
from urllib.parse import quote

import attrs
import httpx
import trio

from herald.core.errors import HeraldError

TIMEOUT_S = 6.0  # RocketMQ's registration timeout


class NoRoute(HeraldError):
    """No name server knows a master address for the queue and protocol."""


class NameServerUnavailable(HeraldError):
    """No name server answered."""


@attrs.frozen
class RegisterOutcome:
    nameserver: str
    ok: bool
    need_full: bool = False  # this name server wants the whole queue table next time
    error: str | None = None


def base_url(nameserver: str) -> str:
    nameserver = nameserver.strip().rstrip("/")
    return nameserver if "://" in nameserver else f"http://{nameserver}"


def route_path(vhost: str, queue: str) -> str:
    """`/v1/route/{vhost}/{queue}`, each percent-encoded whole (vhost "/" is `%2F`)."""
    return f"/v1/route/{quote(vhost, safe='')}/{quote(queue, safe='')}"


async def register_all(
    nameservers: Sequence[str],
    payload: Mapping[str, Any],
    *,
    timeout: float = TIMEOUT_S,
    client: httpx.AsyncClient | None = None,
) -> tuple[RegisterOutcome, ...]:
    """POST `payload` (a `/v1/register` body, see `wire.registration_json`) to every name
    server at once; one outcome per name server, in order. Never raises for a name server
    that is down or refuses: its outcome says so."""
    outcomes: list[RegisterOutcome | None] = [None] * len(nameservers)

    async def one(i: int, http: httpx.AsyncClient) -> None:
        nameserver = nameservers[i]
        try:
            with trio.fail_after(timeout):
                response = await http.post(base_url(nameserver) + "/v1/register", json=payload)
            body = response.json()
            if response.status_code != 200:
                error = f"{response.status_code}: {body.get('field', '')} {body.get('error')}"
                outcomes[i] = RegisterOutcome(nameserver, False, error=error.strip())
            else:
                outcomes[i] = RegisterOutcome(nameserver, True, bool(body.get("need_full")))
        except (httpx.HTTPError, ValueError, AttributeError, trio.TooSlowError) as exc:
            outcomes[i] = RegisterOutcome(nameserver, False, error=repr(exc))

    async with _client(client, timeout) as http, trio.open_nursery() as nursery:
        for i in range(len(nameservers)):
            nursery.start_soon(one, i, http)
    return tuple(o for o in outcomes if o is not None)


async def unregister_all(
    nameservers: Sequence[str], node: str, *, timeout: float = TIMEOUT_S
) -> None:
    """Tell every name server the node is leaving (best effort, at a clean shutdown)."""

    async def one(nameserver: str, http: httpx.AsyncClient) -> None:
        with trio.move_on_after(timeout):
            with suppress(httpx.HTTPError):
                await http.post(base_url(nameserver) + "/v1/unregister", json={"node": node})

    async with _client(None, timeout) as http, trio.open_nursery() as nursery:
        for nameserver in nameservers:
            nursery.start_soon(one, nameserver, http)


def _client(
    client: httpx.AsyncClient | None, timeout: float
) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    """The caller's client (left open), or a new one closed at the end."""
    return nullcontext(client) if client is not None else httpx.AsyncClient(timeout=timeout)


def url_from_route(route: Mapping[str, Any], vhost: str, protocol: str) -> str | None:
    """`protocol://host:port/<vhost percent-encoded>` of the first group whose master serves
    `protocol`, or None."""
    for group in route.get("groups") or ():
        master = group.get("master") or {}
        addr = master.get("addr")
        if isinstance(addr, str) and addr:
            return f"{protocol}://{addr}/{quote(vhost, safe='')}"
    return None


async def resolve(
    nameservers: Sequence[str],
    vhost: str,
    queue: str,
    protocol: str = "amqp",
    *,
    timeout: float = TIMEOUT_S,
) -> str:
    """A URL to reach `queue`'s master over `protocol`, e.g. `amqp://10.0.0.2:5672/%2F`,
    asking each name server in turn. Raises `NoRoute` when those that answered know no
    master for it, `NameServerUnavailable` when none answered. For Trio or asyncio;
    `resolve_sync` for threaded programs (pika, paho)."""
    path = route_path(vhost, queue) + f"?protocol={quote(protocol, safe='')}"
    problems: list[str] = []
    answered = False
    async with httpx.AsyncClient(timeout=timeout) as http:
        for nameserver in nameservers:
            try:
                response = await http.get(base_url(nameserver) + path)
                answered, url = True, _url(response, vhost, protocol)
            except (httpx.HTTPError, ValueError) as exc:
                problems.append(f"{nameserver}: {exc!r}")
                continue
            if url is not None:
                return url
            problems.append(f"{nameserver}: {response.status_code} no {protocol} master")
    raise _failure(answered, vhost, queue, problems)


def resolve_sync(
    nameservers: Sequence[str],
    vhost: str,
    queue: str,
    protocol: str = "amqp",
    *,
    timeout: float = TIMEOUT_S,
) -> str:
    """`resolve` for code without an event loop (a pika or paho program): runs it in a
    Trio loop of its own."""
    import trio

    return trio.run(partial(resolve, nameservers, vhost, queue, protocol, timeout=timeout))


def _url(response: httpx.Response, vhost: str, protocol: str) -> str | None:
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return url_from_route(response.json(), vhost, protocol)


def _failure(answered: bool, vhost: str, queue: str, problems: list[str]) -> HeraldError:
    what = f"queue {queue!r} in vhost {vhost!r}: " + "; ".join(problems)
    return NoRoute(what) if answered else NameServerUnavailable(what)
