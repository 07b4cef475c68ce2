"""The columns of `format("herald")`, as a Spark DDL string and as the Arrow schema the reader's
batches must equal exactly (Spark compares names, order, types and nullability).

One row per message record. A message routed to several queues is stored once with several
targets: its row names the first target in `queue` / `queue_id` / `queue_offset` and all of
them in `queues`, so counts per message are not inflated and per-queue counts are one
`explode(queues)` away.
"""

from __future__ import annotations

import pyarrow as pa

COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("offset", "BIGINT", pa.int64()),  # the record's physical commit-log offset
    ("vhost", "STRING", pa.string()),  # the first target queue's virtual host
    ("exchange", "STRING", pa.string()),
    ("routing_key", "STRING", pa.string()),
    ("queue", "STRING", pa.string()),  # the first target queue's name (null: unknown id)
    ("queue_id", "BIGINT", pa.int64()),
    ("queue_offset", "BIGINT", pa.int64()),
    ("queues", "ARRAY<STRING>", pa.list_(pa.field("element", pa.string()))),
    ("protocol", "STRING", pa.string()),  # amqp, mqtt, stomp or herald (kernel API)
    ("message_id", "STRING", pa.string()),
    ("headers", "MAP<STRING,STRING>", pa.map_(pa.string(), pa.string())),
    ("properties", "MAP<STRING,STRING>", pa.map_(pa.string(), pa.string())),
    ("body", "BINARY", pa.binary()),
    ("body_size", "INT", pa.int32()),
    ("stored_size", "INT", pa.int32()),  # the record's bytes in the log
    ("persistent", "BOOLEAN", pa.bool_()),
    ("priority", "INT", pa.int32()),
    ("expiration_ms", "BIGINT", pa.int64()),
    ("born_time", "TIMESTAMP", pa.timestamp("us", tz="UTC")),  # publisher side
    ("store_time", "TIMESTAMP", pa.timestamp("us", tz="UTC")),  # broker clock, never decreases
)

NAMES = tuple(name for name, _, _ in COLUMNS)
GROUP = "group"
"""The last column of a cluster's read (`.option("cluster", ...)`): the group's name."""


def ddl(body_as_text: bool = False, group: bool = False) -> str:
    """The Spark schema; with `body_as_text` the body column is STRING (UTF-8, invalid bytes
    replaced); with `group` (a cluster's read) a last column `group STRING`."""
    parts = []
    for name, sql, _ in COLUMNS:
        if name == "body" and body_as_text:
            sql = "STRING"
        parts.append(f"{name} {sql}")
    if group:
        parts.append(f"`{GROUP}` STRING")
    return ", ".join(parts)


def with_group(batch: pa.RecordBatch, group: str) -> pa.RecordBatch:
    """`batch` with the `group` column (one value, repeated) appended."""
    return batch.append_column(GROUP, pa.repeat(pa.scalar(group), batch.num_rows))


def arrow_schema(body_as_text: bool = False) -> pa.Schema:
    fields = []
    for name, _, kind in COLUMNS:
        if name == "body" and body_as_text:
            kind = pa.string()
        if isinstance(kind, pa.MapType):  # Spark's map entries: non-null key, nullable value
            kind = pa.map_(pa.field("key", pa.string(), nullable=False), pa.string())
        fields.append(pa.field(name, kind))
    return pa.schema(fields)
