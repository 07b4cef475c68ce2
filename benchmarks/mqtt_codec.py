"""MQTT codec throughput: PUBLISH decode/encode rates, 100-byte payload, QoS 0/1, MQTT 3.1.1/5.0.

Decode feeds N client PUBLISH packets to a server `MQTTConnection` in 64 KiB chunks (as a
socket would deliver them) and drains `next_event()`; encode queues N PUBLISH packets with
`send()` and collects `data_to_send()` every 64 packets. The MQTT 5 packets carry no properties
(the common case); a third 5.0 series adds a topic alias and one user property. Prints one
JSON object of packets per second, the median of 5 runs each. Runs are interleaved across the
series and timed in process CPU time, so other load on a shared machine skews them less.

Run: python benchmarks/mqtt_codec.py [--packets 50000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from herald.plugins.mqtt.codec import (
    NEED_DATA,
    NO_PROPERTIES,
    ConnAck,
    Connect,
    MQTTConnection,
    Properties,
    Publish,
    encode_packet,
)

REPEATS = 5
PAYLOAD = bytes(range(100))
TOPIC = "sensors/building-1/floor-3/temperature"
CHUNK = 65_536


def connected(version: int) -> MQTTConnection:
    conn = MQTTConnection()
    conn.receive_data(encode_packet(Connect("bench", version), version))
    assert isinstance(conn.next_event(), Connect)
    conn.send(ConnAck(properties=Properties(topic_alias_maximum=10 if version == 5 else None)))
    conn.data_to_send()
    return conn


def publishes(qos: int, count: int, props: Properties | None) -> list[Publish]:
    properties = NO_PROPERTIES if props is None else props
    return [
        Publish(
            TOPIC, PAYLOAD, qos, packet_id=(i % 65535) + 1 if qos else None, properties=properties
        )
        for i in range(count)
    ]


def decode_rate(version: int, packets: list[Publish]) -> float:
    wire = b"".join(encode_packet(p, version) for p in packets)
    chunks = [wire[i : i + CHUNK] for i in range(0, len(wire), CHUNK)]
    conn = connected(version)
    start = time.process_time()
    decoded = 0
    for chunk in chunks:
        conn.receive_data(chunk)
        while conn.next_event() is not NEED_DATA:
            decoded += 1
    elapsed = time.process_time() - start
    assert decoded == len(packets), decoded
    return len(packets) / elapsed


def encode_rate(version: int, packets: list[Publish]) -> float:
    conn = connected(version)
    send = conn.send
    start = time.process_time()
    for i, packet in enumerate(packets):
        send(packet)
        if not i & 63:
            conn.data_to_send()
    conn.data_to_send()
    return len(packets) / (time.process_time() - start)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=50_000)
    count = parser.parse_args(argv).packets
    alias_props = Properties(topic_alias=1, user_properties=[("k", "v")])
    series: dict[str, tuple[int, int, Properties | None]] = {
        "mqtt311_qos0": (4, 0, None),
        "mqtt311_qos1": (4, 1, None),
        "mqtt5_qos0": (5, 0, None),
        "mqtt5_qos1": (5, 1, None),
        "mqtt5_qos1_alias_userprop": (5, 1, alias_props),
    }
    result: dict[str, object] = {
        "unit": "packets per second (median of 5)",
        "payload_bytes": len(PAYLOAD),
        "packets": count,
    }
    cases = {
        name: (version, publishes(qos, count, props))
        for name, (version, qos, props) in series.items()
    }
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(REPEATS):
        for name, (version, packets) in cases.items():
            for kind, rate in (("decode", decode_rate), ("encode", encode_rate)):
                samples.setdefault((name, kind), []).append(rate(version, packets))
    rates: dict[str, dict[str, int]] = {}
    for (name, kind), values in samples.items():
        rates.setdefault(name, {})[kind] = round(statistics.median(values))
    result.update(rates)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
