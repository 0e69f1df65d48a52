"""The verdict review of 2026-11-29 (docs/measurements/2026-11-29-verdict-review/README.md, issue #65): one test per
finding fixed, each on a committed run or an edited copy of one (the review's probes.py plants the same edits), each
failing before its fix and passing after."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dflashbench.report import load_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "results" / "examples"
OLD = EXAMPLES / "demo-20261123-120110-e69c"  # the reference backend, before the speed probe
VLLM = EXAMPLES / "demo-20261125-024540-6b40"  # vLLM's CPU build: no run-to-run term of its own
DEFAULT = EXAMPLES / "demo-20261127-075225-b7da"  # the embedded default, each load's points sent in turn
METHODS = EXAMPLES / "demo-20261127-053618-7ae2"  # four methods, on a machine shared with other work
GPU = EXAMPLES / "gpu-embedded-20261123-093322-08e0"  # resumed once: EAGLE-3 at c=4, 16 from a later sitting
TRACE = EXAMPLES / "trace-demo-20261125-182837-c938"


def _copy(tmp_path: Path, run: Path, name: str | None = None) -> Path:
    new = tmp_path / (name or run.name)
    shutil.copytree(run, new)
    return new


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _edit(path: Path, fn) -> None:
    out = [x for r in _rows(path) if (x := fn(r)) is not None]
    path.write_text("".join(json.dumps(r) + "\n" for r in out))


def _model(runs: list[Path], **kw):
    return load_model(runs, with_figures=False, **kw)


def _lines(runs: list[Path], **kw) -> str:
    return "\n".join(_model(runs, **kw).verdict.lines)


# -- p09a: failed requests under max_error_rate --------------------------------------------------------------------
def test_failed_requests_under_the_error_rate_are_said_in_the_answer(tmp_path):
    """Probe p09a: 3 of DFlash c=1's 32 requests time out (9 %, under max_error_rate, so the point stays ok). The
    ratio is read on the 29 that succeeded; the answer said nothing of the three."""
    run = _copy(tmp_path, DEFAULT)
    pid, left = "reference:dflash:synthetic:c1", [3]

    def fail(r):
        if r["point_id"] == pid and not r["warmup"] and left[0]:
            left[0] -= 1
            r.update(ok=False, error="timeout after 300 s", last_token_ns=None, output_tokens=0, output_text=None,
                     output_sha256=None, chunk_ns=[], chunk_tokens=[], output_token_ids=None)
        return r

    _edit(run / "requests.jsonl", fail)
    answer = _model([run]).verdict.settings[0].answer
    assert "Failed requests, left out of every ratio: DFlash at c=1: 3 of 32 failed (timeout after 300 s)." in answer
    assert "Failed requests" not in _model([DEFAULT]).verdict.settings[0].answer  # none failed: nothing said


# -- p10b and X11: the trace's schedule, read from the requests ------------------------------------------------
def test_a_trace_point_whose_requests_slipped_is_not_decided_however_its_row_was_stamped(tmp_path):
    """Probe p10b: DFlash's sends at 2× spread over 1.6× the time in requests.jsonl only (its point row keeps
    3.153/s). The verdict decided at 2× on the row's rate while its own lateness, from the requests, read 10 s."""
    run = _copy(tmp_path, TRACE)
    pid = "reference:dflash:workloads:tazure-codex2.0"
    first = min(r["sent_ns"] for r in _rows(run / "requests.jsonl") if r["point_id"] == pid and not r["warmup"])

    def late(r):
        if r["point_id"] == pid and not r["warmup"]:
            delta = int((r["sent_ns"] - first) * 0.6)
            for k in ("sent_ns", "first_token_ns", "last_token_ns"):
                r[k] += delta
            r["chunk_ns"] = [c + delta for c in r["chunk_ns"]]
        return r

    _edit(run / "requests.jsonl", late)
    said = _lines([run])
    assert "nothing at 2× (schedule not kept: DFlash sent 1.97/s of 3.15 asked (62%))" in said, said
    assert "1.97/s of 3.15 asked at 2× (more than 5% off: not decided)" in said


def test_the_trace_verdicts_worst_lateness_is_the_runs_worst_point():
    """X11: "4.2 ms at p99 (the worst point)" left out the random-token points, whose worst (AR at 2×) is 8.8 ms,
    as the report's own schedule table shows."""
    said = _lines([TRACE])
    assert "8.8 ms at p99 (the worst point)" in said, said


