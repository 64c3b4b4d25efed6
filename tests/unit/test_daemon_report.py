"""The status documents without a broker: rates, counters carried over restarts, Prometheus text,
the status table, the state file and the daemon's configuration rules."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from pumpd.cli.client import render_summary, render_table
from pumpd.config.parse import ConfigError
from pumpd.engine.status import Counters, State
from pumpd.http.server import parse_address
from pumpd.supervisor import statefile
from pumpd.supervisor.definitions import (
    BodyNotJson,
    load_file,
    merge,
    parse_put_body,
    parse_runtime,
    shovels_per_process,
)
from pumpd.supervisor.report import (
    RateMeter,
    ShovelView,
    WorkerView,
    add_counters,
    carry,
    metrics_text,
    plugin_figures,
    shovel_doc,
    summary_doc,
)
from pumpd.supervisor.slots import SlotRecord, SlotTable

URI = "amqp://user:hunter2@broker:5672/%2F"
DEFINITION = {"src-uri": URI, "src-queue": "q", "dest-uri": URI, "dest-queue": "out"}


def test_rates_come_from_counter_deltas_over_the_window() -> None:
    meter = RateMeter()
    meter.sample(Counters(published=0, acked=0), now=100.0)
    meter.sample(Counters(published=500, acked=400), now=101.0)
    meter.sample(Counters(published=1000, acked=900), now=102.0)
    rates = meter.rates()
    assert rates["published"] == 500.0 and rates["acked"] == 450.0


def test_a_finished_process_carries_its_totals_but_not_its_gauges() -> None:
    total = carry(Counters(acked=10), Counters(acked=5, in_flight=7, buffered=3))
    assert (total.acked, total.in_flight, total.buffered) == (15, 0, 0)


def view(name: str = 'odd "name"\\x') -> ShovelView:
    cfg = parse_runtime(name, DEFINITION, 2, "test").cfg
    record = SlotRecord(pid=42, state=State.RUNNING, since=1.0, heartbeat=0.0,
                        counters=Counters(acked=3, in_flight=1), implementation="native")
    workers = [WorkerView(index=i, pid=42 + i, alive=True, stopping=False, record=record,
                          restarts=i, last_exit=None, next_start_in=None, heartbeat_age=0.5,
                          counters=record.counters, rates={"published": 10.0}, moving=True)
               for i in range(2)]
    return ShovelView(name=name, cfg=cfg, origin="runtime", removing=False,
                      state=State.RUNNING, reason="", since=1.0, workers=workers)


def test_shovel_document_sums_workers_and_hides_passwords() -> None:
    doc = shovel_doc(view())
    assert doc["counters"]["acked"] == 6 and doc["restarts"] == 1 and doc["msg_per_s"] == 20.0
    assert doc["workers_configured"] == 2 and len(doc["workers"]) == 2
    assert "hunter2" not in json.dumps(doc)
    assert doc["src_uri"] == "amqp://user@broker:5672/%2F"


def test_metrics_escape_label_values_and_label_every_series() -> None:
    text = metrics_text([view()], "native")
    assert 'shovel="odd \\"name\\"\\\\x"' in text
    assert 'pumpd_messages_acked_total{shovel="odd \\"name\\"\\\\x",worker="1"} 3' in text
    for line in text.splitlines():
        if line and not line.startswith("#") and not line.startswith("pumpd_info"):
            assert "shovel=" in line, line
    assert "hunter2" not in text


def test_status_table_has_the_shovel_status_columns() -> None:
    doc = shovel_doc(view("orders"))
    lines = render_table([doc]).splitlines()
    assert lines[0].split() == ["NAME", "STATE", "SOURCE", "DESTINATION", "LAST", "CHANGE",
                                "MSG/S", "IN", "FLIGHT", "BACKLOG", "LAG", "WORKERS"]
    assert lines[1].startswith("orders  running  amqp://user@broker:5672/%2F [q]")
    assert "2/2 (1 restart)" in lines[1]
    assert render_table([]) == "no shovels\n"


def test_stall_restarts_reach_the_document_the_table_and_the_metrics() -> None:
    v = view("orders")
    v = ShovelView(**{**v.__dict__, "workers": [
        WorkerView(**{**w.__dict__, "counters": Counters(acked=3, stall_restarts=w.index + 1)})
        for w in v.workers]})
    doc = shovel_doc(v)
    assert doc["counters"]["stall_restarts"] == 3
    assert [w["counters"]["stall_restarts"] for w in doc["workers"]] == [1, 2]
    assert "2/2 (1 restart, 3 stall restarts)" in render_table([doc]).splitlines()[1]
    text = metrics_text([v], "native")
    assert "# TYPE pumpd_stall_restarts_total counter" in text
    assert 'pumpd_stall_restarts_total{shovel="orders",worker="1"} 2' in text


def test_state_file_is_written_atomically_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "s.runtime.json"
    assert statefile.load(path) == {}
    statefile.save(path, {"a": DEFINITION}, ())
    assert statefile.load(path) == {"a": DEFINITION}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["s.runtime.json"]  # no temporary left
    assert statefile.default_path("/etc/pumpd/shovels.json") == \
        Path("/etc/pumpd/shovels.runtime.json")


def test_workers_option_is_a_default_that_a_shovel_clause_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"shovels": {"a": DEFINITION, "b": {**DEFINITION, "workers": 1}}}))
    shovels = load_file(cfg, 4)
    assert shovels["a"].cfg.workers == 4 and shovels["b"].cfg.workers == 1
    assert load_file(cfg, None)["a"].cfg.workers == 1
    with pytest.raises(ConfigError, match="both in the configuration file and at run time"):
        merge(shovels, {"a": parse_runtime("a", DEFINITION, None, "x")}, "state")


def test_a_put_body_is_a_definition_or_the_management_api_value_form(tmp_path: Path) -> None:
    plain = parse_put_body("a", json.dumps(DEFINITION).encode(), None)
    wrapped = parse_put_body("a", json.dumps({"value": DEFINITION, "component": "shovel",
                                              "vhost": "/", "name": "a"}).encode(), 2)
    assert plain.origin == wrapped.origin == "runtime"
    assert plain.definition == wrapped.definition == DEFINITION
    assert (plain.cfg.queue, wrapped.cfg.workers) == ("q", 2)
    with pytest.raises(BodyNotJson, match="the body is not valid JSON"):
        parse_put_body("a", b"{", None)
    with pytest.raises(ConfigError, match="PUT /api/shovels/a"):
        parse_put_body("a", b'{"value": {"src-uri": 1}}', None)


def test_the_files_shovels_per_process(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"shovels": {"a": DEFINITION}}))
    assert shovels_per_process(cfg) is None
    cfg.write_text(json.dumps({"shovels": {"a": DEFINITION}, "shovels_per_process": 50}))
    assert shovels_per_process(cfg) == 50


def test_http_addresses() -> None:
    assert parse_address("off") is None
    assert parse_address("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert parse_address(":9000") == ("127.0.0.1", 9000)
    assert parse_address("[::1]:15680") == ("::1", 15680)
    with pytest.raises(ValueError):
        parse_address("localhost")


def test_plugin_status_figures_and_the_source_backlog() -> None:
    """The plugin's shovel_status names: remaining, remaining_unacked, pending,
    forwarded; and the backlog: levels combine by max over workers, never add up."""
    doc = shovel_doc(view("orders"))
    assert (doc["remaining"], doc["remaining_unacked"]) == ("unlimited", "unlimited")
    assert doc["forwarded"] == doc["counters"]["published"] and doc["pending"] == 0
    assert doc["source_backlog"] is None and doc["source_backlog_trend"] is None
    c = Counters(published=7, buffered=2, remaining=13, remaining_unacked=11, source_backlog=40)
    assert plugin_figures(c, -2.5) == {"remaining": 13, "remaining_unacked": 11, "pending": 2,
                                       "forwarded": 7, "source_backlog": 40,
                                       "source_backlog_trend": -2.5,
                                       "lag_messages": None, "lag_seconds": None}
    both = add_counters(Counters(source_backlog=40), Counters(source_backlog=-1))
    assert both.source_backlog == 40 and both.remaining == -1
    assert carry(Counters(), Counters(source_backlog=40)).source_backlog == -1


def test_backlog_trend_over_the_readings() -> None:
    meter = RateMeter()
    for i, backlog in enumerate((100, 100, 110, 120)):
        meter.sample(Counters(source_backlog=backlog), now=float(i * 5))
    assert meter.backlog_trend() == 1.3  # 20 more messages in 15 s
    assert meter.rates()["source_backlog"] == 1.3
    meter.sample(Counters(), now=30.0)  # not known any more: no trend across the gap
    assert meter.backlog_trend() is None


def test_slot_keeps_unknown_levels() -> None:
    table = SlotTable.create(1)
    try:
        table.writer(0).write(SlotRecord(counters=Counters(acked=5, source_backlog=9)))
        got = table.read(0).counters
        assert (got.acked, got.source_backlog, got.remaining) == (5, 9, -1)
    finally:
        table.close()


def test_migration_summary_sums_backlogs_and_rates_and_says_unknown() -> None:
    """The summary over every shovel, from the documents /api/shovels serves."""
    base = shovel_doc(view("orders"))

    def doc(state: str, backlog: int | None, rate: float) -> dict[str, object]:
        return {**base, "state": state, "source_backlog": backlog, "msg_per_s": rate}

    docs = ([doc("running", 400, 1000.0)] * 290 + [doc("starting", None, 0.0)] * 10)
    summary = summary_doc(docs)
    assert summary == {"shovels": 300, "states": {"starting": 10, "running": 290},
                       "source_backlog": 116_000, "source_backlog_known": 290,
                       "msg_per_s": 290_000.0, "seconds_to_empty": 0.4}
    assert render_summary(summary) == (
        "300 shovels: 10 starting, 290 running; 116,000 messages left in the source queues "
        "(known for 290 of 300 shovels), 290,000 msg/s, under a second to empty\n")
    slow = summary_doc([doc("running", 123_456, 12.5), doc("blocked", 0, 0.0)])
    assert slow["seconds_to_empty"] == 9876.5
    assert render_summary(slow).endswith("123,456 messages left in the source queues, 12 msg/s, "
                                         "about 2 h 45 min to empty\n")
    assert render_summary(summary_doc([doc("running", 12_000, 10.0)])).endswith(
        "10 msg/s, about 20 min to empty\n")
    assert render_summary(summary_doc([])) == "0 shovels (none defined: nothing to move)\n"
    unknown = summary_doc([doc("starting", None, 0.0)])
    assert unknown["source_backlog"] is None and unknown["seconds_to_empty"] is None
    assert render_summary(unknown) == (
        "1 shovel: 1 starting; messages left in the source queues: unknown (not read yet), "
        "0 msg/s, time to empty unknown\n")
    stuck = summary_doc([doc("blocked", 5, 0.0)])
    assert render_summary(stuck).endswith("0 msg/s, time to empty unknown (nothing is moving)\n")
    done = summary_doc([doc("running", 0, 0.0), doc("terminated", 0, 0.0)])
    assert done["seconds_to_empty"] == 0.0
    assert render_summary(done) == ("2 shovels: 1 running, 1 terminated; 0 messages left in the "
                                    "source queues, 0 msg/s, the source queues are empty\n")
    # an unknown backlog beside empty ones is not "empty"
    assert summary_doc([doc("running", 0, 0.0), doc("starting", None, 0.0)]
                       )["seconds_to_empty"] is None
    assert summary_doc([])["shovels"] == 0
