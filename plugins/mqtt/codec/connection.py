"""`MQTTConnection`: the server side of one MQTT connection, sans-IO (h2's shape, STYLE rule 1).

Bytes go in through `receive_data`, packets come out of `next_event`; packets go in through
`send` and bytes come out of `data_to_send` (core/codec_kit.py's `CodecConnection`). The end of
the stream goes in as `receive_data(b"")`: between two packets `next_event` then returns
`ConnectionClosed`, inside one it raises 0x81 (a cut packet is malformed). The protocol level
is learned from CONNECT and used for every packet after it. The connection keeps the state
the wire itself needs: the state machine (state.py), the topic aliases of MQTT 5 both ways
(resolved and assigned here, like HPACK in h2), the client's Maximum Packet Size, and PINGREQ,
which it answers itself.

Outbound aliases: when the client's CONNECT allows N > 0, the first N topics sent get aliases
1..N (the first PUBLISH of each carries topic and alias, later ones the alias alone); past N,
the least recently used alias is given to the new topic (the client overwrites its mapping,
MQTT 5.0 section 3.3.2.3.4).

Errors: whatever the client gets wrong raises `RemoteProtocolError` with an MQTT 5 reason code
in `.code`, once; afterwards `next_event` raises again and `error_reply()` gives the packet to
send before closing (a refusing CONNACK in the client's format, or an MQTT 5 DISCONNECT).
Misuse by the caller raises `LocalProtocolError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

import attrs

from herald.core.codec_kit import (
    NEED_DATA,
    ConnectionClosed,
    Direction,
    LocalProtocolError,
    RemoteProtocolError,
    end_of_stream,
)
from herald.plugins.mqtt.codec.decode import connect_level, decode_body
from herald.plugins.mqtt.codec.encode import encode_packet
from herald.plugins.mqtt.codec.packets import (
    PACKET_CLASSES,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Publish,
)
from herald.plugins.mqtt.codec.properties import NO_PROPERTIES
from herald.plugins.mqtt.codec.reader import DEFAULT_MAX_PACKET_SIZE, PacketReader
from herald.plugins.mqtt.codec.reasons import (
    CONNACK_V3_RETURN_CODE,
    VALID_REASON_CODES,
    PacketType,
    ProtocolVersion,
    ReasonCode,
)
from herald.plugins.mqtt.codec.state import (
    MQTT5_ONLY_SENDS,
    TABLE,
    ConnectionState,
    PeerError,
    RefusedConnAck,
)
from herald.plugins.mqtt.codec.wire import malformed, protocol_error

_PING_RESPONSE = PingResp()
_CLASS_BY_TYPE: tuple[type[Packet] | None, ...] = tuple(PACKET_CLASSES.get(t) for t in range(16))
# Every connection's default `supported_versions`: `frozenset()` of a frozenset is that set,
# so 10,000 connections share one.
ALL_VERSIONS: frozenset[int] = frozenset(ProtocolVersion)


class MQTTConnection:
    """One client's connection, seen from the server."""

    def __init__(
        self,
        *,
        max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
        versions: Iterable[int] = ALL_VERSIONS,
    ) -> None:
        self._reader = PacketReader(max_packet_size)
        self._out: list[bytes] = []
        self._state = ConnectionState.AWAIT_CONNECT
        # This state's moves, packet class -> next state.
        self._receivable: Mapping[object, ConnectionState] = TABLE.moves(
            self._state, Direction.RECEIVE
        )
        self._sendable: Mapping[object, ConnectionState] = TABLE.moves(self._state, Direction.SEND)
        self._eof = False  # receive_data(b""): the client ended its stream
        self.connected = False
        """Whether the state is CONNECTED: a plain attribute, read once per delivery."""
        self._version: int | None = None
        self._connect_level: int | None = None
        self._error: RemoteProtocolError | None = None
        self._aliases: dict[int, str] = {}
        self._topic_alias_maximum = 0
        self._out_aliases: dict[str, int] = {}  # topic -> alias, least recently used first
        self._peer_alias_maximum = 0
        self._session_expiry = 0  # the Session Expiry Interval of an MQTT 5 CONNECT
        self._pings_due = 0
        self.supported_versions: frozenset[int] = frozenset(versions)
        self.peer_max_packet_size: int | None = None
        """The client's MQTT 5 Maximum Packet Size; `send` refuses larger packets (0x95)."""

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def version(self) -> int | None:
        """The protocol level CONNECT chose (3, 4 or 5), None before a valid CONNECT."""
        return self._version

    @property
    def max_packet_size(self) -> int:
        """The inbound limit; a server may raise it once the client is authenticated."""
        return self._reader.max_packet_size

    @max_packet_size.setter
    def max_packet_size(self, value: int) -> None:
        self._reader.max_packet_size = value

    @property
    def topic_alias_maximum(self) -> int:
        """The Topic Alias Maximum our accepting CONNACK announced (0: none allowed)."""
        return self._topic_alias_maximum

    # -- inbound ---------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes read from the client (ignored once the connection has failed); b""
        marks the end of its stream, after which more data is the caller's error."""
        if not data:
            self._eof = True
        elif self._eof:
            raise LocalProtocolError("data received after the end of the stream")
        elif self._error is None:
            self._reader.receive_data(data)

    def next_event(self) -> Packet | ConnectionClosed | type[NEED_DATA]:
        """The next packet from the client, NEED_DATA, or (after `receive_data(b"")`)
        ConnectionClosed; raises RemoteProtocolError."""
        if self._error is not None:
            error = self._error
            raise RemoteProtocolError(f"connection already failed: {error.text}", error.code)
        reader = self._reader
        try:
            frame = reader.next_frame()
            if frame is None:
                if self._eof:  # ConnectionClosed, or 0x81 if a packet was cut
                    return end_of_stream(reader.buffered, ReasonCode.MALFORMED_PACKET)
                return NEED_DATA
            first, start, end = frame
            cls = _CLASS_BY_TYPE[first >> 4]
            if cls is None:
                raise malformed("reserved packet type 0")
            new_state = self._receivable.get(cls)
            if new_state is None:  # not in the table: its refusal (0x82) raises
                new_state = TABLE.next_state(self._state, Direction.RECEIVE, cls)
            if cls is Connect:
                self._connect_level = connect_level(reader.buffer, start, end)
            packet = decode_body(first, reader.buffer, start, end, self._version)
            if cls is Publish:
                publish: Publish = packet  # type: ignore[assignment]  # decoded as cls; mypy does not narrow on cls, and a cast is a call per PUBLISH
                if publish.properties is not NO_PROPERTIES:
                    packet = self._resolve_alias(publish)
            elif cls is Connect:
                self._accept_connect(cast(Connect, packet))
            elif cls is PingReq:
                self._pings_due += 1
            elif cls is Disconnect and self._version == 5:
                self._check_disconnect(cast(Disconnect, packet))
            reader.consume(end)
            if new_state is not self._state:
                self._set_state(new_state)
            if self._pings_due:
                self._answer_pings()
            return packet
        except LocalProtocolError as exc:
            self._error = RemoteProtocolError(exc.text, exc.code)
            self._set_state(self._receivable.get(PeerError, self._state))
            raise self._error from None

    def _set_state(self, state: ConnectionState) -> None:
        self._state = state
        self._receivable = TABLE.moves(state, Direction.RECEIVE)
        self._sendable = TABLE.moves(state, Direction.SEND)
        self.connected = state is ConnectionState.CONNECTED

    def _accept_connect(self, packet: Connect) -> None:
        if packet.protocol_level not in self.supported_versions:
            raise LocalProtocolError(
                f"protocol level {packet.protocol_level} is disabled on this listener",
                ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
            )
        self._version = packet.protocol_level
        if self._version == 5:
            self.peer_max_packet_size = packet.properties.maximum_packet_size
            self._peer_alias_maximum = packet.properties.topic_alias_maximum or 0
            self._session_expiry = packet.properties.session_expiry_interval or 0

    def _check_disconnect(self, packet: Disconnect) -> None:
        """[MQTT-3.14.2-2]: a Session Expiry Interval of 0 in CONNECT cannot be raised."""
        if not self._session_expiry and packet.properties.session_expiry_interval:
            raise protocol_error(
                "DISCONNECT sets a Session Expiry Interval after CONNECT set none (0)"
            )

    def _resolve_alias(self, packet: Publish) -> Publish:
        props = packet.properties
        if props.subscription_identifiers:
            raise protocol_error("a client's PUBLISH must not carry subscription identifiers")
        alias = props.topic_alias
        if alias is None:
            return packet
        if alias > self._topic_alias_maximum:
            raise LocalProtocolError(
                f"topic alias {alias} exceeds the maximum {self._topic_alias_maximum}",
                ReasonCode.TOPIC_ALIAS_INVALID,
            )
        if packet.topic:
            self._aliases[alias] = packet.topic
            return packet
        topic = self._aliases.get(alias)
        if topic is None:
            raise protocol_error(f"topic alias {alias} was never set")
        return attrs.evolve(packet, topic=topic)

    # -- outbound --------------------------------------------------------------------------

    def send(self, packet: Packet) -> None:
        """Queue `packet` for the client; raises LocalProtocolError if the protocol forbids it
        now (state, version) or it exceeds the client's Maximum Packet Size (code 0x95, nothing
        queued: MQTT 5 says to drop such a message as if it had been sent)."""
        if type(packet) is PingResp:
            raise LocalProtocolError("the codec answers PINGREQ itself")
        self._send(packet)
        if self._pings_due:
            self._answer_pings()

    def _send(self, packet: Packet) -> None:
        cls = type(packet)
        key = RefusedConnAck if cls is ConnAck and cast(ConnAck, packet).reason_code else cls
        new_state = self._sendable.get(key)
        if new_state is None:  # not in the table: its refusal raises
            new_state = TABLE.next_state(self._state, Direction.SEND, key)
        version = self._version or self._reply_version()
        if cls in MQTT5_ONLY_SENDS and version != 5:
            raise LocalProtocolError(f"a server sends {cls.TYPE.name} in MQTT 5 only")
        topic = None  # set when this PUBLISH gets an alias, committed once it is sent
        if cls is Publish and self._peer_alias_maximum:
            publish: Publish = packet  # type: ignore[assignment]  # cls is type(packet), which mypy does not narrow on; a cast is a call per PUBLISH
            if publish.properties.topic_alias is None:
                topic = publish.topic
                packet = self._with_alias(publish)
        data = encode_packet(packet, version)
        if self.peer_max_packet_size is not None and len(data) > self.peer_max_packet_size:
            raise LocalProtocolError(
                f"{cls.TYPE.name} of {len(data)} bytes exceeds the client's maximum packet size "
                f"{self.peer_max_packet_size}",
                ReasonCode.PACKET_TOO_LARGE,
            )
        if topic is not None:
            self._alias_used(topic, packet.properties.topic_alias)  # type: ignore[attr-defined]  # topic is set: packet is the aliased PUBLISH
        self._out.append(data)
        if cls is ConnAck and new_state is ConnectionState.CONNECTED:
            self._topic_alias_maximum = cast(ConnAck, packet).properties.topic_alias_maximum or 0
        if new_state is not self._state:
            self._set_state(new_state)

    def _with_alias(self, packet: Publish) -> Publish:
        """`packet` with the alias its topic has, or will get once sent."""
        aliases = self._out_aliases
        alias = aliases.get(packet.topic)
        if alias is not None:
            props = attrs.evolve(packet.properties, topic_alias=alias)
            return attrs.evolve(packet, topic="", properties=props)
        if len(aliases) < self._peer_alias_maximum:
            alias = len(aliases) + 1
        else:
            alias = next(iter(aliases.values()))  # the least recently used one
        return attrs.evolve(packet, properties=attrs.evolve(packet.properties, topic_alias=alias))

    def _alias_used(self, topic: str, alias: int) -> None:
        """A PUBLISH with `alias` for `topic` went out: remember it, most recently used last."""
        aliases = self._out_aliases
        if aliases.pop(topic, None) is None and len(aliases) >= self._peer_alias_maximum:
            del aliases[next(iter(aliases))]  # the client now maps that alias to `topic`
        aliases[topic] = alias

    def _answer_pings(self) -> None:
        while self._pings_due and self.connected:
            self._pings_due -= 1
            self._send(_PING_RESPONSE)

    def data_to_send(self) -> bytes:
        """Everything queued since the last call, as one bytes object."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return data

    # -- errors ----------------------------------------------------------------------------

    def _reply_version(self) -> int:
        """The format to answer a CONNECT that failed to decode in: MQTT 5 if it said level 5,
        else 3.1.1's (which 3.1 shares, and which mosquitto uses for unknown levels)."""
        return ProtocolVersion.MQTT_5 if self._connect_level == 5 else ProtocolVersion.MQTT_3_1_1

    def error_reply(self) -> Packet | None:
        """The packet to send before closing after a RemoteProtocolError, or None to just close
        (`CodecConnection.error_reply`; None too if nothing failed).

        Before CONNACK: a refusing CONNACK (3.1/3.1.1: only for codes that have a return code,
        e.g. 0x84 -> 0x01; MQTT 5: the reason code). After CONNACK: an MQTT 5 DISCONNECT.
        """
        error = self._error
        if error is None:
            return None
        code = error.code or ReasonCode.UNSPECIFIED_ERROR
        version = self._version or self._reply_version()
        if self._state is ConnectionState.CONNECT_FAILED:
            if version == 5:
                if code not in VALID_REASON_CODES[PacketType.CONNACK]:
                    code = ReasonCode.UNSPECIFIED_ERROR
                return ConnAck(ReasonCode(code))
            return ConnAck(ReasonCode(code)) if code in CONNACK_V3_RETURN_CODE else None
        if self._state is ConnectionState.FAILED and version == 5:
            if code not in VALID_REASON_CODES[PacketType.DISCONNECT]:
                code = ReasonCode.UNSPECIFIED_ERROR
            return Disconnect(ReasonCode(code))
        return None
