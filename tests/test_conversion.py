"""Message conversion between protocols: raw bytes for the same protocol, one conversion
(cached) for another, and the converter hook in front of the codecs."""

from __future__ import annotations

import json
from pathlib import Path

from herald.core import hookimpl
from herald.core.consumer import Consumer
from herald.core.embedding import embedded
from herald.core.message import CodecRegistry, Content, Message, Properties
from herald.core.queue import QueueEntry
from herald.storage.memory import MemoryStore


class JsonLinesCodec:
    """A toy protocol whose wire form is one JSON object: {"type": ..., "body": ...}."""

    protocol = "jsonl"

    def __init__(self) -> None:
        self.encoded = 0

    def decode(self, raw: bytes) -> Content:
        data = json.loads(raw)
        return Content(Properties(type=data.get("type")), data["body"].encode())

    def encode(self, content: Content, message: Message) -> bytes:
        self.encoded += 1
        return json.dumps({"type": content.properties.type, "body": content.body.decode()}).encode()


class JsonLinesPlugin:
    def __init__(self) -> None:
        self.codec = JsonLinesCodec()

    @hookimpl
    def herald_message_codecs(self) -> list[JsonLinesCodec]:
        return [self.codec]


class ShoutingConverter:
    """A plugin that takes over conversions to 'jsonl' from native messages."""

    @hookimpl
    def herald_convert_message(self, message: Message, target_protocol: str) -> bytes | None:
        if target_protocol == "jsonl" and message.protocol == "herald":
            assert message.content is not None
            return b'{"body": "' + message.content.body.upper() + b'"}'
        return None


class ProtocolSink:
    def __init__(self, protocol: str, codecs: CodecRegistry) -> None:
        self.protocol = protocol
        self.codecs = codecs
        self.sent: list[bytes] = []

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        self.sent.append(entry.message.raw_for(self.protocol, self.codecs))
        entry.queue.ack(entry)

    def consumer_cancelled(self, consumer: Consumer) -> None:
        pass


async def test_same_protocol_gets_raw_other_protocol_converts_once(tmp_path: Path) -> None:
    plugin = JsonLinesPlugin()
    async with embedded(
        data_dir=tmp_path, extra_plugins=[plugin], store=MemoryStore(), plugins=[]
    ) as broker:
        vhost = broker.default_vhost
        for name in ("a", "b", "c"):
            vhost.declare_queue(name)
            vhost.bind_queue(name, "amq.fanout")
        raw = b'{"type": "greeting", "body": "hi"}'
        message = Message("jsonl", raw, "amq.fanout", "", body_size=2)
        same = ProtocolSink("jsonl", broker.codecs)
        native_1 = ProtocolSink("herald", broker.codecs)
        native_2 = ProtocolSink("herald", broker.codecs)
        vhost.queues["a"].add_consumer("1", same)
        vhost.queues["b"].add_consumer("2", native_1)
        vhost.queues["c"].add_consumer("3", native_2)
        vhost.publish(message)
        assert same.sent == [raw]  # untouched: the same object the publisher sent
        assert same.sent[0] is raw
        assert native_1.sent == native_2.sent
        assert native_1.sent[0] is native_2.sent[0]  # converted once, cached on the message
        content = broker.codecs.decode("herald", native_1.sent[0])
        assert content == Content(Properties(type="greeting"), b"hi")


async def test_native_message_converted_by_the_target_codec(tmp_path: Path) -> None:
    plugin = JsonLinesPlugin()
    async with embedded(
        data_dir=tmp_path, extra_plugins=[plugin], store=MemoryStore(), plugins=[]
    ) as broker:
        message = Message.native(b"hello", properties=Properties(type="note"))
        assert message.raw_for("jsonl", broker.codecs) == b'{"type": "note", "body": "hello"}'
        message.raw_for("jsonl", broker.codecs)
        assert plugin.codec.encoded == 1


async def test_converter_hook_takes_precedence(tmp_path: Path) -> None:
    async with embedded(
        data_dir=tmp_path,
        extra_plugins=[JsonLinesPlugin(), ShoutingConverter()],
        store=MemoryStore(),
        plugins=[],
    ) as broker:
        message = Message.native(b"hello")
        assert message.raw_for("jsonl", broker.codecs) == b'{"body": "HELLO"}'
        # The hook declines other pairs: the codecs do the work.
        foreign = Message("jsonl", b'{"body": "x"}', "", "", body_size=1)
        assert broker.codecs.decode("herald", foreign.raw_for("herald", broker.codecs)).body == b"x"