# -- p02 and p02b: labels swapped between two points --------------------------------------------------------------
def _swapped(tmp_path: Path, a: str, b: str) -> Path:
    run = _copy(tmp_path, DEFAULT)
    ids, meth = {a: b, b: a}, {a: b.split(":")[1], b: a.split(":")[1]}

    def points(r):
        if r["point_id"] in ids:
            old = r["point_id"]
            r.update(point_id=ids[old], method=meth[old],
                     draft=None if meth[old] == "ar" else f"dflashbench/embedded/{meth[old]}")
        return r

    _edit(run / "points.jsonl", points)
    _edit(run / "requests.jsonl", lambda r: {**r, "point_id": ids.get(r["point_id"], r["point_id"])})
    return run


def test_two_speculative_methods_swapped_at_one_load_are_caught_by_their_tau(tmp_path):
    """Probe p02b: EAGLE-3 and DFlash swapped at c=2. The verdict served "EAGLE-3 at c=2" on DFlash's point, though
    each method's τ is the same at every load of the run (DFlash 7.72, EAGLE-3 5.19)."""
    run = _swapped(tmp_path, "reference:eagle3:synthetic:c2", "reference:dflash:synthetic:c2")
    answer = _model([run]).verdict.settings[0].answer
    assert "EAGLE-3 at c=2" not in answer and "nothing at c=2 (implausible: " in answer, answer
    assert "EAGLE-3's τ 7.72, DFlash's at its other loads (its own 5.19): labels swapped?" in answer, answer


def test_a_speculative_point_with_ars_tau_is_named_and_not_read(tmp_path):
    """Probe p02: AR and DFlash swapped at c=2. The "DFlash" point with τ 1.00 was not named, and DFlash ÷ EAGLE-3
    at c=2 was decided on it ("clearly longer", 2.01×)."""
    run = _swapped(tmp_path, "reference:ar:synthetic:c2", "reference:dflash:synthetic:c2")
    model = _model([run])
    answer = model.verdict.settings[0].answer
    assert "DFlash's τ 1.00, AR's one token per step (its own 7.72 at its other loads): labels swapped?" in answer
    from dflashbench.measure import verdict

    every, _ = verdict.decide(model.readings, "all", model.verdict.settings[0].implausible)
    assert every[("dflash", "eagle3")].outcome(2) == "undecided"


# -- X1, X2, X14, p05a-c: the brackets line ------------------------------------------------------------------------
def test_the_brackets_say_their_terms_are_1_sd_and_name_the_run_to_run_term():
    """X1: "widened by launch ±7.5% (default)" in a line that calls the brackets 95% intervals: ±7.5% is a 1-sd log
    term (the interval adds it × 1.96), and it is the speedups' spread between unchanged runs, not a launch."""
    brackets = _model([DEFAULT]).verdict.brackets
    assert "widened by run-to-run ±7.5% (1 sd, default)" in brackets and "launch" not in brackets, brackets
    methods = _model([METHODS]).verdict.brackets
    assert "widened by drift (1 sd: probe ±94%; run-to-run ±7.5%, default)" in methods, methods


def test_the_sizing_says_how_many_points_stopped_short_and_that_it_is_the_requests_alone():
    """X2: "all 9 ran out of prompts at 32 requests, reaching ±15–22%": 5 of 9 reached ±20% and 4 did not, and the
    half-widths are the requests' alone, beside brackets the drift widens to ×/÷ 3.7 (example-methods)."""
    assert "points sized to ±20% on requests: all 9 ran out of prompts at 32, 4 short (±21–22%)." in \
        _model([DEFAULT]).verdict.brackets
    assert "points sized to ±20% on requests: all 12 ran out of prompts at 32, 6 short (±21–28%)" in \
        _model([METHODS]).verdict.brackets


def test_intervals_without_a_run_to_run_term_say_so():
    """X14: the vLLM example's intervals hold no run-to-run term (launch_noise.toml has no vllm entry), so they are
    narrower by construction than every reference example's; the line did not say so."""
    brackets = _model([VLLM]).verdict.brackets
    assert brackets.endswith("drift not measured; no run-to-run term known for vllm."), brackets


