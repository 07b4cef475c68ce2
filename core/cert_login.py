"""Client-certificate login: the user a verified TLS client certificate names, without a password.

RabbitMQ's rabbitmq_auth_mechanism_ssl (`ssl_cert_login_from`, `mqtt.ssl_cert_login`,
`stomp.ssl_cert_login`) and Mosquitto's `use_identity_as_username` / `use_subject_as_username`,
switched on by `tls.cert_login` (core/tls.py; it needs `tls.verify = "peer"`). A client whose
certificate chained to `tls.cafile` may log in as the user the certificate names: the subject's
common name, or its whole distinguished name in RFC 4514 form (`tls.cert_login_from`).

As in RabbitMQ, the certificate replaces only the password: the user must exist in herald's
user database (`AccessControl.get_user`), a loopback-only user still needs a loopback peer, and
the virtual host permission and per-user connection limit are checked afterwards like for any
login. Plugins' backends (hook `herald_authenticate`) verify passwords and are not asked.
A refusal is the generic AccessRefused of a password login; the reason goes to the log.

How each protocol asks (the plugins call `certificate_user`, then `login`):
- AMQP: the SASL mechanism EXTERNAL, offered first in connection.start (plugins/amqp/handshake.py);
- MQTT: a CONNECT without user name and password (plugins/mqtt/login.py);
- STOMP: a CONNECT without `login` (plugins/stomp/handshake.py).

The certificate is read through `TLSPeer` when the login happens, not when the connection is
accepted: trio's SSLStream does its TLS handshake on the first read, and by the time a client
has sent its protocol header or CONNECT the handshake is done.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn

import trio

from herald.core.auth import is_loopback
from herald.core.errors import AccessRefused

if TYPE_CHECKING:
    from herald.core.auth import AccessControl, User
    from herald.core.tls import TLSSection

log = logging.getLogger(__name__)

COMMON_NAME = "common_name"
DISTINGUISHED_NAME = "distinguished_name"
EXTERNAL = "EXTERNAL"
"""The SASL mechanism of certificate login (RFC 4422 appendix A); its response is empty."""

Subject = tuple[tuple[tuple[str, str], ...], ...]
"""A certificate subject as `ssl` gives it: relative distinguished names, most general first,
each a tuple of (attribute name, value) pairs."""

# RFC 4514 section 3's short names, from the long names OpenSSL gives `ssl`; others keep theirs.
_SHORT_NAMES = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_ESCAPED = frozenset('"+,;<>\\')


class TLSPeer:
    """The TLS side of one client connection: the certificate the broker verified, if any."""

    __slots__ = ("_stream",)

    def __init__(self, stream: trio.SSLStream[trio.abc.Stream]) -> None:
        self._stream = stream

    @classmethod
    def of(cls, stream: object) -> TLSPeer | None:
        """The TLS peer of a stream an SSLListener accepted; None for a plain TCP stream."""
        return cls(stream) if isinstance(stream, trio.SSLStream) else None

    def subject(self) -> Subject | None:
        """The subject of the verified client certificate; None when the client presented none,
        the broker does not ask for one (`tls.verify = "none"`), or the handshake is not done."""
        try:
            certificate = self._stream.getpeercert()
        except ValueError:  # the handshake has not happened yet
            return None
        if not certificate:  # None: no certificate; {}: not verified (never under CERT_OPTIONAL)
            return None
        return certificate.get("subject") or None


def common_name(subject: Subject) -> str | None:
    """The subject's common name; several are joined with "," (as RabbitMQ does); None if none."""
    names = [value for rdn in subject for key, value in rdn if key == "commonName"]
    return ",".join(names) if names else None


def distinguished_name(subject: Subject) -> str:
    """The subject as an RFC 4514 string, most specific first: "CN=app,OU=dev,O=Example,C=NL"
    (RabbitMQ's `ssl_cert_login_from = distinguished_name` form)."""
    return ",".join(
        "+".join(f"{_SHORT_NAMES.get(key, key)}={_escape(value)}" for key, value in rdn)
        for rdn in reversed(subject)
    )


def _escape(value: str) -> str:
    last = len(value) - 1
    return "".join(
        "\\00"
        if char == "\0"
        else "\\" + char
        if char in _ESCAPED or (i == 0 and char in " #") or (i == last and char == " ")
        else char
        for i, char in enumerate(value)
    )


def login_name(subject: Subject, source: str) -> str | None:
    """The user name `subject` gives under `tls.cert_login_from`; None if it has none."""
    if source == DISTINGUISHED_NAME:
        return distinguished_name(subject) or None
    return common_name(subject)


def certificate_user(section: TLSSection, peer: TLSPeer | None) -> str | None:
    """The user a connection's verified certificate names, when `tls.cert_login` is on; None
    when it is off, the connection is not TLS, or there is no certificate or no such name."""
    if not section.cert_login or peer is None:
        return None
    subject = peer.subject()
    if subject is None:
        return None
    name = login_name(subject, section.cert_login_from)
    if name is None:
        log.info("client certificate without a %s: no certificate login", section.cert_login_from)
    return name


def login(
    users: AccessControl, name: str, peer_host: str | None, mechanism: str = EXTERNAL
) -> User:
    """The user `name` (from a verified certificate) logs in as; AccessRefused when it does not
    exist, or is loopback-only and the peer is remote. Never blocks: no password to hash."""
    user = users.get_user(name)
    if user is None:
        _refuse(name, peer_host, mechanism, "user does not exist")
    if name in users.loopback_users and not is_loopback(peer_host):
        _refuse(name, peer_host, mechanism, "user can only connect via localhost")
    log.debug("%s login for user '%s' from %s", mechanism, name, peer_host or "localhost")
    return user


def _refuse(name: str, peer_host: str | None, mechanism: str, reason: str) -> NoReturn:
    peer = peer_host or "localhost"
    log.info("%s login refused for user '%s' from %s: %s", mechanism, name, peer, reason)
    raise AccessRefused(
        f"Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile."
    )
