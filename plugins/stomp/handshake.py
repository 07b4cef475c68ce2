"""CONNECT / STOMP frames: what the client asks for, and what the server agrees to.

Pure functions, so the rules are tested without sockets or users:
- version: the highest of `accept-version` the server speaks; 1.0 when the header is absent
  (a STOMP 1.0 client); no common version is an ERROR that lists the supported ones;
- heart-beats: the client's `cx,cy` answered with `cy,cx` as RabbitMQ does, each raised to the
  configured floor, and 0 (none) wherever the client asked for none (config.py says why);
- credentials: `login` / `passcode`; without `login`, the user a verified client certificate
  names when `tls.cert_login` is on (RabbitMQ's `stomp.ssl_cert_login`: a `login` header
  takes priority, so a certificate client can still log in with a password), else the
  configured default login and passcode when anonymous CONNECTs are allowed. The login itself
  is the one every protocol shares (core/session_open.py `log_in`, called by the session);
- virtual host: the `host` header (any version, as RabbitMQ) when it names one, else the
  default one; a `host` naming no virtual host is refused only with `strict_host`.
"""

from __future__ import annotations

from collections.abc import Container
from typing import TYPE_CHECKING

import attrs

from herald.core.version import herald_version
from herald.plugins.stomp.codec import VERSIONS, Frame
from herald.plugins.stomp.errors import FrameError

if TYPE_CHECKING:
    from herald.plugins.stomp.config import StompConfig

VERSION_MISMATCH = "Version mismatch"


@attrs.frozen
class ConnectRequest:
    """A CONNECT frame's request, as the server will answer it."""

    version: str
    send_ms: int
    """How often the server sends heart-beats (0: never)."""
    receive_ms: int
    """How often the client promised to send them (0: it is not watched)."""
    login: str
    passcode: str = attrs.field(repr=False)
    host: str | None
    certificate: bool = False
    """`login` is the user the client certificate names: no password to check."""


def negotiate_version(accept_version: str | None) -> str | None:
    """The highest version both sides speak; None when there is none."""
    if accept_version is None:
        return "1.0"
    offered = {part.strip() for part in accept_version.split(",")}
    common = [version for version in VERSIONS if version in offered]
    return common[-1] if common else None


def parse_heartbeat(value: str | None) -> tuple[int, int]:
    """(cx, cy) of a `heart-beat` header; (0, 0) when absent."""
    if value is None:
        return 0, 0
    try:
        cx, cy = (int(part.strip()) for part in value.split(","))
    except ValueError:
        cx = cy = -1
    if cx < 0 or cy < 0:
        raise FrameError(
            "Invalid header", f"heart-beat must be two non-negative integers 'cx,cy', got '{value}'"
        )
    return cx, cy


def parse_connect(
    frame: Frame, config: StompConfig, certificate_user: str | None = None
) -> ConnectRequest:
    """What a CONNECT asks for; FrameError when the server cannot accept it.
    `certificate_user`: the user the connection's client certificate names
    (core/session_open.py `certificate_user`)."""
    version = negotiate_version(frame.get("accept-version"))
    if version is None:
        raise FrameError(
            VERSION_MISMATCH,
            f"supported protocol versions are {','.join(VERSIONS)}; "
            f"the client accepts {frame.get('accept-version')}",
        )
    cx, cy = parse_heartbeat(frame.get("heart-beat"))
    login, passcode = frame.get("login"), frame.get("passcode")
    certificate = False
    if login is None and certificate_user is not None:
        login, passcode, certificate = certificate_user, "", True
    elif login is None:
        if not config.allow_anonymous:
            raise FrameError("Access refused", "a login header is required to connect")
        login, passcode = config.default_login, config.default_passcode
    return ConnectRequest(
        version=version,
        send_ms=max(cy, config.heartbeat_send_min) if cy else 0,
        receive_ms=max(cx, config.heartbeat_receive_min) if cx else 0,
        login=login,
        passcode=passcode or "",
        host=frame.get("host"),
        certificate=certificate,
    )


def choose_vhost(request: ConnectRequest, vhosts: Container[str], config: StompConfig) -> str:
    """The virtual host the connection gets: the one `host` names, else the default one;
    FrameError for a `host` naming none when `strict_host` is on."""
    name = request.host or config.default_vhost
    if name in vhosts:
        return name
    if request.host is not None and not config.strict_host:
        return config.default_vhost
    raise FrameError("Bad CONNECT", f"virtual host '{name}' does not exist")


def connected_frame(request: ConnectRequest, session_id: str) -> Frame:
    """The CONNECTED answer (RabbitMQ's headers, including `server`)."""
    return Frame(
        "CONNECTED",
        (
            ("version", request.version),
            ("heart-beat", f"{request.send_ms},{request.receive_ms}"),
            ("session", session_id),
            ("server", "herald/" + herald_version()),
        ),
    )