def test_a_report_of_several_runs_says_each_runs_terms_for_that_run():
    """p05b: the default (reference) and vLLM runs together read "each pair measured together …; widened by launch
    ±7.5% (default); drift not measured", as if each part held for both; the vLLM intervals carry no such term."""
    brackets = _model([DEFAULT, VLLM]).verdict.brackets
    assert "; reference: each pair measured together, in the same minutes, widened by run-to-run ±7.5% (1 sd, " \
        "default), points sized to ±20% on requests" in brackets, brackets
    assert brackets.endswith("; vllm: drift not measured, no run-to-run term known for vllm."), brackets
    both = _model([DEFAULT, METHODS]).verdict.brackets  # p05a: one backend, two runs: each named by its run
    assert "reference · demo-20261127-053618-7ae2: widened by drift (1 sd: probe ±94%" in both, both
    assert "reference · demo-20261127-075225-b7da: each pair measured together" in both, both


# -- X5: readings across the sittings of a resumed run -----------------------------------------------------------
def test_a_reading_across_the_sittings_of_a_resumed_run_is_marked():
    """X5 (D2): example-gpu's EAGLE-3 at c=4 and 16 came from a later sitting; EAGLE-3 ÷ AR and DFlash ÷ EAGLE-3
    there compare points of two sittings. docs/metrics.md says such a reading is marked "(crosses sittings)"; none
    was, in the table or the JSON."""
    table = _model([GPU]).readings
    lat = table[(table["figure"] == "latency") & (table["category"] == "all")]
    marked = {(r["method"], r["baseline"], int(r["concurrency"])) for r in lat.to_dict("records")
              if str(r["covers"]).endswith("(crosses sittings)")}
    assert marked == {("eagle3", "ar", 4), ("eagle3", "ar", 16), ("dflash", "eagle3", 4), ("dflash", "eagle3", 16)}
    assert "(crosses sittings)" not in _model([GPU]).verdict.brackets  # said there by its points, once


# -- X12 (D1): a trace run's readings in the table under the verdict and in the JSON -----------------------------
def test_a_trace_runs_readings_are_in_the_table_and_the_json(tmp_path):
    """X12: the trace report had no readings table and `report --format json` wrote "readings": [], though its
    verdict decides on four ratios (DFlash ÷ AR at 1× and 2×, on real prompts and on random tokens)."""
    from typer.testing import CliRunner

    from dflashbench.cli import app

    out = tmp_path / "t.json"
    assert CliRunner().invoke(app, ["report", str(TRACE), "-o", str(out)]).exit_code == 0
    lat = [r for r in json.loads(out.read_text())["readings"] if r["figure"] == "latency"]
    got = sorted((r["speed"], r["workload"].split(": ")[1], round(r["value"], 2)) for r in lat)
    assert got == [(1.0, "random tokens", 1.95), (1.0, "synthetic[code]", 0.56), (2.0, "random tokens", 2.36),
                   (2.0, "synthetic[code]", 0.45)], got
    model = _model([TRACE])
    rows = {(r[0], r[1]) for r in model.decides.rows}
    assert ("DFlash ÷ AR", "1× trace") in rows and ("DFlash ÷ AR", "2× trace") in rows, model.decides.rows


# -- p08: a method served on its speed whose outputs differ from AR's ---------------------------------------------
def test_a_served_method_that_is_not_lossless_is_qualified_and_the_others_result_stays(tmp_path):
    """Probe p08: 3 of DFlash's c=1 outputs changed. The answer still read "Serve DFlash at c=1–4" unqualified, the
    lossless line did not say where (c=1), and EAGLE-3's 96/96 disappeared."""
    run = _copy(tmp_path, DEFAULT)
    left = [3]

    def change(r):
        if r["point_id"] == "reference:dflash:synthetic:c1" and not r["warmup"] and left[0]:
            left[0] -= 1
            r.update(output_text=r["output_text"][:20] + " DIFFERENT " + r["output_text"][31:], output_sha256="0" * 64,
                     output_token_ids=r["output_token_ids"][:5] + [999] + r["output_token_ids"][6:])
        return r

    _edit(run / "requests.jsonl", change)
    setting = _model([run]).verdict.settings[0]
    assert setting.answer.endswith("But DFlash is NOT lossless (below)."), setting.answer
    said = dict(setting.facts)["lossless-fails"]
    assert said == ("NOT lossless: DFlash differs from AR on 3 of 96 requests (at c=1), 3 with no margin read; "
                    "EAGLE-3 identical to AR on 96/96 requests (greedy)."), said


