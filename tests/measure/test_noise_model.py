"""Issue #62: the noise model's maths (dflashbench.measure.noise_model) on synthetic series whose terms are known:
the calibration's run-to-run term beyond jitter and drift, the run-level factor told apart from each point's own,
the same term from a history's series, the shift of a whole run named, the report's combined interval, and the
profile file."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dflashbench.errors import UserError
from dflashbench.measure import noise_model as nm


def test_the_between_run_term_is_what_the_runs_spread_beyond_jitter_and_drift():
    """40 readings over 8 runs: each run moves a reading by a term of 0.03, its requests' jitter by 0.02 and the
    probe's drift by 0.01 (log sd); the term read back is 0.03, on 7 degrees of freedom a reading."""
    rng = np.random.default_rng(0)
    k, readings, term, jitter, drift = 8, 40, 0.03, 0.02, 0.01
    values = {r: list(rng.normal(0, term, k) + rng.normal(0, jitter, k) + rng.normal(0, drift, k))
              for r in range(readings)}  # fmt: skip
    found = nm.between_run_term(values, {r: jitter**2 for r in values}, {r: drift**2 for r in values})
    assert found.df == (k - 1) * readings and found.runs == k and found.readings == readings
    assert found.log_sd == pytest.approx(term, rel=0.15)
    assert found.between == pytest.approx(math.sqrt(term**2 + jitter**2 + drift**2), rel=0.15)
    # nothing beyond the jitter: the term is 0, never negative
    quiet = {r: list(rng.normal(0, jitter, k)) for r in range(readings)}
    assert nm.between_run_term(quiet, {r: (2 * jitter) ** 2 for r in quiet}).log_sd == 0.0
    assert nm.between_run_term({0: [0.1]}) is None  # one run: no spread to read


def test_a_speedup_that_is_the_quotient_of_two_others_adds_no_degree_of_freedom():
    """Three methods' speedups over 6 runs: each method moved by its own launch term; DFlash vs EAGLE-3 is DFlash vs
    AR over EAGLE-3 vs AR, so the 3 readings carry 2 readings' worth of freedom: 10 degrees, not 15."""
    rng = np.random.default_rng(3)
    ar, dflash, eagle3 = (rng.normal(0, 0.02, 6) for _ in range(3))
    values = {"dflash/ar": list(dflash - ar), "eagle3/ar": list(eagle3 - ar), "dflash/eagle3": list(dflash - eagle3)}
    assert nm.between_run_term(values).df == 15
    free = nm.between_run_term(values, free=2)
    assert free.df == 10 and free.log_sd == nm.between_run_term(values).log_sd  # the term itself as before
    assert nm.between_run_term(values, free=3).df == 15


def test_the_run_level_factor_is_told_apart_from_each_points_own():
    """Each run shifts all of its 9 points by a common factor of sd 0.05; each point moves on its own by 0.02."""
    rng = np.random.default_rng(1)
    k, points = 30, 9
    common = rng.normal(0, 0.05, k)
    table = {p: list(common + rng.normal(0, 0.02, k) + p) for p in range(points)}
    run_level, point = nm.run_level_terms(table)
    assert run_level.log_sd == pytest.approx(0.05, rel=0.3) and run_level.df == k - 1
    assert point.log_sd == pytest.approx(0.02, rel=0.15) and point.df == (k - 1) * (points - 1)
    total = nm.absolute_term(run_level, point)
    assert total.log_sd == pytest.approx(math.hypot(run_level.log_sd, point.log_sd))
    assert nm.run_level_terms({0: [1.0, 2.0]}) is None  # one point: no run effect to tell apart


def test_a_history_reads_the_term_from_successive_runs_not_across_a_step():
    rng = np.random.default_rng(2)
    logs = list(rng.normal(0, 0.04, 30))
    stepped = logs[:15] + [v - 0.5 for v in logs[15:]]  # a change of level at run 15, found by the fit
    terms = nm.history_terms([(nm.SPEEDUP, stepped, [15]), (nm.SPEEDUP, logs, [])])
    assert terms[nm.SPEEDUP].log_sd == pytest.approx(0.04, rel=0.25) and terms[nm.SPEEDUP].df == 28 + 29
    # read across the step, the one difference of 0.5 alone would make it nearly twice as large
    assert nm.history_terms([(nm.SPEEDUP, stepped, [])])[nm.SPEEDUP].log_sd > 1.8 * terms[nm.SPEEDUP].log_sd


