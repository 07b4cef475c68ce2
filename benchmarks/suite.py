"""The whole benchmark suite in one command: herald against its peers, JSON lines out and a
Markdown summary with every issue-9 target marked met or not.

    python benchmarks/suite.py [--peers rabbitmq,mosquitto,amqtt] [--host 127.0.0.1]
        [--port NAME.PROTOCOL=PORT ...] [--only amqp,mqtt,stomp,deep,connections]
        [--repeat 3] [--quick] [--out suite.jsonl] [--markdown suite.md]

Each part is one of the benchmarks beside this file, run as its own process so a crash or a
hang in one leaves the others' figures:
- amqp, mqtt, stomp: amqp_throughput.py, mqtt_throughput.py, stomp_throughput.py with every
  peer that speaks the protocol. They start herald themselves, run the same client processes
  (publishers and consumers are separate processes) against each broker in turn case by case
  (A B A B, so the machine's noise hits them alike), and report medians, broker CPU per
  delivered message (psutil on the broker's pid when it runs here) and herald / peer ratios;
- deep: deep_queue.py --consumer pika, 10 M stored 100 B messages in one queue (herald only:
  it publishes through the kernel in-process, a pika consumer drains): RSS and drain rate
  against a queue of 10,000 (`deep_queue.py` alone, without `--consumer pika`, gives the
  harder in-process figure);
- connections: floods.py's idle-mqtt, 10,000 idle MQTT clients (herald only): RSS per
  connection.

Peers are brokers already running (benchmarks/peers.sh starts RabbitMQ, Mosquitto and amqtt on
the ports below) on `--host`; `--port mybroker.mqtt=1883` overrides a port or adds a broker of
any name (the host may be given too: `mybroker.amqp=10.0.0.5:5672`). A peer not answering on
its port is left out and its targets reported "not measured".

Output: one JSON line per figure (benchmark, scenario, broker, the medians), one per scenario
with the ratios, one per target, to stdout or `--out`; the Markdown summary (benchmarks/
suite_report.py) to `--markdown` or stderr. `--quick` runs every part small and once, to check
the suite itself (about 5 minutes); its figures are not the ones to quote.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from suite_report import markdown, targets

HERE = Path(__file__).resolve().parent

PEER_PORTS: dict[str, dict[str, int]] = {
    "rabbitmq": {"amqp": 5673, "mqtt": 1884, "stomp": 61614},
    "mosquitto": {"mqtt": 1886},
    "amqtt": {"mqtt": 1885},
}

# (script, arguments) per part; `quick` arguments replace the full run's
PARTS: dict[str, dict[str, Any]] = {
    "amqp": {
        "script": "amqp_throughput.py",
        "full": [],
        "quick": ["--messages", "10000", "--seconds", "2"],
    },
    "mqtt": {
        "script": "mqtt_throughput.py",
        "full": [],
        "quick": ["--messages", "5000", "--seconds", "2"],
    },
    "stomp": {
        "script": "stomp_throughput.py",
        "full": [],
        "quick": ["--messages", "5000", "--seconds", "2"],
    },
    "deep": {
        "script": "deep_queue.py",
        "full": ["--messages", "10000000", "--consumer", "pika"],
        "quick": ["--messages", "500000", "--repeat-small", "3", "--consumer", "pika"],
    },
    "connections": {
        "script": "floods.py",
        "full": ["--scenarios", "idle-mqtt", "--connections", "10000"],
        "quick": ["--scenarios", "idle-mqtt", "--connections", "1000"],
    },
}
PROTOCOL_PARTS = ("amqp", "mqtt", "stomp")


def answering(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def peer_addresses(args: argparse.Namespace) -> dict[str, dict[str, tuple[str, int]]]:
    """Each selected peer's address per protocol, defaults first, then `--port` overrides."""
    wanted = [p for p in args.peers.split(",") if p]
    peers = {
        name: {proto: (args.host, port) for proto, port in PEER_PORTS.get(name, {}).items()}
        for name in wanted
    }
    for item in args.port:
        key, _, where = item.partition("=")
        name, _, protocol = key.partition(".")
        if protocol not in PROTOCOL_PARTS or not where:
            raise SystemExit(f"--port {item!r}: NAME.PROTOCOL=[HOST:]PORT (amqp|mqtt|stomp)")
        host, _, port = where.rpartition(":")
        peers.setdefault(name, {})[protocol] = (host or args.host, int(port))
    return peers


