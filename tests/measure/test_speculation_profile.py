"""speculation_profile.json in specdec_bench's schema, both ways, and tau three ways with its invariant.

``specdec_reader`` below is a reader written from specdec_bench's own writer (NVIDIA/Model-Optimizer@095124e9,
examples/specdec_bench/specdec_bench/speculation_profile.py, ``build_profile``): the keys it always writes, the
vectors dense and exactly K long (position i <-> acceptance length i + 2 in its histogram), the per-step mean and
its consistency with the marginals. The fixture is a profile in that schema, made by hand for these numbers (a
histogram of 100 steps: 40 accepted nothing, 25 one draft, 20 two, 15 all three)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflashbench.errors import UserError
from dflashbench.measure import speculation_profile as sp
from dflashbench.measure import tune_fit as tf
from dflashbench.types import RequestResult

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "speculation_profile" / "specdec_bench_eagle3_k3.json"
KEYS = {"schema_version", "measured", "method", "draft_checkpoint", "target_model", "num_speculative_tokens",
        "block_size", "max_supported_k", "verification_method", "conditional_accept_rates", "marginal_accept_rates",
        "mean_accept_length", "mean_accept_length_per_request", "accept_length_model", "accept_length_by_k",
        "acceptance_length_histogram", "per_category", "measurement_conditions", "validation"}  # fmt: skip


def specdec_reader(profile: dict) -> dict:
    """What a consumer of specdec_bench's profiles may rely on, checked; returns the per-position vectors."""
    assert set(profile) == KEYS and profile["schema_version"] == "1.0" and profile["measured"] is True
    k = profile["num_speculative_tokens"]
    marginal, conditional = profile["marginal_accept_rates"], profile["conditional_accept_rates"]
    assert len(marginal) == len(conditional) == k and all(0 <= x <= 1 for x in marginal + conditional)
    assert profile["accept_length_model"] in ("chain_analytic", "measured_per_k")
    assert profile["verification_method"] == "longest_prefix"
    hist = {int(length): n for length, n in profile["acceptance_length_histogram"].items()}
    steps = sum(hist.values())
    # its dense map: position i <-> length i + 2; a marginal is P(length >= i + 2)
    from_hist = [sum(n for length, n in hist.items() if length >= i + 2) / steps for i in range(k)]
    assert from_hist == pytest.approx(marginal, abs=1.5 / steps + 1e-6)
    per_step = sum(length * n for length, n in hist.items()) / steps
    assert per_step == pytest.approx(1 + sum(marginal), abs=1.5 * (k + 1) / steps + 1e-6)
    for i in range(1, k):
        assert conditional[i] == pytest.approx(marginal[i] / marginal[i - 1], abs=1e-5)
    check = profile["validation"]["mean_consistency"]
    assert check["passed"] == (check["abs_delta"] <= check["tolerance"])
    return {"marginal": marginal, "conditional": conditional, "per_step": profile["mean_accept_length"]}


def test_the_fixture_in_specdec_benchs_schema_reads_back_as_its_acceptance():
    profile = sp.read_profile(FIXTURE)
    specdec_reader(profile)
    acc = sp.profile_acceptance(profile)
    assert acc.marginal == (0.6, 0.35, 0.15) and acc.tau(3) == pytest.approx(2.1) and acc.per_k == {3: 2.1}
    assert acc.conditional == pytest.approx((0.6, 0.35 / 0.6, 0.15 / 0.35))
    assert acc.se[0] == pytest.approx((0.6 * 0.4 / 100) ** 0.5)  # from the histogram's 100 steps


def cells() -> list[tf.Cell]:
    rate = [0.9, 0.75, 0.6, 0.45, 0.3, 0.2, 0.12]
    out = []
    for k in (1, 3, 7):
        for b in (1, 2, 4):
            marginal = tuple(rate[:k])
            tau = 1 + sum(marginal)
            step = 2e-3 + 3e-4 * b + 1e-4 * b * k
            out.append(tf.Cell("dflash", k, b, tau / step, tau / step * b, tau, tau, 2000.0, marginal))
    return out


