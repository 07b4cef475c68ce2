"""What the cluster port's frames carry (CLUSTER.md §4.1): one frozen class per frame type.

The HA stream (slave <-> master) and the node link (slot holder <-> queue origin) share the
frame format and the port; `TYPE` is each class's wire type. Integers are plain ints (offsets
and epochs as the store counts them), strings are str, and what the frames ship as raw bytes
(commit-log data, snapshot files, stored message records) is bytes, sliced once from what was
received. Values are checked when a frame is encoded (wire.py), not when it is built, so
decoding builds them at no extra cost.
"""

from __future__ import annotations

import enum
from typing import ClassVar, Final

import attrs

from herald.core.codec_kit import Event

VERSION: Final = 1
"""The version HELLO and LINK_HELLO carry; the codec speaks this one and refuses any other."""


class FrameType(enum.IntEnum):
    HELLO = 0x01
    EPOCHS = 0x02
    START = 0x03
    DATA = 0x04
    ACK = 0x05
    REFUSE = 0x06
    SNAP_BEGIN = 0x07
    SNAP_FILE = 0x08
    SNAP_CHUNK = 0x09
    SNAP_END = 0x0A
    LINK_HELLO = 0x20
    READ = 0x21
    ENTRIES = 0x22
    ACKS = 0x23
    ACKED = 0x24
    LINK_ERROR = 0x25


class RefuseCode(enum.IntEnum):
    """Why a REFUSE ends an HA stream or a node link."""

    NOT_MASTER = 1
    """The node is not its group's master; the text names the master's address when known."""
    STALE_EPOCH = 2
    OFFSET_UNAVAILABLE = 3
    """START asked for an offset the master no longer has (the slave needs a snapshot)."""
    BAD_SECRET = 4
    VERSION = 5


class LinkErrorCode(enum.IntEnum):
    """Why the origin refused one node-link request (LINK_ERROR)."""

    NOT_MASTER = 1
    """The node is no longer the origin group's master: re-resolve it through etcd."""
    NO_SUCH_QUEUE = 2


class HelloFlags(enum.IntFlag):
    """HELLO's flags; bits not named here are refused both ways."""

    ASYNC_LEARNER = 1
    """The slave never joins the sync set: the master does not wait for its acks."""


NO_FLAGS: Final = HelloFlags(0)


def _short(data: bytes) -> str:
    """A repr of shipped bytes that does not print 256 KiB."""
    return repr(data) if len(data) <= 32 else f"<{len(data)} bytes>"


@attrs.frozen
class Frame(Event):
    """Base of every cluster port frame: the codec kit's `Event`, under the port's name."""

    TYPE: ClassVar[FrameType]


# -- the HA stream ------------------------------------------------------------------------------


@attrs.frozen
class Hello(Frame):
    """HELLO, slave -> master, the HA stream's first frame (RocketMQ 5's handshake, plus the
    cluster's secret): who the slave is and where its log ends. The version on the wire is
    `VERSION`."""

    TYPE: ClassVar[FrameType] = FrameType.HELLO
    cluster: str
    group: str
    node: str
    secret: str = attrs.field(repr=False)
    max_offset: int
    flags: HelloFlags = NO_FLAGS


@attrs.frozen
class EpochStart:
    """One line of an epoch file: `epoch` began at log offset `start`."""

    epoch: int
    start: int


@attrs.frozen
class Epochs(Frame):
    """EPOCHS, master -> slave, the answer to HELLO: the master's epoch, its log end and its
    epoch list, from which the slave computes its truncation point (CLUSTER.md §3.3)."""

    TYPE: ClassVar[FrameType] = FrameType.EPOCHS
    epoch: int
    master_max: int
    epochs: tuple[EpochStart, ...]


SNAPSHOT_OFFSET: Final = 2**64 - 1
"""START's `from_offset` asking for a snapshot instead of an offset: the slave's log cannot be
a prefix of the master's (no shared epoch, no checkpoint at or below its cut)."""


@attrs.frozen
class Start(Frame):
    """START, slave -> master: stream from `from_offset` (the slave's log end after truncation),
    or first ship a snapshot (`SNAPSHOT_OFFSET`). The master ships one too when it no longer
    holds every segment from `from_offset` on."""

    TYPE: ClassVar[FrameType] = FrameType.START
    from_offset: int

    @property
    def wants_snapshot(self) -> bool:
        return self.from_offset == SNAPSHOT_OFFSET