def part_command(part: str, args: argparse.Namespace, peers: dict, notes: list[str]) -> list[str]:
    spec = PARTS[part]
    command = [sys.executable, str(HERE / spec["script"])]
    command += spec["quick"] if args.quick else spec["full"]
    if part in PROTOCOL_PARTS:
        brokers = ["herald"]
        for name, by_protocol in peers.items():
            if part not in by_protocol:
                continue
            host, port = by_protocol[part]
            if answering(host, port):
                brokers.append(f"{name}={host}:{port}")
            else:
                notes.append(f"{name} did not answer on {host}:{port}: left out of {part}")
        command += ["--brokers", ",".join(brokers)]
        command += ["--repeat", "1" if args.quick else str(args.repeat)]
    return command


def run_part(part: str, command: list[str]) -> dict[str, Any]:
    """Run one benchmark process; its JSON, or the reason it has none."""
    started = time.monotonic()
    print(f"suite: {part}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, cwd=HERE)
    seconds = round(time.monotonic() - started, 1)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-5:]
        return {"part": part, "error": f"exit {done.returncode}: {' | '.join(tail)}"}
    shown = ["python", f"benchmarks/{Path(command[1]).name}", *command[2:]]
    return {"part": part, "seconds": seconds, "command": shown, **json.loads(done.stdout)}


def json_lines(results: dict[str, dict]) -> list[dict]:
    """Flatten the parts' JSON: a line per figure, per ratio set, per scalar result."""
    lines: list[dict] = []
    for part, result in results.items():
        if "error" in result:
            lines.append({"part": part, "error": result["error"]})
        elif part in PROTOCOL_PARTS:
            for scenario, by_broker in result["scenarios"].items():
                for broker, figures in by_broker.items():
                    lines.append({"part": part, "scenario": scenario, "broker": broker, **figures})
                ratio = result["herald_vs_peers"].get(scenario)
                if ratio:
                    lines.append({"part": part, "scenario": scenario, "ratios": ratio})
        elif part == "deep":
            deep = result["deep"]
            lines.append(
                {
                    "part": part,
                    "broker": "herald",
                    "messages": deep["messages"],
                    "rss_mb": deep["rss_mb"],
                    "deep_drain_msgs_per_s": deep["drain_msgs_per_s"],
                    "small_drain_msgs_per_s": result["small"]["drain_msgs_per_s"],
                    "drain_ratio": result["drain_ratio"],
                    "drain_ratio_cpu": result["drain_ratio_cpu"],
                }
            )
        elif part == "connections":
            lines.append({"part": part, "broker": "herald", **result["idle-mqtt"]})
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peers", default="rabbitmq,mosquitto,amqtt")
    parser.add_argument("--host", default="127.0.0.1", help="where the peers listen")
    parser.add_argument("--port", action="append", default=[], help="NAME.PROTOCOL=[HOST:]PORT")
    parser.add_argument("--only", default=",".join(PARTS), help="parts to run")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds per part")
    parser.add_argument("--quick", action="store_true", help="small and once: checks the suite")
    parser.add_argument("--out", type=Path, help="JSON lines here instead of stdout")
    parser.add_argument("--markdown", type=Path, help="the summary here instead of stderr")
    args = parser.parse_args(argv)
    parts = [p for p in args.only.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown parts {sorted(unknown)}: choose from {list(PARTS)}")
    peers = peer_addresses(args)
    notes: list[str] = []
    results = {part: run_part(part, part_command(part, args, peers, notes)) for part in parts}
    verdicts = targets(results)
    lines = json_lines(results)
    lines += [{"part": "targets", **verdict} for verdict in verdicts]
    lines += [{"part": "notes", "note": note} for note in notes]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    summary = markdown(results, verdicts, notes, quick=args.quick)
    if args.markdown:
        args.markdown.write_text(summary)
    else:
        sys.stderr.write(summary)
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
