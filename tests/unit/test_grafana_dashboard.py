"""contrib/grafana-pumpd.json asks Prometheus only for metrics pumpd exports: every metric name in
its PromQL expressions (and its variables' queries) is one that the exporter renders for a report
in which every figure is known."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pumpd.engine.status import Counters, State
from pumpd.supervisor.definitions import parse_runtime
from pumpd.supervisor.report import ShovelView, WorkerView, metrics_text
from pumpd.supervisor.slots import SlotRecord

DASHBOARD = Path(__file__).resolve().parents[2] / "contrib" / "grafana-pumpd.json"
# PromQL's words that are not metric names: binary operators and modifiers
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan"}


def exported_names() -> set[str]:
    """The metric families the exporter renders, every per-worker figure known."""
    cfg = parse_runtime("s", {"src-uri": "amqp://h", "src-queue": "q", "dest-uri": "amqp://h",
                              "dest-queue": "out"}, 1, "test").cfg
    counters = Counters(source_backlog=3, lag_messages=3, lag_since_ms=1_000)
    worker = WorkerView(index=0, pid=1, alive=True, stopping=False,
                        record=SlotRecord(pid=1, state=State.RUNNING, counters=counters),
                        restarts=0, last_exit=None, next_start_in=None, heartbeat_age=0.1,
                        counters=counters, moving=True)
    view = ShovelView(name="s", cfg=cfg, origin="file", removing=False, state=State.RUNNING,
                      reason="", since=1.0, workers=[worker])
    text = metrics_text([view], "native", now=2.0)
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
               if line and not line.startswith("#")}
    assert samples <= names  # every sample belongs to a declared family
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are neither functions
    nor aggregations (followed by "("), keywords, label matchers, label lists nor ranges."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, regexes)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges and subqueries
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"(?<![\w$.])([A-Za-z_:][\w:]*)(\s*\()?", expr):
        word, call = m.group(1), m.group(2)
        if not call and word.lower() not in KEYWORDS:
            names.add(word)
    return names


def expressions(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        query = var.get("query")
        if var.get("type") == "query":
            text = query["query"] if isinstance(query, dict) else query
            # label_values(metric, label): its second argument is a label, not a metric
            found.append(re.sub(r"label_values\(\s*([^,)]+),[^)]*\)", r"\1", text))
    return found


def test_the_parser_finds_metric_names_and_nothing_else() -> None:
    expr = ('sum by (shovel, reason) (increase(pumpd_x_total{shovel=~"$shovel",a="b(c)"}'
            '[$__rate_interval])) / on (shovel) group_left max(pumpd_y) > bool 0 or pumpd_z')
    assert metric_names(expr) == {"pumpd_x_total", "pumpd_y", "pumpd_z"}


def test_every_metric_the_dashboard_asks_for_is_exported() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_names()
    assert {"pumpd_lag_seconds", "pumpd_lag_messages"} <= exported
    asked: set[str] = set()
    for expr in expressions(dashboard):
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{sorted(names - exported)} in {expr!r} are not exported"
        asked |= names
    # the panels the dashboard is for
    assert {"pumpd_messages_published_total", "pumpd_lag_seconds", "pumpd_lag_messages",
            "pumpd_shovel_state", "pumpd_worker_restarts_total"} <= asked
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Lag (seconds)", "Lag (messages)", "State"} <= titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