# -- p07a (D6): two repeat rounds, the brackets line -----------------------------------------------------------------
def _two_rounds(tmp_path: Path, factor: float) -> Path:
    """The review's probe: round 0 is the committed default run, round 1 a copy of it with DFlash's request times
    (after sending) × ``factor``."""
    import copy as cp

    run = _copy(tmp_path, DEFAULT)
    points, requests = _rows(run / "points.jsonl"), _rows(run / "requests.jsonl")
    more_p, more_r, off = [], [], 10**12
    for p in points:
        q = {**cp.deepcopy(p), "repeat": 1}
        if q["method"] == "dflash":
            for k in ("throughput_tok_per_s", "throughput_tok_per_s_per_gpu", "per_user_tok_per_s_pooled",
                      "per_user_tok_per_s_mean", "steady_throughput_tok_per_s"):
                q[k] = q[k] / factor if q.get(k) else q.get(k)
            q["duration_s"] *= factor
        more_p.append(q)
    for r in requests:
        q, s = {**cp.deepcopy(r), "repeat": 1}, r["sent_ns"]
        f = factor if r["point_id"].split(":")[1] == "dflash" else 1.0
        for k in ("first_token_ns", "last_token_ns"):
            q[k] = int(s + (q[k] - s) * f) + off
        q["chunk_ns"] = [int(s + (c - s) * f) + off for c in q["chunk_ns"]]
        q["sent_ns"], q["queued_ns"] = s + off, q["queued_ns"] + off
        more_r.append(q)
    (run / "points.jsonl").write_text("".join(json.dumps(r) + "\n" for r in points + more_p))
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests + more_r))
    m = json.loads((run / "manifest.json").read_text())
    m["suite_config"]["repeats"] = 2
    (run / "manifest.json").write_text(json.dumps(m))
    return run


def test_two_rounds_brackets_say_where_the_t_interval_was_set_aside(tmp_path):
    """p07a (D6): "paired repeats (2 rounds): the drift between rounds included; requests of 2 rounds, paired: …
    wider" read as if every interval held the drift between rounds, though the t-interval was set aside where it
    was wider than the requests'."""
    model = _model([_two_rounds(tmp_path, 1.3)])
    brackets = model.verdict.brackets
    assert ("paired repeats (2 rounds): both rounds' requests, paired (their 1-df t-interval set aside), or the span "
            "of both rounds' own where they differ beyond their requests") in brackets, brackets
    assert "the drift between rounds included" not in brackets
    # EAGLE-3 ÷ AR: two equal rounds (the probe copies them), whose 1-df t-interval is 0 wide: never read
    t = model.readings
    row = t[(t["method"] == "eagle3") & (t["baseline"] == "ar") & (t["figure"] == "latency")
            & (t["category"] == "all") & (t["concurrency"] == 4)].iloc[0]
    assert row["hi"] / row["lo"] > 1.2 and "narrower than the requests' own" in row["why"], row.to_dict()


# -- X6 (D9): an "implausible" point the run's own speed probe explains ------------------------------------------
def test_a_point_the_machines_speed_explains_is_said_so_not_called_implausible():
    """X6: example-methods called AR at c=2 "implausible" (a point no method could have measured), though the run's
    probe read 60 ms before it against 190 and 128 ms before its neighbours: the machine ran ~3× faster there."""
    answer = _model([METHODS]).verdict.settings[0].answer
    assert ("nothing at c=2 (the machine ran faster there: AR's 196 tok/s/user, above its neighbours' 87 and 75; "
            "speed probe 60 ms against 190 and 128 ms)") in answer, answer
    assert "implausible" not in answer


# -- p12: points measured in turn, the speed probe's readings missing ---------------------------------------------
def test_points_that_record_being_measured_together_read_so_without_the_probes_file(tmp_path):
    """Probe p12: probes.jsonl deleted from the in-turn default run. The brackets read "drift not measured", though
    every point records pairing mode "turns" with its load's other points: their drift is zero by construction."""
    run = _copy(tmp_path, DEFAULT)
    (run / "probes.jsonl").unlink()
    brackets = _model([run]).verdict.brackets
    assert "each pair measured together, in the same minutes" in brackets and "drift not measured" not in brackets


# -- X3, X4: the run table's count, a load range -------------------------------------------------------------------
def test_the_run_table_counts_points_not_their_category_rows():
    """X3: "points (failed) 36 (0)" for the 9 points of the default run (each point's all row and three category
    rows), beside a verdict that says "all 9"."""
    (info,) = _model([DEFAULT]).runs
    assert (info.num_points, info.num_failed_points, info.num_requests) == (9, 0, 288)


