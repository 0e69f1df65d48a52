"""The verdict's words: hardware, the per-device unit of a run with no GPU, short model names."""

import dataclasses
import re

import pandas as pd

from dflashbench.measure import analysis
from dflashbench.report import summary, write_report

from .conftest import sample_points
from .factory import write_run


def test_short_model_names():
    assert summary.short_model("Qwen/Qwen3-8B") == "Qwen3-8B"
    assert summary.short_model("/models/gpt-oss-120b/") == "gpt-oss-120b"
    assert summary.short_model("dflashbench/embedded/target") == "embedded/target"


def test_hardware_in_words():
    pts = pd.DataFrame({"num_gpus": [0, 0], "model": ["dflashbench/embedded/target"] * 2})
    cpu = summary.hardware_words([{"gpu": {"gpu": "no NVIDIA GPU", "gpu_count": 0}}], pts)
    assert cpu == "a CPU, its cores not recorded (no NVIDIA GPU), tiny embedded model: not representative of GPU serving"
    cores = {"gpu": {"gpu": "no NVIDIA GPU", "gpu_count": 0}, "cpus": {"available": [0, 1], "engine": [0], "client": [1]}}
    assert summary.hardware_words([cores], pts).startswith("2 CPU cores (no NVIDIA GPU)")  # CPUs named as cores
    assert summary.cpu_words(cores) == "2 CPU cores (engine on 0, client on 1)"
    gpu = summary.hardware_words([{"gpu": {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8}}],
                                 pd.DataFrame({"num_gpus": [8], "model": ["Qwen/Qwen3-8B"]}))  # fmt: skip
    assert gpu == "8 × NVIDIA H100 80GB HBM3"
    assert analysis.device_unit(pts) == "device"


def test_measured_on_names_the_memory_plan_the_run_was_launched_on(tmp_path):
    """The manifest's memory_plan (dflashbench.plan.memory.MemoryPlan.record) shows in the "Measured on" line."""
    from dflashbench.plan.gpus import parse_gpu
    from dflashbench.plan.pairing import resolve
    from dflashbench.plan.suite_overrides import apply_overrides
    from dflashbench.plan.suites import load_suite

    _, pair = resolve(apply_overrides(load_suite("default"), backend="sglang", model="gpt-oss-120b"),
                      gpus=parse_gpu("8xh100"))  # fmt: skip
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
    assert "throughput/device" in html and "Measured on a CPU, its cores not recorded," in html


def test_lossless_check_by_token_counts_only_for_greedy_runs(tmp_path):
    from dflashbench.report.model import build
    from dflashbench.run.store import load_run

    from .conftest import sample_requests

    points = sample_points("g")
    greedy = write_run(tmp_path, points, sample_requests("g"), run_id="g")
    block = build([load_run(greedy)], with_figures=False).verdict
    # no stored text: equal token counts per request stand in, and say they are not proof
    assert [(c.method, c.equal, c.compared, c.by) for c in block.checks] == [("DFlash", 24, 24, "token count")]
    assert "Lossless: DFlash token counts equal to AR's (no stored text) on 24/24 requests (greedy; equal counts are " \
        "not proof)." in block.lines
    sampled = write_run(tmp_path, sample_points("s"), sample_requests("s"), run_id="s",
                        manifest={"suite_config": {"temperature": 0.7}})  # fmt: skip
    block = build([load_run(sampled)], with_figures=False).verdict
    assert block.checks == [] and "Lossless: not checked (sampled: outputs may differ)." in block.lines


def test_speedups_over_repeats_carry_the_per_round_ratios_interval(tmp_path):
    """Three repeat rounds of AR and DFlash at c=1 and c=2, their requests stored: each speedup is read on the
    prompts both ran in each round, and its interval is the t-interval of the per-round ratios, which holds the
    drift between rounds."""
    from dflashbench.measure import stats
    from dflashbench.report.model import build
    from dflashbench.run.store import load_run

    from .factory import point, request

    tpot_ms = {"ar": (10.0, 11.0, 10.5), "dflash": (3.0, 4.0, 3.2)}  # per round, at c=1 (c=2: twice that)
    points, requests = [], []
    for r in range(3):
        for m in ("ar", "dflash"):
            for c in (1, 2):
                pid = f"reference-{m}-synthetic-c{c}/r{r}"
                points.append(point(m, c, 1000 / (c * tpot_ms[m][r]), 1000 / tpot_ms[m][r], repeat=r, point_id=pid,
                                    tpot_s_mean=c * tpot_ms[m][r] / 1000))  # fmt: skip
                requests += [dataclasses.replace(request(m, c, i, tpot_s=c * tpot_ms[m][r] / 1000), point_id=pid,
                                                 repeat=r) for i in range(4)]  # fmt: skip
    report = build([load_run(write_run(tmp_path, points, requests))], with_figures=False)
    single = report.headline[0]
    row = dict(zip(single.columns, single.rows[0], strict=True))
    ratios = [a / d for a, d in zip(tpot_ms["ar"], tpot_ms["dflash"], strict=True)]
    ci = stats.ratio_interval(ratios)
    assert row["95% decision interval"] == f"[{ci.lo:.2f}×, {ci.hi:.2f}×]" and row["decided"] == "clearly faster"
    assert "paired repeats (3 rounds): the drift between rounds included" in single.caption
    assert "widened" not in report.verdict.brackets and "paired repeats (3 rounds)" in report.verdict.brackets


def test_without_repeats_the_interval_comes_from_the_common_prompts(tmp_path):
    """No repeats: each ratio gets a bootstrap interval over the prompts both methods ran, paired; one that holds
    1.0 decides nothing, and the answer says the run cannot tell that method from AR."""
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
    report = build([load_run(write_run(tmp_path, points, requests))], with_figures=False)
    table = report.headline[0]
    rows = {r[1]: dict(zip(table.columns, r, strict=True)) for r in table.rows}
    assert rows["DFlash"]["decided"] == "clearly faster" and rows["EAGLE-3"]["decided"] == "not distinguishable"
    assert rows["DFlash"]["prompts both ran"] == "24 of 24"
    (answer,) = report.verdict.answer
    assert answer.startswith("Serve DFlash at c=1 (requests ")
    assert "drift not measured" in report.verdict.brackets  # a run without the speed probe


def test_a_speedup_is_the_common_prompts_ratio_not_its_points(sample_run):
    """sample_run's points say 2.35× at c=2, its requests (the same prompts on both sides) 3.00×: the table reads
    the requests both methods ran, paired, and says how many."""
    from dflashbench.report.model import build
    from dflashbench.run.store import load_run

    table = build([load_run(sample_run)], with_figures=False).headline[1]
    row = next(dict(zip(table.columns, r, strict=True)) for r in table.rows if r[:3] == ["all", "DFlash", "2"])
    assert row["speedup"] == "3.00×" and row["prompts both ran"] == "6 of 6"


def test_no_slo_line_where_ar_was_not_run():
    from dflashbench.measure import slo
    from dflashbench.report import details

    within = pd.DataFrame([{"backend": "vllm", "model": "m", "workload": "w", "method": m, "ratio": None,
                            "note": "AR meets the SLO at no measured point: no ratio"} for m in ("eagle3", "dflash")])
    assert details.slo_lines(within, slo.parse_slo(None)) == []
    with_ar = pd.concat([within, pd.DataFrame([{"backend": "vllm", "model": "m", "workload": "w", "method": "ar"}])])
    (line,) = details.slo_lines(with_ar, slo.parse_slo(None))
    assert line.startswith("Within the SLO (") and "DFlash: AR meets the SLO at no measured point" in line
