"""compare's family (:func:`dflashbench.gate.compare_noise.correct_family`): tests read from the same requests with
one drift count as about one, independent tests as Holm counts them, an exact test stays outside, and unchanged
families fail at about the 5 % promised."""

from __future__ import annotations

import numpy as np
import pytest

from dflashbench.gate.compare_noise import NoiseTest, correct_family
from dflashbench.measure import noise

DRAWS = 20_000


def _null(seed: int, sd: float = 0.02) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, sd, noise.N_RESAMPLES)


def _test(null: np.ndarray, observed: float, drift_sd: float = 0.02, group=None) -> NoiseTest:
    p = noise.p_worse_with_drift(observed, null, "drop", drift_sd)
    return NoiseTest(p, worse="drop", null=null, drift_sd=drift_sd, observed=observed, drift_group=group)


def test_copies_of_one_test_count_as_one_and_independent_tests_as_holm_counts_them():
    """Five tests on the same resampled requests with one drift are one test: the family's level is alpha itself.
    Five on their own requests and drifts get about Holm's alpha / 5."""
    one = _null(1)
    _, same_level, m = correct_family([_test(one, 0.0, group="point")] * 5, draws=DRAWS)
    _, apart_level, _ = correct_family([_test(_null(10 + i), 0.0) for i in range(5)], draws=DRAWS)
    assert m == 5
    assert same_level == pytest.approx(noise.ALPHA, rel=0.1)
    assert apart_level == pytest.approx(noise.ALPHA / 5, rel=0.15)


def test_an_exact_figure_is_outside_the_family_and_fails_on_any_move_the_worse_way():
    """tau decoded alike in both runs: its null has no spread. It does not widen the family, and it rejects when tau
    fell, not when it held."""
    exact_null = np.zeros(noise.N_RESAMPLES)
    held = NoiseTest(noise.bootstrap_p_worse(0.0, exact_null, "drop"), worse="drop", null=exact_null)
    fell = NoiseTest(noise.bootstrap_p_worse(-0.01, exact_null, "drop"), worse="drop", null=exact_null)
    assert held.exact and fell.exact and not _test(_null(2), 0.0).exact
    rejects, level, m = correct_family([_test(_null(2), 0.0), held, fell], draws=DRAWS)
    assert m == 1 and level == pytest.approx(noise.ALPHA, rel=0.1)
    assert rejects == [False, False, True]


def test_unchanged_families_fail_at_about_the_rate_promised():
    """400 unchanged comparisons of 6 figures (3 points' two figures, each point's pair on the same requests and
    drift), each observed move drawn from the model the rule assumes: the share failing anywhere is about 5 %, not
    the 2.8 % Holm's rule gives these dependent tests (2,000 such families), nor far above 5 %."""
    rng = np.random.default_rng(7)
    nulls = [_null(20 + k) for k in range(3)]
    failed = 0
    for _ in range(400):
        tests = []
        for k, null in enumerate(nulls):
            jitter, drift = null[rng.integers(len(null))], 0.02 * rng.standard_normal()
            for wobble in (0.0, 0.001):  # the point's second figure: the same requests, nearly the same move
                tests.append(_test(null, jitter + drift + wobble * rng.standard_normal(), group=k))
        rejects, _, _ = correct_family(tests, draws=5_000, seed=int(rng.integers(1 << 30)))
        failed += any(rejects)
    assert 8 <= failed <= 36  # 5 % of 400 = 20 +- 4.4 (binomial sd)
