"""The benchmark report: every results file loaded into PySpark, medians and ratios computed there.

``python bench/analyse.py`` (``make bench-report``; the last step of ``make bench``) reads every
``bench/results/*.jsonl`` into one Spark DataFrame (local mode) with the common fields of all
benchmarks (``bench``, ``case``, ``system``, ``rep``, ``msg_s``, plus CPU per message and the
confirm benchmark's ``strategy`` / ``client`` / ``rtt_ms`` / ``persistent``), and computes with
Spark, for the newest results file of each benchmark:

* per benchmark, case and system: the median rate, its spread (min, max, (max - min) / median),
  the median client and broker CPU per message;
* shovel: pumpd (and pika) against the plugin, as the ratio of the median rates;
* confirms: per RTT, message kind and strategy, each client's median rate, ms per 50,000
  messages and its ratio to pumpd's; the tutorial's Java figures as reference rows, and the tutorial's
  three-line comparison side by side with each client's, local and remote;
* the Spark reader against a super stream's partition count (``bench/spark_read.py
  --partitions``, from the newest file holding such runs): per P its median rows/s, each run
  with its load average, the speed-up over the smallest P and the ratio to raw rstream.

It writes ``bench/report/README.md`` (the tables) and PNG charts beside it (matplotlib). This is
the only module of pumpd that imports pyspark, and only inside the functions that need it; it
needs a JRE 17 or newer and says so when there is none.

Older result lines written before the common fields existed are read too (``msg_per_s`` for
``msg_s``, the benchmark from the file name).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
REPORT_DIR = BENCH_DIR / "report"
# "spark_read" and "spark-stream-write" before "spark": a file of any is named by the first that
# starts its name
BENCHES = ("shovel", "workers", "confirms", "stream_shovel", "stream_task", "spark_read",
           "spark-stream-write", "spark")
CURVE = "super stream "  # how the cases of bench/spark_read.py --partitions begin
# The publisher-confirms tutorial's Java figures for 50,000 messages, in ms: (strategy, where, ms).
TUTORIAL_FIGURES = [("individual", "local", 5549.0), ("batch", "local", 2331.0), ("async", "local", 4054.0),
         ("individual", "remote", 231541.0), ("batch", "remote", 7232.0),
         ("async", "remote", 6332.0)]
CLIENT_ORDER = ("pumpd", "pika", "aio-pika")
STRATEGY_ORDER = ("individual", "batch", "async")

COLUMNS: list[tuple[str, str]] = [
    ("file", "string"), ("bench", "string"), ("case", "string"), ("system", "string"),
    ("rep", "int"), ("msg_s", "double"), ("client_us", "double"), ("broker_us", "double"),
    ("strategy", "string"), ("rtt_ms", "double"), ("persistent", "boolean"),
    ("messages", "long"), ("seconds", "double"), ("partitions", "int"), ("tasks", "int"),
    ("load_1min", "double"),
]


class ReportError(Exception):
    pass


# -- reading -------------------------------------------------------------------------------------


def _first(rec: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if rec.get(k) is not None:
            return rec[k]
    return None


def normalise(rec: dict[str, Any], file: str) -> dict[str, Any] | None:
    """One result line as a row of :data:`COLUMNS`, or None for a failed or unused run."""
    if rec.get("ok") is False or rec.get("used") is False:
        return None
    bench = rec.get("bench") or next((b for b in BENCHES if file.startswith(b)), None)
    msg_s = _first(rec, "msg_s", "msg_per_s")
    if bench not in BENCHES or msg_s is None:
        return None
    case = rec.get("case")
    if rec.get("metadata"):  # the stream read task's fills: identical or varied metadata
        case = f"{case}, {rec['metadata']} metadata"
    if case is None and bench == "workers":
        case = f"{rec.get('layout')} x{rec.get('processes')}"
    rep = rec.get("rep")
    return {
        "file": file, "bench": bench, "case": str(case), "system": str(rec.get("system") or "pumpd"),
        "rep": int(rep) if rep is not None else None, "msg_s": float(msg_s),
        "client_us": _float(_first(rec, "client_us_per_msg", "pump_cpu_us_per_msg",
                                   "pumpd_cpu_us_per_msg", "cpu_us_per_msg")),
        "broker_us": _float(rec.get("broker_us_per_msg", rec.get("broker_cpu_us_per_msg"))),
        "strategy": rec.get("strategy"), "rtt_ms": _float(rec.get("rtt_ms")),
        "persistent": rec.get("persistent"), "messages": rec.get("messages"),
        "seconds": _float(rec.get("seconds")), "partitions": rec.get("partitions"),
        "tasks": rec.get("tasks"), "load_1min": _float(_first(rec, "loadavg_1min", "load_1min")),
    }


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def read_rows(paths: Iterable[Path]) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(paths):
        for line in path.read_bytes().splitlines():
            if line.strip():
                row = normalise(orjson.loads(line), path.name)
                if row is not None:
                    rows.append(row)
    return rows


# -- Spark ---------------------------------------------------------------------------------------


def check_java() -> None:
    """:raises ReportError: without a JRE 17+ (PySpark 4 needs one)."""
    java = shutil.which("java", path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin")) \
        if os.environ.get("JAVA_HOME") else shutil.which("java")
    if java is None:
        raise ReportError("PySpark needs a Java runtime 17 or newer and there is none on PATH "
                          "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):  # "1.8.0" is Java 8
        major = int(m.group(2))
    if major < 17:
        raise ReportError(f"PySpark 4 needs Java 17 or newer; {java} is {out.splitlines()[0]!r}")


def spark_session() -> Any:
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").appName("pumpd bench report")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "512m")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def load(spark: Any, rows: list[dict[str, Any]], latest_only: bool = True) -> Any:
    """The rows as a DataFrame; with ``latest_only``, only the newest file of each benchmark and
    kind, the super-stream curve of ``spark_read``, its queue and stream runs, a shovel route and
    a read task's metadata each counting as a kind of its own (each may run alone, so the newest
    file of the others need not hold it). The curve is
    the reader's with its own split, one task per partition: a curve run with
    ``--min-partitions`` above 1 (more tasks than partitions) is left out of it."""
    from pyspark.sql import functions as F

    schema = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
    df = spark.createDataFrame([tuple(r[c] for c, _ in COLUMNS) for r in rows], schema)
    if latest_only:
        split = df.where(F.col("case").startswith(CURVE) & (F.col("tasks") > F.col("partitions")))
        df = df.join(split.select("file").distinct(), "file", "left_anti")
        # a benchmark's runs of one kind come from one file, the newest that has that kind:
        # the curve, a shovel route (``@10-10``), queues or streams, a read task's metadata
        df = df.withColumn("kind", F.concat(
            F.col("case").startswith(CURVE).cast("string"),
            F.regexp_extract("case", r"^(queue|stream)", 1),
            F.regexp_extract("case", r"(@\S+)$", 1),
            F.regexp_extract("case", r"(, \w+ metadata)$", 1)))
        newest = df.groupBy("bench", "kind").agg(F.max("file").alias("file"))
        df = df.join(newest, ["bench", "kind", "file"]).drop("kind")
    return df


def medians(df: Any) -> Any:
    """Per bench, case and system: runs, median / min / max rate, spread, median CPU."""
    from pyspark.sql import functions as F

    return (df.groupBy("bench", "case", "system")
            .agg(F.count("*").alias("runs"), F.median("msg_s").alias("msg_s"),
                 F.min("msg_s").alias("min_msg_s"), F.max("msg_s").alias("max_msg_s"),
                 F.median("client_us").alias("client_us"),
                 F.median("broker_us").alias("broker_us"))
            .withColumn("spread", (F.col("max_msg_s") - F.col("min_msg_s")) / F.col("msg_s"))
            .orderBy("bench", "case", "system"))


def shovel_ratios(df: Any) -> Any:
    """Shovel benchmark: each system's median rate over the plugin's, per case."""
    from pyspark.sql import functions as F

    m = medians(df.where(F.col("bench") == "shovel"))
    plugin = m.where(F.col("system") == "plugin").select("case", F.col("msg_s").alias("plugin"))
    return (m.join(plugin, "case").withColumn("ratio", F.col("msg_s") / F.col("plugin"))
            .select("case", "system", "msg_s", "ratio", "client_us", "broker_us")
            .orderBy("case", "system"))


def curve_table(df: Any) -> Any:
    """bench/spark_read.py --partitions: per partition count P and system, the median rows/s,
    each run in repetition order, and the reader's speed-up over the smallest P and ratio to
    the raw client's median at the same P."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c = df.where((F.col("bench") == "spark_read") & F.col("case").startswith(CURVE))
    m = (c.groupBy("partitions", "system")
         .agg(F.count("*").alias("runs"), F.median("msg_s").alias("msg_s"),
              F.max("tasks").alias("tasks"), F.median("client_us").alias("client_us"),
              F.median("broker_us").alias("broker_us"),
              F.sort_array(F.collect_list(F.struct("rep", "msg_s", "load_1min"))).alias("each")))
    first = Window.partitionBy("system").orderBy("partitions")
    raw = m.where(F.col("system").startswith("raw")).select(
        "partitions", F.col("msg_s").alias("raw_msg_s"))
    return (m.withColumn("speedup", F.col("msg_s") / F.first("msg_s").over(first))
            .join(raw, "partitions", "left")
            .withColumn("of_raw", F.col("msg_s") / F.col("raw_msg_s"))
            .orderBy("system", "partitions"))


