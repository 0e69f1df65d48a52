"""The GPU suites (gpu-smoke, gpu-embedded): their whole path on the CPU at a tiny size in the default run, and
on CUDA for real in the `gpu` session (skipped cleanly without a GPU)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dflashbench.cli.sweep_report import report_and_verdict
from dflashbench.plan.suites import load_suite
from dflashbench.run.store import load_run
from dflashbench.run.sweep import SweepConfig, run_sweep

pytestmark = pytest.mark.timeout(600)


def run_suite(name: str, out_dir, **updates):
    suite = load_suite(name).model_copy(update=updates)
    outcome = run_sweep(SweepConfig(suite=suite, out_dir=out_dir, progress=False), echo=lambda *_: None)
    assert not outcome.failed, [p.failure_reason for p in outcome.failed]
    report = report_and_verdict(outcome.run_dir, True, lambda *_: None)  # as `dflashbench sweep` does after it
    return load_run(outcome.run_dir), report


def test_gpu_smoke_runs_on_cpu_at_a_tiny_random_shape(tmp_path):
    """Everything but the size and the device: random weights made on the spot by `dflashbench serve`, no
    end-of-sequence token (every request runs to max_tokens), all three methods through HTTP and /metrics."""
    suite = load_suite("gpu-smoke")
    assert suite.model == "random:qwen3-8b" and set(suite.drafts.values()) == {"random:qwen3-8b"}
    assert "cuda" in suite.args_for("dflash") and max(suite.concurrency) >= 32
    wl = suite.workloads[0].model_copy(update={"num_prompts": 4, "max_tokens": 6})
    run, report = run_suite("gpu-smoke", tmp_path, model="random:tiny",
                             drafts={m: "random:tiny" for m in suite.drafts}, concurrency=[1, 2],
                             extra_args={"all": ["--device", "cpu"]}, workloads=[wl], warmup_requests=0,
                             requests_per_stream=4)  # fmt: skip
    points = run.points[run.points["category"] == "all"]
    assert sorted(zip(points["method"], points["concurrency"], strict=True)) == [
        ("ar", 1), ("ar", 2), ("dflash", 1), ("dflash", 2), ("eagle3", 1), ("eagle3", 2)]
    # 4 prompts, at least 4 requests per stream: c=1 sends the 4, c=2 sends 8 (each prompt twice)
    by_method = points.sort_values(["method", "concurrency"], kind="stable")  # interleaved on the CPU: any order
    assert list(by_method["num_requests"]) == [4, 8] * 3 and (points["num_errors"] == 0).all()
    assert (points["output_tokens"] == points["num_requests"] * 6).all()  # no EOS: every request ran to max_tokens
    reused = run.requests[run.requests["point_id"].str.endswith(":c2") & ~run.requests["warmup"]]["request_id"]
    assert sum(rid.endswith("~1") for rid in reused) == 3 * 4
    assert points["steady_share"].notna().all() and points["steady_throughput_tok_per_s"].gt(0).all()
    assert points["tau"].notna().all()
    assert all("no NVIDIA GPU" in json.dumps(e) for e in points["extra"])  # no energy here, and it says why
    assert report is not None and report.is_file()


def test_random_shapes_have_the_released_checkpoints_sizes():
    from dflashbench.reference.random_pair import SHAPES, random_drafter, random_target

    q8 = SHAPES["qwen3-8b"]
    assert (q8.num_layers, q8.hidden_size, q8.num_heads, q8.num_kv_heads, q8.vocab_size) == (36, 4096, 32, 8, 151936)
    target = random_target("random:tiny")
    assert target.vocab_size == len(target.tokenizer) == SHAPES["tiny"].vocab_size
    dflash = random_drafter("random:tiny", "dflash", target)
    assert dflash.block_size == 16 and dflash.draft.config.num_hidden_layers == SHAPES["tiny"].dflash_layers
    assert random_drafter("random:tiny", "eagle3", target).block_size == 4
    with pytest.raises(Exception, match="unknown random model shape 'qwen9'"):
        random_target("random:qwen9")
    with pytest.raises(Exception, match="same random shape"):
        random_drafter("random:small", "dflash", target)


@pytest.mark.gpu
def test_gpu_embedded_on_cuda_records_telemetry_and_energy(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    wl = load_suite("gpu-embedded").workloads[0].model_copy(update={"num_prompts": 16})
    run, report = run_suite("gpu-embedded", tmp_path, concurrency=[1, 4], workloads=[wl])
    gpu = run.manifest["gpu"]
    assert gpu["gpu_count"] >= 1 and gpu["driver"] and gpu["cuda_driver"], gpu
    tel = run.telemetry
    fields = ["power_w", "energy_mj", "gpu_util_pct", "mem_used_gib", "sm_clock_mhz", "mem_clock_mhz", "temp_c"]
    assert tel[fields].notna().all().all()
    points = run.points[run.points["category"] == "all"]
    assert points["energy_j_per_tok"].notna().all() and (points["energy_j_per_tok"] > 0).all()
    for extra in points["extra"]:
        energy = extra["energy"]
        assert energy["source"] == "energy_counter"
        assert energy["power_integral_j"] == pytest.approx(energy["energy_j"], rel=0.1)  # two ways agree
    gaps = tel.groupby("point_id")["t_s"].diff().dropna()
    assert gaps.median() == pytest.approx(run.manifest["suite_config"]["telemetry_interval_s"], rel=0.1)
    assert "Power" in report.read_text() or "power" in report.read_text()
    assert isinstance(tel, pd.DataFrame)


@pytest.mark.gpu
def test_reference_decoder_on_cuda_is_lossless_for_the_embedded_pair():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from dflashbench.bench.pair import encode_prompts
    from dflashbench.embedded import default_paths
    from dflashbench.reference.corpus import demo_prompts
    from dflashbench.reference.decode import ar_decode, dflash_decode
    from dflashbench.reference.dflash.checkpoint import load_draft
    from dflashbench.reference.target import load_target

    paths = default_paths()
    target = load_target(paths.target, device="cuda")
    draft = load_draft(paths.dflash, device=target.device, dtype=target.dtype)
    for ids in encode_prompts(target.tokenizer, demo_prompts(6, 0)):
        ar = ar_decode(target, ids, max_new_tokens=48)
        fast = dflash_decode(target, draft, ids, max_new_tokens=48)
        assert fast.token_ids == ar.token_ids
        assert fast.tau > 1.5
