"""`herald pipeline ...`: the jobs from the command line, each in a local SparkSession.

plugin.py's hook loads this module only when a `pipeline` command runs; pyspark is imported only
after the arguments are checked, and its absence is one clear line, not a traceback.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import click

from herald.pipeline.log_view import DataDirError, store_root

INSTALL_HINT = "the Spark pipeline needs pyspark and pyarrow: pip install 'heraldmq[spark]'"


def require_spark() -> None:
    missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        raise click.ClickException(f"{' and '.join(missing)} not installed; {INSTALL_HINT}")


def _data_dir(value: Path) -> Path:
    try:
        store_root(value)
    except DataDirError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def _source(data_dir: Path | None, cluster: str | None) -> tuple[Path | None, str | None]:
    """DATA_DIR or --cluster, exactly one of them."""
    if (data_dir is None) == (cluster is None):
        raise click.UsageError("give a DATA_DIR or --cluster CLUSTER_JSON_OR_URL (one of them)")
    return (None if data_dir is None else _data_dir(data_dir)), cluster


def source_arguments(fn: Any) -> Any:
    """DATA_DIR, or `--cluster` (a cluster.json, its dir, or a name server's URL)."""
    fn = click.option(
        "--cluster",
        help="Read every group of a cluster: its cluster.json (or dir) or http://NAMESERVER.",
    )(fn)
    path = click.Path(exists=True, file_okay=False, path_type=Path)
    return click.argument("data_dir", type=path, required=False)(fn)


def _filters(
    destination: str | None, start: str | None, end: str | None, vhost: str | None
) -> dict[str, str]:
    options = {"destination": destination, "startTime": start, "endTime": end, "vhost": vhost}
    return {k: v for k, v in options.items() if v}


def filter_options(fn: Any) -> Any:
    fn = click.option("--destination", help="Only messages for these queues/exchanges (a,b).")(fn)
    fn = click.option("--start", help="Stored at or after (ISO-8601 or epoch ms).")(fn)
    fn = click.option("--end", help="Stored before (ISO-8601 or epoch ms).")(fn)
    fn = click.option("--vhost", help="Only messages for queues of this virtual host.")(fn)
    return fn


def _run(
    job: str,
    source: tuple[Path | None, str | None],
    options: dict[str, str],
    work: Any,
    as_json: bool,
) -> None:
    require_spark()
    from herald.pipeline.jobs import Scope
    from herald.pipeline.options import OptionError
    from herald.pipeline.session import local_session

    scope = Scope(source[0], options, source[1])
    try:
        click.echo(scope.progress(job), err=as_json)
    except OptionError as exc:  # a cluster that cannot be resolved: one clear line
        raise click.ClickException(str(exc)) from None
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()  # embedded use (tests, notebooks): keep it running
    spark = active or local_session(app=f"herald-pipeline-{job}")
    try:
        result = work(spark, scope)
    finally:
        if active is None:
            spark.stop()
    if as_json:
        json.dump(result, sys.stdout, default=str, indent=2)
        sys.stdout.write("\n")
        return
    from herald.pipeline.jobs import table

    for title, rows in result.items():
        click.echo(f"\n{title}:\n{table(rows)}")


@click.group(name="pipeline")
def pipeline() -> None:
    """Spark jobs over a data dir's commit log, or a cluster's (needs pip install
    'heraldmq[spark]')."""


@pipeline.command()
@source_arguments
@click.option("--window", default="1 minute", show_default=True, help="Time window (Spark).")
@filter_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def stats(
    data_dir: Path | None,
    cluster: str | None,
    window: str,
    destination: str | None,
    start: str | None,
    end: str | None,
    vhost: str | None,
    as_json: bool,
) -> None:
    """Messages and bytes per destination per window, size and latency percentiles."""
    from herald.pipeline import jobs

    _run(
        "stats",
        _source(data_dir, cluster),
        _filters(destination, start, end, vhost),
        lambda spark, scope: jobs.stats(spark, scope, window),
        as_json,
    )


@pipeline.command()
@click.argument(
    "paths", nargs=-1, required=True, metavar="[DATA_DIR] OUT", type=click.Path(path_type=Path)
)
@click.option(
    "--cluster",
    help="Read every group of a cluster: its cluster.json (or dir) or http://NAMESERVER.",
)
@click.option(
    "--to",
    "fmt",
    type=click.Choice(["parquet", "json", "orc"]),
    default="parquet",
    show_default=True,
    help="Output format.",
)
@click.option("--partition-by", help="A column to partition the output by (e.g. queue).")
@filter_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def export(
    paths: tuple[Path, ...],
    cluster: str | None,
    fmt: str,
    partition_by: str | None,
    destination: str | None,
    start: str | None,
    end: str | None,
    vhost: str | None,
    as_json: bool,
) -> None:
    """Write the stored messages of DATA_DIR (or --cluster) to OUT (overwritten)."""
    from herald.pipeline import jobs

    if len(paths) > 2:
        raise click.UsageError("expected [DATA_DIR] OUT")
    data_dir, out = (None, paths[0]) if len(paths) == 1 else paths
    _run(
        "export",
        _source(data_dir, cluster),
        _filters(destination, start, end, vhost),
        lambda spark, scope: {"exported": jobs.export(spark, scope, out, fmt, partition_by)},
        as_json,
    )


@pipeline.command()
@source_arguments
@click.option("--to", "url", required=True, help="The broker: amqp://user:pass@host:port/vhost")
@filter_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def replay(
    data_dir: Path | None,
    cluster: str | None,
    url: str,
    destination: str | None,
    start: str | None,
    end: str | None,
    vhost: str | None,
    as_json: bool,
) -> None:
    """Publish stored messages again, to their exchange and routing key, over AMQP."""
    from herald.pipeline import jobs

    _run(
        "replay",
        _source(data_dir, cluster),
        _filters(destination, start, end, vhost),
        lambda spark, scope: {"replayed": jobs.replay(spark, scope, url)},
        as_json,
    )
