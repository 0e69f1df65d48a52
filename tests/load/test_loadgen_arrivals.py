"""Open-loop arrivals and goodput: pure maths on hand-computed and synthetic cases."""

import math

import numpy as np
import pytest

from dflashbench.errors import UserError
from dflashbench.load.arrivals import achieved_rate_per_s, arrival_offsets_s, parse_rates, rate_label
from dflashbench.measure.goodput import goodput, meets_slo, parse_slo
from dflashbench.types import RequestResult

MS = 1_000_000


def test_constant_arrivals_are_evenly_spaced_at_one_over_the_rate():
    assert arrival_offsets_s(4, 2.0, "constant") == [0.5, 1.0, 1.5, 2.0]
    gaps = np.diff(arrival_offsets_s(100, 8.0, "constant"))
    assert gaps == pytest.approx(np.full(99, 0.125))


def test_poisson_arrivals_seeded_reproducible_mean_gap_and_exponential_spread():
    a = arrival_offsets_s(5000, 4.0, "poisson", seed=7)
    assert a == arrival_offsets_s(5000, 4.0, "poisson", seed=7)  # same seed, same schedule
    assert a != arrival_offsets_s(5000, 4.0, "poisson", seed=8)
    assert a[-1] == pytest.approx(5000 / 4.0)  # vLLM's normalisation: the last is due at n / rate
    gaps = np.diff([0.0, *a])
    assert (gaps >= 0).all()
    assert gaps.mean() == pytest.approx(0.25, rel=1e-9)
    # an exponential distribution's standard deviation equals its mean (a constant schedule's is 0)
    assert gaps.std() == pytest.approx(0.25, rel=0.05)
    # burstiness > 1 is smoother (gamma shape k: cv = 1/sqrt(k)), still mean 1/rate
    smooth = np.diff([0.0, *arrival_offsets_s(5000, 4.0, "poisson", seed=7, burstiness=4.0)])
    assert smooth.std() / smooth.mean() == pytest.approx(0.5, rel=0.05)


def test_infinite_rate_sends_everything_at_once_and_bad_input_is_named():
    assert arrival_offsets_s(3, math.inf) == [0.0, 0.0, 0.0]
    with pytest.raises(UserError, match="above 0"):
        arrival_offsets_s(3, 0.0)
    with pytest.raises(UserError, match="choose one of"):
        arrival_offsets_s(3, 1.0, "uniform")
    assert parse_rates("2, 4.5") == [2.0, 4.5]
    with pytest.raises(UserError, match=r"infinite rate sends every request at once, which is a closed loop: use "
                                        r"--concurrency N"):  # fmt: skip
        parse_rates("2,inf")  # a sweep cannot record an infinite rate (JSON has no inf): say what does that
    with pytest.raises(UserError, match="listed twice"):
        parse_rates("2,2")
    with pytest.raises(UserError, match="numbers of requests per second"):
        parse_rates("fast")
    assert (rate_label(4), rate_label(0.5), rate_label(math.inf)) == ("r4.0", "r0.5", "rinf")


def test_achieved_rate_counts_gaps_between_sends():
    assert achieved_rate_per_s([0, 250 * MS, 500 * MS, 750 * MS, 1000 * MS]) == pytest.approx(4.0)
    assert achieved_rate_per_s([5]) is None and achieved_rate_per_s([5, 5]) is None


def result(sent_ms, first_ms, last_ms, tokens, ok=True, warmup=False):
    ns = lambda v: None if v is None else int(v * MS)  # noqa: E731
    return RequestResult(run_id="r", point_id="p", request_id="q", category="c", concurrency=0, ok=ok,
                         error=None if ok else "x", queued_ns=ns(sent_ms), sent_ns=ns(sent_ms),
                         first_token_ns=ns(first_ms), last_token_ns=ns(last_ms), output_tokens=tokens,
                         output_tokens_source="server", warmup=warmup)  # fmt: skip


