"""bench/analyse.py on a small fixed results directory (tests/data/bench-results), with a real
local SparkSession: the tables Spark computes, against values worked out by hand."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "bench-results"


@pytest.fixture(scope="module")
def analyse() -> Iterator[ModuleType]:
    """bench/analyse.py, imported as ``python bench/analyse.py`` would run it: with bench/ first
    on the path, for this module's tests only (bench/ holds scripts named like packages)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(ROOT / "bench")
        yield importlib.import_module("analyse")


@pytest.fixture(scope="module")
def spark(analyse: ModuleType) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = analyse.spark_session()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def df(analyse: ModuleType, spark: Any) -> Any:
    return analyse.load(spark, analyse.read_rows(DATA.glob("*.jsonl"))).cache()


def test_only_the_newest_file_of_each_benchmark_and_only_used_runs_are_read(df: Any) -> None:
    files = {r[0] for r in df.select("file").distinct().collect()}
    # spark_read: the newest file for the single-stream cases, and for the super-stream curve
    # the newest file that holds one (the newer file has none) with one task per partition (the
    # newest, --min-partitions 2, is left out)
    assert files == {"confirms-20260101-000000.jsonl", "shovel-20260101-000000.jsonl",
                     "spark_read-20260101-000000.jsonl", "spark_read-20260102-000000.jsonl"}
    assert df.where("file = 'spark_read-20260102-000000.jsonl'").count() == 2
    assert df.where("file = 'spark_read-20260101-000000.jsonl'").count() == 12
    # 19 confirm lines, one failed; 7 shovel lines, one not used
    assert df.where("bench = 'confirms'").count() == 18
    assert df.where("bench = 'shovel'").count() == 6


def test_confirm_medians_spreads_and_ratios(analyse: ModuleType, df: Any) -> None:
    rows = {(r["rtt_ms"], r["strategy"], r["system"]): r.asDict()
            for r in analyse.confirm_table(df).collect()}
    batch = rows[(0.0, "batch", "pumpd")]
    assert (batch["runs"], batch["msg_s"], batch["min_msg_s"], batch["max_msg_s"]) == (
        3, 200.0, 100.0, 300.0)
    assert batch["ms_50k"] == pytest.approx(250_000.0)  # 50,000 messages at 200 msg/s
    pika_batch = rows[(0.0, "batch", "pika")]
    assert pika_batch["msg_s"] == 45.0  # the median of two runs, 50 and 40
    assert pika_batch["pumpd_ratio"] == pytest.approx(200 / 45)
    assert rows[(0.0, "async", "pika")]["msg_s"] == 100.0  # the failed run is not counted
    assert rows[(0.0, "async", "pika")]["pumpd_ratio"] == pytest.approx(8.0)
    individual = rows[(0.0, "individual", "pumpd")]
    assert (individual["msg_s"], individual["client_us"]) == (20.0, 4.0)
    assert rows[(5.0, "async", "pika")]["pumpd_ratio"] == pytest.approx(2.5)


def test_the_tutorial_s_table_side_by_side(analyse: ModuleType, spark: Any, df: Any) -> None:
    rows = {(r["where"], r["strategy"]): r.asDict()
            for r in analyse.tutorial_side_by_side(spark, df).collect()}
    assert rows[("local", "async")] == {"strategy": "async", "where": "local",
                                        "tutorial (Java)": 4054.0, "pumpd": 62_500.0,
                                        "pika": 500_000.0}
    assert rows[("remote", "individual")]["tutorial (Java)"] == 231_541.0
    assert rows[("remote", "individual")]["pumpd"] == pytest.approx(500_000.0)
    assert rows[("remote", "batch")]["pika"] == pytest.approx(20_000.0)


def test_shovel_ratios_against_the_plugin_from_old_format_lines(analyse: ModuleType, df: Any) -> None:
    rows = {r["system"]: r.asDict() for r in analyse.shovel_ratios(df).collect()}
    assert rows["plugin"]["msg_s"] == 11.0 and rows["plugin"]["ratio"] == 1.0
    assert rows["pumpd"]["msg_s"] == 20.0
    assert rows["pumpd"]["ratio"] == pytest.approx(20 / 11)
    assert rows["pika"]["ratio"] == pytest.approx(9 / 11)
    spread = {r["system"]: r["spread"] for r in analyse.medians(df).collect()
              if r["bench"] == "shovel"}
    assert spread["pumpd"] == pytest.approx(1.0)  # (30 - 10) / 20


def test_the_super_stream_curve(analyse: ModuleType, df: Any) -> None:
    rows = {(r["system"], r["partitions"]): r.asDict(recursive=True)
            for r in analyse.curve_table(df).collect()}
    one, two = rows[("pumpd-superstream-noop", 1)], rows[("pumpd-superstream-noop", 2)]
    assert (one["runs"], one["msg_s"], one["tasks"], one["speedup"]) == (3, 100.0, 1, 1.0)
    assert [(e["rep"], e["msg_s"], e["load_1min"]) for e in one["each"]] == [
        (1, 100.0, 1.0), (2, 120.0, 2.0), (3, 90.0, 3.0)]  # in repetition order
    assert (two["msg_s"], two["tasks"]) == (160.0, 2)
    assert two["speedup"] == pytest.approx(1.6)
    assert one["of_raw"] == pytest.approx(2.0)  # raw's median at P=1: 50
    assert two["of_raw"] == pytest.approx(3.2)
    assert rows[("raw-rstream-all", 2)]["speedup"] == pytest.approx(1.0)


def test_the_report_and_its_charts(analyse: ModuleType, spark: Any, df: Any, tmp_path: Path) -> None:
    path = analyse.write_report(spark, df, tmp_path, ["confirms-20260101-000000.jsonl"])
    text = path.read_text()
    assert "| local | async | 4,054 | 62,500 | 500,000 |" in text
    assert "| remote | individual | 231,541 | 500,000 | 500,000 |" in text
    assert "| 64B-transient-on_confirm | pumpd | 20 | 1.82 | 4.0 | 30.0 |" in text
    assert "| 2 | pumpd-superstream-noop | 2 | 3 | 160 | 150 (1.0) / 180 (2.0) / 160 (3.0) | 1.60 | 320% | - | - |" in text
    for png in ("confirms.png", "shovel.png", "super_stream_curve.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
