"""A CONNECT, from login to CONNACK: what the protocol leaves to the server in between.

`login.py` says who the client is; `accept` then opens the virtual host as every protocol
does (core/session_open.py `open_vhost`: it exists, the user has access, the per-user
connection limit admits one more), checks the will, picks the client id (an empty one gets
`herald-<random>`, MQTT 5: Assigned Client Identifier), the session expiry and keep alive,
takes the client id over from a connection that has it, opens or resumes the session and
answers CONNACK; or it answers a refusing CONNACK and the session closes. Nothing of the
client id is taken until the client is sure to be accepted: a refusal leaves the client id
and its session as they were (and the per-user count, once the refused connection closed).
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING

from herald.core.auth import PermissionKind
from herald.core.connections import UserConnectionLimit
from herald.core.errors import AccessRefused, KernelError, NotAllowed
from herald.core.session_open import open_vhost
from herald.plugins.mqtt import login
from herald.plugins.mqtt.codec import (
    NO_PROPERTIES,
    ConnAck,
    Connect,
    Properties,
    ReasonCode,
    encode_packet,
)
from herald.plugins.mqtt.codec.reasons import CONNACK_V3_RETURN_CODE
from herald.plugins.mqtt.codec.topics import is_sys_topic
from herald.plugins.mqtt.config import SESSION_NEVER_EXPIRES
from herald.plugins.mqtt.subscriber import Subscriber

if TYPE_CHECKING:
    from herald.plugins.mqtt.session import Session

log = logging.getLogger(__name__)


async def accept(session: Session, packet: Connect) -> None:
    """Answer `packet`, the connection's CONNECT: accept the client (session opened or
    resumed, CONNACK sent, its consumers attached) or refuse it (`refuse`)."""
    session.version = version = packet.protocol_level
    props = packet.properties
    session.problem_information = props.request_problem_information is not False
    if props.authentication_method is not None:
        refuse(
            session,
            ReasonCode.BAD_AUTHENTICATION_METHOD,
            "enhanced authentication is not supported",
        )
        return
    user = await login.authenticate(session, packet)
    if isinstance(user, login.Refusal):
        refuse(session, user.code, user.text)
        return
    if session.done:
        return
    context, config = session.context, session.config
    try:
        open_vhost(session.broker, session.connection, user, context.vhost_name)
    except UserConnectionLimit as exc:  # 3.1.1: 3, server unavailable (`refuse`)
        refuse(session, ReasonCode.QUOTA_EXCEEDED, exc.reply_text)
        return
    except NotAllowed as exc:  # no such vhost, or no access to it
        refuse(session, ReasonCode.NOT_AUTHORIZED, exc.reply_text)
        return
    session.user = user
    if packet.will is not None:
        try:
            if is_sys_topic(packet.will.topic):
                raise AccessRefused(f"will topic {packet.will.topic!r} is a $SYS topic")
            session.authorize(PermissionKind.WRITE, "exchange", config.exchange)
        except KernelError as exc:
            refuse(session, ReasonCode.NOT_AUTHORIZED, exc.reply_text)
            return
    if packet.will is not None and packet.will.retain and not context.retain_available:
        refuse(session, ReasonCode.RETAIN_NOT_SUPPORTED, "retained messages are disabled")
        return
    client_id = packet.client_id
    assigned = None
    if not client_id:
        client_id = "herald-" + secrets.token_hex(8)
        assigned = client_id if version == 5 else None
    if version == 5:
        requested = props.session_expiry_interval or 0
    else:
        requested = 0 if packet.clean_start else SESSION_NEVER_EXPIRES
    expiry = min(requested, config.session_expiry_max)
    keepalive, server_keepalive = packet.keepalive, None
    if config.keepalive_max and keepalive > config.keepalive_max:
        keepalive = config.keepalive_max
        server_keepalive = keepalive if version == 5 else None
    ack_props = NO_PROPERTIES
    if version == 5:
        ack_props = Properties(
            session_expiry_interval=expiry if expiry != requested else None,
            receive_maximum=config.max_inflight,
            maximum_packet_size=config.max_packet_size,
            topic_alias_maximum=config.topic_alias_maximum or None,
            retain_available=False if not context.retain_available else None,
            assigned_client_identifier=assigned,
            server_keep_alive=server_keepalive,
        )
        if not _connack_fits(session, ack_props):
            return
    present = _take_session(session, client_id, packet, expiry)
    state = session.state
    assert state is not None
    session.keepalive = keepalive
    window = config.max_inflight
    if version == 5 and props.receive_maximum:
        window = min(window, props.receive_maximum)
    session.subscriber = subscriber = Subscriber(session, window)
    session.will = packet.will
    connection = session.connection
    connection.client = client_id
    connection.channels = session.describe  # the management API's /api/channels
    session.send(ConnAck(ReasonCode.SUCCESS, present, ack_props))
    session.can_send = not session.done and session.codec.connected
    session.reschedule_timers()  # the keep alive replaces the CONNECT timeout
    context.sessions.save(state)
    session.outbound.resend_pubrels()
    subscriber.attach()


def refuse(session: Session, code: int, text: str) -> None:
    """Answer CONNECT with a refusing CONNACK (3.1.1: its return code, else 3 server
    unavailable; MQTT 5: the reason code and `text` as reason string), then close."""
    log.info("MQTT connection from %s refused: %s", session.connection.peer, text)
    if session.version < 5 and code not in CONNACK_V3_RETURN_CODE:
        code = ReasonCode.SERVER_UNAVAILABLE
    props = Properties(reason_string=text) if session.version == 5 else NO_PROPERTIES
    session.send(ConnAck(code, properties=props))
    session.finish(text)


def _connack_fits(session: Session, props: Properties) -> bool:
    """Whether the accepting CONNACK fits the client's Maximum Packet Size. If not, the
    connection closes before anything is taken for it (no client id, no session): MQTT has
    no reply for this, and an accepting CONNACK's properties cannot be left out."""
    limit = session.codec.peer_max_packet_size
    size = len(encode_packet(ConnAck(properties=props), 5)) if limit is not None else 0
    if limit is None or size <= limit:
        return True
    text = f"its CONNACK of {size} bytes exceeds the client's maximum packet size {limit}"
    log.info("MQTT connection from %s closed: %s", session.connection.peer, text)
    session.finish(text)
    return False


def _take_session(session: Session, client_id: str, packet: Connect, expiry: int) -> bool:
    """Take over a client id (close its connection if it has one, settle a pending will) and
    open its session; returns CONNACK's "session present".

    The old connection's will is published only if its session ends here: it was not
    persistent, or this CONNECT starts clean. A session this connection continues keeps quiet
    ([MQTT-3.1.2-8]; Mosquitto decides the same way for 3.1.1)."""
    context = session.context
    sessions = context.sessions
    state = sessions.get(client_id)
    if state is not None and state.live is not None:
        state.live.taken_over(continued=state.persistent and not packet.clean_start)
    if state is not None and state.pending_will is not None:
        if packet.clean_start:
            context.fire_will(state)  # the old session ends now
        else:
            context.cancel_will(state)  # resumed before the will delay passed
    state, present = sessions.open(client_id, clean=packet.clean_start, expiry=expiry)
    session.state = state
    state.live = session
    return present
