"""The sequential stopping rule (dflashbench.measure.sequential): the linearised interval against a bootstrap, the
floors and ceiling, drift that no number of requests beats, and the coverage of the intervals it stops on, in
a simulation that draws requests the way a closed loop makes them (rounds of c requests sharing the machine's
state, prompts of different tau), not as independent draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dflashbench.measure import noise, sequential
from dflashbench.measure.sequential import Figure, Terms


def test_the_linearised_interval_agrees_with_the_bootstrap():
    rng = np.random.default_rng(0)
    tokens = rng.integers(20, 200, size=300).astype(float)
    decode = tokens / rng.lognormal(math.log(200), 0.4, size=300)
    base, other = {}, {}
    for i, (n, d) in enumerate(zip(tokens, decode, strict=True)):
        base[f"p{i}"] = (n, d)
        other[f"p{i}"] = (n, d / rng.lognormal(math.log(1.5), 0.2))
    r, v, _ = sequential.paired_log_var(*(Terms([t[0] for t in s.values()], [t[1] for t in s.values()],
                                             range(len(s)), list(s)) for s in (other, base)))  # fmt: skip
    lo, hi = noise.ratio_ci(base, other)
    boot_half = math.log(hi / lo) / 2
    assert r == pytest.approx(noise.ratio_of_sums(base, other))
    assert 1.96 * math.sqrt(v) == pytest.approx(boot_half, rel=0.15)


def test_requests_of_one_round_are_not_counted_as_independent():
    rng = np.random.default_rng(1)
    rounds = np.repeat(np.arange(50), 8)  # 50 rounds of 8 requests, each round's speed its own
    den = 100 * np.exp(rng.normal(0, 0.2, size=50))[rounds] * np.exp(rng.normal(0, 0.02, size=400))
    num = np.full(400, 100.0)
    _, v_clustered, k = sequential.ratio_log_var(Terms(num, den, rounds))
    _, v_naive, _ = sequential.ratio_log_var(Terms(num, den, range(400)))
    assert k == 50
    assert v_clustered > 4 * v_naive  # the rounds, not the requests, are the independent draws


def test_floors_and_ceiling():
    floors = sequential.floors_for(concurrency=4, per_stream=4, prompts=64, categories=["math", "code"],
                                   min_per_category=4)  # fmt: skip
    precise = {"tput": Figure(100.0, 1e-6, 200, 50)}
    assert floors.min_requests == 4 * sequential.MIN_ROUNDS
    assert not sequential.check(16, precise, 0.03, floors, {"math": 8, "code": 8}).stop  # below 8 rounds of 4
    assert not sequential.check(32, precise, 0.03, floors, {"math": 30, "code": 2}).stop  # code short
    done = sequential.check(32, precise, 0.03, floors, {"math": 16, "code": 16})
    assert done.stop and done.reason == sequential.PRECISE
    wide = {"tput": Figure(100.0, 0.01, 40, 10)}
    assert not sequential.check(40, wide, 0.03, floors, {"math": 20, "code": 20}).stop
    last = sequential.check(64, wide, 0.03, floors, {"math": 32, "code": 32})
    assert last.stop and last.reason == sequential.CEILING and last.widest[1] > 0.03
    assert not sequential.check(40, {"tput": None}, 0.03, floors, {"math": 20, "code": 20}).stop


def test_drift_wider_than_the_precision_stops_once_the_requests_are_precise():
    floors = sequential.floors_for(concurrency=1, per_stream=4, prompts=500)
    drifting = Figure(1.5, 1e-5, 300, 75, drift_sd_log=0.05)  # 1.96 x 5 % drift: about +-10 %, over a 3 % target
    c = sequential.check(300, {"speedup": drifting}, 0.03, floors)
    assert drifting.drift_limited(0.03) and c.stop and c.reason == sequential.UNREACHABLE
    assert c.widest[1] > 0.09  # the interval it stops on still holds the drift
    noisy = Figure(1.5, 1e-3, 30, 8, drift_sd_log=0.05)
    assert not sequential.check(30, {"speedup": noisy}, 0.03, floors).stop


# -- coverage: a closed loop's requests, rounds sharing the machine's state, prompts of different tau --------------
CATEGORY_SPEED = {"math": 1.0, "code": 1.6, "chat": 0.7}  # per-user speed of each category's prompts


def _draw_point(rng, c, n_max, sigma_round, categories, speedup=1.0, order=None):
    """Requests of one point in send order: (prompt id, tokens - 1, decode s, round)."""
    prompts = order if order is not None else rng.permutation(10_000)
    out = []
    for i in range(n_max):
        rnd = i // c
        if i % c == 0:
            factor = math.exp(rng.normal(0, sigma_round))
        p = int(prompts[i])
        speed = CATEGORY_SPEED[categories[p % len(categories)]] * speedup
        tokens = 60 + (p * 37) % 140
        decode = tokens / (200 * speed) * factor * math.exp(rng.normal(0, SIGMA_REQUEST))
        out.append((f"q{p}", tokens, decode, rnd))
    return out


SIGMA_REQUEST = 0.1


def _true_ratio(categories, speedup=1.0, sigma_round=0.08):
    """sum(tokens) / sum(decode) over the whole prompt population, in expectation (the lognormal factors' means
    included)."""
    num = den = 0.0
    for p in range(10_000):
        tokens = 60 + (p * 37) % 140
        num += tokens
        den += tokens / (200 * CATEGORY_SPEED[categories[p % len(categories)]] * speedup)
    return num / den / math.exp((sigma_round**2 + SIGMA_REQUEST**2) / 2)


def _stop(reqs, precision, floors, paired_with=None):
    """Walk the point's requests check by check; the figure and its interval where the rule stops."""
    n = floors.min_requests
    while True:
        n = min(n, len(reqs))
        part = reqs[:n]
        terms = Terms([r[1] for r in part], [r[2] for r in part], [r[3] for r in part], [r[0] for r in part])
        if paired_with is None:
            found = sequential.ratio_log_var(terms)
        else:
            found = sequential.paired_log_var(terms, paired_with)
        fig = Figure.of(found, n)
        if sequential.check(n, {"x": fig}, precision, floors).stop or n == len(reqs):
            return fig
        n = sequential.next_check(n, 4)


