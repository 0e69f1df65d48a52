"""history on planted steps and drifts laid on real runs' readings (tools/history_planted.py; the full 20 trials
in docs/ci.md): a few trials, cheaply (2,000 random orders a test instead of 10,000)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import history_planted as hp  # noqa: E402


def _args(**kw):
    import argparse

    base = dict(length=10, at=6, step=0.25, drift=0.03, recent=5, perms=2000)
    return argparse.Namespace(**{**base, **kw})


def test_a_step_at_run_6_of_10_is_found_there_and_is_recent_flat_histories_stay_quiet():
    runs = hp.pool([hp.DEFAULT_RUNS])
    assert len(runs) >= 10  # real sweeps' readings
    for t in (0, 1, 2):
        r = hp.trial(runs, _args(), t)
        assert r["step_headline"] and r["step_exit"] == 1, r  # DFlash vs AR's speedup, from run 6, exit 1
        assert r["step_found"] >= 1 and not r["step_others"], r  # AR's and EAGLE-3's series: nothing
        assert not r["flat_found"] and r["flat_exit"] != 1, r
        assert r["drift_trends"] >= 1 and r["drift_exit"] == 1 and r["drift_regressions"] >= 1, r


def test_the_rescue_t_test_matches_scipy_and_needs_three_runs_a_side():
    import numpy as np
    from scipy import stats

    from dflashbench.measure import changepoints as cp

    rng = np.random.default_rng(5)
    for _ in range(20):
        a, b = rng.normal(0, 1, int(rng.integers(3, 9))), rng.normal(0.4, 1, int(rng.integers(3, 9)))
        assert abs(cp.student_p(a, b) - stats.ttest_ind(a, b).pvalue) < 1e-9
    assert cp.order_floor(10, 5) == 2 / 252
    # in a family of 15 series (as history reads a setting), random orders of 10 runs cannot reach the family's
    # level with a split of 5 and 5 (2/252 at best): the t-test finds the -25 % step at run 6
    noise = [list(1 + 0.01 * rng.standard_normal(10)) for _ in range(14)]
    y = [1.0, 1.01, 0.99, 1.0, 1.02, 0.75, 0.76, 0.74, 0.75, 0.76]
    fits = cp.detect_family([(v, [0.01] * 10) for v in [y, *noise]], n_perms=2000)
    assert fits[0].floor_level < cp.order_floor(10, 5)
    assert [(c.index, c.test) for c in fits[0].changes] == [(5, "t-test")] and fits[0].trend is None
    assert not any(f.changes or f.trend for f in fits[1:])
    # two runs off at the start are never rescued: too few a side for the t-test
    y2 = [0.8, 0.81, 1.0, 1.01, 0.99, 1.0, 1.02, 1.0, 0.99, 1.01]
    fits = cp.detect_family([(v, [0.01] * 10) for v in [y2, *noise]], n_perms=2000)
    assert fits[0].changes == [] and fits[0].trend is None
