"""Matched-interactivity readings on hand-computed frontiers: a ratio where the curves overlap, a bound with
the closing sweep where they do not, and category shares of mixed runs kept out of throughput figures."""

import math

import pandas as pd
import pytest

from dflashbench.measure import analysis, verdict


def front(*xyc) -> pd.DataFrame:
    df = pd.DataFrame([{analysis.INTERACTIVITY: x, analysis.THROUGHPUT: y, "concurrency": c} for x, y, c in xyc])
    return analysis.pareto_frontier(df)


AR = front((50.0, 400.0, 4), (100.0, 300.0, 2), (176.9, 170.0, 1))


def test_method_faster_everywhere_gives_a_lower_bound_and_the_closing_sweep():
    r = verdict.read_matched(AR, front((401.7, 1087.6, 4), (600.0, 700.0, 1)), "DFlash")
    assert r.kind == verdict.ABOVE and r.bound == "≥"
    assert r.ratio == pytest.approx(1087.6 / 170.0)  # its slowest point against AR's fastest: 6.40
    assert r.at_tok_per_s_user == pytest.approx(176.9)
    assert r.beats_every_point  # 1,087.6 tok/s is above AR's best, 400
    assert r.text.startswith("DFlash ≥ 6.40× AR's throughput/GPU at AR's best interactivity (176.9 tok/s/user)")
    # issue #53: only the slowest point was checked (its c=1 point, 700 tok/s, is above AR's best too here, but a
    # faster point with less throughput need not be): the bound names the one point that beats every AR point
    assert "this DFlash point beats every AR point on both axes" in r.text and "at every measured point" not in r.text
    assert r.next_sweep == ("curves do not overlap: sweep DFlash to higher concurrency (beyond c=4) until its "
                            "per-user rate falls to 176.9 tok/s/user or below, for a matched ratio")  # fmt: skip


def test_faster_but_lower_throughput_is_a_bound_without_dominance():
    r = verdict.read_matched(AR, front((300.0, 350.0, 4), (500.0, 200.0, 1)), "EAGLE-3", unit="device")
    assert r.kind == verdict.ABOVE and r.ratio == pytest.approx(350.0 / 170.0)
    assert not r.beats_every_point and "both axes" not in r.text
    assert "throughput/device" in r.text


def test_method_slower_everywhere_gives_an_upper_bound():
    r = verdict.read_matched(front((50.0, 400.0, 4), (100.0, 200.0, 1)), front((10.0, 50.0, 4), (20.0, 30.0, 1)), "X")
    assert r.kind == verdict.BELOW and r.bound == "≤"
    assert r.ratio == pytest.approx(30.0 / 400.0)
    assert r.next_sweep.startswith("curves do not overlap: sweep AR to higher concurrency (beyond c=4) until its "
                                   "per-user rate falls to 20.0 tok/s/user")  # fmt: skip


def test_overlap_reads_the_best_and_worst_ratio_at_breakpoints():
    ar = front((10.0, 100.0, 8), (100.0, 10.0, 1))  # y = 1000 / x
    m = front((20.0, 400.0, 8), (200.0, 100.0, 1))
    r = verdict.read_matched(ar, m, "DFlash")
    # method at x=100 by log-log interpolation: 400 * 5 ** (log(100/400) / log(10))
    y100 = 400.0 * 5 ** (math.log(0.25) / math.log(10))
    assert r.kind == verdict.OVERLAP and r.bound == ""
    assert r.ratio == pytest.approx(y100 / 10.0) and r.at_tok_per_s_user == pytest.approx(100.0)
    assert r.ratio_min == pytest.approx(400.0 / 50.0)  # at x=20, AR gives 1000/20
    assert r.overlap == (20.0, 100.0)
    assert "above 100.0 tok/s/user only DFlash was measured" in r.text


def test_no_data():
    r = verdict.read_matched(AR.iloc[0:0], front((1.0, 1.0, 1)), "DFlash")
    assert r.kind == verdict.NO_DATA and r.ratio is None and "AR has no point" in r.text


def test_category_rows_of_a_mixed_point_are_shares():
    pts = pd.DataFrame([
        {"run_id": "r", "point_id": "p1", "category": "all", "num_requests": 32},
        {"run_id": "r", "point_id": "p1", "category": "code", "num_requests": 11},
        {"run_id": "r", "point_id": "p2", "category": "all", "num_requests": 10},
        {"run_id": "r", "point_id": "p2", "category": "code", "num_requests": 10},  # measured alone
        {"run_id": "r", "point_id": "p3", "category": "math", "num_requests": 5},  # no "all" row
    ])  # fmt: skip
    assert analysis.category_share_mask(pts).tolist() == [False, True, False, False, False]


