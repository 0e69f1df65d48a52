"""Issue #56: a draft-free method's steps that drafted nothing (n-gram with no match) are steps all the same: the
decomposition reads its tokens per step over every step the engine timed, not its τ over the steps that drafted."""

from __future__ import annotations

import pandas as pd
import pytest

from dflashbench.measure import decomposition


def point(method: str, tau: float | None, output_tokens: int, steps: int, step_mean_s: float, user_tok_s: float) -> dict:
    return {"backend": "reference", "model": "m", "workload": "w", "category": "all", "method": method,
            "concurrency": 1, "status": "ok", "run_id": "r", "point_id": f"reference:{method}:w:c1", "tau": tau,
            "output_tokens": output_tokens, "num_requests": 10, "per_user_tok_per_s_pooled": user_tok_s,
            "per_user_tok_per_s_mean": user_tok_s,
            "extra": {"server_timing": {"itl_s": {"count": steps, "mean_s": step_mean_s}}}}  # fmt: skip


def test_ngram_reads_tokens_per_step_over_every_step():
    # AR: 1,010 tokens over 10 requests, 1,000 steps of 10 ms. n-gram: the same tokens in 800 steps of 11 ms, a
    # quarter of them drafting (200 drafts, 200 accepted: tau 2.0 over the steps that drafted), so 1.25 tokens per
    # step over every step; per user 1.25 / 1.1 = 1.136x AR's
    points = pd.DataFrame([point("ar", 1.0, 1010, 1000, 0.010, 100.0),
                           point("ngram", 2.0, 1010, 800, 0.011, 100.0 * 1.25 / 1.1)])  # fmt: skip
    row = decomposition.decompose(points, pd.DataFrame()).iloc[0]
    assert row["method"] == "ngram" and row["tau_drafting"] == 2.0
    assert row["tau"] == pytest.approx(1000 / 800)
    assert row["predicted"] == pytest.approx(1.25 / 1.1) and row["error"] == pytest.approx(0.0, abs=1e-9)


def test_without_the_engines_step_count_a_draft_free_point_is_left_out_and_said():
    points = pd.DataFrame([point("ar", 1.0, 1010, 1000, 0.010, 100.0), point("ngram", 2.0, 1010, 800, 0.011, 113.6)])
    points.at[1, "extra"] = {"server_timing": {"itl_s": {"mean_s": 0.011}}}  # no count
    row = decomposition.decompose(points, pd.DataFrame()).iloc[0]
    assert row["left_out"] == "left out: no count of the engine's steps, which a draft-free method's tokens per step needs"


def test_a_drafter_keeps_its_tau():
    points = pd.DataFrame([point("ar", 1.0, 1010, 1000, 0.010, 100.0), point("dflash", 5.0, 1010, 200, 0.02, 250.0)])
    row = decomposition.decompose(points, pd.DataFrame()).iloc[0]
    assert row["tau"] == 5.0 and pd.isna(row["tau_drafting"]) and row["predicted"] == pytest.approx(2.5)
