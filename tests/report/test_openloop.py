"""Open-loop points (sweep --request-rate) in analysis, the report and compare: kept out of every closed-loop
reading, shown in their own table against AR at the same rate; goodput and a busy client in the report."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dflashbench.gate import compare
from dflashbench.gate.compare_output import format_text
from dflashbench.measure import analysis, repeats, slo
from dflashbench.report import load_shape, model, render, write_report
from dflashbench.run.store import load_run

from .factory import point, rate_point, request, write_run

BUSY = {"processes": 1, "busy_share_max": 0.95, "loop_lag_ms_p99": 1.0}


def mixed_points(run_id="run"):
    """AR and DFlash at c=1 and c=2 (closed loop), and at 5 and 10 requests/s (open loop, no cap: concurrency 0)."""
    pts = []
    for method, gain in (("ar", 1.0), ("dflash", 3.0)):
        for c in (1, 2):
            pts.append(point(method, c, 50.0 * gain / c, 50.0 * gain * c, tpot_s_mean=c / (50 * gain), run_id=run_id,
                             extra={"goodput": {"slo": {"ttft_s": 2.0}, "good": 8, "requests": 8, "good_share": 1.0,
                                                "goodput_req_per_s": 1.0 * gain}}))  # fmt: skip
        for rate in (5.0, 10.0):
            pts.append(rate_point(method, rate, 20.0 * gain, 100.0 * gain * rate / 5, run_id=run_id,
                                  goodput_req_per_s=rate * (0.5 if method == "ar" else 0.9),
                                  ttft_s_p50=0.1, ttft_s_p99=0.3, tpot_s_p50=0.02 / gain,
                                  client=BUSY if method == "dflash" and rate == 10 else None))  # fmt: skip
    return pts


def frame(points) -> pd.DataFrame:
    return pd.DataFrame([p.to_dict() for p in points])


def test_open_loop_mask_reads_the_load_not_the_concurrency():
    df = frame([point("ar", 1, 10.0, 10.0, extra={"goodput": {"goodput_req_per_s": 1.0}, "client": BUSY}),
                point("ar", 0, 10.0, 10.0), rate_point("ar", 4.0, 10.0, 10.0), rate_point("ar", 4.0, 10.0, 10.0, cap=8)])
    assert list(analysis.open_loop_mask(df)) == [False, False, True, True]
    assert len(analysis.closed_loop(df)) == 2
    assert [analysis.load_label(c, e) for c, e in zip(df["concurrency"], df["extra"], strict=True)] == \
        ["1", "0", "4/s", "4/s ≤8"]
    assert not analysis.open_loop_mask(pd.DataFrame([{"concurrency": 1}])).any()  # no extra column at all


def test_rate_points_stay_out_of_every_closed_loop_reading():
    df = frame(mixed_points())
    assert len(analysis.usable_points(df)) == 8  # the two rates at concurrency 0 are two points, not one re-measured
    matched = analysis.matched_concurrency_speedups(df)
    assert sorted(matched["concurrency"]) == [1, 2]  # never "matched at c=0"
    single = analysis.single_stream_speedups(df)
    assert single["speedup"].tolist() == pytest.approx([3.0])
    inter = analysis.matched_interactivity_speedups(df)
    assert set(inter["per_user_tok_per_s"]) == {150.0, 75.0}  # DFlash's closed-loop frontier only


def test_open_loop_speedups_pair_methods_at_the_same_rate():
    table = analysis.open_loop_speedups(frame(mixed_points())).set_index(["method", "request_rate"])
    assert list(table.index) == [("ar", 5.0), ("dflash", 5.0), ("ar", 10.0), ("dflash", 10.0)]
    assert table.loc[("dflash", 10.0), "throughput_speedup"] == pytest.approx(3.0)
    assert table.loc[("dflash", 10.0), "goodput_speedup"] == pytest.approx(0.9 / 0.5)
    assert table.loc[("dflash", 5.0), "achieved_rate_per_s"] == pytest.approx(4.9)
    assert table.loc[("dflash", 5.0), "slo"] == "ttft_s ≤ 2"
    assert pd.isna(table.loc[("ar", 5.0), "goodput_speedup"])  # AR is the baseline, not a subject


def test_goodput_ratio_needs_the_same_slo():
    pts = [rate_point("ar", 5.0, 10.0, 10.0, goodput_req_per_s=2.0, slo={"ttft_s": 1.0}),
           rate_point("dflash", 5.0, 30.0, 30.0, goodput_req_per_s=4.0, slo={"ttft_s": 2.0})]
    row = analysis.open_loop_speedups(frame(pts)).iloc[1]
    assert row["throughput_speedup"] == pytest.approx(3.0) and pd.isna(row["goodput_speedup"])


def test_report_has_an_open_loop_section_goodput_and_a_client_warning(tmp_path):
    reqs = [request(m, 1, i, run_id="run") for m in ("ar", "dflash") for i in range(3)]
    run = write_run(tmp_path, mixed_points(), reqs, manifest={"gpu": {"gpu": "no NVIDIA GPU", "gpu_count": 0}})
    report = model.build([load_run(run)], with_figures=False)
    sections = {s.id: s for s in report.sections}
    table = sections["openloop"].tables[0]
    assert table.title == "Open-loop points"
    cols = table.columns
    rows = {(r[cols.index("method")], r[cols.index("target rate")]): r for r in table.rows}
    assert rows[("DFlash", "10/s")][cols.index("goodput vs AR")] == "1.80×"
    assert rows[("DFlash", "10/s")][cols.index("tput vs AR")] == "3.00×"
    assert rows[("AR", "5/s")][cols.index("achieved rate")] == "4.90/s"
    assert "ttft_s ≤ 2" in table.caption and "max in flight" not in cols  # one value: folded into the caption
    # the verdict and the SLO reading never see a rate point; the verdict reads the rate points on their own
    assert all("c=0" not in line for line in report.verdict.lines)
    assert sections["openloop"].lines == ["DFlash vs AR at the same arrival rate: goodput 1.80× at 5/s, 1.80× at 10/s "
                                          "(SLO ttft_s ≤ 2) · throughput 3.00× at 5/s, 3.00× at 10/s"]  # fmt: skip
    slo_rows = sections["slo"].tables[0].rows
    assert all(r[0] != "0" for r in slo_rows)
    points = sections["latency"].tables[0]
    loads = [r[points.columns.index("conc. or rate")] for r in points.rows]
    assert sorted(set(loads)) == ["1", "10/s", "2", "5/s"]
    assert "goodput req/s" in points.columns and "ttft_s ≤ 2" in points.caption
    assert [w for w in report.warnings if w.startswith("Client overhead at 1 point(s) (DFlash synthetic 10/s)")]
    md = render.render_markdown(report)
    assert "- DFlash vs AR at the same arrival rate: goodput 1.80×" in md and "### Open-loop points" in md and "| DFlash | 10/s | 9.80/s |" in md.replace("all | ", "")


def test_a_rate_point_more_than_five_percent_short_of_its_target_is_flagged(tmp_path):
    """Issue #65: the achieved rate beside the target, flagged where the point did not carry the traffic asked."""
    pts = mixed_points()
    short = next(p for p in pts if p.method == "dflash" and p.extra.get("load", {}).get("request_rate") == 10.0)
    short.extra["load"]["achieved_rate_per_s"] = 9.4  # 94 % of 10/s
    run = write_run(tmp_path, pts, [request("ar", 1, 0, run_id="run")])
    table = {s.id: s for s in model.build([load_run(run)], with_figures=False).sections}["openloop"].tables[0]
    cols = table.columns
    achieved = {(r[cols.index("method")], r[cols.index("target rate")]): r[cols.index("achieved rate")] for r in table.rows}
    assert achieved[("DFlash", "10/s")] == "9.40/s ⚠ not kept" and achieved[("AR", "10/s")] == "9.80/s"
    assert "more than 5% short of the target" in table.caption


