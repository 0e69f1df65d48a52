import math

import pandas as pd
import pytest
from report.factory import point

from dflashbench.measure import analysis
from dflashbench.plan.published import measured_vs_published


def frame(*points) -> pd.DataFrame:
    return pd.DataFrame([p.to_dict() for p in points])


def xy(front: pd.DataFrame) -> list[tuple[float, float]]:
    return list(zip(front[analysis.INTERACTIVITY], front[analysis.THROUGHPUT], strict=True))


# --- frontier ---------------------------------------------------------------------------------------


def test_frontier_drops_dominated_and_sorts_non_monotone_points():
    # Concurrency order is not frontier order: c=4 is beaten by c=2 on both axes, c=16 ties c=8 on x
    # but is lower, c=32 is an exact duplicate of c=8.
    pts = frame(
        point("dflash", 1, 100, 50),
        point("dflash", 2, 80, 120),
        point("dflash", 4, 60, 110),
        point("dflash", 8, 50, 200),
        point("dflash", 16, 50, 150),
        point("dflash", 32, 50, 200),
    )
    front = analysis.pareto_frontier(pts)
    assert xy(front) == [(50, 200), (80, 120), (100, 50)]
    assert list(front["concurrency"]) == [8, 2, 1]


def test_frontier_equal_y_keeps_only_the_faster_point():
    front = analysis.pareto_frontier(frame(point("ar", 1, 30, 10), point("ar", 2, 20, 10)))
    assert xy(front) == [(30, 10)]


def test_frontier_ignores_unmeasured_points():
    pts = frame(point("ar", 1, 30, 10), point("ar", 2, None, 40), point("ar", 4, 10, None))
    assert xy(analysis.pareto_frontier(pts)) == [(30, 10)]


# --- interpolation ----------------------------------------------------------------------------------


def test_interpolation_is_exact_on_a_power_law():
    # Linear in log-log space means a power law through the frontier points is reproduced exactly.
    law = lambda x: 5000.0 * x**-1.3  # noqa: E731
    front = analysis.pareto_frontier(
        frame(*(point("dflash", c, x, law(x)) for c, x in enumerate((10, 40, 90), 1)))
    )
    for at in (10, 17.5, 40, 63.2, 90):
        assert analysis.interpolate_frontier(front, at).value == pytest.approx(law(at), rel=1e-12)


def test_interpolation_between_two_points_by_hand():
    front = analysis.pareto_frontier(frame(point("dflash", 8, 50, 200), point("dflash", 2, 80, 120)))
    k = math.log(120 / 200) / math.log(80 / 50)
    assert analysis.interpolate_frontier(front, 64).value == pytest.approx(200 * (64 / 50) ** k)
    assert 120 < analysis.interpolate_frontier(front, 64).value < 200


def test_interpolation_outside_the_measured_range_is_not_reached():
    front = analysis.pareto_frontier(frame(point("ar", 1, 30, 10), point("ar", 4, 20, 35)))
    above = analysis.interpolate_frontier(front, 30.5)
    below = analysis.interpolate_frontier(front, 19)
    assert (
        above.value is None and not above.reached and "not reached" in above.reason and "30" in above.reason
    )
    assert below.value is None and "not reached" in below.reason and "20" in below.reason
    assert analysis.interpolate_frontier(front.iloc[0:0], 25).reason == "no measured points"


# --- speedups ---------------------------------------------------------------------------------------


def test_single_stream_speedup_is_tpot_ratio_at_concurrency_1():
    pts = frame(
        point("ar", 1, 50, 50, tpot_s_mean=0.020, tpot_s_p50=0.019),
        point("dflash", 1, 200, 200, tpot_s_mean=0.005, tpot_s_p50=0.004),
        point("eagle3", 1, 100, 100, tpot_s_p50=0.0095),  # no mean: both sides fall back to the median
        point("dflash", 2, 150, 300, tpot_s_mean=0.001),  # not concurrency 1: ignored
    )
    table = analysis.single_stream_speedups(pts).set_index("method")
    assert table.loc["dflash", "speedup"] == pytest.approx(4.0)
    assert table.loc["dflash", "statistic"] == "mean"
    assert table.loc["eagle3", "speedup"] == pytest.approx(2.0)
    assert table.loc["eagle3", "statistic"] == "p50"
    assert "ar" not in table.index


