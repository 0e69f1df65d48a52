"""Issue #61, the lossless check's rules (dflashbench.measure.lossless) on hand-made stored outputs: one (request,
round) pair counts once whatever the number of times a run is read, every repeat round counts, nothing is compared
after a divergence; the margin and its tolerance; the per-token ceiling on near-ties; and the verdict's one line."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from dflashbench.load.outputs import output_fields
from dflashbench.measure import lossless
from dflashbench.measure.lossless import DIFFERENT, IDENTICAL, NEAR_TIE, LosslessCheck, lossless_checks
from dflashbench.report.answer import _lossless

AR_IDS = [5, 6, 7, 8, 9, 10, 11, 12]


def text_of(ids) -> str:
    return " ".join(f"t{i}" for i in ids)


def record(method: str, rid: str, ids, *, c: int = 1, rnd: int | None = None, turn: int = 0, sent: int = 0,
           run_id: str = "run") -> dict:  # fmt: skip
    """A stored request as requests.jsonl holds it (text, hash, token ids) for point ``reference:<method>:...``."""
    pid = f"reference:{method}:synthetic:c{c}" + (f"/r{rnd}" if rnd is not None else "")
    return {"run_id": run_id, "point_id": pid, "request_id": rid, "turn": turn, "repeat": rnd or 0, "ok": True,
            "warmup": False, "category": "math", "concurrency": c, "sent_ns": sent, "output_tokens": len(ids),
            **output_fields(text_of(ids), list(ids), store_text=True)}  # fmt: skip


def points_of(methods=("ar", "dflash"), cs=(1,), rounds: int | None = None, run_id: str = "run") -> pd.DataFrame:
    rows = []
    for m in methods:
        for c in cs:
            ids = [f"reference:{m}:synthetic:c{c}" + (f"/r{r}" if rounds else "") for r in range(rounds or 1)]
            rows.append({"run_id": run_id, "backend": "reference", "model": "tiny", "workload": "synthetic",
                         "category": "all", "method": m, "concurrency": c, "point_id": ids[0], "status": "ok",
                         **({"repeat_point_ids": ids} if rounds else {})})  # fmt: skip
    return pd.DataFrame(rows)


def diverged(ids, at: int, token: int = 99) -> list[int]:
    return [*ids[:at], token, *ids[at + 1 :]]


def test_a_divergence_is_paired_with_its_position_tokens_and_the_tokens_compared():
    reqs = pd.DataFrame([record("ar", "a", AR_IDS), record("dflash", "a", diverged(AR_IDS, 3)),
                         record("ar", "b", AR_IDS), record("dflash", "b", AR_IDS)])  # fmt: skip
    pairs = {p.request_id: p for p in lossless.compared_pairs(points_of(), reqs)}
    a, b = pairs["a"], pairs["b"]
    assert (a.same, a.position, a.ar_token, a.method_token, a.compared_tokens) == (False, 3, 8, 99, 4)
    assert (b.same, b.compared_tokens, b.ar_point_id) == (True, len(AR_IDS), "reference:ar:synthetic:c1")


def test_a_run_read_twice_counts_each_pair_once_and_every_repeat_round_counts():
    """The report given the same run twice said 192/192 for 96 requests; a --repeats 2 run said 28/28, not 56/56."""
    once = [record(m, f"q{i}", AR_IDS, c=c, sent=i) for m in ("ar", "dflash") for c in (1, 2) for i in range(3)]
    reqs = pd.DataFrame(once + once)  # the same rows read twice
    points = pd.concat([points_of(cs=(1, 2))] * 2, ignore_index=True)
    (check,) = lossless.checks(points, reqs)
    assert (check.identical, check.compared) == (6, 6)  # 3 prompts x 2 concurrencies
    rounds = [record(m, f"q{i}", AR_IDS, rnd=r, sent=i) for m in ("ar", "dflash") for r in (0, 1) for i in range(3)]
    (check,) = lossless.checks(points_of(rounds=2), pd.DataFrame(rounds))
    assert (check.identical, check.compared) == (6, 6)  # both rounds
    from dflashbench.measure.quality import agreement_table

    table = agreement_table(points_of(rounds=2), pd.DataFrame(rounds))
    row = table[(table["method"] == "dflash") & (table["category"] == "all")].iloc[0]
    assert (row["exact"], row["compared"]) == (6, 6)  # the agreement table counts alike


def test_a_prompt_sent_twice_in_a_point_is_two_pairs_and_a_later_turn_after_a_divergence_is_not_compared():
    reqs = pd.DataFrame([
        record("ar", "a", AR_IDS, sent=1), record("ar", "a", AR_IDS, sent=2),
        record("dflash", "a", AR_IDS, sent=1), record("dflash", "a", AR_IDS, sent=2),
        record("ar", "m", AR_IDS, turn=0), record("ar", "m", AR_IDS, turn=1),
        record("dflash", "m", diverged(AR_IDS, 2), turn=0), record("dflash", "m", AR_IDS, turn=1),
    ])  # fmt: skip
    pairs = lossless.compared_pairs(points_of(), reqs)
    assert sorted((p.request_id, p.turn, p.occurrence) for p in pairs) == [("a", 0, 0), ("a", 0, 1), ("m", 0, 0)]


def probe_row(pair: lossless.Pair, margin: float | None, why: str | None = None) -> dict:
    return {"run_id": pair.run_id, "point_id": pair.point_id, "request_id": pair.request_id, "turn": pair.turn,
            "occurrence": pair.occurrence, "position": pair.position, "ar_token_id": pair.ar_token,
            "method_token_id": pair.method_token, "margin_nats": margin, "why": why}  # fmt: skip


def test_margin_from_the_targets_top_logprobs():
    top = {8: -0.70, 99: -0.71, 3: -2.5}
    assert lossless.margin_nats(8, 99, top)[0] == pytest.approx(0.01)
    margin, why = lossless.margin_nats(8, 42, top)  # the method's token below the top-k: a plain difference
    assert margin is None and "outside the target's top 3 (margin > 1.80 nats)" in why
    assert lossless.margin_nats(42, 8, top)[0] is None  # AR's own token not there: not readable
    assert lossless.classify(0.0) == lossless.classify(0.125) == lossless.classify(-0.05) == NEAR_TIE
    assert lossless.classify(0.126) == lossless.classify(None) == lossless.classify(float("nan")) == DIFFERENT


def test_near_tie_different_and_unreadable_are_told_apart_by_the_probe_rows():
    reqs = pd.DataFrame([record("ar", r, AR_IDS) for r in "abcd"] + [
        record("dflash", "a", diverged(AR_IDS, 3)), record("dflash", "b", diverged(AR_IDS, 1)),
        record("dflash", "c", diverged(AR_IDS, 5)), record("dflash", "d", AR_IDS)])  # fmt: skip
    pairs = {p.request_id: p for p in lossless.compared_pairs(points_of(), reqs)}
    rows = [probe_row(pairs["a"], 0.0), probe_row(pairs["b"], 1.7),
            {**probe_row(pairs["c"], 0.0), "method_token_id": 12}]  # names other tokens: an earlier sitting's row
    judged = {j.pair.request_id: j for j in lossless.judge(pairs.values(), rows)}
    assert [judged[r].kind for r in "abcd"] == [NEAR_TIE, DIFFERENT, DIFFERENT, IDENTICAL]
    assert judged["a"].margin == 0.0 and judged["b"].margin == 1.7
    assert judged["c"].why == "margin not readable: not probed"
    (check,) = lossless.summarize(list(judged.values()))
    assert (check.identical, check.near_tie, check.different, check.unreadable, check.max_margin) == (1, 1, 2, 1, 0.0)
    assert not check.holds


def test_more_near_ties_than_rounding_explains_break_the_ceiling_beyond_noise():
    assert lossless.poisson_lower(0) == 0
    assert [round(lossless.poisson_lower(k), 3) for k in (1, 2, 5, 10)] == [0.051, 0.355, 1.970, 5.425]  # chi2/2
    base = lossless.Pair("run", "reference:dflash:synthetic:c4", "reference:ar:synthetic:c4", "dflash", 4, 0, "r", 0,
                         0, False, 3, 1, 2, 4)  # fmt: skip

    def near_ties(n: int, tokens_each: int) -> list[lossless.Judged]:
        return [lossless.Judged(dataclasses.replace(base, request_id=f"r{i}", compared_tokens=tokens_each), NEAR_TIE,
                                0.01) for i in range(n)]  # fmt: skip

    # 2 near-ties in 200 tokens (1 %, twice the ceiling's rate) is not beyond noise; 30 in 1,000 (3 %) is
    (few,) = lossless.summarize(near_ties(2, 100))
    assert few.holds and not few.over_ceiling and few.loads[0].tokens == 200
    (many,) = lossless.summarize(near_ties(30, 33))
    (load,) = many.over_ceiling
    assert (load.concurrency, load.near_ties, load.tokens) == (4, 30, 990) and load.lower > lossless.NEAR_TIE_CEILING
    assert not many.holds and many.different == 0
    line = _lossless([LosslessCheck("DFlash", 0, 30, "text", 30, 0.01, 0, tuple(many.over_ceiling))], True)
    assert line[0] == "lossless-fails" and "more than rounding explains" in line[1] and "loose verifier" in line[1]


def test_the_verdict_line_says_identical_near_tie_and_different():
    reqs = pd.DataFrame([record("ar", r, AR_IDS, c=c) for r in "abc" for c in (1, 2)] + [
        record("dflash", r, diverged(AR_IDS, 3) if r == "a" else AR_IDS, c=c) for r in "abc" for c in (1, 2)])  # fmt: skip
    points = points_of(cs=(1, 2))
    pairs = [p for p in lossless.compared_pairs(points, reqs) if not p.same]
    checks = lossless_checks(points, reqs, [probe_row(p, 0.004) for p in pairs])
    kind, line = _lossless(checks, True)
    assert kind == "lossless"
    assert line == ("Lossless: DFlash identical to AR on 4/6 requests, near-tie on 2 (margin ≤ 0.00 nats), different "
                    "on 0 (greedy, full text).")  # fmt: skip
    kind, line = _lossless(lossless_checks(points, reqs, [probe_row(p, 2.5) for p in pairs]), True)
    assert (kind, line) == ("lossless-fails", "NOT lossless: DFlash differs from AR on 2 of 6 requests (at c=1, 2) "
                            "(greedy).")  # where it differed (review 2026-11-29, p08)
    kind, line = _lossless(lossless_checks(points, reqs), True)  # no probe: a plain difference, said so
    assert line == "NOT lossless: DFlash differs from AR on 2 of 6 requests (at c=1, 2), 2 with no margin read (greedy)."
    same = pd.DataFrame([record(m, r, AR_IDS) for m in ("ar", "dflash") for r in "ab"])
    assert _lossless(lossless_checks(points_of(), same, (), {"dflash": "rejection_sample_method=synthetic"}),
                     True)[1] == ("NOT lossless: DFlash identical to AR on 2/2 requests, DFlash's server ran "
                                  "rejection_sample_method=synthetic, not lossless by design (greedy).")  # fmt: skip