def test_a_whole_run_shift_is_named_and_a_one_method_change_is_not():
    shift = nm.run_level_shift({"ar": (-0.2, 0.03), "dflash": (-0.18, 0.03), "eagle3": (-0.21, 0.03)})
    assert shift is not None and shift.log_move == pytest.approx(-0.2) and not shift.own
    assert "every method 18% slower" in shift.text
    assert nm.run_level_shift({"ar": (0.0, 0.03), "dflash": (-0.15, 0.03), "eagle3": (0.01, 0.03)}) is None
    assert nm.run_level_shift({"ar": (-0.2, 0.03), "dflash": (0.2, 0.03)}) is None  # opposite ways: not the run's
    # a shift and, beyond it, one method's own change
    both = nm.run_level_shift({"ar": (-0.1, 0.02), "dflash": (-0.4, 0.02), "eagle3": (-0.11, 0.02)})
    assert both is not None and both.own == ("dflash",)


def test_the_combined_interval_adds_drift_and_launch_and_keeps_the_interval_before_launch():
    found = nm.combined_interval(2.0, (1.8, 2.2), 0.02, 0.03)
    h = math.log(2.2 / 2.0)
    assert found.interval[1] == pytest.approx(2.0 * math.exp(math.hypot(h, nm.Z_95 * math.hypot(0.02, 0.03))))
    assert found.without_launch[1] == pytest.approx(2.0 * math.exp(math.hypot(h, nm.Z_95 * 0.02)))
    assert found.launch == 0.03 and found.drift == 0.02
    assert nm.combined_interval(2.0, None, 0.02, 0.03) is None


def test_a_profile_round_trips_and_a_bad_file_is_named(tmp_path):
    terms = {nm.SPEEDUP: nm.Term(0.012, 27, 4, 9, 0.015), nm.ABSOLUTE: nm.Term(0.05, 3, 4, 9)}
    path = tmp_path / "p.json"
    nm.write_profile(path, [nm.RunToRun("vllm", terms, nm.MEASURED, "calibrate")], made_by="dflashbench calibrate")
    doc = json.loads(path.read_text())
    assert doc["schema"] == nm.PROFILE_SCHEMA and doc["version"] == nm.PROFILE_VERSION and doc["machine"]["host"]
    back = nm.read_profile(path)["vllm"]
    assert back.sd(nm.SPEEDUP) == 0.012 and back.terms[nm.SPEEDUP].df == 27 and back.source == nm.MEASURED
    assert nm.resolve("vllm", {"vllm": back}) is back
    assert nm.resolve("vllm", None) is None  # never measured, no profile
    default = nm.resolve("reference", None)
    assert default.source == nm.DEFAULT and default.sd(nm.SPEEDUP) and "2026-11-27" in default.how
    (tmp_path / "bad.json").write_text('{"schema": "something else"}')
    with pytest.raises(UserError, match="not a dflashbench noise profile"):
        nm.read_profile(tmp_path / "bad.json")
    with pytest.raises(UserError, match="cannot read it"):
        nm.read_profile(tmp_path / "missing.json")


# -- the report's readings (measure/readings.py) read with the noise model ----------------------------------------
def test_two_rounds_never_give_an_interval_wider_than_the_requests_own():
    """Issue #62: DFlash at c=2, 0.40x and 0.34x of AR's time in two rounds, read [0.13-1.04] on one degree of freedom
    against the paired requests' [0.30-0.43]: the requests' interval with the run-to-run term stands, and says why."""
    from dflashbench.measure import readings

    term = nm.RunToRun("reference", {nm.SPEEDUP: nm.Term(0.03)}, nm.MEASURED, "test")
    p = readings.Paired(0.37, (0.30, 0.43), 32, 32, 32, rounds=(0.40, 0.34))
    d = readings.decided(p, 0.0, term)
    assert d.interval[1] < 1 and d.rounds == 2 and "set aside" in d.why
    assert d.launch_sd == 0.03 and d.interval[0] < 0.30 and d.interval[1] > 0.43  # the launch term widened it
    three = readings.decided(readings.Paired(0.37, (0.30, 0.43), 32, 32, 32, rounds=(0.40, 0.34, 0.37)), 0.0, term)
    assert three.covers.startswith("paired repeats (3 rounds)") and three.why is None