def test_the_ratio_crosses_one_where_log_ratio_is_zero_between_breakpoints():
    x = verdict.crossings_of(((100.0, 0.8), (200.0, 1.2), (400.0, 1.5)))
    t = math.log(0.8) / (math.log(0.8) - math.log(1.2))
    assert x == pytest.approx((math.exp(math.log(100) + t * math.log(2)),))
    assert verdict.crossings_of(((100.0, 1.2), (200.0, 1.5))) == ()
    # the committed vLLM example's DFlash curve crosses once, where the verdict says
    r = verdict.read_matched(front((142.9, 519.2, 4), (196.8, 357.9, 2), (257.5, 237.8, 1)),
                             front((109.0, 360.4, 4), (198.9, 327.4, 2), (334.4, 287.9, 1)), "DFlash")  # fmt: skip
    assert r.kind == verdict.OVERLAP and len(r.crossings) == 1 and 142.9 < r.crossings[0] < 257.5
    assert r.text.startswith("DFlash gives 0.66× to 1.29× AR's throughput/GPU over 142.9–257.5 tok/s/user")


def test_choose_serves_what_users_wait_less_for_and_decides_among_several_by_the_same_rule():
    """docs/metrics.md, "The verdict's answer": a method is served at a load where its requests' time is clearly
    shorter (issue #65: one reading decides; the points' own throughput stands beside it, and the requests' tokens ÷
    their time would be the same reading mirrored); of several such, the one no other is clearly better than; AR
    where none is; nothing chosen where no reading has an interval."""
    from dflashbench.measure.readings import BETTER, SAME, UNDECIDED, WORSE

    assert verdict.outcome({"latency": BETTER, "throughput": SAME}) == BETTER
    assert verdict.outcome({"latency": SAME, "throughput": SAME}) == SAME  # faster decode alone is no gain
    assert verdict.outcome({"latency": BETTER, "throughput": WORSE}) == BETTER  # the throughput does not vote
    assert verdict.outcome({"latency": SAME, "throughput": BETTER}) == SAME
    assert verdict.outcome({"latency": WORSE}) == WORSE and verdict.outcome({}) == UNDECIDED
    out = {("eagle3", "ar"): {1: BETTER, 2: BETTER, 4: SAME, 8: UNDECIDED},
           ("dflash", "ar"): {1: BETTER, 2: SAME, 4: WORSE, 8: UNDECIDED},
           ("dflash", "eagle3"): {1: WORSE, 2: WORSE, 4: WORSE}}  # fmt: skip
    got = verdict.choose(out)
    assert got[1] == verdict.Choice(("eagle3",), BETTER)  # both better than AR: EAGLE-3 is better than DFlash
    assert got[2] == verdict.Choice(("eagle3",), BETTER)
    assert got[4] == verdict.Choice(("ar",), verdict.NO_GAIN)  # EAGLE-3 only as good as AR: not served on a gain
    assert got[8] == verdict.Choice((), UNDECIDED)  # no interval anywhere: nothing chosen
    tie = verdict.choose({("dflash", "ar"): {1: BETTER}, ("eagle3", "ar"): {1: BETTER}, ("dflash", "eagle3"): {1: SAME}})
    assert tie[1] == verdict.Choice(("eagle3", "dflash"), BETTER)  # the run cannot tell them apart
    # any set of methods: the rule names none of them
    many = {("ngram", "ar"): {1: BETTER}, ("mtp", "ar"): {1: BETTER}, ("dflash2", "ar"): {1: WORSE},
            ("ngram", "mtp"): {1: BETTER}}  # fmt: skip
    assert verdict.choose(many)[1] == verdict.Choice(("ngram",), BETTER)
    assert verdict.choose({("ngram", "ar"): {1: WORSE}, ("mtp", "ar"): {1: WORSE}})[1] == verdict.Choice(("ar",), WORSE)


def test_where_a_method_stops_paying_is_the_lowest_of_its_crossings_naming_which():
    rows = [{"figure": f, "concurrency": c, "value": v, "lo": v * 0.95, "hi": v * 1.05}
            for f, vals in (("per_user", (1.30, 1.01, 0.76)), ("throughput", (1.21, 0.91, 0.68)),
                            ("latency", (0.82, 1.10, 1.46))) for c, v in zip((1, 2, 4), vals, strict=True)]  # fmt: skip
    stop = verdict.stops_paying(rows)
    # the lowest of the crossings read with an interval; the points' own throughput crosses first, beside them
    assert stop.figure == "latency" and 1 < stop.at < 2 and stop.crossings["throughput"] < stop.at
    assert stop.crossings["per_user"] > 2 and 1 < stop.crossings["latency"] < 2
    never = [{**r, "value": 1 / r["value"] if r["figure"] == "latency" else r["value"] * 0.5} for r in rows]
    assert verdict.stops_paying([r for r in never if r["figure"] != "per_user"]) is None  # it never paid
