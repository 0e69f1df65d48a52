"""The verdict's words: hardware, the per-device unit of a run with no GPU, short model names."""

import dataclasses
import re

import pandas as pd

from dflashbench.report import summary, wording, write_report

from .conftest import sample_points
from .factory import write_run


def test_short_model_names():
    assert summary.short_model("Qwen/Qwen3-8B") == "Qwen3-8B"
    assert summary.short_model("/models/gpt-oss-120b/") == "gpt-oss-120b"
    assert summary.short_model("dflashbench/embedded/target") == "embedded/target"


def test_hardware_in_words():
    pts = pd.DataFrame({"num_gpus": [0, 0], "model": ["dflashbench/embedded/target"] * 2})
    cpu = summary.hardware_words([{"gpu": {"gpu": "no NVIDIA GPU", "gpu_count": 0}}], pts)
    assert cpu == "1 CPU device (no NVIDIA GPU), tiny embedded model: not representative of GPU serving"
    gpu = summary.hardware_words([{"gpu": {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8}}],
                                 pd.DataFrame({"num_gpus": [8], "model": ["Qwen/Qwen3-8B"]}))  # fmt: skip
    assert gpu == "8 × NVIDIA H100 80GB HBM3"
    assert summary.device_unit(pts) == "device"


def test_measured_on_names_the_memory_plan_the_run_was_launched_on(tmp_path):
    """The manifest's memory_plan (dflashbench.plan.memory.MemoryPlan.record) shows in the "Measured on" line."""
    from dflashbench.plan.gpus import parse_gpu
    from dflashbench.plan.pairing import resolve
    from dflashbench.plan.suite_overrides import apply_overrides
    from dflashbench.plan.suites import load_suite

    _, pair = resolve(apply_overrides(load_suite("default"), backend="sglang", model="gpt-oss-120b"),
                      gpus=parse_gpu("h100"))  # fmt: skip
    manifest = {"gpu": {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 4}, "memory_plan": pair.memory.record()}
    words = summary.hardware_words([manifest], pd.DataFrame({"num_gpus": [4], "model": ["openai/gpt-oss-120b"]}))
    assert words == (f"4 × NVIDIA H100 80GB HBM3; sglang tp 4 on H100: KV cache for {pair.memory.capacity:,} requests "
                     "of 6,144 tokens in every method's server (planned)")
    run = write_run(tmp_path, sample_points("gpu"), run_id="gpu", manifest=manifest)
    assert "KV cache for" in write_report([run], tmp_path / "gpu.html").read_text()
    # the engines' own reports read at launch (dflashbench.run.capacity) say the real capacity, the plan's beside it
    real = {**manifest, "capacity": {"common": 131, "first": "dflash", "caps": {"ar": 1234}}}
    words = summary.hardware_words([real], pd.DataFrame({"num_gpus": [4], "model": ["openai/gpt-oss-120b"]}))
    assert words.endswith(f"sglang tp 4 on H100: KV cache for 131 requests of 6,144 tokens in every method's server, "
                          f"as the engine reported it at launch (dflash first, planned {pair.memory.capacity:,})")
    unequal = {**manifest, "capacity": {"common": 131, "first": "dflash", "unequal": {"ar": 120}}}
    words = summary.hardware_words([unequal], pd.DataFrame({"num_gpus": [4], "model": ["openai/gpt-oss-120b"]}))
    assert words.endswith("; but ar held 120 (more than 5 % less)")


def test_a_run_without_gpu_never_says_per_gpu(tmp_path):
    points = [dataclasses.replace(p, num_gpus=0) for p in sample_points("cpu")]
    run = write_run(tmp_path, points, run_id="cpu", manifest={"gpu": {"gpu": "no NVIDIA GPU", "gpu_count": 0}})
    html = write_report([run], tmp_path / "cpu.html").read_text()
    assert not re.search(r"per GPU|/GPU", html), re.findall(r".{60}(?:per GPU|/GPU).{20}", html)[:3]
    assert "throughput/device" in html and "1 CPU device (no NVIDIA GPU)" in html


def test_lossless_check_by_token_counts_only_for_greedy_runs(tmp_path):
    from dflashbench.report.model import build
    from dflashbench.run.store import load_run

    from .conftest import sample_requests

    points = sample_points("g")
    greedy = write_run(tmp_path, points, sample_requests("g"), run_id="g")
    lines = build([load_run(greedy)], with_figures=False).verdict.lossless
    # no stored text: equal token counts per request stand in, and say they are not proof
    assert lines == ["DFlash: output token count equal to AR's on 24/24 requests (no stored text to compare; equal "
                     "counts are necessary, not sufficient)"]  # fmt: skip
    sampled = write_run(tmp_path, sample_points("s"), sample_requests("s"), run_id="s",
                        manifest={"suite_config": {"temperature": 0.7}})  # fmt: skip
    assert build([load_run(sampled)], with_figures=False).verdict.lossless == []


