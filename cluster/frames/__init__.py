"""The cluster port's frames (CLUSTER.md §4.1), sans-IO: no sockets, no Trio, no kernel.

One port carries two streams, both `u32 length | u8 type | body` frames, big-endian: the HA
stream (a slave replicating its master's commit log) and the node link (a slot holder reading
and acking a shared queue's messages on their origin). `FrameConnection(role)` is one end of
either; `encode` / `FrameReader` work on any frame, with no connection rules.

    conn = FrameConnection(Role.HA_SLAVE)
    conn.send(Hello("c1", "g1", "n2", secret, max_offset=log_end))
    stream.send_all(conn.data_to_send())
    conn.receive_data(await stream.receive_some())   # b"" at the end of the stream
    while (frame := conn.next_event()) is not NEED_DATA:
        ...                                          # Epochs, Data, ...; ConnectionClosed

`NEED_DATA`, `ConnectionClosed` and the error types are core/codec_kit.py's, the same in every
codec. On `RemoteProtocolError` send `conn.error_reply()` if it is not None, then close.
"""

from herald.cluster.frames.connection import FrameConnection
from herald.cluster.frames.events import (
    FRAME_CLASSES,
    SNAPSHOT_OFFSET,
    VERSION,
    Ack,
    Acked,
    Acks,
    Data,
    Entries,
    Entry,
    Epochs,
    EpochStart,
    Frame,
    FrameType,
    Hello,
    HelloFlags,
    LinkError,
    LinkErrorCode,
    LinkHello,
    Read,
    Refuse,
    RefuseCode,
    SnapBegin,
    SnapChunk,
    SnapEnd,
    SnapFile,
    Start,
)
from herald.cluster.frames.reader import FrameReader
from herald.cluster.frames.state import Role, State
from herald.cluster.frames.wire import MAX_FRAME, encode
from herald.core.codec_kit import NEED_DATA, ConnectionClosed

__all__ = [
    "FRAME_CLASSES",
    "MAX_FRAME",
    "NEED_DATA",
    "SNAPSHOT_OFFSET",
    "VERSION",
    "Ack",
    "Acked",
    "Acks",
    "ConnectionClosed",
    "Data",
    "Entries",
    "Entry",
    "EpochStart",
    "Epochs",
    "Frame",
    "FrameConnection",
    "FrameReader",
    "FrameType",
    "Hello",
    "HelloFlags",
    "LinkError",
    "LinkErrorCode",
    "LinkHello",
    "Read",
    "Refuse",
    "RefuseCode",
    "Role",
    "SnapBegin",
    "SnapChunk",
    "SnapEnd",
    "SnapFile",
    "Start",
    "State",
    "encode",
]
