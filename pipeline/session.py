"""A local SparkSession set up as herald's jobs and tests need it (pyspark.md, "CI gotchas").

The environment is set before the JVM starts, since it reads it only then: loopback only
(`SPARK_LOCAL_IP`, driver host and bind address; otherwise Spark binds to the machine's
external address), the workers run this interpreter (`PYSPARK_PYTHON`; otherwise `python3`
from PATH, without herald or pyarrow), a log4j2 configuration at level error
(`SPARK_CONF_DIR`), and scratch and warehouse directories in a temporary directory instead
of the current one. `local[2]` and two shuffle partitions suit the 2-core machines herald
is developed on.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def prepare_environment(scratch: Path | None = None) -> Path:
    """Set the variables the JVM and the Python workers read at launch; returns the scratch
    directory (made if not given)."""
    scratch = Path(scratch or tempfile.mkdtemp(prefix="herald-spark-"))
    conf = scratch / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "log4j2.properties").write_text(LOG4J2)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_CONF_DIR", str(conf))
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(scratch / "local"))
    return scratch


def local_session(
    master: str = "local[2]", memory: str = "1g", app: str = "herald-pipeline", **conf: Any
) -> Any:
    """A SparkSession on this machine with the `herald` format registered."""
    scratch = prepare_environment()
    from pyspark.sql import SparkSession

    from herald.pipeline import register

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.driver.memory", memory)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch / 'derby'}")
    )
    for key, value in conf.items():
        builder = builder.config(key.replace("_", "."), value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
