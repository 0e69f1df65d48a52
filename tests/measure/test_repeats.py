"""Repeats: the interval maths against hand-computed cases, paired speedup intervals, and the collapse of
repeat rows into one row per point (in memory and through a run directory)."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from dflashbench.measure import analysis, stats
from dflashbench.measure.repeats import (
    aggregate_repeats,
    base_point_id,
    paired_speedups,
    summary_lines,
)
from dflashbench.run.store import RunStore, load_run
from dflashbench.types import PointKey, PointSummary

T_2 = 4.302653  # t_{0.975, 2}, from any t-table


# -- the maths ------------------------------------------------------------------------------------------------
def test_t_interval_of_three_values_by_hand():
    found = stats.t_interval([1.0, 2.0, 3.0])
    # mean 2, sd sqrt(((-1)^2 + 0 + 1^2) / 2) = 1, half-width t_{0.975,2} * 1 / sqrt(3)
    assert found.mean == 2.0 and found.sd == pytest.approx(1.0) and found.n == 3
    assert found.lo == pytest.approx(2 - T_2 / math.sqrt(3)) and found.hi == pytest.approx(2 + T_2 / math.sqrt(3))
    assert (found.lo, found.hi) == pytest.approx((-0.484137, 4.484137), abs=1e-6)


def test_interval_needs_two_values_and_ignores_missing_ones():
    assert stats.t_interval([]) is None and stats.t_interval([None, float("nan")]) is None
    one = stats.t_interval([5.0, None])
    assert one.mean == 5.0 and one.n == 1 and one.sd is None and one.lo is None and one.hi is None
    assert stats.mean_sd([4.0, 6.0, float("inf"), "x"]) == (5.0, pytest.approx(math.sqrt(2)))


def test_t_quantiles_match_scipy_within_a_thousandth():
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in [*range(1, 61), 80, 100, 150, 200, 500, 10_000]:
        assert stats.t_quantile_975(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), abs=1e-3), df
    with pytest.raises(ValueError):
        stats.t_quantile_975(0)


def test_ratio_interval_is_a_t_interval_on_log_ratios():
    found = stats.ratio_interval([2.0, 2.4, 1.8])
    # logs 0.6931, 0.8755, 0.5878: mean 0.71880, sd 0.14555; exp(mean -+ 4.302653 * sd / sqrt(3))
    assert found.mean == pytest.approx(2.051971, rel=1e-6)  # the geometric mean
    assert (found.lo, found.hi) == pytest.approx((1.429383, 2.945736), rel=1e-5)
    assert found.sd == pytest.approx(0.145547, rel=1e-5) and found.n == 3
    assert stats.ratio_interval([2.0, -1.0, 0.0]).n == 1  # a non-positive ratio cannot be logged


def test_paired_ratios_use_rounds_both_sides_have():
    assert stats.paired_ratios({0: 10, 1: 20, 2: 30}, {0: 5, 1: 0, 3: 1}) == [2.0]


# -- synthetic points ---------------------------------------------------------------------------------------------
def point(method: str, c: int, repeat: int, *, tpot_ms: float, tput: float, status: str = "ok", repeats: int = 3,
          run_id: str = "run") -> dict:  # fmt: skip
    key = PointKey("reference", method, "synthetic", f"c{c}", repeat if repeats > 1 else None)
    p = PointSummary(
        run_id=run_id, backend="reference", method=method, model="m", draft=None, workload="synthetic",
        category="all", concurrency=c, num_gpus=1, num_requests=8, num_errors=0, duration_s=1.0,
        output_tokens=100, throughput_tok_per_s=tput, throughput_tok_per_s_per_gpu=tput,
        per_user_tok_per_s_mean=1000 / tpot_ms / c, per_user_tok_per_s_p50=1000 / tpot_ms, per_user_tok_per_s_p10=None,
        ttft_s_p50=0.01, ttft_s_p99=0.02, tpot_s_p50=tpot_ms / 1000, tpot_s_p99=None, itl_s_p50=None, itl_s_p99=None,
        e2e_s_p50=None, e2e_s_p99=None, tau=1.0 if method == "ar" else 3.0 + repeat, acceptance_rate=None,
        energy_j_per_tok=None, point_id=str(key), repeat=repeat, status=status,
        tpot_s_mean=tpot_ms / 1000, num_graded=4, num_correct=3 - repeat % 2,
    )  # fmt: skip
    return p.to_dict()


def test_point_keys_make_ids_and_read_them_back():
    """One str() for ids, one parser for stored rows (issue #47): every shape the grid makes comes back as it was."""
    assert str(PointKey("reference", "ar", "synthetic", "c1", 2)) == "reference:ar:synthetic:c1/r2"
    assert str(PointKey("reference", "ar", "synthetic", "c1")) == "reference:ar:synthetic:c1"  # as before repeats
    for pid in ("reference:ar:synthetic:c1", "standin:dflash:gsm8k:c64/r0", "vllm:eagle3:speed-bench/qualitative:r4.0",
                "vllm:ar:workloads:tazure-codex2.0/r3", "x:dflash:a:b:c2"):
        assert str(PointKey.parse(pid)) == pid
    key = PointKey.parse("standin:dflash:gsm8k:c64/r1")
    assert (key.backend, key.method, key.workload, key.load, key.round, key.streams) == \
        ("standin", "dflash", "gsm8k", "c64", 1, 64)  # fmt: skip
    assert PointKey.parse("vllm:ar:gsm8k:r2.0").streams is None and PointKey.parse("a:b:c") is None
    assert base_point_id("reference:ar:synthetic:c1/r2") == base_point_id("reference:ar:synthetic:c1")
    assert base_point_id("hand-made") == "hand-made" and base_point_id("hand-made/r3") == "hand-made"


def test_aggregation_gives_one_row_per_point_with_intervals():
    rows = [point(m, c, r, tpot_ms=10, tput=100 + 10 * r) for r in range(3) for m in ("ar", "dflash") for c in (1, 2)]
    agg = aggregate_repeats(pd.DataFrame(rows))
    assert len(agg) == 4 and list(agg["point_id"]) == [f"reference:{m}:synthetic:c{c}/r0" for m in ("ar", "dflash")
                                                       for c in (1, 2)]  # the first repeat represents the point
    row = agg.iloc[0]
    assert row["n_repeats"] == 3 and row["throughput_tok_per_s"] == pytest.approx(110)
    assert row["throughput_tok_per_s_sd"] == pytest.approx(10)
    assert (row["throughput_tok_per_s_ci_lo"], row["throughput_tok_per_s_ci_hi"]) == pytest.approx(
        (110 - T_2 * 10 / math.sqrt(3), 110 + T_2 * 10 / math.sqrt(3)))  # 85.16 .. 134.84
    dflash = agg[agg["method"] == "dflash"].iloc[0]
    assert dflash["tau"] == pytest.approx(4.0) and dflash["tau_ci_hi"] > 4.0 > dflash["tau_ci_lo"]
    assert row["tpot_s_p50_sd"] == 0 and row["tpot_s_p50_ci_lo"] == pytest.approx(0.010)  # no spread, no width
    # counts are totals over the repeats; graded counts stay the representative's (same prompts re-asked)
    assert row["num_requests"] == 24 and row["output_tokens"] == 300 and row["num_graded"] == 4
    assert pd.isna(row["ttft_s_p99_sd"]) is False and row["ttft_s_p99"] == pytest.approx(0.02)
    # every metric compare may gate carries the interval columns under these exact names
    for metric in ("throughput_tok_per_s", "per_user_tok_per_s_mean", "tau", "ttft_s_p99", "tpot_s_p50",
                   "throughput_tok_per_s_per_gpu", "ttft_s_p50", "energy_j_per_tok", "accuracy"):
        assert {f"{metric}_sd", f"{metric}_ci_lo", f"{metric}_ci_hi"} <= set(agg.columns), metric
    # and every analysis still sees one row per point
    assert len(analysis.usable_points(agg)) == 4
    assert analysis.single_stream_speedups(agg)["speedup"].tolist() == [pytest.approx(1.0)]


def test_a_failed_repeat_stays_visible_and_the_rest_are_aggregated():
    rows = [point("ar", 1, r, tpot_ms=10, tput=100 + r) for r in range(3)]
    rows[1] = {**rows[1], "status": "failed", "failure_reason": "server died"}
    agg = aggregate_repeats(pd.DataFrame(rows))
    assert list(agg["status"]) == ["failed", "ok"]  # the failed repeat first: the point itself is the last row
    ok = agg.iloc[-1]
    assert ok["n_repeats"] == 2 and ok["throughput_tok_per_s"] == pytest.approx(101)
    assert ok["repeat_point_ids"] == ["reference:ar:synthetic:c1/r0", "reference:ar:synthetic:c1/r2"]
    assert len(analysis.usable_points(agg)) == 1


def test_a_run_without_repeats_is_left_as_it_is():
    rows = pd.DataFrame([point(m, 1, 0, tpot_ms=10, tput=100, repeats=1) for m in ("ar", "dflash")])
    assert aggregate_repeats(rows) is rows


def test_paired_speedup_interval_cancels_drift_that_hits_both_methods():
    # the machine slows down 1x, 2x, 3x over the rounds; DFlash is exactly twice as fast as AR in every round
    rows = [point(m, 1, r, tpot_ms=(10 if m == "ar" else 5) * (r + 1), tput=100) for r in range(3) for m in ("ar", "dflash")]
    raw = pd.DataFrame(rows)
    table = paired_speedups(analysis.single_stream_speedups(aggregate_repeats(raw)), raw,
                            analysis.single_stream_speedups, (*analysis.SETTING, "method"))  # fmt: skip
    row = table.iloc[0]
    assert row["speedup"] == pytest.approx(2.0) and row["speedup_n_pairs"] == 3
    assert row["speedup_ci_lo"] == pytest.approx(2.0) and row["speedup_ci_hi"] == pytest.approx(2.0)
    # the per-point intervals, unpaired, are wide: the drift is in them
    agg = aggregate_repeats(raw)
    assert agg.iloc[0]["tpot_s_mean_ci_hi"] - agg.iloc[0]["tpot_s_mean_ci_lo"] > 0.04


def test_paired_speedup_interval_by_hand_and_matched_concurrency():
    ar_ms, dflash_ms = (10.0, 12.0, 9.0), (5.0, 5.0, 5.0)  # per-round ratios 2.0, 2.4, 1.8
    rows = [point("ar", 1, r, tpot_ms=ar_ms[r], tput=100) for r in range(3)]
    rows += [point("dflash", 1, r, tpot_ms=dflash_ms[r], tput=100) for r in range(3)]
    raw = pd.DataFrame(rows)
    single = paired_speedups(analysis.single_stream_speedups(aggregate_repeats(raw)), raw,
                             analysis.single_stream_speedups, (*analysis.SETTING, "method"))  # fmt: skip
    assert (single.iloc[0]["speedup_ci_lo"], single.iloc[0]["speedup_ci_hi"]) == pytest.approx((1.429383, 2.945736), rel=1e-5)
    matched = paired_speedups(analysis.matched_concurrency_speedups(aggregate_repeats(raw)), raw,
                              analysis.matched_concurrency_speedups, (*analysis.SETTING, "method", "concurrency"))  # fmt: skip
    assert (matched.iloc[0]["speedup_ci_lo"], matched.iloc[0]["speedup_ci_hi"]) == pytest.approx((1.429383, 2.945736), rel=1e-5)
    # a round where DFlash failed has no pair: two rounds remain
    raw2 = raw.copy()
    raw2.loc[(raw2["method"] == "dflash") & (raw2["repeat"] == 1), "status"] = "failed"
    again = paired_speedups(analysis.single_stream_speedups(aggregate_repeats(raw2)), raw2,
                            analysis.single_stream_speedups, (*analysis.SETTING, "method"))  # fmt: skip
    assert again.iloc[0]["speedup_n_pairs"] == 2
    lines = summary_lines(raw)  # the speedup is the ratio of the means (31/3 / 5); the interval is the paired one
    assert any("DFlash single-stream speedup over AR (synthetic): 2.07x, 95% CI [1.43, 2.95] over 3 paired rounds" in line
               for line in lines), lines  # fmt: skip


def test_load_run_collapses_repeats_and_keeps_the_rows(tmp_path):
    store = RunStore.create(tmp_path, {"status": "complete"}, run_id="run")
    with store:
        for r in range(3):
            for m in ("ar", "dflash"):
                store.append_point(PointSummary.from_dict(point(m, 1, r, tpot_ms=10 + r, tput=100 + r)))
    run = load_run(tmp_path / "run")
    assert len(run.repeat_points) == 6 and list(run.repeat_points["repeat"]) == [0, 0, 1, 1, 2, 2]
    assert len(run.points) == 2 and set(run.points["n_repeats"]) == {3}
    assert run.points.iloc[0]["throughput_tok_per_s"] == pytest.approx(101)


def test_compare_reads_one_row_per_point(tmp_path):
    from dflashbench.gate.compare import compare_runs

    for name, shift in (("base", 0), ("new", 1)):
        with RunStore.create(tmp_path, {"status": "complete"}, run_id=name) as store:
            for r in range(3):
                store.append_point(PointSummary.from_dict(point("ar", 1, r, tpot_ms=10, tput=100 + r + shift)))
    comparison = compare_runs(tmp_path / "base", tmp_path / "new", [])
    assert comparison.common == 1 and comparison.exit_code == 0
    row = next(r for r in comparison.rows if r.metric == "throughput_tok_per_s")
    assert (row.base, row.new) == (pytest.approx(101), pytest.approx(102))


def test_point_summary_round_trips_its_repeat():
    p = PointSummary.from_dict(point("ar", 1, 2, tpot_ms=10, tput=1))
    assert p.repeat == 2 and dataclasses.replace(p, repeat=0).repeat == 0


def test_report_draws_error_bars_and_speedup_intervals_only_for_repeated_runs(tmp_path):
    from report.factory import request

    from dflashbench.report import render_report

    ar_ms, dflash_ms = (10.0, 12.0, 9.0), (5.0, 5.0, 5.0)  # single-stream ratios 2.0, 2.4, 1.8 per round
    for name, repeats in (("repeated", 3), ("once", 1)):
        with RunStore.create(tmp_path, {"status": "complete"}, run_id=name) as store:
            for r in range(repeats):
                for m, ms in (("ar", ar_ms), ("dflash", dflash_ms)):
                    for c in (1, 2):
                        p = point(m, c, r, tpot_ms=ms[r] * c, tput=100 * c + 5 * r, repeats=repeats, run_id=name)
                        store.append_point(PointSummary.from_dict(p))
                        # the requests the round measured, paired with the other method's by prompt: intervals
                        # are read from these (measure/readings.py), one ratio per round
                        for i in range(4):
                            q = request(m, c, i, tpot_s=ms[r] * c / 1000, run_id=name)
                            store.append_request(dataclasses.replace(q, point_id=p["point_id"], repeat=r))
    html, _ = render_report([tmp_path / "repeated"])
    assert "Error bars: 95% t-intervals over 3 repeats of each point." in html
    # the hand-computed interval, decided on as it is, and what it covers
    assert "95% decision interval" in html and "[1.43×, 2.95×]" in html
    assert "paired repeats (3 rounds): the drift between rounds included" in html
    once, _ = render_report([tmp_path / "once"])
    assert "Error bars" not in once and "paired repeats" not in once


def test_three_rows_one_point():  # as many rows as a group key has parts: grouping must not compare by tuple
    agg = aggregate_repeats(pd.DataFrame([point("ar", 1, r, tpot_ms=10, tput=100 + r) for r in range(3)]))
    assert len(agg) == 1 and agg.iloc[0]["n_repeats"] == 3 and agg.iloc[0]["throughput_tok_per_s"] == pytest.approx(101)


def test_error_bars_stop_at_a_tenth_of_the_value_and_say_so():
    from matplotlib.figure import Figure

    from dflashbench.report.figures import draw_error_bars, error_bar_note

    rows = [point("ar", 1, r, tpot_ms=10, tput=t) for r, t in enumerate((10.0, 100.0, 190.0))]  # CI reaches < 0
    agg = aggregate_repeats(pd.DataFrame(rows))
    assert agg.iloc[0]["throughput_tok_per_s_per_gpu_ci_lo"] < 0
    ax = Figure().add_subplot()
    assert draw_error_bars(ax, agg, "k") == 1
    ax.set_yscale("log")
    assert ax.get_ylim()[0] >= 100 * 0.1 * 0.5  # the axis is not stretched toward zero
    assert "1 interval(s) reach below 10% of their point's value" in error_bar_note(agg)


def test_summary_lines_name_a_rate_point_by_its_rate_not_c0():
    rows = [dict(run_id="run", point_id=f"ref:ar:w:r20.0/r{k}", backend="ref", model="m", workload="w",
                 category="all", method="ar", concurrency=0, repeat=k, status="ok",
                 throughput_tok_per_s=100.0 + k, extra={"load": {"request_rate": 20.0}}) for k in range(3)]
    lines = summary_lines(pd.DataFrame(rows))
    assert any("ar w 20/s: throughput 101.0 tok/s over 3 repeat(s)" in line for line in lines), lines
    assert not any("c=0" in line for line in lines)