def test_a_closed_loop_run_has_no_open_loop_section(sample_run):
    report = model.build([load_run(sample_run)], with_figures=False)
    assert "openloop" not in {s.id for s in report.sections}
    assert load_shape.client_findings(load_run(sample_run).points) == ([], [])


def test_compare_aligns_rate_points_by_rate(tmp_path):
    base = frame(mixed_points())
    new = frame([p for p in mixed_points() if not (p.method == "dflash" and p.concurrency == 0
                                                    and p.extra["load"]["request_rate"] == 10.0)])  # fmt: skip
    result = compare.compare_points(base, new, compare.default_gates())
    assert result.only_in_base == [("reference", "dflash", "synthetic", "all", "10/s")]
    assert result.exit_code == 1 and result.common == 7
    assert "10/s" in format_text(result)


def test_slo_reading_ignores_rate_points(tmp_path):
    reqs = [request("ar", 1, i, run_id="run") for i in range(3)]
    run = write_run(tmp_path, mixed_points(), reqs)
    report = model.build([load_run(run)], with_figures=False, slo_text="ttft_p99=2s")
    assert slo.parse_slo("ttft_p99=2s")[0].limit_s == 2.0
    table = {s.id: s for s in report.sections}["slo"].tables[0]
    assert all("/s" not in cell for row in table.rows for cell in row[:4])