def test_three_rounds_carry_the_measured_term_beyond_their_own_spread():
    """Issue #62: a launch moves all of a run's rounds alike, which their spread cannot show; 4 unchanged --repeats 3
    runs' intervals covered the other runs' median in 83-86 % of readings. With a measured term the t-interval is
    widened by the term's part beyond one round's sd (as compare's rounds test takes it); never with the project's
    default, nor where the rounds already spread as much as the term."""
    import statistics

    from dflashbench.measure import readings, stats

    rounds = (0.40, 0.39, 0.41)
    p = readings.Paired(0.40, (0.36, 0.44), 32, 32, 32, rounds=rounds)
    t = stats.ratio_interval(rounds)
    measured = nm.RunToRun("reference", {nm.SPEEDUP: nm.Term(0.05)}, nm.MEASURED, "test")
    d = readings.decided(p, 0.0, measured)
    beyond = math.sqrt(0.05**2 - statistics.stdev(math.log(r) for r in rounds) ** 2)
    assert d.launch_sd == pytest.approx(beyond) and d.launch_source == nm.MEASURED
    half = math.hypot(math.log(t.hi / t.lo) / 2, nm.Z_95 * beyond)
    assert d.interval == pytest.approx((t.mean * math.exp(-half), t.mean * math.exp(half)))
    assert "the run-to-run term beyond the rounds' spread" in d.covers and d.rounds == 3
    default = nm.RunToRun("reference", {nm.SPEEDUP: nm.Term(0.05)}, nm.DEFAULT, "test")
    assert readings.decided(p, 0.0, default).interval == pytest.approx((t.lo, t.hi))
    spread = readings.Paired(0.40, (0.30, 0.50), 32, 32, 32, rounds=(0.30, 0.40, 0.52))
    t_wide = stats.ratio_interval(spread.rounds)
    assert readings.decided(spread, 0.0, measured).interval == pytest.approx((t_wide.lo, t_wide.hi))


def test_two_rounds_that_differ_beyond_their_requests_get_an_interval_holding_both():
    """Review 2026-11-29, probe p07c: DFlash at 0.32x of AR's time in one round and 0.80x in the other, each round's
    requests tight. The pooled requests' interval ([0.45-0.68]) held neither round; the span of both rounds' own
    intervals holds each, and is said."""
    from dflashbench.measure import readings

    term = nm.RunToRun("reference", {nm.SPEEDUP: nm.Term(0.072)}, nm.DEFAULT, "test")
    p = readings.Paired(0.56, (0.50, 0.62), 64, 64, 64, rounds=(0.32, 0.80), round_cis=((0.28, 0.36), (0.72, 0.88)))
    d = readings.decided(p, 0.0, term)
    assert d.interval[0] < 0.32 and d.interval[1] > 0.80, d.interval
    assert d.covers == readings.ROUNDS_APART and "0.32× and 0.80×" in d.why and d.rounds == 2
    # rounds that agree within their requests keep the pooled requests' interval (the t-interval set aside)
    near = readings.Paired(0.37, (0.30, 0.43), 64, 64, 64, rounds=(0.40, 0.34), round_cis=((0.33, 0.48), (0.28, 0.41)))
    assert readings.decided(near, 0.0, term).covers == readings.POOLED_ROUNDS


def test_a_decision_the_run_to_run_term_undoes_is_not_decided_at_this_noise():
    from dflashbench.measure import noise, readings

    p = readings.Paired(0.9, (0.85, 0.95), 32, 32, 32)
    assert noise.decide(readings.decided(p, 0.0).interval) == noise.SLOWER  # no term: decided
    d = readings.decided(p, 0.0, nm.RunToRun("reference", {nm.SPEEDUP: nm.Term(0.072)}, nm.DEFAULT, "x"))
    assert noise.decide(d.interval) == noise.UNCLEAR and d.why.startswith(readings.AT_THIS_NOISE)
    assert "the project's default" in d.why


def test_every_pair_at_a_load_carries_the_same_drift():
    """The four-method example: one pair's points far apart in the probe's readings widened that method alone, and
    the answer served the one spared. At a load, every pair now carries the largest drift read there."""
    from dflashbench.measure import readings
    from dflashbench.types import ProbeReading

    ids = ["p:ar:c1", "p:eagle3:c1", "p:dflash:c1"]
    seconds = [0.04, 0.041, 0.08, 0.04, 0.04, 0.041, 0.039, 0.04]
    probes = [ProbeReading("cpu", f"before {ids[i]}" if i < 3 else "end", i * 10**9, s, (s,) * 5)
              for i, s in enumerate(seconds)]  # fmt: skip
    pairwise = {(a, b): readings.point_drift(probes, a, b) for a, b in (ids[:2], (ids[0], ids[2]))}
    found = readings.load_drift(probes, ids)
    assert found == max(v for v in pairwise.values() if v is not None)


def test_the_absolute_terms_df_are_those_of_its_sum():
    """Calibrate's 4 launches of 9 points (/tmp/sharp-gate/calib, docs/measurements/2026-11-29-sharp-gate): a
    run-level part of 1.1 % on 3 df beside a point part of 2.6 % on 24 df is known about as well as the point part,
    not as badly as the run-level part alone."""
    total = nm.absolute_term(nm.Term(0.011175, 3, 4, 9), nm.Term(0.025781, 24, 4, 9))
    assert total.df == 26 and total.log_sd == pytest.approx(0.0281, abs=1e-4)
    assert nm.absolute_term(nm.Term(0.05, 3, 4, 9), nm.Term(0.0, 24, 4, 9)).df == 3  # the run-level part alone
