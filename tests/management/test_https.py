"""HTTPS for the management API: once `[tls]` has a certificate, the plugin serves the API
on `https_port` too (transport "https"), with the broker's certificate. Clients verify it
against the test CA (trustme); the plain HTTP port keeps working beside it."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest
import trio
import trustme
from click.testing import CliRunner, Result

from herald.core.broker import Broker
from herald.core.cli import main
from herald.core.testing import listener_port
from tests.management.helpers import management_broker, port


class Certificates:
    """A throwaway CA and the broker's certificate for 127.0.0.1, as files."""

    def __init__(self, directory: Path) -> None:
        self.ca = trustme.CA()
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.certfile = directory / "server.pem"
        self.keyfile = directory / "server.key"
        self.cafile = directory / "ca.pem"
        server.cert_chain_pems[0].write_to_path(str(self.certfile))
        for pem in server.cert_chain_pems[1:]:
            pem.write_to_path(str(self.certfile), append=True)
        server.private_key_pem.write_to_path(str(self.keyfile))
        self.ca.cert_pem.write_to_path(str(self.cafile))

    def settings(self) -> list[str]:
        return [
            f'tls.certfile="{self.certfile}"',
            f'tls.keyfile="{self.keyfile}"',
            "management.https_port=0",
            "amqp.tls_port=0",
        ]

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


def _chain(exc: BaseException | None) -> list[BaseException]:
    """`exc` and its causes (under Trio, httpx's message is empty; the cause says why)."""
    out = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


async def test_api_over_https_verified_against_the_ca(
    certificates: Certificates, tmp_path: Path
) -> None:
    async with management_broker(tmp_path / "data", settings=certificates.settings()) as broker:
        https_port = listener_port(broker, "management", "https")
        url = f"https://127.0.0.1:{https_port}"
        async with httpx.AsyncClient(
            base_url=url, auth=("guest", "guest"), verify=certificates.client_context()
        ) as https:
            overview = await https.get("/api/overview")
            assert overview.status_code == 200, overview.text
            transports = {(x["protocol"], x["transport"]) for x in overview.json()["listeners"]}
            assert {("management", "http"), ("management", "https")} <= transports
            assert (await https.get("/api/whoami")).json()["name"] == "guest"
            assert (await https.get("/api/queues", auth=("guest", "bad"))).status_code == 401
            page = await https.get("/")
            assert page.status_code == 200 and "herald" in page.text

        # A client that does not trust the CA refuses the certificate.
        async with httpx.AsyncClient(base_url=url, auth=("guest", "guest")) as untrusting:
            with pytest.raises(httpx.ConnectError) as refused:
                await untrusting.get("/api/overview")
            assert any(isinstance(e, ssl.SSLCertVerificationError) for e in _chain(refused.value))

        # Plain HTTP still answers on its own port, and the API's first listener is it.
        assert port(broker) != https_port
        async with httpx.AsyncClient(auth=("guest", "guest")) as plain:
            answer = await plain.get(f"http://127.0.0.1:{port(broker)}/api/overview")
            assert answer.status_code == 200

        # `herald admin` over HTTPS: --cacert verifies, without it the error says why.
        def admin(*args: str) -> Result:
            return CliRunner().invoke(main, ["admin", "--url", url, *args, "overview"])

        with trio.fail_after(30):
            verified = await trio.to_thread.run_sync(admin, "--cacert", str(certificates.cafile))
            unverified = await trio.to_thread.run_sync(admin)
        assert verified.exit_code == 0, verified.output
        assert unverified.exit_code == 2
        assert "CERTIFICATE_VERIFY_FAILED" in unverified.stderr


async def test_no_https_listener_without_a_certificate(broker: Broker) -> None:
    management = [lst for lst in broker.listeners if lst.protocol == "management"]
    assert [lst.transport for lst in management] == ["http"]
