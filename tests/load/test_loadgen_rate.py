"""Open-loop points against the reference server (``dflashbench serve``, launched by the sweep): the schedule's due
times follow the asked rate exactly, the achieved arrival rate is the target within what the client's own recorded
lateness allows (no speed of this machine is assumed: a busy client is late, and says so), goodput is recorded, and
the cap holds."""

import re

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.load.openloop import default_in_flight_cap
from dflashbench.measure import observability
from dflashbench.measure.metrics import measured
from dflashbench.run.store import load_run
from dflashbench.types import RequestResult

pytestmark = pytest.mark.timeout(600)
RATE = 40.0
N = 120


def test_request_rate_against_the_reference_server(tmp_path):
    suite = tmp_path / "rate.toml"
    suite.write_text(f"""
name = "rate"
backend = "reference"
methods = ["ar"]
model = "embedded"
concurrency = [4]
num_prompts = {N}
requests_per_stream = 1
warmup_requests = 1
max_tokens = 2
timeout_s = 120
[[workloads]]
name = "synthetic"
""")
    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["sweep", "--suite", str(suite), "--request-rate", str(RATE), "--arrivals",
                                      "constant", "--goodput", "ttft_s=30,tpot_s=10", "-o", str(out), "--no-report"],
                                catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    run = load_run(run_dir)
    points = run.points[run.points["category"] == "all"].set_index("point_id")
    assert list(points.index) == ["reference:ar:synthetic:c4", "reference:ar:synthetic:r40.0"]
    p = points.loc["reference:ar:synthetic:r40.0"]
    load = p["extra"]["load"]
    assert p["num_requests"] == N and p["num_errors"] == 0 and load["arrived"] == N
    # no --max-concurrency: the default cap on requests in flight, recorded as it was applied
    assert (load["request_rate"], load["arrivals"], load["max_concurrency"]) == (RATE, "constant", default_in_flight_cap())
    rows = [RequestResult.from_dict(r) for r in run.requests.to_dict("records") if r["point_id"].endswith("r40.0")]
    # every request meets a generous SLO, but a TPOT target only where the client saw its timing: a two-token
    # output whose tokens came in one read (a burst, on a busy machine) has no TPOT to meet it with
    timed = sum(observability.timing_observable(r) is not False for r in measured(rows))
    assert p["extra"]["goodput"]["good"] == timed
    assert "steady" not in p["extra"]  # an open loop has no all-streams-busy window
    cats = run.points[(run.points["point_id"] == "reference:ar:synthetic:r40.0") & (run.points["category"] != "all")]
    assert len(cats) == 3  # math, code, writing: each its own goodput over its own requests
    assert sorted(c["goodput"]["requests"] for c in cats["extra"]) == sorted(cats["num_requests"])
    assert sum(c["goodput"]["good"] for c in cats["extra"]) == timed
    # the schedule itself: due times exactly 1/RATE apart (constant arrivals), whatever the machine's speed
    due = sorted(r.queued_ns for r in measured(rows))
    span_s = (N - 1) / RATE
    assert (due[-1] - due[0]) / 1e9 == pytest.approx(span_s, abs=1e-3)
    # the achieved rate: the sends' span differs from the schedule's by at most the spread of the client's lateness
    # (sent - due, recorded per request), so the rate is the target within that much and no more
    late_s = [(r.sent_ns - r.queued_ns) / 1e9 for r in measured(rows)]
    assert min(late_s) >= 0
    sent = sorted(r.sent_ns for r in measured(rows))
    assert load["achieved_rate_per_s"] == pytest.approx((N - 1) / ((sent[-1] - sent[0]) / 1e9), rel=1e-6)
    spread_s = max(late_s) - min(late_s)
    assert abs((sent[-1] - sent[0]) / 1e9 - span_s) <= spread_s + 1e-6
    # the point's line: the achieved rate (39.9 or 40.1 on a loaded machine) beside its target, and goodput
    assert re.search(r"arrivals \d+\.\d\d/s \(target 40\)", result.output) and "goodput" in result.output
    assert "40/s" in result.output
