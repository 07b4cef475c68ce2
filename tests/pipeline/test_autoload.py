"""`format("herald")` in a plain SparkSession: no `herald.pipeline.register(spark)`, no
herald import in the driver. PySpark finds `pyspark_herald` by itself (issue 19)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.pipeline.datadir import write_store

# What a user types in a fresh Python session with the venv active; only the loopback
# settings that every Spark run here needs are added (tests dial loopback only).
PLAIN_SESSION = """
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.ui.enabled", "false").getOrCreate())
rows = spark.read.format("herald").load(sys.argv[1]).groupBy("queue").count().collect()
print(json.dumps({r["queue"]: r["count"] for r in rows}))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("herald"))))
spark.stop()
"""


def test_the_format_works_without_registering(tmp_path: Path) -> None:
    write_store(tmp_path / "data", 30)
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")  # an active venv
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_SESSION, str(tmp_path / "data")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counts_line, driver_modules_line = done.stdout.strip().splitlines()[-2:]
    assert json.loads(counts_line) == {"alpha": 10, "beta": 10, "gamma": 10}
    # the driver never imported herald: the lookup ran in a PySpark worker
    assert json.loads(driver_modules_line) == []
