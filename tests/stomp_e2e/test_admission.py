"""The per-user connection limit counts a STOMP connection under the user it logged in as,
whichever way it did (core/session_open.py): a password, a password under another name an
authentication backend maps to the same user, a client certificate (stomps), or the
configured default login of an anonymous CONNECT. Before the shared login flow STOMP
counted them by their login string, so one user could hold a connection more per way in.
Real TLS on 127.0.0.1 (tests/tls_helpers.py); the other protocols' refusals are in
tests/test_connection_limits.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from herald.core import hookimpl
from herald.core.auth import User
from herald.core.broker import Broker
from herald.core.embedding import embedded
from tests.stomp_e2e.helpers import no_connections
from tests.tls_helpers import PKI, WAIT, port

USER, PASSWORD = "alice", "secret"
ALIAS = "alice@example.com"  # what the directory below also knows her as

WAYS = {
    "password": f"login:{USER}\npasscode:{PASSWORD}\n",
    "alias": f"login:{ALIAS}\npasscode:{PASSWORD}\n",
    "certificate": "",  # over stomps, with a certificate for USER
    "anonymous": "",  # over plain TCP: the configured default login
}


class Directory:
    """An authentication backend that knows alice under her e-mail address too."""

    @hookimpl
    def herald_authenticate(self, username: str, password: str, peer_host: str) -> User | None:
        if username == ALIAS and password == PASSWORD:
            return User(USER)
        return None


async def connect(broker: Broker, pki: PKI, way: str) -> tuple[trio.abc.Stream, bytes]:
    """A CONNECT logging in `way`; the stream (open) and the first frame of the answer."""
    if way == "certificate":
        tcp = await trio.open_tcp_stream("127.0.0.1", port(broker, "stomp", "tls"))
        context = pki.client_context(cert_from=pki.ca, common_name=USER)
        stream: trio.abc.Stream = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
    else:
        stream = await trio.open_tcp_stream("127.0.0.1", port(broker, "stomp", "tcp"))
    await stream.send_all(f"CONNECT\naccept-version:1.2\nhost:/\n{WAYS[way]}\n\0".encode())
    data = b""
    while b"\0" not in data:
        chunk = await stream.receive_some(4096)
        assert chunk, f"closed after {data!r}"
        data += chunk
    return stream, data.partition(b"\0")[0]


@pytest.mark.parametrize("first", list(WAYS))
async def test_a_users_connections_count_together_whichever_way_they_logged_in(
    tmp_path: Path, pki: PKI, first: str
) -> None:
    settings = pki.settings(
        'tls.verify="peer"',
        "tls.cert_login=true",
        "broker.max_connections_per_user=1",
        "stomp.allow_anonymous=true",
        f'stomp.default_login="{USER}"',
        f'stomp.default_passcode="{PASSWORD}"',
    )
    with trio.fail_after(WAIT):
        async with embedded(
            plugins=["stomp"],
            settings=settings,
            data_dir=tmp_path / "data",
            extra_plugins=[Directory()],
        ) as broker:
            broker.users.add_user(USER, PASSWORD)
            broker.users.set_permissions(USER, "/", ".*", ".*", ".*")
            held, answer = await connect(broker, pki, first)
            assert answer.startswith(b"CONNECTED\n"), answer
            (connection,) = broker.connections
            assert connection.user == USER  # counted and shown by the user's name
            for second in WAYS:
                if second == first:
                    continue
                stream, answer = await connect(broker, pki, second)
                assert answer.startswith(b"ERROR\n"), (second, answer)
                assert b"message:Not allowed\n" in answer
                assert f"user '{USER}' has reached its limit of 1".encode() in answer
                await trio.aclose_forcefully(stream)
            await trio.aclose_forcefully(held)
            await no_connections(broker)
            again, answer = await connect(broker, pki, first)  # only open ones count
            assert answer.startswith(b"CONNECTED\n"), answer
            await trio.aclose_forcefully(again)
