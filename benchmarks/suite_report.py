"""The suite's verdicts and Markdown summary (benchmarks/suite.py): issue 9's targets checked
against the figures of one run, and the tables a reader compares brokers by."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Verdict = dict[str, Any]


def _throughput(key: str) -> bool:
    return not key.endswith("/latency")


def _ratios(
    results: dict, part: str, peer: str, select: Callable[[str], bool]
) -> list[tuple[str, float]]:
    """herald / peer throughput ratios of the part's scenarios that `select` picks."""
    found = results.get(part, {}).get("herald_vs_peers", {})
    return [
        (scenario, ratios[f"vs_{peer}"])
        for scenario, ratios in found.items()
        if _throughput(scenario) and select(scenario) and f"vs_{peer}" in ratios
    ]


def _at_least(target: str, pairs: list[tuple[str, float]], floor: float) -> Verdict:
    if not pairs:
        return {"target": target, "met": None, "value": None, "detail": "not measured"}
    worst = min(pairs, key=lambda pair: pair[1])
    misses = [f"{scenario} {ratio:.2f}" for scenario, ratio in pairs if ratio < floor]
    return {
        "target": target,
        "met": not misses,
        "value": worst[1],
        "detail": "lowest "
        + f"{worst[0]} {worst[1]:.2f}"
        + (f"; below: {', '.join(misses)}" if misses else ""),
    }


def _herald(results: dict, part: str) -> dict[str, dict]:
    """herald's medians per scenario of a protocol part."""
    scenarios = results.get(part, {}).get("scenarios", {})
    return {key: by["herald"] for key, by in scenarios.items() if "herald" in by}


def targets(results: dict[str, dict]) -> list[Verdict]:
    """Each target of issue 9, met (True), missed (False) or not measured (None)."""
    verdicts = [
        _at_least(
            "AMQP transient and persistent-confirmed >= 1.0x RabbitMQ",
            _ratios(results, "amqp", "rabbitmq", lambda s: True),
            1.0,
        ),
        _at_least(
            "MQTT QoS 0 fan-in >= 0.5x Mosquitto",
            _ratios(results, "mqtt", "mosquitto", lambda s: s.startswith("qos0/fan-in")),
            0.5,
        ),
        _at_least(
            "MQTT QoS 1 >= 1.0x RabbitMQ-MQTT",
            _ratios(results, "mqtt", "rabbitmq", lambda s: s.startswith("qos1/")),
            1.0,
        ),
        _at_least(
            "every MQTT figure >= 3x amqtt",
            _ratios(results, "mqtt", "amqtt", lambda s: True),
            3.0,
        ),
        _at_least(
            "STOMP >= 1.0x RabbitMQ-STOMP",
            _ratios(results, "stomp", "rabbitmq", lambda s: True),
            1.0,
        ),
    ]
    cpu = [
        (f"{part} {key}", figures["broker_cpu_us_per_msg"])
        for part in ("amqp", "mqtt", "stomp")
        for key, figures in _herald(results, part).items()
        if _throughput(key) and "/100B" in key and "broker_cpu_us_per_msg" in figures
    ]
    verdicts.append(_at_most("broker CPU <= 40 us per delivered 100 B message", cpu, 40.0, "us"))
    p99 = [
        (f"{part} {key}", figures["p99_ms"])
        for part in ("amqp", "mqtt", "stomp")
        for key, figures in _herald(results, part).items()
        if not _throughput(key) and "p99_ms" in figures
    ]
    verdicts.append(_at_most("p99 latency at 1k msg/s <= 2 ms, all protocols", p99, 2.0, "ms"))
    verdicts += _deep_queue(results.get("deep"))
    idle = results.get("connections", {}).get("idle-mqtt")
    if idle:
        rss = idle["rss_with_them_mb"]
        verdicts.append(
            {
                "target": f"{idle['connections']:,} idle MQTT connections in <= 150 MB RSS",
                "met": rss <= 150.0 if idle["connections"] >= 10_000 else None,
                "value": rss,
                "detail": f"{rss} MB, {idle['rss_per_connection_kb']} KB per connection",
            }
        )
    else:
        verdicts.append(
            {"target": "10,000 idle MQTT connections in <= 150 MB RSS", "met": None,
             "value": None, "detail": "not measured"}
        )  # fmt: skip
    return verdicts