def test_matched_concurrency_speedup_per_concurrency_and_category():
    pts = frame(
        point("ar", 1, 50, 50, category="math"),
        point("ar", 4, 40, 160, category="math"),
        point("dflash", 1, 150, 150, category="math"),
        point("dflash", 4, 100, 400, category="math"),
        point("dflash", 8, 80, 640, category="math"),  # no AR at 8: no row
        point("ar", 1, 50, 50, category="code"),
        point("dflash", 1, 100, 100, category="code"),
    )
    table = analysis.matched_concurrency_speedups(pts)
    got = {(r.category, r.concurrency): r.speedup for r in table.itertuples()}
    assert got == pytest.approx({("math", 1): 3.0, ("math", 4): 2.5, ("code", 1): 2.0})


def test_settings_are_not_mixed_across_backends():
    pts = frame(point("ar", 1, 50, 50, backend="vllm"), point("dflash", 1, 150, 150, backend="sglang"))
    assert analysis.matched_concurrency_speedups(pts).empty


def test_failed_points_are_left_out():
    pts = frame(point("ar", 1, 50, 50), point("dflash", 1, 150, 150, status="failed", failure_reason="died"))
    assert analysis.matched_concurrency_speedups(pts).empty


def test_matched_interactivity_when_ar_never_reaches_the_target():
    # AR: 20..30 tok/s/user; DFlash: 40..100. At DFlash's interactivity AR is never measured.
    pts = frame(
        point("ar", 1, 30, 10), point("ar", 8, 20, 60),
        point("dflash", 1, 100, 40), point("dflash", 8, 40, 240),
    )  # fmt: skip
    table = analysis.matched_interactivity_speedups(pts, targets=[25, 60])
    at25, at60 = table.iloc[0], table.iloc[1]
    assert at25.baseline_throughput_per_gpu == pytest.approx(analysis.interpolate_frontier(
        analysis.pareto_frontier(pts[pts.method == "ar"]), 25).value)  # fmt: skip
    assert at25.method_throughput_per_gpu is None or pd.isna(at25.method_throughput_per_gpu)
    assert pd.isna(at25.speedup) and "DFlash not reached" in at25.note
    assert pd.isna(at60.speedup) and "AR not reached" in at60.note and "30" in at60.note
    assert at60.method_throughput_per_gpu == pytest.approx(40 * (60 / 100) ** (math.log(6) / math.log(0.4)))


def test_matched_interactivity_inside_both_ranges_and_default_targets():
    pts = frame(
        point("ar", 1, 100, 100), point("ar", 4, 50, 300),
        point("dflash", 1, 200, 150), point("dflash", 4, 80, 900),
    )  # fmt: skip
    # Default targets: DFlash's own frontier points. At 80 tok/s/user AR is interpolated, at 200 not reached.
    table = analysis.matched_interactivity_speedups(pts)
    assert list(table["per_user_tok_per_s"]) == [80, 200]
    ar_at_80 = 300 * (80 / 50) ** (math.log(100 / 300) / math.log(100 / 50))
    assert table.iloc[0].speedup == pytest.approx(900 / ar_at_80)
    assert pd.isna(table.iloc[1].speedup)


# --- tau and published ------------------------------------------------------------------------------


def test_tau_is_pooled_over_verification_steps():
    pts = frame(
        point("dflash", 1, 100, 100, tau=4.0, output_tokens=400, accepted_per_pos_rate=(0.8, 0.4)),
        point("dflash", 4, 80, 300, tau=2.0, output_tokens=200, accepted_per_pos_rate=(0.6, 0.2)),
        point("ar", 1, 50, 50, tau=1.0),
    )
    table = analysis.tau_by_category(pts)
    assert list(table["method"]) == ["dflash"]
    row = table.iloc[0]
    assert row.tau == pytest.approx(3.0)  # 600 tokens / (100 + 100) steps
    assert (row.tau_min, row.tau_max) == (2.0, 4.0)
    assert row.accepted_per_pos_rate == pytest.approx((0.7, 0.3))