def confirm_table(df: Any) -> Any:
    """Confirm benchmark, per RTT, kind, strategy and client: median rate, ms per 50,000
    messages, CPU per message, and the rate's ratio to pumpd's."""
    from pyspark.sql import functions as F

    c = df.where(F.col("bench") == "confirms")
    m = (c.groupBy("rtt_ms", "persistent", "strategy", "system")
         .agg(F.count("*").alias("runs"), F.median("msg_s").alias("msg_s"),
              F.min("msg_s").alias("min_msg_s"), F.max("msg_s").alias("max_msg_s"),
              F.median("client_us").alias("client_us"), F.median("broker_us").alias("broker_us"))
         .withColumn("ms_50k", F.lit(50_000_000.0) / F.col("msg_s")))
    pumpd = m.where(F.col("system") == "pumpd").select(
        "rtt_ms", "persistent", "strategy", F.col("msg_s").alias("pumpd_msg_s"))
    return (m.join(pumpd, ["rtt_ms", "persistent", "strategy"], "left")
            .withColumn("pumpd_ratio", F.col("pumpd_msg_s") / F.col("msg_s"))
            .drop("pumpd_msg_s")
            .orderBy("persistent", "rtt_ms", "strategy", "system"))


def tutorial_side_by_side(spark: Any, df: Any, remote_rtt: float | None = None) -> Any:
    """The tutorial's three-line comparison (ms for 50,000 messages) beside each client's, transient
    messages, local (RTT 0) and remote (``remote_rtt``, default the largest RTT measured)."""
    from pyspark.sql import functions as F

    t = confirm_table(df).where(~F.col("persistent"))
    if remote_rtt is None:
        remote_rtt = t.agg(F.max("rtt_ms")).first()[0] or 0.0
    where = (F.when(F.col("rtt_ms") == 0, "local")
             .when(F.col("rtt_ms") == F.lit(remote_rtt), "remote"))
    ours = (t.withColumn("where", where).where(F.col("where").isNotNull())
            .select("strategy", "where", "system", "ms_50k"))
    tutorial = spark.createDataFrame([(s, w, "tutorial (Java)", ms) for s, w, ms in TUTORIAL_FIGURES],
                                  "strategy string, where string, system string, ms_50k double")
    return (tutorial.unionByName(ours).groupBy("strategy", "where").pivot("system").agg(
        F.first("ms_50k")).orderBy("where", "strategy"))