@pytest.mark.parametrize("categories", [("math",), ("math", "code", "chat")], ids=["homogeneous", "mixed"])
def test_coverage_of_the_intervals_it_stops_on(categories, capsys):
    rng = np.random.default_rng(7)
    truth_ar = _true_ratio(categories)
    truth_ratio = _true_ratio(categories, 1.5) / truth_ar  # the factors' means cancel
    floors = sequential.floors_for(concurrency=4, per_stream=4, prompts=1000)
    hits_single = hits_paired = 0
    sizes = []
    runs = 200
    for _ in range(runs):
        order = rng.permutation(10_000)
        ar = _draw_point(rng, 4, 1000, 0.08, categories, order=order)
        fig = _stop(ar, 0.03, floors)
        sizes.append(fig.n)
        hits_single += abs(math.log(fig.value / truth_ar)) <= math.log1p(fig.half_width)
        # the method's point on the same prompts, in its own rounds
        ar_terms = Terms([r[1] for r in ar], [r[2] for r in ar], [r[3] for r in ar], [r[0] for r in ar])
        dflash = _draw_point(rng, 4, 1000, 0.08, categories, speedup=1.5, order=order)
        pf = _stop(dflash, 0.03, floors, paired_with=ar_terms)
        hits_paired += abs(math.log(pf.value / truth_ratio)) <= math.log1p(pf.half_width)
    single, paired = hits_single / runs, hits_paired / runs
    with capsys.disabled():
        print(f"\ncoverage at stopping ({'+'.join(categories)}, c=4, ±3 %, {runs} runs): own figure "
              f"{single:.1%}, paired ratio {paired:.1%}; requests at stopping median {int(np.median(sizes))}")
    assert single >= 0.90 and paired >= 0.90


def test_a_mixed_workload_needs_more_requests_than_a_homogeneous_one():
    rng = np.random.default_rng(3)
    floors = sequential.floors_for(concurrency=4, per_stream=4, prompts=1500)
    n = {}
    for cats in (("math",), ("math", "code", "chat")):
        n[cats] = np.median([_stop(_draw_point(rng, 4, 1500, 0.03, cats), 0.03, floors).n for _ in range(30)])
    assert n[("math",)] < n[("math", "code", "chat")]
