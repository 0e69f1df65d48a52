"""A sweep against the stand-in server that bursts (its chunks made on pace but delivered several per network write,
or all at the end, as a server whose consumer lags delivers them) and against the pace-exact one: real server
processes over loopback, the sweep in-process (CliRunner) so the stand-in can be registered as a backend.

The bursting one must be flagged at every concurrency, with no TPOT or ITL of 0 printed or stored as measured and
a verdict that names the problem and the fix; the pace-exact one must raise no flag. Both expose vLLM-named latency
histograms timed when each chunk was made, so the server's own TPOT is known either way.
"""

import json
import math
import re
from pathlib import Path

import pytest
from report import mdtables
from typer.testing import CliRunner

from dflashbench.backends import BACKENDS
from dflashbench.bench.standin import STANDIN_TAU
from dflashbench.cli import app
from dflashbench.measure import observability
from dflashbench.measure.noise_model import Z_95
from dflashbench.run.store import load_run

GSM8K = Path(__file__).parent.parent / "fixtures" / "datasets" / "openai--gsm8k"
PER_TOKEN = ("tpot_s_p50", "tpot_s_p99", "tpot_s_mean", "itl_s_p50", "itl_s_p99", "icl_s_p50",
             "per_user_tok_per_s_mean", "per_user_tok_per_s_p50", "per_user_tok_per_s_pooled")  # fmt: skip


@pytest.fixture(autouse=True)
def standin_backend(monkeypatch):
    monkeypatch.setitem(BACKENDS, "standin", "dflashbench.bench.standin:StandinBackend")


PACE_MS = 6.0  # the stand-in's pace in these sweeps: slow enough that a busy test machine keeps up with it


