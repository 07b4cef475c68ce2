"""CONNECT negotiation rules (pure functions of the frame and the config)."""

from __future__ import annotations

import attrs
import pytest

from herald.plugins.stomp.codec import Frame
from herald.plugins.stomp.config import StompConfig
from herald.plugins.stomp.errors import FrameError
from herald.plugins.stomp.handshake import (
    choose_vhost,
    connected_frame,
    negotiate_version,
    parse_connect,
    parse_heartbeat,
)

CONFIG = StompConfig()


def connect(**headers: str) -> Frame:
    return Frame("CONNECT", tuple(headers.items()))


@pytest.mark.parametrize(
    ("accept", "version"),
    [
        (None, "1.0"),
        ("1.0", "1.0"),
        ("1.0,1.1", "1.1"),
        ("1.2, 1.1", "1.2"),
        ("1.1,2.0", "1.1"),
        ("2.0", None),
    ],
)
def test_the_highest_common_version_wins(accept: str | None, version: str | None) -> None:
    assert negotiate_version(accept) == version


@pytest.mark.parametrize("value", ["1000", "a,b", "-1,0", "1,2,3", ""])
def test_malformed_heart_beats_are_refused(value: str) -> None:
    with pytest.raises(FrameError):
        parse_heartbeat(value)


@pytest.mark.parametrize(
    ("client", "floors", "agreed"),
    [
        ("0,0", (1000, 1000), (0, 0)),  # the client wants none: none either way
        ("5000,10000", (1000, 1000), (10000, 5000)),  # RabbitMQ: cx,cy answered with cy,cx
        ("100,200", (1000, 1000), (1000, 1000)),  # raised to the floors
        ("0,200", (50, 50), (200, 0)),
    ],
)
def test_heart_beats_mirror_the_client_above_the_floors(
    client: str, floors: tuple[int, int], agreed: tuple[int, int]
) -> None:
    config = attrs.evolve(CONFIG, heartbeat_send_min=floors[0], heartbeat_receive_min=floors[1])
    request = parse_connect(connect(login="u", passcode="p", **{"heart-beat": client}), config)
    assert (request.send_ms, request.receive_ms) == agreed
    assert connected_frame(request, "s").get("heart-beat") == f"{agreed[0]},{agreed[1]}"


def test_a_connect_without_login_uses_the_default_user_only_if_allowed() -> None:
    with pytest.raises(FrameError) as caught:
        parse_connect(connect(), CONFIG)
    assert caught.value.message == "Access refused"
    anonymous = attrs.evolve(CONFIG, allow_anonymous=True)
    request = parse_connect(connect(), anonymous)
    assert (request.login, request.passcode) == ("guest", "guest")


def test_the_host_header_chooses_the_virtual_host() -> None:
    vhosts = {"/", "prod"}
    strict = attrs.evolve(CONFIG, strict_host=True)
    for config in (CONFIG, strict):
        request = parse_connect(connect(login="u", host="prod"), config)
        assert choose_vhost(request, vhosts, config) == "prod"
        assert choose_vhost(parse_connect(connect(login="u"), config), vhosts, config) == "/"
    unknown = parse_connect(connect(login="u", host="broker.example.com"), CONFIG)
    assert choose_vhost(unknown, vhosts, CONFIG) == "/"  # the default: ActiveMQ's rule
    with pytest.raises(FrameError) as caught:
        choose_vhost(unknown, vhosts, strict)
    assert caught.value.message == "Bad CONNECT"
    assert caught.value.detail == "virtual host 'broker.example.com' does not exist"


def test_connected_names_version_session_and_server() -> None:
    request = parse_connect(connect(login="u", **{"accept-version": "1.1,1.2"}), CONFIG)
    frame = connected_frame(request, "session-1")
    assert frame.command == "CONNECTED"
    assert frame.get("version") == "1.2"
    assert frame.get("session") == "session-1"
    assert (frame.get("server") or "").startswith("herald")
