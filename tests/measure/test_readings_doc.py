"""Issue #62: the readings as data. A committed run's readings written as the versioned JSON document (``report
--format json``), read back, and held against what the report's own speedup table and verdict show: one source."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.errors import UserError
from dflashbench.measure import readings, readings_doc
from dflashbench.report import load_model

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "results" / "examples" / "demo-20261127-075225-b7da"
KEYS = {"run_id", "backend", "model", "workload", "category", "concurrency", "speed", "figure", "method", "baseline",
        "value",
        "interval", "decision", "verdict", "decided", "why", "covers", "terms", "rests_on"}  # fmt: skip


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("json") / "readings.json"
    result = CliRunner().invoke(app, ["report", str(RUN), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_the_document_holds_every_reading_as_documented(written):
    assert written["schema"] == "dflashbench.readings" and written["version"] == 1
    assert written["runs"] == [RUN.name]
    rows = written["readings"]
    assert rows and all(set(r) == KEYS for r in rows)
    assert {r["figure"] for r in rows} == {"latency", "throughput", "ttft", "per_user", "single"}
    decided = [r for r in rows if r["decided"]]
    assert decided and all(r["interval"][0] > 1 or r["interval"][1] < 1 for r in decided)
    assert all(set(r["terms"]) == {"requests_sd", "drift_sd", "run_to_run_sd", "run_to_run_source"} for r in rows)
    # in turn: no drift between a pair's points; the project's run-to-run term, named
    assert {r["terms"]["drift_sd"] for r in rows if r["interval"]} == {0.0}
    assert {r["terms"]["run_to_run_source"] for r in rows if r["interval"]} == {"the project's default"}
    assert all(r["rests_on"]["prompts_both_ran"] == 32 for r in rows if r["category"] == "all"
               and r["figure"] != "throughput")  # the points' own throughput rests on the two points (issue #65)
    assert all(r["interval"] is None and not r["decided"] for r in rows if r["figure"] == "throughput")


def test_read_back_it_is_the_table_the_report_was_made_of(written):
    model = load_model([RUN], with_figures=False)
    back = readings_doc.table_of(written)
    assert list(back.columns) == list(readings.COLUMNS) and len(back) == len(model.readings)
    mine = model.readings.set_index(["category", "method", "baseline", "concurrency", "figure"])
    for r in back.to_dict("records"):
        row = mine.loc[(r["category"], r["method"], r["baseline"], r["concurrency"], r["figure"])]
        assert r["value"] == pytest.approx(row["value"]) and r["decision"] == row["decision"]
        if readings.finite(r["lo"]) is not None:
            assert (r["lo"], r["hi"]) == pytest.approx((row["lo"], row["hi"]))
    # the report's matched-concurrency speedup table shows the same per-user readings, interval and all
    table = next(t for t in model.headline if t.title == "Speedup at matched concurrency")
    names = {"EAGLE-3": "eagle3", "DFlash": "dflash"}
    shown = 0
    for cells in table.rows:
        rec = dict(zip(table.columns, cells, strict=True))
        if rec["category"] != "all":
            continue
        r = back[(back["figure"] == "per_user") & (back["category"] == "all") & (back["baseline"] == "ar")
                 & (back["method"] == names[rec["method"]]) & (back["concurrency"] == int(rec["concurrency"]))].iloc[0]  # fmt: skip
        assert rec["speedup"] == f"{r['value']:.2f}×"
        assert rec["95% decision interval"] == f"[{r['lo']:.2f}×, {r['hi']:.2f}×]"
        shown += 1
    assert shown == 6  # EAGLE-3 and DFlash at c=1, 2, 4


def test_a_document_that_is_not_one_is_refused():
    with pytest.raises(UserError, match="not a dflashbench readings document"):
        readings_doc.table_of({"schema": "other"})
    with pytest.raises(UserError, match="newer than this dflashbench reads"):
        readings_doc.table_of({"schema": readings_doc.SCHEMA, "version": 99})
    assert math.isnan(float("nan"))  # the document never holds NaN: missing values are null
    assert readings_doc.reading_of({"lo": float("nan"), "hi": 2.0, "value": float("nan")})["interval"] is None


def test_compare_writes_its_rows_as_data(tmp_path):
    result = CliRunner().invoke(app, ["compare", str(RUN), str(RUN), "--format", "json"])
    doc = json.loads(result.output)
    assert doc["schema"] == "dflashbench.comparison" and doc["exit_code"] == result.exit_code
    assert {r["metric"] for r in doc["rows"]} >= {"speedup", "throughput_tok_per_s", "per_user_tok_per_s_pooled"}
    assert doc["paired"].startswith("not paired across runs")  # a run from before the prompt digest
