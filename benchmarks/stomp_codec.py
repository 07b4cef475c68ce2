"""STOMP codec throughput: decoding SEND frames and encoding MESSAGE frames.

Decode: N SEND frames (4 headers including content-length, 100-byte body) back to back, fed to
an open server `StompConnection` in 64 KiB receives, then read with `next_event()`; a second
series feeds frames without content-length (the body ends at the NUL). Encode: N MESSAGE frames
(4 headers plus the content-length the writer adds, 100-byte body) through `send()`, with
`data_to_send()` every 64 frames. Prints one JSON object with the median of 5 repetitions
(frames per second, and MB/s of wire bytes) for STOMP 1.2.

Run: python benchmarks/stomp_codec.py [--frames 100000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

from herald.plugins.stomp.codec import NEED_DATA, Frame, StompConnection, encode_frame

REPEATS = 5
CHUNK = 64 * 1024
BODY = bytes(range(100))
VERSION = "1.2"


def open_connection() -> StompConnection:
    conn = StompConnection()
    conn.receive_data(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
    assert conn.next_event() is not NEED_DATA
    conn.version = VERSION
    conn.send(Frame("CONNECTED", (("version", VERSION),)))
    conn.data_to_send()
    return conn


def send_wire(frames: int, content_length: bool) -> bytes:
    headers = [("destination", "/queue/bench"), ("content-type", "application/octet-stream")]
    headers.append(("persistent", "true"))
    body = BODY.replace(b"\x00", b"\x01")  # a NUL-terminated body may not contain NUL
    one = encode_frame(Frame("SEND", headers, body), VERSION)
    if not content_length:
        one = one.replace(b"content-length:100\n", b"receipt:none\n")
    return one * frames


def decode(wire: bytes, frames: int) -> float:
    """Seconds to read `frames` frames from `wire`."""
    conn = open_connection()
    receive, next_event = conn.receive_data, conn.next_event
    count = 0
    start = time.perf_counter()
    for offset in range(0, len(wire), CHUNK):
        receive(wire[offset : offset + CHUNK])
        while next_event() is not NEED_DATA:
            count += 1
    elapsed = time.perf_counter() - start
    assert count == frames, count
    return elapsed


def message_batch() -> list[Frame]:
    """64 MESSAGE frames as a session would deliver them (message ids differ)."""
    return [
        Frame(
            "MESSAGE",
            (
                ("subscription", "0"),
                ("message-id", f"T_0@@session-1@@{i}"),
                ("destination", "/queue/bench"),
                ("content-type", "application/octet-stream"),
            ),
            BODY,
        )
        for i in range(64)
    ]


def encode(frames: int) -> float:
    """Seconds to queue and collect `frames` MESSAGE frames."""
    conn = open_connection()
    send, data_to_send = conn.send, conn.data_to_send
    batch = message_batch()
    start = time.perf_counter()
    for _ in range(frames // len(batch)):
        for message in batch:
            send(message)
        data_to_send()
    return time.perf_counter() - start


def medians(cases: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Median seconds of each case; repetitions interleave the cases."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(REPEATS):
        for name, case in cases.items():
            samples[name].append(case())
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000, help="frames per repetition")
    args = parser.parse_args(argv)
    frames = args.frames - args.frames % 64
    with_length = send_wire(frames, content_length=True)
    without_length = send_wire(frames, content_length=False)
    batch = message_batch()
    message_bytes = sum(len(encode_frame(m, VERSION)) for m in batch) * (frames // len(batch))
    result = medians(
        {
            "decode": lambda: decode(with_length, frames),
            "decode_nul": lambda: decode(without_length, frames),
            "encode": lambda: encode(frames),
        }
    )

    def rates(seconds: float, wire_bytes: int) -> dict[str, float]:
        return {
            "frames_per_s": round(frames / seconds),
            "mb_per_s": round(wire_bytes / seconds / 1e6, 1),
        }

    print(
        json.dumps(
            {
                "benchmark": "stomp_codec",
                "python": sys.version.split()[0],
                "version": VERSION,
                "frames_per_repeat": frames,
                "repeats": REPEATS,
                "send_frame_bytes": len(with_length) // frames,
                "decode_send_content_length": rates(result["decode"], len(with_length)),
                "decode_send_nul_terminated": rates(result["decode_nul"], len(without_length)),
                "encode_message": rates(result["encode"], message_bytes),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
