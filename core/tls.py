"""TLS for every listener: one `[tls]` section, one server context, a TLS port per protocol.

RabbitMQ's model: the certificate, key and CA live in one place (`ssl_options`), and each
protocol adds a TLS listener on its own port (AMQP 5671, MQTT 8883, STOMP 61614, and the
WebSocket ports) once a certificate is configured. Client certificates are optional: with
`verify = "peer"` a certificate the client presents must chain to `cafile`, and with
`fail_if_no_peer_cert` a client without one is refused during the handshake. With
`cert_login` the verified certificate also names the user a client logs in as, without a
password (core/cert_login.py: AMQP's EXTERNAL mechanism, MQTT and STOMP without credentials).
"""

from __future__ import annotations

import ssl
from typing import Any

import attrs

from herald.core.errors import ConfigError, InvalidValue

VERIFY_MODES = ("none", "peer")
CERT_LOGIN_FROM = ("common_name", "distinguished_name")
VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


def _one_of(choices: tuple[str, ...] | dict[str, Any]) -> Any:
    def check(_inst: object, attribute: attrs.Attribute, value: str) -> None:
        if value not in choices:
            expected = ", ".join(choices)
            raise InvalidValue(f"expected one of {expected}, got {value!r}", attribute.name)

    return check


@attrs.frozen
class TLSSection:
    """`[tls]`: the server certificate and how client certificates are checked."""

    certfile: str = ""
    """PEM file with the server certificate (and its chain). Empty: no TLS listeners."""
    keyfile: str = ""
    """PEM file with the private key; empty when it is in `certfile`."""
    password: str = attrs.field(default="", repr=lambda _: "'********'")
    """The private key's passphrase, if it has one."""
    cafile: str = ""
    """PEM file of the CAs client certificates must chain to (needed for `verify = "peer"`)."""
    verify: str = attrs.field(default="none", validator=_one_of(VERIFY_MODES))
    """"none": client certificates are not asked for; "peer": asked for and verified."""
    fail_if_no_peer_cert: bool = False
    """With `verify = "peer"`: refuse clients that present no certificate."""
    min_version: str = attrs.field(default="1.2", validator=_one_of(VERSIONS))
    """The oldest TLS version accepted: "1.2" or "1.3"."""
    ciphers: str = ""
    """An OpenSSL cipher list for TLS 1.2 (empty: Python's secure default)."""
    cert_login: bool = False
    """With `verify = "peer"`: a verified client certificate logs in as the user it names,
    without a password (RabbitMQ's EXTERNAL mechanism and `ssl_cert_login`)."""
    cert_login_from: str = attrs.field(default="common_name", validator=_one_of(CERT_LOGIN_FROM))
    """Which name of the certificate's subject is the user name: "common_name" (the CN) or
    "distinguished_name" (the whole subject, RFC 4514: "CN=app,O=Example,C=NL")."""

    @property
    def enabled(self) -> bool:
        return bool(self.certfile)


def server_context(section: TLSSection) -> ssl.SSLContext | None:
    """The server context of `section`, or None when TLS is not configured. Every problem
    (a missing file, a key that does not match, a bad cipher list) is a ConfigError naming
    the key, raised at start rather than at the first TLS client."""
    if not section.enabled:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = VERSIONS[section.min_version]
    try:
        context.load_cert_chain(
            section.certfile, section.keyfile or None, password=section.password or None
        )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"tls.certfile, tls.keyfile: cannot load the certificate: {exc}") from exc
    if section.ciphers:
        try:
            context.set_ciphers(section.ciphers)
        except ssl.SSLError as exc:
            raise ConfigError(f"tls.ciphers: {exc}") from exc
    if section.verify == "peer":
        if not section.cafile:
            raise ConfigError('tls.cafile: needed to verify client certificates (verify = "peer")')
        try:
            context.load_verify_locations(cafile=section.cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"tls.cafile: cannot load the CA certificates: {exc}") from exc
        required = section.fail_if_no_peer_cert
        context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    elif section.fail_if_no_peer_cert:
        raise ConfigError('tls.fail_if_no_peer_cert: needs verify = "peer"')
    elif section.cert_login:
        raise ConfigError('tls.cert_login: needs verify = "peer" (a certificate to log in with)')
    return context