def test_tau_pooling_weights_by_steps_not_points():
    pts = frame(
        point("dflash", 1, tau=6.0, output_tokens=600), point("dflash", 2, tau=2.0, output_tokens=100)
    )
    assert analysis.tau_by_category(pts).iloc[0].tau == pytest.approx(700 / (100 + 50))


def test_measured_beside_published_with_ratio_and_average():
    pts = frame(
        point("ar", 1, 50, 50, tpot_s_mean=0.02, workload="gsm8k"),
        point("dflash", 1, 200, 200, tpot_s_mean=0.005, workload="gsm8k", tau=6.0),
        point("ar", 1, 50, 50, tpot_s_mean=0.02, workload="math500"),
        point("dflash", 1, 200, 200, tpot_s_mean=0.004, workload="math500"),
    )
    published = pd.DataFrame(
        [("paper", "Qwen3-8B", "transformers", "H200", task, "dflash", metric, value)
         for task, metric, value in [("GSM8K", "speedup_single_stream", 5.0), ("MATH-500", "speedup_single_stream", 6.0),
                                     ("AIME25", "speedup_single_stream", 5.6), ("Average", "speedup_single_stream", 5.5),
                                     ("GSM8K", "tau", 6.5)]],
        columns=["source", "model", "engine", "hardware", "task", "method", "metric", "value"],
    )  # fmt: skip
    table = measured_vs_published(pts, published).set_index(["task", "metric"])
    assert table.loc[("GSM8K", "speedup_single_stream"), "measured"] == pytest.approx(4.0)
    assert table.loc[("GSM8K", "speedup_single_stream"), "ratio"] == pytest.approx(0.8)
    assert table.loc[("MATH-500", "speedup_single_stream"), "measured"] == pytest.approx(5.0)
    assert pd.isna(table.loc[("AIME25", "speedup_single_stream"), "measured"])
    assert table.loc[("AIME25", "speedup_single_stream"), "note"] == "not measured in these runs"
    # AIME25 was not measured: a mean of GSM8K and MATH-500 is not the paper's 3-task average
    average = table.loc[("Average", "speedup_single_stream")]
    assert pd.isna(average["measured"]) and pd.isna(average["ratio"])
    assert average["note"] == "not shown: 2 of 3 tasks measured, and the published average is over all of them"
    assert table.loc[("GSM8K", "tau"), "ratio"] == pytest.approx(6.0 / 6.5)
    # a tiny model on the reference backend set against Qwen3-8B on transformers: the note names both
    assert table.loc[("GSM8K", "speedup_single_stream"), "note"] == (
        "different model: measured tiny, published Qwen3-8B; different engine: measured reference, published transformers")
    every = measured_vs_published(pts, published[published["task"] != "AIME25"]).set_index(["task", "metric"])
    assert every.loc[("Average", "speedup_single_stream"), "measured"] == pytest.approx(4.5)
    assert every.loc[("Average", "speedup_single_stream"), "measured_in"] == "mean of all 2 tasks"


def test_published_on_the_same_model_and_engine_has_no_note():
    pts = frame(point("ar", 1, 50, 50, tpot_s_mean=0.02, workload="gsm8k", model="/models/Qwen3-8B", backend="sglang"),
                point("dflash", 1, 200, 200, tpot_s_mean=0.005, workload="gsm8k", model="/models/Qwen3-8B",
                      backend="sglang"))  # fmt: skip
    published = pd.DataFrame([{**figure("GSM8K", "dflash", "speedup_single_stream", 5.0), "model": "Qwen/Qwen3-8B",
                               "engine": "SGLang"}])  # fmt: skip
    row = measured_vs_published(pts, published).iloc[0]
    assert row.measured == pytest.approx(4.0) and row.note is None


PUBLISHED = ["source", "model", "engine", "hardware", "task", "method", "metric", "value", "baseline", "bound",
             "workload", "concurrency", "interactivity_tok_per_s"]  # fmt: skip


def figure(task, method, metric, value, **extra):
    row = dict.fromkeys(PUBLISHED)
    row.update(source="NVIDIA", model="openai/gpt-oss-120b", engine="trtllm", hardware="8x B300", task=task,
               method=method, metric=metric, value=value, **extra)  # fmt: skip
    return row