def test_verdict_speedups_carry_their_paired_interval_over_repeats(tmp_path):
    """Three repeat rounds of AR and DFlash at c=1 and c=2: the verdict's single-stream and matched-concurrency
    speedups show the 95% interval of the per-round ratios (t on log ratios), and how many rounds it rests on."""
    from dflashbench.measure import stats
    from dflashbench.report.model import build
    from dflashbench.run.store import load_run

    from .factory import point

    tpot_ms = {"ar": (10.0, 11.0, 10.5), "dflash": (3.0, 4.0, 3.2)}  # per round, at c=1 (c=2: twice that)
    points = [point(m, c, 1000 / (c * tpot_ms[m][r]), 1000 / tpot_ms[m][r], tpot_s_mean=c * tpot_ms[m][r] / 1000,
                    repeat=r, point_id=f"reference-{m}-synthetic-c{c}/r{r}")
              for r in range(3) for m in ("ar", "dflash") for c in (1, 2)]  # fmt: skip
    run = write_run(tmp_path, points)
    line = build([load_run(run)], with_figures=False).verdict.lines[0]
    ratios = [a / d for a, d in zip(tpot_ms["ar"], tpot_ms["dflash"], strict=True)]
    ci = stats.ratio_interval(ratios)
    mean = (sum(tpot_ms["ar"]) / 3) / (sum(tpot_ms["dflash"]) / 3)
    assert f"single-stream {mean:.2f}× [{ci.lo:.2f}–{ci.hi:.2f}] clearly faster (mean TPOT at c=1)" in line, line
    assert ci.lo < mean < ci.hi
    # one c=1 figure in the verdict (the single-stream one); past it, matched concurrency with its interval
    assert re.search(r"matched concurrency \d+\.\d\d× \[\d+\.\d\d–\d+\.\d\d\] clearly faster at c=2", line), line
    # what the interval covers, where it is read: the repeats hold the drift between rounds
    assert line.endswith("intervals: paired repeats (3 rounds): the drift between rounds included"), line
    assert summary.INTERVAL_DEFINITION in build([load_run(run)], with_figures=False).verdict.definitions


def test_without_repeats_the_interval_comes_from_the_requests(tmp_path):
    """No repeats: each speedup gets a bootstrap interval over the point's own requests, paired by prompt; it
    brackets the figure, and one that holds 1.0 reads "no clear difference"."""
    import random

    from dflashbench.report.model import build
    from dflashbench.run.store import load_run

    from .factory import point, request

    rng = random.Random(7)
    tpot_s = {(m, i): base * rng.uniform(0.7, 1.3) for m, base in (("ar", 0.010), ("dflash", 0.004), ("eagle3", 0.0099))
              for i in range(24)}  # fmt: skip  (EAGLE-3 within noise of AR)
    requests = [request(m, 1, i, tpot_s=tpot_s[m, i]) for m in ("ar", "dflash", "eagle3") for i in range(24)]
    mean_tpot = {m: sum(tpot_s[m, i] for i in range(24)) / 24 for m in ("ar", "dflash", "eagle3")}
    points = [point(m, 1, 1 / mean_tpot[m], 1 / mean_tpot[m], tpot_s_mean=mean_tpot[m]) for m in mean_tpot]
    verdict = build([load_run(write_run(tmp_path, points, requests))], with_figures=False).verdict
    dflash = next(m for m in verdict.methods if m.label == "DFlash vs AR")
    eagle3 = next(m for m in verdict.methods if m.label == "EAGLE-3 vs AR")
    assert dflash.single_ci[0] < dflash.single_x < dflash.single_ci[1] and dflash.single_ci[0] > 1.0
    assert eagle3.single_ci[0] < 1.0 < eagle3.single_ci[1]
    line = next(ln for ln in verdict.lines if ln.startswith("EAGLE-3 vs AR"))
    assert "not distinguishable" in line and "repeats" not in line
    assert line.endswith("intervals: requests only: drift not measured"), line  # a run without the speed probe
    (answer,) = verdict.answer
    assert answer.startswith("Serve DFlash here at c=1") and "EAGLE-3 vs AR: not distinguishable at c=1" in answer
    assert summary.INTERVAL_DEFINITION in verdict.definitions
    # DFlash against EAGLE-3, the paper's own comparison, has its own line with its interval
    assert any(h.startswith("DFlash vs EAGLE-3: single-stream ") and "[" in h for h in verdict.head_to_head)


def test_no_interval_where_the_requests_do_not_reproduce_the_figure(sample_run):
    from dflashbench.report.model import build
    from dflashbench.run.store import load_run

    # sample_run's requests give 3.00x at every concurrency, its points 2.35x at c=2: not that figure's sample,
    # so no interval, the reason said where the figure is, and nothing decided on it
    line = build([load_run(sample_run)], with_figures=False).verdict.lines[0]
    assert ("2.35× (no interval: the figure rests on part of the point's requests, so their interval is not its own "
            "(the requests give 3.00×); decides nothing) at c=2") in line, line


def test_no_slo_line_where_ar_was_not_run():
    from dflashbench.measure import slo

    within = pd.DataFrame([{"backend": "vllm", "model": "m", "workload": "w", "method": m, "ratio": None,
                            "note": "AR meets the SLO at no measured point: no ratio"} for m in ("eagle3", "dflash")])
    assert wording.slo_lines(within, slo.parse_slo(None)) == []
    with_ar = pd.concat([within, pd.DataFrame([{"backend": "vllm", "model": "m", "workload": "w", "method": "ar"}])])
    (line,) = wording.slo_lines(with_ar, slo.parse_slo(None))
    assert line.startswith("Within the SLO (") and "DFlash: AR meets the SLO at no measured point" in line
