"""`df.write.format("herald")` and `writeStream.format("herald")`: rows published into a
running broker over AMQP 0-9-1 with publisher confirms.

Each Spark task opens one connection (pika) and publishes its rows; `basic_publish` in
confirm mode returns only when the broker confirmed the message, which for a persistent
message means it is stored as the broker's flush policy promises (docs/storage.md). A task
returns its commit message only after its last confirm, so when Spark commits a job every row
is durable in the broker. With `mandatory` (the default) a row no queue takes fails the task
instead of vanishing. A retried task publishes its rows again: delivery is at least once.

Where a row goes: a `destination` column (STOMP-style: `/queue/q`, `/topic/key`,
`/exchange/e/key`, or a bare queue name), else `exchange` and `routing_key` columns, else the
`exchange` / `routingKey` options. The body is the `body` column (binary or string);
`headers` (a map), `message_id`, `content_type`, `priority` columns are used when present.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from herald.pipeline.options import OptionError, _get, parse_bool

log = logging.getLogger(__name__)

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


@attrs.frozen
class WriteOptions:
    url: str = DEFAULT_URL
    exchange: str = ""
    routing_key: str | None = None
    persistent: bool = True
    mandatory: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> WriteOptions:
        return cls(
            url=_get(options, "url") or _get(options, "path") or DEFAULT_URL,
            exchange=_get(options, "exchange") or "",
            routing_key=_get(options, "routingKey"),
            persistent=parse_bool(options, "persistent", True),
            mandatory=parse_bool(options, "mandatory", True),
        )


def route(destination: str) -> tuple[str, str]:
    """(exchange, routing key) of a STOMP-style destination, as the STOMP plugin maps them."""
    if destination.startswith("/queue/"):
        return "", destination[len("/queue/") :]
    if destination.startswith("/amq/queue/"):
        return "", destination[len("/amq/queue/") :]
    if destination.startswith("/topic/"):
        return "amq.topic", destination[len("/topic/") :]
    if destination.startswith("/exchange/"):
        exchange, _, key = destination[len("/exchange/") :].partition("/")
        return exchange, key
    return "", destination


@attrs.frozen
class PublishedMessage(WriterCommitMessage):
    """What one task published (all of it confirmed)."""

    partition: int
    count: int


class Publisher:
    """One task's AMQP connection: publish rows, each confirmed before the next."""

    def __init__(self, options: WriteOptions, columns: list[str]) -> None:
        import pika

        self.pika = pika
        self.options = options
        self.columns = set(columns)
        self.connection = pika.BlockingConnection(pika.URLParameters(options.url))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def publish(self, row: Any) -> None:
        values = row.asDict()
        exchange, key = self._route(values)
        body = values.get("body")
        if body is None:
            raise ValueError("herald writer: a row has no body (a `body` column is required)")
        if isinstance(body, str):
            body = body.encode()
        headers = values.get("headers") if "headers" in self.columns else None
        properties = self.pika.BasicProperties(
            delivery_mode=2 if self.options.persistent else 1,
            headers=dict(headers) if headers else None,
            message_id=values.get("message_id"),
            content_type=values.get("content_type"),
            priority=values.get("priority") if "priority" in self.columns else None,
        )
        try:
            self.channel.basic_publish(
                exchange, key, bytes(body), properties, mandatory=self.options.mandatory
            )
        except self.pika.exceptions.UnroutableError:
            raise RuntimeError(
                f"herald writer: no queue took a message for exchange {exchange!r} routing key "
                f"{key!r} (set mandatory=false to allow that)"
            ) from None
        except self.pika.exceptions.NackError:
            raise RuntimeError("herald writer: the broker refused a message (nack)") from None

    def _route(self, values: Mapping[str, Any]) -> tuple[str, str]:
        destination = values.get("destination")
        if destination:
            return route(destination)
        exchange = values.get("exchange")
        key = values.get("routing_key")
        exchange = self.options.exchange if exchange is None else exchange
        key = self.options.routing_key if key is None else key
        if key is None:
            raise OptionError(
                "herald writer: no routing key: give a destination or routing_key column, "
                "or the routingKey option"
            )
        return exchange, key

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()


def _publish_all(options: WriteOptions, schema: StructType, rows: Iterator[Any]) -> int:
    publisher = Publisher(options, schema.fieldNames())
    count = 0
    try:
        for row in rows:
            publisher.publish(row)
            count += 1
    finally:
        publisher.close()
    return count


def _partition_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class HeraldWriter(DataSourceWriter):
    """Batch writes (`.mode("append")`)."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        count = _publish_all(self.options, self.schema, iterator)
        return PublishedMessage(_partition_id(), count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.count for m in messages if isinstance(m, PublishedMessage))
        log.info("herald writer: %d message(s) published and confirmed", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = sum(m.count for m in messages if isinstance(m, PublishedMessage))
        log.error("herald writer: job aborted after %d confirmed message(s)", done)


class HeraldStreamWriter(DataSourceStreamWriter):
    """Streaming writes: each micro-batch's rows, confirmed before Spark commits the batch."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        count = _publish_all(self.options, self.schema, iterator)
        return PublishedMessage(_partition_id(), count)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.count for m in messages if isinstance(m, PublishedMessage))
        log.info("herald stream writer: batch %d, %d message(s) confirmed", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.error("herald stream writer: batch %d aborted", batchId)
