"""Scenario (g), issue 8: records/s through a trivial PySpark streaming query on a share group.

The query reads a topic through this project's ``shoal-share`` source (``pipeline/``) and writes
to Spark's ``noop`` sink, ``Trigger.AvailableNow``, in ``local[2]``: it measures the source
(one ShareFetch per micro-batch, the record batches shipped undecoded to the Python workers,
which decode them into Arrow batches, ACCEPT when the batch commits), not a computation.

The query runs in a child process (``python -m bench.spark_source --topic T --group G``) that
prints one JSON line of figures; the parent (:func:`run`) creates nothing itself, the caller
(``scenarios.scenario_g``) makes the topic, pre-produces the records and sets the group's
configs. Figures, all from the query's ``recentProgress`` and ``time.monotonic``:

- ``rate``: records after the first micro-batch / (end of the last micro-batch - end of the
  first). The first batch holds the JVM's and the Python workers' warm-up and the share group
  join, so it is left out; so are the empty polls after the last batch that end
  ``AvailableNow`` (the source's ``availableNowQuietMs``; ``final_poll_s``, termination
  included). None if one batch held everything.
- ``rate_overall``: every record / (``start()`` to termination).
- ``spark_startup_s`` (SparkSession creation), ``first_batch_s``, ``batches``,
  ``mean_batch_records`` and the mean ``durationMs`` per phase (``phase_mean_ms``).
- ``steady_cpu_us_per_record``: CPU per record by process (JVM, Python workers, the source
  runner, the driver; ``bench/proc_tree.py``) in ``rate``'s window, and ``first_batch_cpu_s``:
  CPU seconds by process from ``start()`` to the end of the first micro-batch.
- ``ceiling_ratio``: ``rate`` / the ceiling's rate (issue 26's target: >= 0.8).
- ``ceiling``: the same figures for the same query over a synthetic source that makes the
  same rows in the executors (:func:`ceiling`): what Spark's Python data source path allows
  on this machine without any broker or consumer work.

Run on its own (starts a fresh Shoal broker unless ``--bootstrap``), to try settings by hand:

    .venv/bin/python -m bench.spark_source --records 600000 --partitions 32 --max-records 64000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.proc_tree import TreeSampler, per_record_us

# Issue 8 settings (bench/README.md, scenario g, says why). A share-partition holds at most
# share.partition.max.record.locks in-flight records and one micro-batch is one ShareFetch, so
# a batch is at most partitions x locks records: 32 x 4,000 = 128,000, shared with the batch
# polled ahead when the source prefetches (its default), so each can reach maxRecordsPerBatch
# (in practice the consumer's 50 MiB fetch limit, about 46,000 records of 1 KiB, comes first).
PARTITIONS = 32
RECORD_LOCKS = 4000  # group share.partition.max.record.locks (Shoal's ceiling by default)
MAX_RECORDS_PER_BATCH = 64_000
SPARK_PARTITIONS = 2  # numPartitions: one Spark task per core of local[2]
POLL_TIMEOUT_MS = 500  # the source's default; the last, empty poll waits this long
# The records reach the executors from the driver's batch server instead of inside the input
# partitions (local[2]: every executor is on this host); about 10 µs less per record here.
SOURCE_OPTIONS = {"transport": "tcp"}
FULL_RECORDS = 600_000  # enough micro-batches (about 14) for a steady state
MIN_RECORDS = 20_000
PHASES = ("latestOffset", "addBatch", "walCommit", "commitOffsets")


def unavailable() -> str | None:
    """Why the scenario cannot run here (pyspark or Java missing), or None."""
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} not installed"
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        return "java not found (make java)"
    return None


# ---------------------------------------------------------------------------------------------
# The child: one SparkSession, one query


def _wall(timestamp: str) -> float:
    """A progress timestamp (ISO 8601, UTC, 'Z') as seconds since the epoch."""
    return datetime.fromisoformat(timestamp).timestamp()


def query(bootstrap: str, topic: str, group: str, records: int, *,
          max_records: int = MAX_RECORDS_PER_BATCH, spark_partitions: int = SPARK_PARTITIONS,
          poll_timeout_ms: int = POLL_TIMEOUT_MS, options: dict[str, str] | None = None,
          warm_up: int = 0) -> dict[str, Any]:
    """Run the query to termination and return its figures (runs in the child process).

    ``options`` are further ``shoal-share`` source options (``prefetch``, ...). ``warm_up``
    records first go through an untimed ceiling query, so that the source's query does not
    run on a colder JVM than the ceiling's (off by default: the figures so far have none).
    """
    # Spark starts its Python workers with PYSPARK_PYTHON (default: python3 on PATH), which
    # would not see this venv's pyarrow and the project.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    t0 = time.monotonic()
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession

    import pipeline

    spark = (SparkSession.builder.master("local[2]").appName("shoal-bench-g")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    startup = time.monotonic() - t0
    checkpoint = tempfile.mkdtemp(prefix="shoal-bench-g-")
    try:
        reader = (spark.readStream.format("shoal-share")
                  .option("kafka.bootstrap.servers", bootstrap)
                  .option("group.id", group).option("subscribe", topic)
                  .option("maxRecordsPerBatch", str(max_records))
                  .option("numPartitions", str(spark_partitions))
                  .option("pollTimeoutMs", str(poll_timeout_ms)))
        for k, v in {**SOURCE_OPTIONS, **(options or {})}.items():
            reader = reader.option(k, v)
        df = reader.load()
        if warm_up:
            ceiling(spark, warm_up, min(warm_up, max_records), spark_partitions,
                    checkpoint + "-warm", None)
        sampler = TreeSampler()
        t_start, wall_start = time.monotonic(), time.time()
        q = (df.writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination()
        except StreamingQueryException:
            pass  # q.exception() below; the progress so far is still reported
        t_end = time.monotonic()
        failure = q.exception()
        progress = [json.loads(p.json) for p in q.recentProgress]
        fig = figures(progress, records, t_start, t_end, wall_start)
        fig.update(cpu_figures(sampler, fig, t_start))
        if failure is None and fig.get("mean_batch_records"):
            fig["ceiling"] = ceiling(spark, records, fig["mean_batch_records"], spark_partitions,
                                     checkpoint + "-ceiling", sampler)
            if fig.get("rate") and fig["ceiling"].get("rate"):
                fig["ceiling_ratio"] = round(fig["rate"] / fig["ceiling"]["rate"], 3)
    finally:
        sampler.close()
        spark.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.rmtree(checkpoint + "-ceiling", ignore_errors=True)
        shutil.rmtree(checkpoint + "-warm", ignore_errors=True)
    fig.update(spark_startup_s=round(startup, 3), max_records_per_batch=max_records,
               warm_up_records=warm_up,
               spark_partitions=spark_partitions, poll_timeout_ms=poll_timeout_ms,
               source_options={**SOURCE_OPTIONS, **(options or {})})
    if failure is not None:
        fig["error"] = f"the query failed: {failure}"
    return fig


def ceiling(spark: Any, records: int, batch_records: int, spark_partitions: int,
            checkpoint: str, sampler: TreeSampler | None) -> dict[str, Any]:
    """The same query over a synthetic source that makes the same rows (1 KiB values, the
    ``shoal-share`` schema, the same batch size and task count) in the executors: no broker,
    no consumer, nothing shipped from the driver. Its rate is what Spark's Python data source
    path itself allows on this machine (run second, on a warm JVM, so an upper bound)."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamReader,
        InputPartition,
    )
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    from pipeline.rows import SCHEMA_DDL

    class Range(InputPartition):
        def __init__(self, lo: int, hi: int) -> None:
            super().__init__((lo, hi))

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"n": min(records, start["n"] + batch_records)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            lo, hi = start["n"], end["n"]
            step = -(-(hi - lo) // spark_partitions)
            return [Range(a, min(hi, a + step)) for a in range(lo, hi, step)]

        def read(self, partition: Any) -> Any:
            from pipeline.rows import Columns, to_arrow

            lo, hi = partition.value
            n = hi - lo
            yield to_arrow(Columns(
                key=[None] * n, value=[b"v" * 1024] * n, topic=["t"] * n, partition=[0] * n,
                offset=list(range(lo, hi)), timestamp_ms=[1_700_000_000_000] * n,
                timestamp_type=[0] * n, headers=[[]] * n, delivery_count=[1] * n))

    class Synthetic(DataSource):
        @classmethod
        def name(cls) -> str:
            return "shoal-bench-ceiling"

        def schema(self) -> str:
            return SCHEMA_DDL

        def streamReader(self, schema: Any) -> Reader:
            return Reader()

    spark.dataSource.register(Synthetic)
    t_start, wall_start = time.monotonic(), time.time()
    q = (spark.readStream.format("shoal-bench-ceiling").load().writeStream.format("noop")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    progress = [json.loads(p.json) for p in q.recentProgress]
    fig = figures(progress, records, t_start, time.monotonic(), wall_start)
    if sampler is not None:
        fig.update(cpu_figures(sampler, fig, t_start))
    return {k: fig.get(k) for k in ("rate", "records", "batches", "mean_batch_records",
                                    "steady_phase_mean_ms", "steady_cpu_us_per_record")}


def cpu_figures(sampler: TreeSampler, fig: dict[str, Any], t_start: float) -> dict[str, Any]:
    """CPU by process role (bench/proc_tree.py): seconds in the first micro-batch (from
    ``start()``), µs per record after it (the ``rate``'s window)."""
    t1 = fig.get("t_steady_start")
    if t1 is None:
        return {}
    out: dict[str, Any] = {"first_batch_cpu_s": sampler.between(t_start, t1)}
    if fig.get("steady_records"):
        cpu = sampler.between(t1, t1 + fig["steady_s"])
        out["steady_cpu_us_per_record"] = per_record_us(cpu, fig["steady_records"])
    return out


def figures(progress: list[dict[str, Any]], records: int, t_start: float, t_end: float,
            wall_start: float) -> dict[str, Any]:
    """The scenario's figures from a finished query's progress reports (module doc).

    ``t_start`` and ``t_end`` are ``time.monotonic`` at ``start()`` and after termination.
    Progress timestamps are wall-clock: ``wall_start`` (``time.time`` read with ``t_start``)
    maps them onto the monotonic clock, which the broker monitor uses too.
    """
    batches = [p for p in progress if p.get("numInputRows")]
    total = sum(p["numInputRows"] for p in batches)
    wall_s = t_end - t_start
    fig: dict[str, Any] = {"records": total, "target_records": records,
                           "complete": total >= records, "batches": len(batches),
                           "query_s": round(wall_s, 3),
                           "rate_overall": round(total / wall_s, 1) if wall_s > 0 else None}
    if not batches:
        return fig
    to_mono = t_start - wall_start

    def end_of(p: dict[str, Any]) -> float:
        return _wall(p["timestamp"]) + p["batchDuration"] / 1000 + to_mono

    first, last = batches[0], batches[-1]
    first_end = end_of(first)
    steady = total - first["numInputRows"]
    window = end_of(last) - first_end
    fig.update(
        rate=round(steady / window, 1) if steady and window > 0 else None,
        first_batch_s=round(first_end - t_start, 3),
        first_batch_records=first["numInputRows"],
        steady_records=steady, steady_s=round(window, 3),
        final_poll_s=round(t_end - end_of(last), 3),
        mean_batch_records=round(total / len(batches)),
        mean_batch_ms=round(sum(p["batchDuration"] for p in batches) / len(batches)),
        phase_mean_ms={k: round(sum(p["durationMs"].get(k, 0) for p in batches)
                                / len(batches), 1) for k in PHASES},
        t_steady_start=first_end, t_end=t_end,
        per_batch=[{"batch": p["batchId"], "records": p["numInputRows"],
                    "ms": p["batchDuration"], **{k: p["durationMs"].get(k) for k in PHASES}}
                   for p in batches])
    # A steady-state phase breakdown too: the first batch's latestOffset holds the group join.
    rest = batches[1:]
    if rest:
        fig["steady_phase_mean_ms"] = {k: round(sum(p["durationMs"].get(k, 0) for p in rest)
                                                / len(rest), 1) for k in PHASES}
    return fig


# ---------------------------------------------------------------------------------------------
# The parent side


def run(bootstrap: str, topic: str, group: str, records: int, *,
        max_records: int = MAX_RECORDS_PER_BATCH, spark_partitions: int = SPARK_PARTITIONS,
        poll_timeout_ms: int = POLL_TIMEOUT_MS, options: dict[str, str] | None = None,
        timeout: float | None = None, warm_up: int = 0) -> dict[str, Any]:
    """Run :func:`query` in a child process and return its figures.

    The topic must hold ``records`` records and the group read from the start
    (``share.auto.offset.reset=earliest``). Raises RuntimeError if the child fails.
    """
    from bench.procs import ROOT, track_popen, untrack_popen

    cmd = [sys.executable, "-m", "bench.spark_source", "--bootstrap", bootstrap,
           "--topic", topic, "--group", group, "--records", str(records),
           "--max-records", str(max_records), "--spark-partitions", str(spark_partitions),
           "--poll-timeout-ms", str(poll_timeout_ms), "--warm-up-records", str(warm_up)]
    for k, v in (options or {}).items():
        cmd += ["--option", f"{k}={v}"]
    limit = timeout if timeout is not None else 180 + records / 2_000
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    track_popen(proc)  # type: ignore[arg-type]
    try:
        stdout, stderr = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        raise RuntimeError(f"the Spark query did not finish within {limit:.0f} s: "
                           f"{_tail(stderr)}") from None
    finally:
        untrack_popen(proc)  # type: ignore[arg-type]
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the Spark query process exited with {proc.returncode}: "
                           f"{_tail(stderr)}")
    fig: dict[str, Any] = json.loads(lines[-1])
    return fig


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(ln for ln in text.strip().splitlines()[-lines:])


def _standalone(args: argparse.Namespace) -> dict[str, Any]:
    """Set up a topic and group (on a fresh Shoal broker unless --bootstrap), then :func:`run`."""
    from bench import scenarios
    from bench.clients import Admin
    from bench.procs import ShoalBroker, remove_tree, stop_everything

    reason = unavailable()
    if reason:
        return {"skipped": reason}
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-g-"))
    try:
        bootstrap = args.bootstrap
        if bootstrap is None:
            broker = ShoalBroker(work / "data", work / "broker.log")
            broker.start()
            bootstrap = broker.bootstrap
        system = scenarios.System("shoal", bootstrap, Admin(bootstrap))
        settings = scenarios.Settings(scale=1.0, run_id=time.strftime("%Y%m%d-%H%M%S"),
                                      work_dir=work, log=lambda m: print(m, file=sys.stderr))
        try:
            return scenarios.scenario_g(settings, system, records=args.records,
                                        partitions=args.partitions,
                                        record_locks=args.record_locks,
                                        max_records=args.max_records,
                                        spark_partitions=args.spark_partitions,
                                        poll_timeout_ms=args.poll_timeout_ms,
                                        options=_options(args),
                                        warm_up=args.warm_up_records)
        finally:
            system.admin.close()  # before the broker goes away
    finally:
        stop_everything()
        remove_tree(work)


def _options(args: argparse.Namespace) -> dict[str, str]:
    return dict(o.split("=", 1) for o in args.option)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="use this broker (default: start a fresh Shoal broker)")
    ap.add_argument("--topic", help="consume this topic (already produced; the child mode)")
    ap.add_argument("--group", help="with --topic: the share group (reset to earliest already)")
    ap.add_argument("--records", type=int, default=FULL_RECORDS)
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument("--record-locks", type=int, default=RECORD_LOCKS,
                    help="the group's share.partition.max.record.locks (0: the broker default)")
    ap.add_argument("--max-records", type=int, default=MAX_RECORDS_PER_BATCH)
    ap.add_argument("--spark-partitions", type=int, default=SPARK_PARTITIONS)
    ap.add_argument("--poll-timeout-ms", type=int, default=POLL_TIMEOUT_MS)
    ap.add_argument("--warm-up-records", type=int, default=0,
                    help="first run this many records through an untimed ceiling query")
    ap.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                    help="another shoal-share source option (repeatable), e.g. prefetch=false")
    args = ap.parse_args()
    if args.topic:
        if not (args.bootstrap and args.group):
            ap.error("--topic needs --bootstrap and --group")
        from bench.clients import _watch_parent

        _watch_parent()
        fig = query(args.bootstrap, args.topic, args.group, args.records,
                    max_records=args.max_records, spark_partitions=args.spark_partitions,
                    poll_timeout_ms=args.poll_timeout_ms, options=_options(args),
                    warm_up=args.warm_up_records)
    else:
        fig = _standalone(args)
    print(json.dumps(fig), flush=True)


if __name__ == "__main__":
    main()