def test_goodput_against_a_hand_computed_case():
    # window: first send 0 ms .. last token 4000 ms = 4 s
    rows = [
        result(0, 500, 1400, 10),  # TTFT 0.5, TPOT 0.1: good
        result(1000, 3500, 3600, 3),  # TTFT 2.5 > 2: bad
        result(1000, 1200, 4000, 15),  # TTFT 0.2, TPOT 0.2 > 0.15: bad
        result(2000, 2100, 2100, 1),  # one token: TPOT counts as 0 (vLLM): good
        result(2000, None, None, 0, ok=False),  # failed: never good
        result(0, 100, 200, 2, warmup=True),  # warm-up: not measured
    ]
    slo = {"ttft_s": 2.0, "tpot_s": 0.15}
    assert [meets_slo(r, slo) for r in rows[:5]] == [True, False, False, True, False]
    got = goodput(rows, slo)
    assert got["good"] == 2 and got["requests"] == 5
    assert got["goodput_req_per_s"] == pytest.approx(2 / 4.0)
    assert got["good_share"] == pytest.approx(0.4)
    assert goodput(rows, {}) is None
    # E2E: 1.4 s, 2.6 s, 3.0 s, 0.1 s
    assert goodput(rows, {"e2e_s": 1.5})["good"] == 2 and goodput(rows, {"e2e_s": 1.0})["good"] == 1


def test_slo_parsing_names_the_problem():
    assert parse_slo("ttft_s=2, tpot_s=0.05") == {"ttft_s": 2.0, "tpot_s": 0.05}
    assert parse_slo({"e2e_s": 30}) == {"e2e_s": 30.0}
    assert parse_slo("ttft=2s,tpot=50ms,e2e=30000000us") == {"ttft_s": 2.0, "tpot_s": 0.05, "e2e_s": 30.0}
    with pytest.raises(UserError, match="give a unit"):
        parse_slo("ttft=2000")  # vLLM's milliseconds without a unit: ambiguous here
    with pytest.raises(UserError, match="unknown target 'itl_s'"):
        parse_slo("itl_s=1")
    with pytest.raises(UserError, match="KEY=SECONDS"):
        parse_slo("ttft_s")
    with pytest.raises(UserError, match="above 0"):
        parse_slo("tpot_s=0")


def test_suite_keys_and_flags_for_the_load_shape():
    from dflashbench.plan.suite_overrides import apply_overrides
    from dflashbench.plan.suites import load_suite
    from dflashbench.run.load_summary import plan_line, point_load

    suite = apply_overrides(load_suite("demo"), request_rate="2,0.5", arrivals="constant", max_concurrency=8,
                            goodput="ttft_s=1.5", client_processes="3")  # fmt: skip
    assert (suite.request_rate, suite.arrivals, suite.max_concurrency, suite.client_processes) == ([2.0, 0.5],
                                                                                                   "constant", 8, 3)
    assert suite.goodput == {"ttft_s": 1.5}
    line = plan_line(suite)
    assert "client processes: 3" in line and "2, 0.5 requests/s, constant arrivals" in line
    assert "at most 8 in flight" in line and "ttft_s <= 1.5" in line
    load = point_load(suite, 0, 2.0)
    assert (load.open_loop, load.max_concurrency, load.processes, load.connections) == (True, 8, 3, 8)
    assert load_suite("demo").client_processes == "auto"
    with pytest.raises(UserError, match="give a number, or auto"):
        apply_overrides(load_suite("demo"), client_processes="many")
    with pytest.raises(UserError, match="--request-rate 1,0: every rate must be above 0"):
        apply_overrides(load_suite("demo"), request_rate="1,0")


def test_dry_run_shows_the_load_shape_and_rate_points():
    from typer.testing import CliRunner

    from dflashbench.cli import app

    run = CliRunner().invoke(app, ["sweep", "--dry-run", "-v", "--method", "ar", "--request-rate", "2,4", "--burstiness", "0.5",
                                   "--max-concurrency", "8", "--goodput", "tpot_s=0.05", "--num-prompts", "2"])  # fmt: skip
    assert run.exit_code == 0, run.output
    assert "reference:ar:synthetic:r2.0" in run.output and "reference:ar:synthetic:r4.0" in run.output
    assert "poisson arrivals (seed 0, burstiness 0.5), at most 8 in flight; goodput SLO tpot_s <= 0.05" in run.output
    bad = CliRunner().invoke(app, ["sweep", "--dry-run", "--request-rate", "2", "--burstiness", "0"])
    assert bad.exit_code == 2 and "--burstiness" in bad.output