def test_a_load_range_is_said_only_over_loads_that_double():
    """X4: example-gpu's "c=1–16" over the three loads 1, 4 and 16 read as if every load from 1 to 16 was swept."""
    from dflashbench.report.answer import concurrencies

    assert concurrencies([1, 4, 16], [1, 4, 16]) == "c=1, 4, 16"
    assert concurrencies([1, 2, 4], [1, 2, 4]) == "c=1–4"
    assert _model([GPU]).verdict.settings[0].answer.startswith("Serve DFlash at c=1, 4, 16 (")


# -- X7, X17: a category's own answer against the setting's ---------------------------------------------------------
def test_a_category_that_narrows_or_decides_the_answer_is_said_so():
    """X17: example.md left out writing prompts at c=1, where DFlash's requests take 1.34× EAGLE-3's (the answer there
    is "EAGLE-3 or DFlash"). X7: example-methods said code prompts "reverse" an answer that was "cannot tell"."""
    said = dict(_model([OLD]).verdict.settings[0].facts)["reverses"]
    assert "writing prompts differ: EAGLE-3 at c=1, 2 (requests take " in said, said
    assert said.startswith("Code prompts narrow it: DFlash at c=1 (requests take 0.26× [0.22–0.31] AR's time; "
                           "EAGLE-3's 0.50×)"), said
    methods = dict(_model([METHODS]).verdict.settings[0].facts)["reverses"]
    assert methods.startswith("Code prompts decide it: DFlash at c=1, 4 (requests take 0.18×"), methods


# -- X15: a method clearly slower than AR -----------------------------------------------------------------------------
def test_a_method_clearly_slower_than_ar_is_said():
    """X15: on the vLLM example DFlash's requests take 1.46× [1.26–1.68] AR's time at c=4; only "stops paying"
    hinted at it."""
    said = dict(_model([VLLM]).verdict.settings[0].facts)["slower"]
    assert said == "Slower than AR: DFlash at c=4 (requests take 1.46× [1.26–1.68] AR's time).", said


# -- X9, X10, X13: the trace verdict's content line ---------------------------------------------------------------
def test_the_trace_verdict_says_how_the_lengths_matched_and_the_random_tokens_goodput():
    """X9: only 21% of the inputs landed within 10% of their target, which the verdict did not say; X13: the
    requests' median lengths (32 tokens in, 13 out) were not given; X10: on random tokens DFlash's goodput is 0.56×
    and 0.15× AR's, left out where the real prompts' goodput stood beside the answer."""
    said = _lines([TRACE])
    assert "at 2% of the trace's input lengths (21% of inputs within 10% of it; median 32 in, 13 out)" in said
    assert "AR's time at 1×, 2×, goodput 0.56× and 0.15× AR's" in said, said


# -- p03b: a point whose stored requests fall short of its count ----------------------------------------------------
def test_the_requests_flag_names_the_point_that_falls_short(tmp_path):
    """Probe p03b: DFlash c=2 keeps 12 of its 32 requests. The flag said "holds 268 of the 288" without naming the
    point whose readings rest on 12 prompts."""
    run = _copy(tmp_path, DEFAULT)
    kept = [0]

    def cut(r):
        if r["point_id"] == "reference:dflash:synthetic:c2" and not r["warmup"]:
            kept[0] += 1
            return r if kept[0] <= 12 else None
        return r

    _edit(run / "requests.jsonl", cut)
    said = _lines([run])
    assert ("requests.jsonl holds 268 of the 288 measured requests its points count, dflash at c=2 12 of its 32, so "
            "what is read from each request rests on those") in said, said


# -- X16: a category whose own answer widens the setting's -----------------------------------------------------------
def test_a_category_that_widens_the_answer_is_said_where_it_fits():
    """X16: on the default's writing prompts DFlash is no better than EAGLE-3 (0.94–0.96× its time, every interval
    holding 1), where the answer serves DFlash alone; the verdict did not say so. It fits there (11 lines); on
    example.md (14 lines already) it is left to the readings table."""
    said = dict(_model([DEFAULT]).verdict.settings[0].facts)["widens"]
    assert said == ("Writing prompts widen it: EAGLE-3 or DFlash at c=1–4 (DFlash's requests take 0.94–0.96× "
                    "EAGLE-3's time, each interval holding 1)."), said
    assert "widens" not in dict(_model([OLD]).verdict.settings[0].facts)  # would print a 15th line