@pytest.mark.slow
def test_real_open_loop_run_reports_its_rate_points(tmp_path):
    """A short sweep of the reference server with one concurrency point and one rate point per method."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "dflashbench", "sweep", "--suite", "demo", "--method", "ar,dflash",
           "--concurrency", "1", "--request-rate", "20", "--num-prompts", "4", "--requests-per-stream", "1",
           "--goodput", "ttft_s=2,tpot_s=0.05", "--no-report", "-o", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = load_run(run_dir)
    assert analysis.open_loop_mask(run.points).sum() > 0
    assert set(analysis.matched_concurrency_speedups(run.points)["concurrency"]) == {1}
    out = write_report([run_dir], tmp_path / "r.md")
    text = out.read_text()
    assert "### Open-loop points" in text and "| DFlash | 20/s |" in text.replace("all | ", "")
    assert "at c=0" not in text and "c=0:" not in text


def test_repeated_rate_points_show_goodput_averaged_over_their_repeats(tmp_path):
    """The aggregated row keeps the first repeat's extra; the table's goodput is the mean over all repeats."""
    pts = [rate_point(m, 5.0, 20.0, 100.0 * (1 + r), goodput_req_per_s=g * (1 + r), repeat=r,
                      point_id=f"reference:{m}:synthetic:r5.0/r{r}")
           for r in range(3) for m, g in (("ar", 1.0), ("dflash", 3.0))]  # fmt: skip
    run = load_run(write_run(tmp_path, pts))
    assert set(run.points["n_repeats"]) == {3}
    table = analysis.open_loop_speedups(repeats.with_repeat_goodput(run.points, run.repeat_points))
    by_method = table.set_index("method")
    assert by_method.loc["ar", "goodput_req_per_s"] == pytest.approx(2.0)  # mean of 1, 2, 3, not the first repeat's 1
    assert by_method.loc["dflash", "goodput_req_per_s"] == pytest.approx(6.0)
    assert by_method.loc["dflash", "throughput_tok_per_s_per_gpu"] == pytest.approx(200.0)


def test_requests_of_rate_points_stay_out_of_the_closed_loop_readings():
    raw = frame([point("ar", 1, 10.0, 10.0, point_id="p-c1"), rate_point("ar", 5.0, 10.0, 10.0, point_id="p-r5")])
    reqs = pd.DataFrame({"run_id": ["run"] * 3, "point_id": ["p-c1", "p-r5", "p-c1"], "request_id": ["a", "b", "c"]})
    assert list(analysis.closed_loop_requests(raw, reqs)["request_id"]) == ["a", "c"]


def test_a_lagging_loop_in_an_idle_client_is_a_note_on_timing_noise_not_a_warning(tmp_path):
    """The embedded default on 2 shared cores: the client's loop lags behind a ~1 ms ITL while the client is
    5% busy. That is a CPU shared with the server (scheduling noise), said as a note; more client processes
    would not help, so it is no warning."""
    idle = {"processes": 1, "busy_share_max": 0.05, "loop_lag_ms_p99": 3.2}
    rows = [point("dflash", 1, 700.0, 700.0, extra={"client": idle}, itl_s_p50=0.0013)]
    warned, noted = load_shape.client_findings(frame(rows))
    assert warned == []
    assert noted and noted[0].startswith("Timing noise at 1 point(s) (DFlash synthetic c=1): ")
    assert "only 5% busy: the CPU is shared" in noted[0]

