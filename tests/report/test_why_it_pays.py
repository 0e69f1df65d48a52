"""Issue #42: why DFlash pays here and where it stops. The decomposition speedup = τ ÷ step-cost ratio checked on
every committed example, the crossover rule on hand-made ratios and on the vLLM CPU example, the reference server
made to lose above some concurrency (its crossover found within one concurrency step), acceptance by slice with
intervals, and vLLM's per-request acceptance read and asked for."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.measure import crossover, decomposition, slices
from dflashbench.measure.analysis import with_latency_rule
from dflashbench.report import load_model, write_report
from dflashbench.run.store import load_run
from dflashbench.types import RequestResult

from . import mdtables

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "results" / "examples"
REFERENCE = EXAMPLES / "demo-20261123-120110-e69c"
VLLM = EXAMPLES / "demo-20261125-024540-6b40"
GPU = EXAMPLES / "gpu-embedded-20261123-093322-08e0"
LENGTHS = next(EXAMPLES.glob("demo-lengths-*"))


def _decompose(run_dir: Path) -> pd.DataFrame:
    run = load_run(run_dir)
    pts = with_latency_rule(run.points, run.requests)  # the older run's rows as the report reads them
    return pd.concat([decomposition.decompose(pts, run.requests),
                      decomposition.decompose(pts, run.requests, "eagle3", ("dflash",))], ignore_index=True)  # fmt: skip


@pytest.mark.parametrize("run_dir", [REFERENCE, VLLM, GPU, LENGTHS], ids=lambda p: p.name)
def test_the_identity_holds_on_every_committed_example(run_dir):
    """τ ratio ÷ step-cost ratio reproduces the measured speedup at every point; what it is off by is the tokens τ
    counts past a stop (with the client's clock exactly; with the engine's, within its clock's difference)."""
    d = _decompose(run_dir)
    cs = pd.read_json(run_dir / "points.jsonl", lines=True)["concurrency"].nunique()
    assert len(d) == 3 * cs and d["left_out"].isna().all()  # 3 pairs x the concurrencies, no bursty point here
    for r in d.to_dict("records"):
        assert abs(r["error"]) < 0.05, r
        slack = 0.002 if r["step_source"] == decomposition.CLIENT else 0.005
        assert r["error"] == pytest.approx(r["past_stop"], abs=slack), r


def test_the_step_cost_is_the_engines_own_step_time_where_it_has_one():
    d = _decompose(VLLM)
    pts = pd.read_json(VLLM / "points.jsonl", lines=True)
    step = {(r["method"], r["concurrency"]): r["extra"]["server_timing"]["itl_s"]["mean_s"]
            for r in pts[pts["category"] == "all"].to_dict("records")}  # fmt: skip
    row = d[(d["method"] == "dflash") & (d["baseline"] == "ar") & (d["concurrency"] == 1)].iloc[0]
    assert row["step_source"] == decomposition.ENGINE
    assert row["cost_ratio"] == pytest.approx(step[("dflash", 1)] / step[("ar", 1)])  # 5.70
    assert row["predicted"] == pytest.approx(row["tau"] / row["cost_ratio"])
    line = next(ln for ln in _why(VLLM) if ln.startswith("Why, DFlash vs AR"))
    assert line.startswith("Why, DFlash vs AR (step cost from the engine's own step time; 16 tokens verified per step): "
                           "c=1: τ 7.60× ÷ step cost 5.70× = 1.33× expected, 1.30× measured")  # fmt: skip
    assert "c=4: τ 7.60× ÷ step cost 9.72× = 0.78× expected, 0.76× measured" in line
    assert "of which +2.4% is tokens accepted past a stop" in line


def _why(run_dir: Path) -> list[str]:
    return next(s.lines for s in load_model([run_dir], with_figures=False).sections if s.id == "why")


def _edit(tmp_path: Path, run_dir: Path, edit) -> Path:
    import shutil

    run = tmp_path / run_dir.name
    shutil.copytree(run_dir, run)
    rows = [json.loads(ln) for ln in (run / "points.jsonl").read_text().splitlines()]
    (run / "points.jsonl").write_text("".join(json.dumps(edit(r)) + "\n" for r in rows))
    return run


def test_each_concurrency_is_explained_by_its_own_tau_and_a_check_that_fails_says_so(tmp_path):
    """Issue #53: the "why" line printed c=1's τ at every concurrency. With DFlash's τ at c=4 edited to 5.00 and its
    engine step time at c=2 made seven times longer, c=4 reads its own τ, and the c=2 check, off by far more than
    the engine's clock against the client's explains, is said to fail, not put down to clock differences."""
    def edit(r: dict) -> dict:
        if r["method"] == "dflash" and r["concurrency"] == 4:
            r["tau"] = 5.0
        if r["method"] == "dflash" and r["concurrency"] == 2 and r["category"] == "all":
            r["extra"]["server_timing"]["itl_s"]["mean_s"] *= 7
        return r

    line = next(ln for ln in _why(_edit(tmp_path, VLLM, edit)) if ln.startswith("Why, DFlash vs AR"))
    assert "c=1: τ 7.60× ÷" in line and "c=4: τ 5.00× ÷ step cost 9.72×" in line, line
    assert "so the check fails" in line and "is the engine's step clock against the client's" not in line, line
    # on the client's clock the identity is arithmetic: said as such, never as a check
    ref = next(ln for ln in _why(REFERENCE) if ln.startswith("Why, DFlash vs AR"))
    assert "an identity" in ref and "expected" not in ref and "off by" not in ref


def test_a_bursty_point_is_left_out_of_the_check_and_said(tmp_path):
    import shutil

    run = tmp_path / "bursty"
    shutil.copytree(VLLM, run)
    rows = [json.loads(ln) for ln in (run / "points.jsonl").read_text().splitlines()]
    for r in rows:
        if r["method"] == "ar" and r["concurrency"] == 4:
            r["timing_observed_share"], r["timing_observed_requests"] = 0.75, 24
    (run / "points.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    d = _decompose(run)
    left = d[d["left_out"].notna()]
    assert set(zip(left["method"], left["concurrency"], strict=True)) == {("dflash", 4), ("eagle3", 4)}
    assert left["error"].isna().all()
    assert "left out: requests left out of its per-token timing for bursts (8 of 32 requests) at the baseline's " \
           "point" in set(left["left_out"])  # fmt: skip


def test_the_crossover_is_read_on_log_c_with_the_points_intervals():
    found = crossover.crossover([1, 2, 4, 8], [2.0, 1.4, 0.8, 0.5],
                                [(1.8, 2.2), (1.2, 1.6), (0.7, 0.95), (0.4, 0.6)])  # fmt: skip
    t = math.log(1.4) / (math.log(1.4) - math.log(0.8))
    assert found.kind == crossover.CROSSES and found.between == (2, 4) and found.pays_below
    assert found.at == pytest.approx(2 * 2**t)
    t_lo = math.log(1.2) / (math.log(1.2) - math.log(0.7))
    assert found.lo == pytest.approx(2 * 2**t_lo)  # the lower ends cross first
    t_hi = math.log(1.6) / (math.log(1.6) - math.log(0.95))
    assert found.hi == pytest.approx(2 * 2**t_hi)
    # an interval already holding 1 at the first point: open below; never below 1 at the last: open above
    wide = crossover.crossover([1, 2], [1.2, 0.9], [(0.9, 1.5), (0.7, 1.1)])
    assert wide.lo is None and wide.hi is None and 1 < wide.at < 2
    # no crossover: the range, and where the line through the last two points would reach 1
    none = crossover.crossover([1, 4, 16], [4.0, 3.0, 1.5])
    assert none.kind == crossover.NONE and none.swept == (1, 16) and none.above
    assert none.aim == pytest.approx(16 * 4 ** (math.log(1.5) / (math.log(3) - math.log(1.5))))
    assert crossover.aim_concurrency(none.aim, 16) == 2 ** math.ceil(math.log2(none.aim)) == 64
    slow = crossover.crossover([1, 4, 16], [4.0, 3.0, 2.0])  # would reach 1 only near c=171: too far to aim at
    assert slow.aim > 8 * 16 and crossover.aim_concurrency(slow.aim, 16) is None
    assert crossover.crossover([1, 4, 16], [3.0, 3.5, 4.0]).aim is None  # moving away from 1: no aim


def test_where_dflash_stops_paying_is_the_lowest_of_its_three_crossings(tmp_path):
    """Issue #53: the vLLM CPU example said "DFlash pays up to c≈2.1" (its per-user crossing) while its throughput
    crossed at c≈1.6. "Where it stops paying" is the lowest of the per-user, throughput and request-latency
    crossings, naming which, each read on the prompts both methods ran."""
    from dflashbench.measure import readings

    run = load_run(VLLM)
    table = readings.pair_readings(run.points, run.requests, {run.run_id: run.probes})
    dflash = table[(table["method"] == "dflash") & (table["baseline"] == "ar") & (table["category"] == "all")]

    def crossing(figure: str) -> float:
        v = {int(r["concurrency"]): r["value"] for r in dflash[dflash["figure"] == figure].to_dict("records")}
        if figure == "latency":
            v = {c: 1 / x for c, x in v.items()}
        lo = max(c for c in v if v[c] > 1)
        hi = 2 * lo
        return lo * 2 ** (math.log(v[lo]) / (math.log(v[lo]) - math.log(v[hi])))

    at = {f: crossing(f) for f in ("per_user", "throughput", "latency")}
    first = min(at, key=at.get)
    md = write_report([VLLM], tmp_path / "v.md").read_text()
    line = next(ln for ln in md.splitlines() if "Stops paying:" in ln)
    names = {"per_user": "per user", "throughput": "throughput", "latency": "request latency"}
    assert f"Stops paying: DFlash at c≈{at[first]:.1f} ({names[first]}; " in line, (line, at)
    assert all(f"{names[f]} c≈{at[f]:.1f}" in line for f in at if f != first), (line, at)
    assert at["per_user"] > 2 > at[first] and "pays up to c≈2.1" not in md
    # the GPU example's DFlash pays at every concurrency swept: no stop is named
    assert "Stops paying" not in write_report([GPU], tmp_path / "g.md").read_text()


SUITE = """
name = "crossover"
backend = "reference"
methods = ["ar", "dflash"]
model = "embedded"
concurrency = [1, 2, 4, 8]
num_prompts = 8
requests_per_stream = 1
warmup_requests = 1
max_tokens = 32
timeout_s = 300
[drafts]
dflash = "embedded"
[extra_args]
ar = ["--test-step-delay-ms", "{ar_ms}"]
dflash = ["--test-step-delay-per-request-ms", "{per_request_ms}"]
[[workloads]]
name = "synthetic"
"""


@pytest.mark.timeout(900)
def test_dflash_made_to_lose_above_some_concurrency_has_its_crossover_found_within_one_step(tmp_path):
    """The reference server with a DFlash step that costs 150 ms more per request in its batch, and an AR step 30 ms
    more: DFlash's per-user speedup is about τ x t_AR / (t_DFlash + 0.15 b), some 8 x 50 / (40 + 150 b) ms here, so
    it is well above 1 at c=1 and 2 and well below at c=4 and 8 (the batch holds about 1.6 requests at c=2, 3.5 at
    c=4). The report finds the crossover between the two concurrencies where the ratio changes side: within one
    concurrency step."""
    suite = tmp_path / "crossover.toml"
    suite.write_text(SUITE.format(ar_ms=30, per_request_ms=150))
    out = tmp_path / "runs"
    result = CliRunner().invoke(app, ["sweep", "--suite", str(suite), "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    from dflashbench.measure import readings

    run = load_run(run_dir)
    table = readings.pair_readings(run.points, run.requests, {run.run_id: run.probes}, figures=("per_user",))
    ratios = {int(r["concurrency"]): r["value"] for r in table[table["category"] == "all"].to_dict("records")}
    sides = [c for c in (1, 2, 4) if ratios[c] > 1 > ratios[2 * c]]
    assert len(sides) == 1 and all((ratios[c] > 1) == (c <= sides[0]) for c in ratios), ratios  # one change of side
    lo_c, hi_c = sides[0], 2 * sides[0]
    assert (lo_c, hi_c) in ((1, 2), (2, 4), (4, 8)), ratios  # where the injected costs put it, give or take a step
    from dflashbench.measure import verdict

    every = readings.pair_readings(run.points, run.requests, {run.run_id: run.probes})
    stop = verdict.stops_paying(every[every["category"] == "all"].to_dict("records"))
    assert lo_c <= stop.crossings["per_user"] <= hi_c, (stop, ratios)  # found within one concurrency step
    # the lowest of the crossings read with an interval (the points' own throughput has none: it stands beside)
    assert stop.at == min(a for f, a in stop.crossings.items() if a is not None and f != "throughput")
    # and the decomposition says why: the step cost climbs with the batch while τ stays
    d = decomposition.decompose(run.points, run.requests).sort_values("concurrency")
    # (the injected costs alone give about x5.7 from c=1 to c=8; a busy machine adds its own cost to every step,
    # which dilutes it: x2.5 was seen under load, so the test asks for the climb, x2, not its idle size)
    assert d["cost_ratio"].is_monotonic_increasing and d["cost_ratio"].iloc[-1] > 2 * d["cost_ratio"].iloc[0]
    assert d["tau"].nunique() == 1


def _request(i: int, prompt: int, chunks: list[int], steps: int, accepted: int, category: str = "math",
             point: str = "p") -> RequestResult:  # fmt: skip
    t = [1_000_000 + k * 1_000_000 for k in range(len(chunks))]
    return RequestResult(run_id="r", point_id=point, request_id=f"q{i}", category=category, concurrency=1, ok=True,
                         error=None, queued_ns=0, sent_ns=0, first_token_ns=t[0], last_token_ns=t[-1],
                         output_tokens=sum(chunks), output_tokens_source="server", chunk_ns=tuple(t),
                         chunk_tokens=tuple(chunks), prompt_tokens=prompt, spec_verify_steps=steps,
                         spec_accepted_tokens=accepted)  # fmt: skip


def test_slices_by_input_length_position_and_category():
    # 30 requests, prompts from 10 to 640 tokens; each streams one chunk per step: 8, 8, 4, 4, 2, 2 tokens after
    # the prefill's one (28 tokens). A step belongs to the third its first token falls in (tokens 0-9, 10-18,
    # 19-27): 8 + 8 over two steps, 4 over one, 4 + 2 + 2 over three
    rs = [_request(i, 10 * 2 ** (i % 7), [1, 8, 8, 4, 4, 2, 2], 6, 26 - 6, "math" if i % 2 else "code")
          for i in range(30)]  # fmt: skip
    bins, why = slices.by_input_length(rs)
    assert why is None or "bins with fewer" in why
    assert bins[0].label.startswith("10–") and bins[-1].label.endswith("–640 tokens")
    assert all(s.tau == pytest.approx(1 + 20 / 6) for s in bins)
    thirds, why = slices.by_position(rs)
    assert why is None and [s.label for s in thirds] == list(slices.THIRDS)
    assert [s.tau for s in thirds] == pytest.approx([8.0, 4.0, 8 / 3])
    assert all(s.lo <= s.tau <= s.hi for s in thirds)
    cats, _ = slices.by_category(rs)
    assert [c.label for c in cats] == ["code", "math"] and cats[0].requests == 15
    alike = [_request(i, 20 + i, [1, 8, 8, 4, 4, 2, 2], 6, 20) for i in range(30)]
    assert slices.by_input_length(alike)[1].startswith("the prompts span 20–49 tokens (2.5×): too alike")
    burst = [_request(i, 20, [1, 16, 12], 6, 20) for i in range(30)]  # two chunks for six steps
    assert "did not stream one chunk per verification step" in slices.by_position(burst)[1]


def test_the_embedded_pair_reads_tau_by_input_length_and_position_with_intervals(tmp_path):
    """The committed demo-lengths run (synthetic prompts with 0-6 earlier conversations in front): its report
    gives τ per input-length bin and per third of the output, each with its interval."""
    (run,) = sorted(EXAMPLES.glob("demo-lengths-*"))
    md = write_report([run], tmp_path / "l.md").read_text()
    rows = mdtables.tables(md)["Acceptance by slice"]
    by_len = [r for r in rows if r["method"] == "DFlash" and r["slice"] == "input length"]
    by_pos = [r for r in rows if r["method"] == "DFlash" and r["slice"] == "output position"]
    assert len(by_len) >= 2 and [r["part"] for r in by_pos] == list(slices.THIRDS)
    for r in by_len + by_pos:
        lo, hi = (float(x) for x in r["95% interval"].strip("\\[]").split(", "))
        assert lo <= float(r["τ"]) <= hi, r
    requests = pd.read_json(run / "requests.jsonl", lines=True)
    prompts = requests.loc[~requests["warmup"], "prompt_tokens"]
    assert prompts.max() >= 4 * prompts.min()  # the span the bins need


def test_vllm_per_request_acceptance_is_read_and_asked_for():
    from dflashbench.backends.base import ServerSpec
    from dflashbench.backends.vllm import VllmBackend
    from dflashbench.load.loadgen import _Stream
    from dflashbench.types import Method

    # the final usage chunk of a vLLM >= 0.29.0 stream (vllm/entrypoints/openai/chat_completion/serving.py)
    s = _Stream()
    s.on_event(json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 52},
                           "metrics": {"speculative_decoding": {"mean_acceptance_length": 7.5, "num_spec_steps": 7,
                                                                "num_accepted_draft_tokens": 45, "num_draft_tokens": 105,
                                                                "num_spec_tokens": 15}}}), 1)  # fmt: skip
    assert (s.spec_steps, s.spec_accepted) == (7, 45)
    spec = ServerSpec(method=Method.DFLASH, model="m", draft="d", draft_block_size=16)
    assert VllmBackend(version="0.29.0").launch_plan(spec).argv[-2:] == ("--per-request-spec-decode-metrics", "summary")
    assert "--per-request-spec-decode-metrics" not in VllmBackend(version="0.28.0").launch_plan(spec).argv
    ar = VllmBackend(version="0.32.0").launch_plan(ServerSpec(method=Method.AR, model="m"))
    assert "--per-request-spec-decode-metrics" not in ar.argv  # AR has no speculative decoding to report