def _deep_queue(result: dict | None) -> list[Verdict]:
    """Issue 3's deep-queue targets, which the suite measures too (at 10 M messages)."""
    names = ("10 M queued: RSS <= 200 MB (issue 3)", "10 M queued: drain >= 0.8x a 10k queue")
    if not result or "deep" not in result:
        return [{"target": n, "met": None, "value": None, "detail": "not measured"} for n in names]
    full = result["deep"]["messages"] >= 10_000_000
    rss, ratio = result["deep"]["rss_mb"], result["drain_ratio"]
    return [
        {"target": names[0], "met": rss <= 200 if full else None, "value": rss,
         "detail": f"{rss} MB at {result['deep']['messages']:,} messages"},
        {"target": names[1], "met": ratio >= 0.8 if full else None, "value": ratio,
         "detail": f"{ratio} with a {result.get('consumer', 'kernel')} consumer "
                   f"(per broker CPU second {result['drain_ratio_cpu']})"},
    ]  # fmt: skip


def _at_most(target: str, pairs: list[tuple[str, float]], ceiling: float, unit: str) -> Verdict:
    if not pairs:
        return {"target": target, "met": None, "value": None, "detail": "not measured"}
    worst = max(pairs, key=lambda pair: pair[1])
    over = [f"{name} {value:g} {unit}" for name, value in pairs if value > ceiling]
    return {
        "target": target,
        "met": not over,
        "value": worst[1],
        "detail": f"highest {worst[0]} {worst[1]:g} {unit}"
        + (f"; over: {', '.join(over)}" if over else ""),
    }


# -- Markdown -------------------------------------------------------------------------------
def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _protocol_section(part: str, result: dict) -> str:
    brokers = list(result["brokers"])
    peers = [b for b in brokers if b != "herald"]
    throughput_rows, latency_rows = [], []
    for scenario, by_broker in result["scenarios"].items():
        ratios = result["herald_vs_peers"].get(scenario, {})
        if _throughput(scenario):
            row = [scenario]
            row += [f"{by_broker[b]['msgs_per_s']:,.0f}" if b in by_broker else "-"
                    for b in brokers]  # fmt: skip
            row += [f"**{ratios[f'vs_{p}']:.2f}**" if f"vs_{p}" in ratios else "-" for p in peers]
            row.append(
                " / ".join(
                    f"{by_broker[b].get('broker_cpu_us_per_msg', '-')}" for b in brokers
                    if b in by_broker
                )
            )  # fmt: skip
            throughput_rows.append(row)
        else:
            row = [scenario.removesuffix("/latency")]
            row += [
                f"{by_broker[b]['p50_ms']:.2f} / {by_broker[b]['p99_ms']:.2f}"
                if b in by_broker
                else "-"
                for b in brokers
            ]
            latency_rows.append(row)
    text = f"### {part.upper()}\n\n`{' '.join(result['command'])}` ({result['seconds']} s)\n\n"
    header = ["scenario", *[f"{b} msg/s" for b in brokers], *[f"herald / {p}" for p in peers]]
    header.append("broker CPU µs/msg (" + " / ".join(brokers) + ")")
    text += _table(header, throughput_rows)
    if latency_rows:
        text += "\nLatency at a fixed rate, p50 / p99 ms:\n\n"
        text += _table(["scenario", *brokers], latency_rows)
    return text + "\n"


def markdown(results: dict, verdicts: list[Verdict], notes: list[str], quick: bool) -> str:
    text = "## Benchmark suite" + (" (--quick: not figures to quote)" if quick else "") + "\n\n"
    marks = {True: "met", False: "**not met**", None: "not measured"}
    rows = [[v["target"], marks[v["met"]], v["detail"]] for v in verdicts]
    text += _table(["target", "verdict", "figure"], rows) + "\n"
    for part, result in results.items():
        if "error" in result:
            text += f"### {part.upper()}\n\nfailed: {result['error']}\n\n"
        elif part in ("amqp", "mqtt", "stomp"):
            text += _protocol_section(part, result)
        elif part == "deep":
            deep, small = result["deep"], result["small"]
            text += (
                f"### Deep queue (herald)\n\n`{' '.join(result['command'])}` "
                f"({result['seconds']} s)\n\n{deep['messages']:,} messages: RSS "
                f"{deep['rss_mb']} MB; drain {deep['drain_msgs_per_s']:,} msg/s against "
                f"{small['drain_msgs_per_s']:,} for {small['messages']:,} messages: ratio "
                f"{result['drain_ratio']} with a {result.get('consumer', 'kernel')} consumer "
                f"(per broker CPU second {result['drain_ratio_cpu']})\n\n"
            )
        elif part == "connections":
            idle = result["idle-mqtt"]
            text += (
                f"### Idle MQTT connections (herald)\n\n`{' '.join(result['command'])}` "
                f"({result['seconds']} s)\n\n{idle['connections']:,} connections opened in "
                f"{idle['open_seconds']} s: RSS {idle['rss_before_mb']} -> "
                f"{idle['rss_with_them_mb']} MB, {idle['rss_per_connection_kb']} KB each\n\n"
            )
    if notes:
        text += "Notes:\n\n" + "".join(f"- {note}\n" for note in notes)
    return text