@attrs.frozen
class Data(Frame):
    """DATA, master -> slave: commit-log bytes at `offset`, all of one epoch and one segment,
    with the master's confirm offset. An empty `payload` is the heartbeat of an idle second;
    it still carries the epoch, the master's log end and its confirm offset."""

    TYPE: ClassVar[FrameType] = FrameType.DATA
    epoch: int
    epoch_start: int
    offset: int
    confirm_offset: int
    payload: bytes = attrs.field(default=b"", repr=_short)

    @property
    def heartbeat(self) -> bool:
        return not self.payload


@attrs.frozen
class Ack(Frame):
    """ACK, slave -> master: the slave's log holds everything below `written`, and everything
    below `flushed` is fsynced."""

    TYPE: ClassVar[FrameType] = FrameType.ACK
    written: int
    flushed: int


@attrs.frozen
class Refuse(Frame):
    """REFUSE, either way, on either stream: the sender hangs up, for `code`'s reason."""

    TYPE: ClassVar[FrameType] = FrameType.REFUSE
    code: RefuseCode
    text: str = ""


@attrs.frozen
class SnapBegin(Frame):
    """SNAP_BEGIN, master -> slave: a snapshot resync starts; `checkpoint` is the pinned
    checkpoint file's bytes."""

    TYPE: ClassVar[FrameType] = FrameType.SNAP_BEGIN
    checkpoint: bytes = attrs.field(repr=_short)


@attrs.frozen
class SnapFile(Frame):
    """SNAP_FILE, master -> slave: the SNAP_CHUNKs that follow are the file `relpath` (relative
    to the store directory), `size` bytes in all."""

    TYPE: ClassVar[FrameType] = FrameType.SNAP_FILE
    relpath: str
    size: int


@attrs.frozen
class SnapChunk(Frame):
    """SNAP_CHUNK, master -> slave: the next bytes of the file the last SNAP_FILE named."""

    TYPE: ClassVar[FrameType] = FrameType.SNAP_CHUNK
    data: bytes = attrs.field(repr=_short)


@attrs.frozen
class SnapEnd(Frame):
    """SNAP_END, master -> slave: the snapshot is complete; DATA resumes at `log_end`."""

    TYPE: ClassVar[FrameType] = FrameType.SNAP_END
    log_end: int


# -- the node link ------------------------------------------------------------------------------


@attrs.frozen
class LinkHello(Frame):
    """LINK_HELLO: the holder's first frame on a node link, and the origin's answer to it (each
    end says who it is). The version on the wire is `VERSION`."""

    TYPE: ClassVar[FrameType] = FrameType.LINK_HELLO
    cluster: str
    node: str
    secret: str = attrs.field(repr=False)


@attrs.frozen
class Read(Frame):
    """READ, holder -> origin: request `req` for the messages of a slot, queue offsets `first`
    to `last` of `queue` in `vhost`, at most `limit` of them and about `max_bytes`."""

    TYPE: ClassVar[FrameType] = FrameType.READ
    req: int
    vhost: str
    queue: str
    first: int
    last: int
    limit: int
    max_bytes: int


@attrs.frozen
class Entry:
    """One message of ENTRIES: its queue offset, delivery count and stored record."""

    offset: int
    delivery_count: int
    record: bytes = attrs.field(repr=_short)


@attrs.frozen
class Entries(Frame):
    """ENTRIES, origin -> holder, the answer to READ `req`: the messages found, `more` when
    the range holds more than `limit` / `max_bytes` let through."""

    TYPE: ClassVar[FrameType] = FrameType.ENTRIES
    req: int
    entries: tuple[Entry, ...]
    more: bool = False


@attrs.frozen
class Acks(Frame):
    """ACKS, holder -> origin: request `req` to ack these queue offsets of `queue`."""

    TYPE: ClassVar[FrameType] = FrameType.ACKS
    req: int
    vhost: str
    queue: str
    offsets: tuple[int, ...]


@attrs.frozen
class Acked(Frame):
    """ACKED, origin -> holder: the acks of ACKS `req` are durable (and replicated in sync
    mode)."""

    TYPE: ClassVar[FrameType] = FrameType.ACKED
    req: int


@attrs.frozen
class LinkError(Frame):
    """LINK_ERROR, origin -> holder: request `req` failed for `code`'s reason; the link stays."""

    TYPE: ClassVar[FrameType] = FrameType.LINK_ERROR
    req: int
    code: LinkErrorCode
    text: str = ""


FRAME_CLASSES: dict[FrameType, type[Frame]] = {
    cls.TYPE: cls
    for cls in (
        Hello,
        Epochs,
        Start,
        Data,
        Ack,
        Refuse,
        SnapBegin,
        SnapFile,
        SnapChunk,
        SnapEnd,
        LinkHello,
        Read,
        Entries,
        Acks,
        Acked,
        LinkError,
    )
}
