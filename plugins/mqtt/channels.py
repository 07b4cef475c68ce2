"""An MQTT connection as the management API's /api/channels shows it: its session, as the
connection's one "channel" (`Connection.channels`, core/connections.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herald.plugins.mqtt.session import Session


def describe(session: Session) -> list[Mapping[str, Any]]:
    """The session's one channel; none before CONNECT took a session."""
    state = session.state
    if state is None:
        return []
    return [
        {
            "number": 1,
            "client_id": state.client_id,
            "protocol_version": session.version,
            "session_expiry": state.expiry,
            "subscriptions": [{"filter": sub.text, "qos": sub.qos} for sub in state.subscriptions],
            "unacked": len(session.outbound.inflight),
            "keepalive": session.keepalive,
        }
    ]
