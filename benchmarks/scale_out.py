"""Beyond one core: what a broker process per protocol gives over one process for all three.

    python benchmarks/scale_out.py [--repeat 3] [--seconds-each 6] [--store commitlog]

herald runs its kernel on one Trio thread, so one process uses at most one core. The cheapest
way to use more, without giving up "one queue, one order", is to split the work where no
queue is shared: here, one process per protocol. Each round runs the same mixed load twice,
in turn (A B A B):
- one: one herald process with the amqp, mqtt and stomp plugins;
- split: three herald processes, one plugin each, each with its own data dir;
and the load is the three throughput benchmarks at once, each its own process tree:
AMQP transient 100 B (2 pika publishers -> 1 queue -> 2 consumers), MQTT QoS 0 fan-in 100 B
(4 paho publishers -> 1 subscriber), STOMP 100 B queue (2 stomp.py publishers -> 2
client-individual consumers). Message counts are set so that each part alone would take about
`seconds_each` at the rates measured before; a part's msg/s is over its own run.

Prints one JSON object: per mode the medians of each protocol's msg/s, their sum, the brokers'
CPU seconds per message over the whole mixed run, and the ratio split / one. The design
question this answers is written up in docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil
from _common import cpu_seconds, header, herald_broker

HERE = Path(__file__).resolve().parent

# protocol -> (script, arguments but --brokers, msg/s one process reached alone, 100 B)
LOADS = {
    "amqp": ("amqp_throughput.py", ["--scenarios", "transient"], 15_000),
    "mqtt": ("mqtt_throughput.py", ["--qos", "0", "--topologies", "fan-in"], 17_000),
    "stomp": ("stomp_throughput.py", [], 10_000),
}


def mixed_run(ports: dict[str, int], seconds_each: float) -> dict[str, float]:
    """The three loads at once against `ports`; each one's msg/s."""
    running = {}
    for protocol, (script, extra, rate) in LOADS.items():
        messages = int(rate * seconds_each)
        command = [sys.executable, str(HERE / script), *extra, "--sizes", "100", "--rate", "0"]
        command += ["--repeat", "1", "--messages", str(messages)]
        command += ["--brokers", f"target=127.0.0.1:{ports[protocol]}"]
        running[protocol] = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=HERE)
    rates = {}
    for protocol, process in running.items():
        out, _ = process.communicate(timeout=600)
        if process.returncode:
            raise RuntimeError(f"{protocol} load failed (exit {process.returncode})")
        (scenario,) = json.loads(out)["scenarios"].values()
        rates[protocol] = scenario["target"]["msgs_per_s"]
    return rates


def one_round(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        if mode == "one":
            ports, process = stack.enter_context(herald_broker(list(LOADS), args.store))
            processes = [process]
        else:
            ports, processes = {}, []
            for protocol in LOADS:
                own, process = stack.enter_context(herald_broker([protocol], args.store))
                ports[protocol] = own[protocol]
                processes.append(process)
        cpu_before = sum(cpu_seconds(p) for p in processes)
        began = time.monotonic()
        rates = mixed_run(ports, args.seconds_each)
        wall = time.monotonic() - began
        cpu = sum(cpu_seconds(p) for p in processes) - cpu_before
    messages = sum(int(rate * args.seconds_each) for _, _, rate in LOADS.values())
    return {
        **{f"{p}_msgs_per_s": round(r) for p, r in rates.items()},
        "sum_msgs_per_s": round(sum(rates.values())),
        "broker_cpu_us_per_msg": round(cpu / messages * 1e6, 1),
        "broker_cores": round(cpu / wall, 2),
        "wall_seconds": round(wall, 1),
    }


def main(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds-each", type=float, default=6.0)
    parser.add_argument("--store", default="commitlog", choices=["memory", "commitlog"])
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {"one": [], "split": []}
    for _ in range(args.repeat):
        for mode in runs:
            runs[mode].append(one_round(mode, args))
    table = {
        mode: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for mode, rs in runs.items()
    }
    table["one"]["sum_runs"] = [r["sum_msgs_per_s"] for r in runs["one"]]
    table["split"]["sum_runs"] = [r["sum_msgs_per_s"] for r in runs["split"]]
    return {
        **header("scale_out", ["pika", "paho-mqtt", "stomp.py"], args),
        "cores": psutil.cpu_count(),
        "modes": table,
        "split_vs_one": round(table["split"]["sum_msgs_per_s"] / table["one"]["sum_msgs_per_s"], 2),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=2))