# -- the report ----------------------------------------------------------------------------------


def _fmt(v: Any, spec: str = ",.0f") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v != v:
        return "-"
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _sort_key(system: str) -> tuple[int, str]:
    return (CLIENT_ORDER.index(system) if system in CLIENT_ORDER else 9, system)


def write_report(spark: Any, df: Any, out_dir: Path, files: list[str]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = ["# pumpd benchmark report", "",
             "Made by `bench/analyse.py` (`make bench-report`) with PySpark from the newest results "
             "file of each benchmark: " + ", ".join(f"`bench/results/{f}`" for f in files) + ".",
             "Medians over the repetitions; spread = (max - min) / median.", ""]
    conf = [r.asDict() for r in confirm_table(df).collect()]
    if conf:
        side = [r.asDict() for r in tutorial_side_by_side(spark, df).collect()]
        systems = sorted({k for r in side for k in r} - {"strategy", "where"}, key=lambda s: (
            0 if s.startswith("tutorial") else 1, _sort_key(s)))
        remote = max((r["rtt_ms"] for r in conf if not r["persistent"]), default=0)
        parts += ["## Confirm strategies: the tutorial's comparison reproduced", "",
                  f"ms for 50,000 messages of 64 B, transient (the tutorial's Java client beside "
                  f"each client here; remote = RTT {remote:g} ms through the latency proxy; "
                  "runs with fewer messages are scaled to 50,000).", "",
                  _table(["where", "strategy", *systems],
                         [[r["where"], r["strategy"], *[_fmt(r.get(s)) for s in systems]]
                          for r in sorted(side, key=lambda r: (
                              r["where"], STRATEGY_ORDER.index(r["strategy"])))]), ""]
        parts += ["## Confirm strategies, every client", "",
                  _table(["kind", "RTT ms", "strategy", "client", "runs", "msg/s", "spread",
                          "ms / 50k", "client µs/msg", "broker µs/msg", "x pumpd"],
                         [["persistent" if r["persistent"] else "transient", _fmt(r["rtt_ms"], "g"),
                           r["strategy"], r["system"], str(r["runs"]), _fmt(r["msg_s"]),
                           _fmt((r["max_msg_s"] - r["min_msg_s"]) / r["msg_s"], ".0%"),
                           _fmt(r["ms_50k"]), _fmt(r["client_us"], ".1f"),
                           _fmt(r["broker_us"], ".1f"), _fmt(r["pumpd_ratio"], ".2f")]
                          for r in sorted(conf, key=lambda r: (
                              r["persistent"], r["rtt_ms"], STRATEGY_ORDER.index(r["strategy"]),
                              _sort_key(r["system"])))]), ""]
        parts += [f"![confirm strategies]({_confirm_chart(conf, out_dir).name})", ""]
    shovel = [r.asDict() for r in shovel_ratios(df).collect()]
    if shovel:
        parts += ["## Shovel: pumpd and pika against the plugin", "",
                  _table(["case", "system", "msg/s", "x plugin", "pump µs/msg", "broker µs/msg"],
                         [[r["case"], r["system"], _fmt(r["msg_s"]), _fmt(r["ratio"], ".2f"),
                           _fmt(r["client_us"], ".1f"), _fmt(r["broker_us"], ".1f")]
                          for r in shovel]), ""]
        parts += [f"![shovel]({_shovel_chart(shovel, out_dir).name})", ""]
    parts += _curve_section(df, out_dir)
    latency = out_dir / "latency.md"
    if latency.exists():
        parts += ["## Latency", "", "What a shovel adds from publisher to consumer, with no "
                  "shovel, the plugin and pumpd at paced rates: [latency.md](latency.md) "
                  "(`bench/latency.py`).", ""]
    allm = [r.asDict() for r in medians(
        df.where("bench not in ('confirms', 'latency')")).collect()]
    if allm:
        parts += ["## Every case and system (all but confirms and latency)", "",
                  _table(["bench", "case", "system", "runs", "msg/s", "min", "max", "spread",
                          "client µs/msg", "broker µs/msg"],
                         [[r["bench"], r["case"], r["system"], str(r["runs"]), _fmt(r["msg_s"]),
                           _fmt(r["min_msg_s"]), _fmt(r["max_msg_s"]), _fmt(r["spread"], ".0%"),
                           _fmt(r["client_us"], ".1f"), _fmt(r["broker_us"], ".1f")]
                          for r in allm]), ""]
    path = out_dir / "README.md"
    path.write_text("\n".join(parts))
    return path


def _curve_section(df: Any, out_dir: Path) -> list[str]:
    """The rows/s curve against a super stream's partitions (bench/spark_read.py
    --partitions): a table and a chart, or nothing without such results."""
    rows = [r.asDict(recursive=True) for r in curve_table(df).collect()]
    if not rows:
        return []
    raw = next((r["system"] for r in rows if r["system"].startswith("raw")), None)
    table = _table(
        ["P", "system", "tasks", "runs", "rows/s", "each run (load 1 min)", "x smallest P",
         f"x {raw}" if raw else "x raw", "client µs/msg", "broker µs/msg"],
        [[str(r["partitions"]), r["system"], _fmt(r["tasks"]), str(r["runs"]), _fmt(r["msg_s"]),
          " / ".join(f"{_fmt(e['msg_s'])} ({_fmt(e['load_1min'], '.1f')})" for e in r["each"]),
          _fmt(r["speedup"], ".2f"), "-" if r["system"] == raw else _fmt(r["of_raw"], ".0%"),
          _fmt(r["client_us"], ".1f"), _fmt(r["broker_us"], ".1f")]
         for r in rows])
    return ["## Spark: rows/s against a super stream's partitions", "",
            "`bench/spark_read.py --partitions`: a super stream of P partitions holding the same "
            "messages in total, read whole into `noop` by the stream reader (one task per "
            "partition unless `--min-partitions`), and by rstream in one process subscribed to "
            "every partition (the raw ceiling). Medians over the repetitions, P alternating "
            "within each; the load average before each run in brackets; client CPU is the "
            "reader's whole tree (Spark's JVM and Python workers) or rstream's process.", "",
            table, "", f"![super stream curve]({_curve_chart(rows, out_dir).name})", ""]


def _curve_chart(rows: list[dict[str, Any]], out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for system in sorted({r["system"] for r in rows}):
        mine = sorted((r for r in rows if r["system"] == system), key=lambda r: r["partitions"])
        ps = [r["partitions"] for r in mine]
        (line,) = ax.plot(ps, [r["msg_s"] for r in mine], marker="o",
                          label=f"{system} (median)")
        for r in mine:  # each run, so the spread shows beside the median
            ax.scatter([r["partitions"]] * len(r["each"]), [e["msg_s"] for e in r["each"]],
                       s=10, alpha=0.4, color=line.get_color())
        ax.set_xticks(ps)
    ax.set_xlabel("partitions of the super stream (P)")
    ax.set_ylabel("rows/s")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = out_dir / "super_stream_curve.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _confirm_chart(conf: list[dict[str, Any]], out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["persistent"], r["rtt_ms"]) for r in conf})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), squeeze=False)
    for ax, (persistent, rtt) in zip(axes[0], panels, strict=True):
        rows = [r for r in conf if r["persistent"] == persistent and r["rtt_ms"] == rtt]
        clients = sorted({r["system"] for r in rows}, key=_sort_key)
        width = 0.8 / max(1, len(clients))
        for i, client in enumerate(clients):
            vals = [next((r["msg_s"] for r in rows if r["system"] == client
                          and r["strategy"] == s), 0) for s in STRATEGY_ORDER]
            ax.bar([x + i * width for x in range(3)], vals, width, label=client)
        ax.set_xticks([x + width * (len(clients) - 1) / 2 for x in range(3)], STRATEGY_ORDER)
        ax.set_yscale("log")
        ax.set_title(f"{'persistent' if persistent else 'transient'}, RTT {rtt:g} ms")
        ax.set_ylabel("msg/s (median, log scale)")
        ax.legend(fontsize="small")
    fig.tight_layout()
    path = out_dir / "confirms.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _shovel_chart(rows: list[dict[str, Any]], out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({r["case"] for r in rows})
    systems = sorted({r["system"] for r in rows})
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(cases)), 4))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        vals = [next((r["msg_s"] for r in rows if r["system"] == system and r["case"] == c), 0)
                for c in cases]
        ax.bar([x + i * width for x in range(len(cases))], vals, width, label=system)
    ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(cases))], cases,
                  rotation=15, fontsize="small")
    ax.set_ylabel("msg/s (median)")
    ax.legend()
    fig.tight_layout()
    path = out_dir / "shovel.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS_DIR, help="directory of *.jsonl")
    p.add_argument("--output", type=Path, default=REPORT_DIR, help="report directory")
    ns = p.parse_args(argv)
    paths = sorted(ns.results.glob("*.jsonl"))
    rows = read_rows(paths)
    if not rows:
        print(f"no results in {ns.results}: run make bench first", file=sys.stderr)
        return 1
    try:
        spark = spark_session()
    except ReportError as exc:
        print(f"bench/analyse.py: {exc}", file=sys.stderr)
        return 2
    try:
        df = load(spark, rows).cache()
        files = sorted(r[0] for r in df.select("file").distinct().collect())
        print(f"analysing {df.count()} runs from {', '.join(files)} "
              f"({len(paths)} results files read)", flush=True)
        path = write_report(spark, df, ns.output, files)
    finally:
        spark.stop()
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