def speed_bench_points(model="openai/gpt-oss-120b", backend="trtllm"):
    """AR reaches 100..600 tok/s/user, EAGLE-3 and DFlash more; SPEED-Bench coding category."""
    common = dict(workload="speed-bench/qualitative[coding]", category="coding", model=model, backend=backend)
    shapes = {"ar": (600, 100, 40), "eagle3": (900, 300, 800), "dflash": (1200, 400, 1600)}
    pts = []
    for method, (fast, slow, tput) in shapes.items():
        for c, per_user, thr in ((1, fast, tput / 20), (8, (fast * slow) ** 0.5, tput / 4), (64, slow, tput)):
            pts.append(point(method, c, per_user, thr, **common))
    return frame(*pts)


def test_published_matched_interactivity_band_and_other_baselines():
    pts = speed_bench_points()
    published = pd.DataFrame([
        figure("coding", "dflash", "speedup_matched_interactivity", 15.0, bound=">", baseline="ar",
               workload="speed-bench", interactivity_tok_per_s="500-600"),
        figure("coding", "dflash", "speedup_matched_interactivity", 1.5, bound="~", baseline="eagle3",
               workload="speed-bench", interactivity_tok_per_s="500-600"),
        figure("coding", "dflash", "speedup_matched_interactivity", 9.0, baseline="ar", workload="speed-bench",
               interactivity_tok_per_s="1500-1700"),
        figure("Coding", "dflash", "speedup_matched_concurrency", 2.6, baseline="ar", workload="speed-bench"),
    ])  # fmt: skip
    table = measured_vs_published(pts, published)
    vs_ar, vs_eagle, too_fast, by_conc = (table.iloc[i] for i in range(4))
    expected = analysis.matched_interactivity_speedups(pts, [550.0])
    assert vs_ar.measured == pytest.approx(expected.set_index("method").loc["dflash", "speedup"])
    assert vs_ar.bound == ">" and vs_ar.baseline == "ar" and "at 550 tok/s/user" in vs_ar.measured_in
    by_eagle = analysis.matched_interactivity_speedups(pts, [550.0], baseline="eagle3")
    assert vs_eagle.measured == pytest.approx(by_eagle.set_index("method").loc["dflash", "speedup"])
    assert vs_eagle.ratio == pytest.approx(vs_eagle.measured / 1.5)
    assert pd.isna(too_fast.measured) and too_fast.note.startswith("AR not reached")  # AR tops out at 600
    # no concurrency in the figure: the lowest measured one, and it says so
    assert by_conc.measured == pytest.approx(1200 / 600) and by_conc.measured_in.endswith("c=1")


def test_published_prefers_the_figures_own_model():
    pts = pd.concat([speed_bench_points(model="meta-llama/Llama-3.1-8B-Instruct"),
                     speed_bench_points(model="/models/gpt-oss-120b")])  # fmt: skip
    pts.loc[(pts.model == "/models/gpt-oss-120b") & (pts.method == "dflash") & (pts.concurrency == 1),
            analysis.INTERACTIVITY] = 1800  # fmt: skip
    published = pd.DataFrame([figure("Coding", "dflash", "speedup_matched_concurrency", 2.6, workload="speed-bench",
                                     concurrency=1)])  # fmt: skip
    row = measured_vs_published(pts, published).iloc[0]
    assert row.measured == pytest.approx(1800 / 600)
    assert "/models/gpt-oss-120b" in row.measured_in


def test_published_metric_not_measured_is_shown_as_such():
    published = pd.DataFrame([figure("coding", "dflash", "energy_ratio", 0.5)])
    row = measured_vs_published(speed_bench_points(), published).iloc[0]
    assert pd.isna(row.measured) and row.note == "a metric dflashbench does not measure"


def test_speedups_against_eagle3_baseline():
    pts = speed_bench_points()
    table = analysis.matched_concurrency_speedups(pts, baseline="eagle3")
    assert set(table["method"]) == {"dflash"}  # AR is never the subject
    assert table.set_index("concurrency").loc[1, "speedup"] == pytest.approx(1200 / 900)