def run_sweep(tmp_path: Path, burst: str | None):
    burst_args = f', "--burst", "{burst}"' if burst is not None else ""
    args = f'[extra_args]\nall = ["--pace-ms", "{PACE_MS}"{burst_args}]\n'
    suite = tmp_path / "bursts.toml"
    suite.write_text(f"""
name = "timing"
version = 1
backend = "standin"
methods = ["ar", "dflash"]
model = "standin-model"
concurrency = [1, 2, 4]
num_prompts = 4
requests_per_stream = 2
warmup_requests = 1
max_tokens = 24
timeout_s = 30
[drafts]
dflash = "standin-draft"
{args}
[[workloads]]
name = "gsm8k"
data = "{GSM8K}"
""")
    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["sweep", "--suite", str(suite), "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    report = CliRunner().invoke(app, ["report", str(run_dir), "-o", str(tmp_path / "r.md"), "--format", "md"])
    assert report.exit_code == 0, report.output
    return result.output, load_run(run_dir), (tmp_path / "r.md").read_text()


def true_tpot_s(method: str) -> float:
    """The stand-in's pace per token: one chunk every pace, STANDIN_TAU tokens per chunk for a speculative method."""
    return PACE_MS / 1e3 / (1 if method == "ar" else STANDIN_TAU)


@pytest.mark.parametrize("burst", ["0", "4"])  # the whole output at the end; four chunks per write
def test_a_bursting_server_is_flagged_and_never_shows_a_zero(tmp_path, burst):
    output, run, report = run_sweep(tmp_path, burst)
    alls = run.points[run.points["category"] == "all"]
    assert sorted(alls["concurrency"]) == [1, 1, 2, 2, 4, 4] and set(alls["status"]) == {"ok"}
    for p in alls.to_dict("records"):
        n = p["num_requests"]
        assert p["timing_observed_share"] == 0.0 and p["timing_requests"] == n
        assert f"per-token timing not observable: {n} of {n} requests" in p["latency_not_measured_reason"]
        assert p["throughput_tok_per_s"] > 0 and p["ttft_s_p50"] > 0  # what the client could measure stands
        # the engine's own clock still has the pace, whatever reached the client
        server = p["extra"]["server_timing"]
        assert server["source"] == "standin /metrics" and server["tpot_s"]["count"] == n
        assert server["tpot_s"]["mean_s"] == pytest.approx(true_tpot_s(p["method"]), rel=0.3)
    for p in run.points.to_dict("records"):  # category rows too: nothing per-token is stored as measured
        for field in PER_TOKEN:
            assert p[field] is None or p[field] != p[field], (p["point_id"], field)
    measured = run.requests[~run.requests["warmup"]]
    assert measured["ok"].all() and not measured["timing_observable"].any()
    assert (measured["burst_tokens"] >= 12).all()  # at least half of 23 tokens after the first

    # the console: n/m where a figure was not measured, the reason once, never a made-up 0.00
    output = " ".join(output.split())  # the footnote wraps at the console's width
    assert "TPOT n/m" in output and "TPOT p50 0.00" not in output
    assert output.count("n/m = not measured: per-token timing not observable") == 1
    assert "Fix: give the client cores of its own" in output

    # the verdict decides on what was measured (request latency and throughput stand), flags the blind points, and
    # reads no per-token speedup off them; the report's latency section names the problem, the fix and the engine's
    # own clock
    verdict = report.split("### Verdict")[1].split("| run |")[0]
    assert "per-token latency not observable at 6 points" in verdict.split("Read with care:")[1]
    served = re.search(r"\*\*Serve DFlash at c=1–4 \(requests take 0\.\d\d(–0\.\d\d)?× AR's time", verdict)
    # a busy neighbour (the other test worker) can move the speed probe so far that the drift holds 1 in every
    # interval, or in some (seen: ±133 % at every load, ±72 % at c=1 and 4): the same request-latency reading is then
    # said for those loads, the drift named as why
    drifted = re.search(r"Cannot tell from AR: DFlash at c=[0-9, –]+ \(requests take 0\.\d\d(–0\.\d\d)?× AR's time[^\n]*"
                        r"the machine's drift widens these", verdict)  # fmt: skip
    assert served or drifted, verdict
    latency = report.split("### Latency")[1]
    assert "Per-token latency not measured for AR at c=1, 2, 4; DFlash at c=1, 2, 4" in latency
    assert "Fix: give the client cores of its own" in latency and "--stream-interval" in latency
    assert "The engine's own histograms there: AR c=1 TPOT mean" in latency
    tables = mdtables.tables(report)
    single = next(r for r in tables["Single-stream speedup"] if r["method"] == "DFlash")
    assert single["speedup"] == "—" and single["decided"] == "no interval: per-token timing not observable"
    matched = [r for r in tables["Speedup at matched concurrency"] if r["method"] == "DFlash"]
    assert matched and all(r["speedup"] == "—" for r in matched)


def test_the_pace_exact_server_raises_no_flag(tmp_path):
    output, run, report = run_sweep(tmp_path, None)
    alls = run.points[run.points["category"] == "all"]
    assert len(alls) == 6
    for p in alls.to_dict("records"):
        assert p["timing_observed_share"] == 1.0  # a chunk or two read together on a busy machine is no flag
        assert p["timing_observed_tokens_share"] > 1 - observability.MAX_BURST_SHARE
        assert p["latency_not_measured_reason"] is None
        assert p["tpot_s_p50"] == pytest.approx(true_tpot_s(p["method"]), rel=0.3)
        assert p["per_user_tok_per_s_pooled"] == pytest.approx(1 / true_tpot_s(p["method"]), rel=0.3)
        server = p["extra"]["server_timing"]["tpot_s"]
        assert server["mean_s"] == pytest.approx(p["tpot_s_mean"], rel=0.2)  # the client and the server agree
    assert run.requests.loc[~run.requests["warmup"], "timing_observable"].all()
    assert "n/m" not in output and "timed" not in output
    assert "Not measured" not in report and "bursts" not in report
    assert "per-token latency not observable" not in report.split("### Verdict")[1].split("| run |")[0]
    tables = mdtables.tables(report)
    single_row = next(r for r in tables["Single-stream speedup"] if r["method"] == "DFlash")
    single = float(single_row["speedup"].rstrip("×"))
    # clearly faster, unless the other test worker moved the speed probe so far that the drift holds 1 in the interval
    # (seen in fresh-clone nox runs, as in the bursting sweeps above: [0.58x, 17.98x] around 3.24x, while the probe's
    # median adjacent drift read only 8.5 %): then the reading's own terms say so, in the run's readings.json: without
    # its drift term, its requests and run-to-run term alone would have decided it
    (reading,) = [r for r in json.loads(next((tmp_path / "results").glob("*/readings.json")).read_text())["readings"]
                  if (r["figure"], r["method"], r["category"], r["concurrency"]) == ("single", "dflash", "all", 1)]
    terms = reading["terms"]
    without_drift = Z_95 * math.hypot(terms["requests_sd"] or 0.0, terms["run_to_run_sd"] or 0.0)
    assert single_row["decided"] == "clearly faster" or (
        single_row["decided"] == "not distinguishable" and (terms["drift_sd"] or 0.0) > 0
        and abs(math.log(reading["value"])) > without_drift), (single_row, reading)  # fmt: skip
    matched = tables["Speedup at matched concurrency"]
    matched_c1 = float(next(r for r in matched if (r.get("category", "all"), r["method"], r["concurrency"]) == ("all", "DFlash", "1"))
                       ["speedup"].rstrip("×"))  # fmt: skip
    # 3 tokens per chunk at AR's pace: (24 - 1) tokens over 7 chunk gaps instead of 23, about 3.3x; the paper's
    # statistic and the pooled per-user rate read the same requests and agree
    assert 2.8 < single < 3.6 and matched_c1 == pytest.approx(single, rel=0.05)
