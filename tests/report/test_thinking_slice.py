"""Issue #42's thinking slice: a suite's ``thinking_slice`` runs every workload with thinking on and off, as two
labelled workloads; only a model whose registry entry has the switch can run it; the report reads τ of each side,
per request where the engine reports acceptance, else from the sides' points' counters."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from dflashbench.errors import UserError
from dflashbench.measure.slices import THINKING, slice_rows
from dflashbench.plan import pairing
from dflashbench.plan.models import lookup
from dflashbench.plan.suites import parse_suite
from report.factory import point, request

SUITE = {"name": "think", "backend": "vllm", "methods": ["ar", "dflash"], "concurrency": [1],
         "thinking_slice": True, "workloads": [{"name": "gsm8k"}, {"name": "math500", "num_prompts": 8}]}  # fmt: skip


def test_each_workload_runs_on_both_sides_under_labels_of_its_own():
    suite = parse_suite({**SUITE, "model": "qwen3-8b"}, source="test")
    assert [(w.label, w.thinking) for w in suite.workloads] == [
        ("gsm8k+thinking", True), ("gsm8k+no-thinking", False), ("math500+thinking", True),
        ("math500+no-thinking", False)]  # fmt: skip
    again = parse_suite(suite.model_dump(mode="json", exclude={"source_file"}), source="manifest")  # resumed: not doubled
    assert [w.label for w in again.workloads] == [w.label for w in suite.workloads]
    resolved, _ = pairing.resolve(suite)
    assert [w.thinking for w in resolved.workloads] == [True, False, True, False]  # the registry's default kept out
    chat = lookup("qwen3-8b").chat
    assert chat.drafter_trained_with_thinking is False and "thinking mode disabled" in chat.source


def test_a_model_without_the_switch_is_refused_with_the_fix():
    with pytest.raises(UserError, match="no thinking switch in the model registry"):
        pairing.resolve(parse_suite({**SUITE, "model": "gpt-oss-20b"}, source="test"))  # reasoning effort instead


def _requests(point_id: str, steps: int, accepted: int, n: int = 6) -> list[dict]:
    out = []
    for i in range(n):
        r = request("dflash", 1, i, tokens=40)
        r = dataclasses.replace(r, point_id=point_id, spec_verify_steps=steps, spec_accepted_tokens=accepted + i % 2)
        out.append(r.to_dict())
    return out


def test_the_report_reads_tau_on_each_side_per_request_or_from_the_counters():
    on = point("dflash", 1, 100.0, 100.0, workload="gsm8k+thinking", point_id="on", tau=2.5)
    off = point("dflash", 1, 150.0, 150.0, workload="gsm8k+no-thinking", point_id="off", tau=5.0)
    points = pd.DataFrame([dataclasses.asdict(p) for p in (on, off)])
    requests = pd.DataFrame(_requests("on", 10, 15) + _requests("off", 10, 40))
    rows, _ = slice_rows(points, requests)
    sides = {r["slice"]: r for r in rows if r["kind"] == THINKING}
    assert set(sides) == {"thinking on", "thinking off"} and {r["workload"] for r in sides.values()} == {"gsm8k"}
    assert sides["thinking on"]["tau"] == pytest.approx(1 + 15.5 / 10) and sides["thinking on"]["lo"] is not None
    assert sides["thinking off"]["tau"] == pytest.approx(1 + 40.5 / 10)
    # no per-request acceptance (an engine without it): the points' own counters, said so, no interval
    rows, _ = slice_rows(points, pd.DataFrame(columns=["run_id", "point_id"]))
    sides = {r["slice"]: r for r in rows if r["kind"] == THINKING}
    assert sides["thinking on"]["tau"] == 2.5 and sides["thinking on"]["lo"] is None
    assert "counters" in sides["thinking off"]["statistic"]