def test_a_written_profile_passes_specdec_benchs_checks_and_predicts_what_the_fit_did(tmp_path):
    grid = cells()
    acc, cost = tf.fit_acceptance(grid), tf.fit_step_cost(grid)
    profile = sp.build_profile(acc, grid, method="dflash", draft="/home/me/models/z-lab/Tiny-DFlash",
                               target="/x/embedded/target", block_size=16, prefix_exact=True, per_request_tau=3.3,
                               conditions={"engine": "reference", "concurrency": [1, 2, 4]})  # fmt: skip
    assert profile["draft_checkpoint"] == {"id": "z-lab/Tiny-DFlash"}  # no machine's path in a published file
    assert profile["accept_length_model"] == "chain_analytic" and profile["max_supported_k"] == 15
    assert profile["accept_length_by_k"] == {"1": 1.9, "3": 3.25, "7": 4.32}
    specdec_reader(profile)
    assert profile["validation"]["mean_consistency"]["passed"]
    path = sp.write_profile(tmp_path / "speculation_profile.json", profile)
    back = sp.profile_acceptance(sp.read_profile(path))
    before = tf.predict(acc, cost, range(1, 8), [1, 2, 4, 8], draws=200)
    after = tf.predict(back, cost, range(1, 8), [1, 2, 4, 8], draws=200)
    for a, b in zip(before, after, strict=True):
        assert b.per_user == pytest.approx(a.per_user, rel=0.01)  # rounded to 6 digits: well within 1 %
    assert json.loads(path.read_text())["schema_version"] == "1.0"


@pytest.mark.parametrize(("change", "message"), [
    (lambda p: p.pop("marginal_accept_rates"), "missing marginal_accept_rates"),
    (lambda p: p.update(schema_version="2.0"), "this reader knows 1.0"),
    (lambda p: p.update(measured=False), "a placeholder profile predicts nothing"),
    (lambda p: p.update(marginal_accept_rates=[0.6, 0.35]), "must hold 3 rates"),
    (lambda p: p.update(conditional_accept_rates=[0.6, 1.2, 0.4]), "must hold 3 rates in \\[0, 1\\]"),
])
def test_a_profile_outside_the_schema_is_refused_naming_what(change, message):
    profile = json.loads(FIXTURE.read_text())
    change(profile)
    with pytest.raises(UserError, match=message):
        sp.check_profile(profile, "p.json")


def request(steps: int, accepted: int, tokens: int) -> RequestResult:
    return RequestResult(run_id="r", point_id="p", request_id=f"q{steps}", category="all", concurrency=1, ok=True,
                         error=None, queued_ns=0, sent_ns=0, first_token_ns=1, last_token_ns=2, output_tokens=tokens,
                         output_tokens_source="server", spec_verify_steps=steps, spec_accepted_tokens=accepted)  # fmt: skip


def test_tau_three_ways_and_the_counters_invariant():
    rs = [request(10, 30, 41), request(40, 40, 81)]  # tau 4.0 over 41 tokens, tau 2.0 over 81
    t = sp.tau_conventions(rs, marginal=(0.8, 0.4, 0.2), counters_tau=2.4)
    assert t.per_request == pytest.approx(3.0) and t.pooled == pytest.approx(1 + 70 / 50)
    assert t.token_weighted == pytest.approx((4.0 * 41 + 2.0 * 81) / 122)
    assert t.from_positions == pytest.approx(2.4) and t.invariant_gap == pytest.approx(0) and not t.broken
    # a data-parallel engine's per-position counters under-count (vllm-project/speculators#1095): flagged
    under = sp.tau_conventions(rs, marginal=(0.5, 0.2, 0.1), counters_tau=2.4)
    assert under.broken and under.invariant_gap == pytest.approx(0.6)
    assert sp.tau_conventions([], counters_tau=None).pooled is None
