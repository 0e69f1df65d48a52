"""The preflight over the whole registry: every entry x engine x GPU planned, each plan within one node, every method
with the same capacity, the version gates it passes through; the TensorRT-LLM gate against installed-distribution
metadata; `models check` without a network."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import time

import pytest

from dflashbench.backends import gates, get_backend
from dflashbench.backends.base import ServerSpec
from dflashbench.errors import UserError
from dflashbench.plan.gpus import GPU_MODELS, gpus_per_node, parse_gpu
from dflashbench.plan.memory import MIB
from dflashbench.plan.models import HEAD_FORMATS, registry
from dflashbench.plan.pairing import resolve, server_spec
from dflashbench.plan.preflight import preflight
from dflashbench.plan.suite_overrides import apply_overrides
from dflashbench.plan.suites import load_suite
from dflashbench.types import Method

ENGINES = ("vllm", "sglang", "trtllm")


def plan_all():
    for entry in registry().models:
        for engine in ENGINES:
            suite = apply_overrides(load_suite("default"), backend=engine, model=entry.name)
            for gpu in GPU_MODELS:
                yield entry, engine, gpu, suite


@pytest.fixture(scope="module")
def plans():
    out = []
    for entry, engine, gpu, suite in plan_all():
        resolved, pair = resolve(suite, gpus=parse_gpu(gpu))
        out.append((entry, engine, gpu, resolved, pair))
    return out


def test_every_entry_engine_and_gpu_is_planned_within_one_node_with_equal_capacity(plans):
    assert len(plans) == len(registry().models) * len(ENGINES) * len(GPU_MODELS) == 345
    for entry, engine, gpu, resolved, pair in plans:
        where = f"{entry.name} {engine} {gpu}"
        plan = pair.memory
        assert plan is not None and plan.engine == engine, where
        assert resolved.tp == plan.tp <= gpus_per_node(GPU_MODELS[gpu].label), where  # never wider than a node
        assert set(plan.servers) == set(resolved.methods), where
        if not plan.fits:
            with pytest.raises(UserError, match="memory plan refused"):
                preflight(plan)
            continue
        preflight(plan)
        assert plan.capacity >= max(resolved.concurrency), where
        for method, server in plan.servers.items():  # every method holds exactly the common capacity
            spec = server_spec(resolved, method, pair, port=8000)
            cap = plan.caps.get(method)
            if cap is None:
                assert server.requests == plan.capacity, where
                continue
            if engine == "vllm":  # bytes per GPU, before the recipe's flags
                held = cap // (server.request_mib * MIB)
                assert spec.extra_args[:2] == ("--kv-cache-memory-bytes", str(cap)), where
            else:  # tokens of the pool, each request in whole KV blocks
                held = cap // server.request_tokens
            assert int(held) == plan.capacity < server.requests, (where, method)
            if engine == "sglang":
                assert spec.extra_args[:2] == ("--max-total-tokens", str(int(cap))), where
            elif engine == "trtllm":
                assert spec.engine_config["kv_cache_config"] == {"max_tokens": cap}, where
            assert "--gpu-memory-utilization" not in spec.extra_args[:2], where  # never a lower share


def test_the_plans_pass_through_the_gates_their_methods_need(plans):
    for entry, engine, _gpu, resolved, pair in plans:
        specs = {m: server_spec(resolved, m, pair, port=8000) for m in resolved.methods}
        needed = {g.since for g in gates.needed(engine, specs)}
        if Method.DFLASH in resolved.methods:
            assert {"vllm": "0.20.0", "sglang": "0.5.11", "trtllm": "1.3.0rc27"}[engine] in needed
        if engine == "vllm" and pair.draft_layers == "mixed" and Method.DFLASH in resolved.methods:
            assert "0.26.0" in needed, entry.name


def test_sglang_and_trtllm_get_no_speculators_head_and_sglang_the_context_variable(plans):
    for entry, engine, gpu, resolved, pair in plans:
        head = pair.drafts.get(Method.EAGLE3)
        formats = {h.id: h.format for h in (entry.eagle3, *entry.eagle3_by_engine.values()) if h is not None}
        if head is not None:
            assert formats[head] in HEAD_FORMATS[engine], (entry.name, engine, head)
        if engine != "sglang" or gpu != "h200":
            continue
        backend = get_backend("sglang")
        for method in resolved.methods:
            env = backend.launch_plan(server_spec(resolved, method, pair, port=8000)).env
            assert (env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") == "1") is (method is not Method.AR)


def test_speculators_heads_are_left_out_of_sglang_with_the_reason():
    suite = apply_overrides(load_suite("default"), backend="sglang", model="qwen3-8b")
    resolved, pair = resolve(suite, gpus=parse_gpu("8xh100"))
    assert Method.EAGLE3 not in resolved.methods
    assert any("speculators format, which SGLang 0.5.23 cannot load" in n for n in resolved.notes)
    llama = apply_overrides(load_suite("default"), backend="sglang", model="llama-3.1-8b-instruct")
    _, pair = resolve(llama, gpus=parse_gpu("8xh100"))
    assert pair.drafts[Method.EAGLE3] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"  # SGLang's own head
    _, pair = resolve(apply_overrides(llama, backend="vllm"), gpus=parse_gpu("8xh100"))
    assert pair.drafts[Method.EAGLE3] == "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"


def test_kimi_on_eight_h100s_is_refused_naming_what_fits():
    suite = apply_overrides(load_suite("default"), backend="sglang", model="kimi-k2.5")
    resolved, pair = resolve(suite, gpus=parse_gpu("8xh100"))
    assert resolved.tp == 8 and not pair.memory.fits
    with pytest.raises(UserError, match=r"wider than one node \(8 x H100\).*fits on 8 x B200"):
        preflight(pair.memory)


def test_qwen35_dflash_on_sglang_is_bound_by_the_state_pool_and_says_so():
    """Issue #56: Qwen3.5-27B's Gated DeltaNet states on SGLang: 5 slots a request plus an intermediate state per draft
    token (16) of every running request (sglang@0.5.23 kv_cache_configurator.py _handle_max_mamba_cache) hold 63
    DFlash requests on 8 x H100, and no split of the pool between states and KV reaches c=128: the refusal says what
    binds, the best split, and the --concurrency that runs; with it the plan fits."""
    suite = apply_overrides(load_suite("default"), backend="sglang", model="qwen3.5-27b",
                            methods=[Method.AR, Method.MTP, Method.DFLASH, Method.NGRAM])  # fmt: skip
    _, pair = resolve(suite, gpus=parse_gpu("8xh100"))
    dflash = pair.memory.servers[Method.DFLASH]
    assert dflash.requests == pair.memory.capacity == 63
    assert "16 intermediate states per running request, one per draft token" in dflash.limit
    with pytest.raises(UserError, match=r"holds 63 requests .*\(bound by SGLang's mamba state slots .*the best split "
                                        r"of states and KV \(--mamba-full-memory-ratio, default 0.9\) is \d+(\.\d+)?, "
                                        r"holding \d+ \(a suite's \[extra_args\] dflash = .*--concurrency up to 63"):  # fmt: skip
        preflight(pair.memory)
    lowered = apply_overrides(suite, concurrency=[1, 2, 4, 8, 16, 32])
    _, fits = resolve(lowered, gpus=parse_gpu("8xh100"))
    assert fits.memory.fits


def test_a_dflash2_server_on_sglang_fits_with_the_state_split_its_refusal_names():
    """Issue #56: Qwen3.8-27B's DFlash2 drafter (block 8) on SGLang, 8 x H100: SGLang's default split of states and KV
    holds 114 requests; the refusal names the split that holds more and the suite line that asks for it, and with
    that line the plan reads the flag, holds the top concurrency, and passes the flag to that server alone."""
    suite = apply_overrides(load_suite("default"), backend="sglang", model="qwen3.8-27b",
                            methods=[Method.AR, Method.DFLASH2])  # fmt: skip
    _, pair = resolve(suite, gpus=parse_gpu("8xh100"))
    assert pair.memory.servers[Method.DFLASH2].requests == pair.memory.capacity == 114
    line = '[extra_args] dflash2 = ["--mamba-full-memory-ratio", "4"]'
    with pytest.raises(UserError, match=re.escape(line)):
        preflight(pair.memory)
    split = apply_overrides(suite, extra_args={"dflash2": ["--mamba-full-memory-ratio", "4"]})
    _, fits = resolve(split, gpus=parse_gpu("8xh100"))
    assert fits.memory.fits and fits.memory.servers[Method.DFLASH2].requests == 193
    assert fits.memory.servers[Method.AR].requests > 193  # AR keeps SGLang's default split


def test_gpt_oss_120b_on_one_h100_is_refused_and_on_a_node_fits():
    suite = apply_overrides(load_suite("default"), backend="sglang", model="gpt-oss-120b")
    _, one = resolve(suite, gpus=parse_gpu("1xh100"))
    assert one.memory.tp == 1 and one.memory.capacity == 0  # the padded weights (65.9 GiB) leave SGLang's 0.8 nothing
    with pytest.raises(UserError, match=r"no memory share up to 0.95 holds it.*cannot hold the top concurrency.*"
                                        r"fits on 4 x H100"):
        preflight(one.memory)
    resolved, node = resolve(suite, gpus=parse_gpu("8xh100"))
    assert node.memory.fits and resolved.tp == 4 and node.memory.capacity >= 128


def fake_engine(tmp_path, name: str, version: str) -> str:
    """An installed distribution as importlib.metadata finds it: a dist-info folder on sys.path."""
    dist = tmp_path / f"{name}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(tmp_path)


def test_tensorrt_llm_without_dflash_is_refused_with_the_version_needed(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(fake_engine(tmp_path, "tensorrt_llm", "1.2.1"))
    importlib.invalidate_caches()
    assert gates.engine_version("trtllm") == "1.2.1"
    suite = apply_overrides(load_suite("default"), backend="trtllm", model="kimi-k2.6")
    resolved, pair = resolve(suite, gpus=parse_gpu("8xb300"))
    assert resolved.methods == [Method.AR, Method.DFLASH]  # no public EAGLE-3 head for K2.6
    specs = {m: server_spec(resolved, m, pair, port=8000) for m in resolved.methods}
    with pytest.raises(UserError, match=r"trtllm 1.2.1 is installed.*DFlash .* needs trtllm 1.3.0rc27 or later.*"
                                        r"pip install 'tensorrt-llm>=1.3.0rc27'"):  # fmt: skip
        gates.check("trtllm", specs)
    ar_only = {Method.AR: specs[Method.AR]}
    assert gates.check("trtllm", ar_only) is None  # AR needs nothing 1.2.1 lacks


def test_kimi_k26_on_trtllm_plans_ar_and_dflash_with_the_block_from_the_checkpoint():
    suite = apply_overrides(load_suite("default"), backend="trtllm", model="kimi-k2.6", methods="ar,dflash")
    resolved, pair = resolve(suite, gpus=parse_gpu("8xb300"))
    backend = get_backend("trtllm")
    plans = {m: backend.launch_plan(server_spec(resolved, m, pair, port=8000)) for m in resolved.methods}
    dflash_yaml = next(iter(plans[Method.DFLASH].files.values()))
    assert "decoding_type: DFlash" in dflash_yaml and "max_draft_len" not in dflash_yaml
    assert all("--trust_remote_code" in p.argv for p in plans.values())
    assert gates.check("trtllm", {m: server_spec(resolved, m, pair, 8000) for m in plans}, version="1.3.0rc27") is None


@pytest.mark.parametrize("offline", [True, False])
def test_models_check_without_a_network_takes_seconds_and_says_why(offline, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT="http://127.0.0.1:9")  # nothing listens: no network
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dflashbench", "models", "check"], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    elapsed = time.monotonic() - start
    assert elapsed < 10, elapsed
    assert proc.returncode == 2, proc.stdout + proc.stderr  # nothing could be read
    first = proc.stdout.splitlines()[0]
    if offline:
        assert first == "HF_HUB_OFFLINE is set: reading the Hugging Face cache only"
    else:
        assert first.startswith("no network: http://127.0.0.1:9 did not answer")
    assert "set HF_HUB_OFFLINE" not in proc.stdout  # no hint to set what is set, no retries per file
    assert proc.stdout.count("unchecked") >= len(registry().models) * 2


# --- a launched sweep: the preflight runs before any server starts --------------------------------------------------

REV = "0" * 40


def cached(root, repo: str, config: dict) -> None:
    """``config.json`` of ``repo`` in the huggingface_hub cache layout (models--org--name/snapshots/<rev>/)."""
    import json

    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(REV)
    (base / "snapshots" / REV).mkdir(parents=True, exist_ok=True)
    (base / "snapshots" / REV / "config.json").write_text(json.dumps(config))


@pytest.fixture
def gpt_oss_cached(tmp_path, monkeypatch):
    import huggingface_hub.constants as hf

    root = tmp_path / "hub"
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached(root, "openai/gpt-oss-120b", {"architectures": ["GptOssForCausalLM"], "num_hidden_layers": 36})
    cached(root, "z-lab/gpt-oss-120b-DFlash", {"architectures": ["DFlashDraftModel"], "block_size": 10})
    suite = tmp_path / "oss.toml"
    suite.write_text('name = "oss"\nbackend = "sglang"\nmethods = ["ar", "dflash"]\nmodel = "gpt-oss-120b"\n'
                     'concurrency = [1, 128]\nmax_tokens = 4096\nready_timeout_s = 5\n'
                     '[[workloads]]\nname = "synthetic"\nnum_prompts = 4\n')  # fmt: skip
    return suite


def launched(suite, gpu: str, out):
    from dflashbench.plan.suites import load_suite as load
    from dflashbench.run.sweep import SweepConfig, run_sweep

    lines: list[str] = []
    return run_sweep(SweepConfig(suite=load(str(suite)), out_dir=out, gpu=gpu, progress=False),
                     echo=lines.append), lines  # fmt: skip


def test_a_launched_sweep_that_cannot_hold_its_concurrency_stops_before_any_server(gpt_oss_cached, tmp_path):
    out = tmp_path / "results"
    with pytest.raises(UserError, match=r"memory plan refused: the weights \(67.4 GiB per GPU at tp 1\)"):
        launched(gpt_oss_cached, "1xh100", out)
    assert not out.exists()  # nothing written, nothing launched


def test_a_launched_sweep_on_an_engine_too_old_stops_before_any_server(gpt_oss_cached, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(fake_engine(tmp_path, "sglang", "0.5.10"))
    importlib.invalidate_caches()
    out = tmp_path / "results"
    with pytest.raises(UserError, match=r"sglang 0.5.10 is installed.*DFlash .* needs sglang 0.5.11 or later"):
        launched(gpt_oss_cached, "8xh100", out)
    assert not out.exists()


def test_a_launched_sweep_records_its_memory_plan_in_the_manifest(gpt_oss_cached, tmp_path, monkeypatch):
    """The plan fits (tp 4 on H100s) and the engine is new enough: the manifest keeps the plan before the first
    server starts (here none can: the sglang on PATH exits at once, as one without a GPU would)."""
    import json

    monkeypatch.syspath_prepend(fake_engine(tmp_path, "sglang", "0.5.23"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sglang").write_text("#!/bin/sh\necho 'sglang: no GPU here' >&2\nexit 3\n")
    (bin_dir / "sglang").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    importlib.invalidate_caches()
    outcome, _ = launched(gpt_oss_cached, "8xh100", tmp_path / "results")
    assert outcome.points and all("server did not start" in (p.failure_reason or "") for p in outcome.points)
    (run_dir,) = (tmp_path / "results").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    plan = manifest["memory_plan"]
    assert (plan["engine"], plan["tp"], plan["gpu"]) == ("sglang", 4, "H100")
    assert plan["capacity_requests"] >= 128 and set(plan["servers"]) == {"ar", "dflash"}
    assert plan["servers"]["ar"]["cap"] == plan["capacity_requests"] * plan["tokens_per_request"]


def test_request_length_from_the_prompts_read_or_an_assumption_said_out_loud():
    from dflashbench.plan.preflight import request_tokens
    from dflashbench.types import Request

    suite = load_suite("default")  # Hub workloads, not read on a dry run: 2,048 prompt tokens assumed
    tokens, why = request_tokens(suite)
    assert tokens == 2048 + 4096 and "speed-bench/qualitative" in why and "assumed" in why
    throughput = load_suite("speed-bench-throughput-8k")  # prompts padded to the config's nominal length
    assert request_tokens(throughput)[0] == 8192 + throughput.workloads[0].max_tokens
    read = Request(id="r", workload="w", category="c", messages=({"role": "user", "content": "x" * 3000},),
                   max_tokens=100, followup_turns=("y" * 300,))  # fmt: skip
    tokens, why = request_tokens(suite, {0: [read]})  # the first workload read: 3,300 characters, two turns
    assert tokens == max(3300 // 3 + 2 * suite.workloads[0].max_tokens, 2048 + 4096)


def test_every_recipe_flag_says_which_engine_releases_take_it():
    for entry in registry().models:
        for engine, recipe in entry.recipes.items():
            flags = [*recipe.flat(), *(a for table in recipe.gpu.values() for a in table.flat())]
            for flag in (f for f in flags if f.startswith("--")):
                assert flag in gates.FLAG_SINCE[engine], (entry.name, engine, flag)
    old = {Method.AR: ServerSpec(Method.AR, "m", extra_args=("--max-num-batched-tokens", "32768"))}
    with pytest.raises(UserError, match="--max-num-batched-tokens needs vllm 0.20.0 or later"):
        gates.check("vllm", old, version="0.19.1")


def test_tp_gives_the_tightest_server_a_tenth_of_headroom_or_says_it_is_at_risk():
    """gpt-oss-120b on an H100 node with vLLM: tp 2 is the smallest where DFlash's server (the tightest) holds 1.1 x
    c=128; forced to tp 2 with a top concurrency it holds under 1.1 x, the plan runs and says it is at risk."""
    suite = apply_overrides(load_suite("default"), backend="vllm", model="gpt-oss-120b")
    resolved, pair = resolve(suite, gpus=parse_gpu("8xh100"))
    plan = pair.memory
    assert resolved.tp == 2 and plan.fits and not plan.at_risk and plan.margin >= 1.1
    assert plan.tightest() is Method.DFLASH and set(plan.caps) == {Method.AR, Method.EAGLE3}
    thin = apply_overrides(suite, concurrency=[1, plan.capacity - 5], tp=2)
    _, pair = resolve(thin, gpus=parse_gpu("8xh100"))
    assert pair.memory.fits and pair.memory.at_risk and "--tp 2 is the suite's" in pair.memory.risk
    preflight(pair.memory)  # at risk is not refused
    record = pair.memory.record()
    assert record["at_risk"] and record["servers"]["dflash"]["tp"] == 2 and record["tightest"] == "dflash"


def test_kimi_k25_on_eight_h200s_plans_vllms_decode_context_parallelism_and_fits(monkeypatch):
    """Issue #63: the recipes serve Kimi-K2.5 on 8 x H200 with vLLM's decode context parallelism, which shards the
    MLA KV cache over the tp ranks (vllm/config/parallel.py; the Kimi-K2.5 recipe's supports_dcp): the plan refused
    it knowing nothing of it. It plans TP8 + DCP8 as the recipes do, every method's argv carrying the flag."""
    from typer.testing import CliRunner

    from dflashbench.cli import app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from dflashbench.plan import preflight as pf

    suite = apply_overrides(load_suite("default"), backend="vllm", model="kimi-k2.5")
    with monkeypatch.context() as m:
        m.setattr(pf, "dcp_sizes", lambda *a: [1])
        _, plain = resolve(suite, gpus=parse_gpu("8xh200"))
    assert not plain.memory.fits  # without it: refused, as the issue found
    resolved, pair = resolve(suite, gpus=parse_gpu("8xh200"))
    assert pair.memory.dcp == 8 and pair.memory.fits and resolved.tp == 8
    assert pair.memory.capacity > plain.memory.capacity
    out = CliRunner().invoke(app, ["sweep", "--backend", "vllm", "--model", "kimi-k2.5", "--gpu", "8xh200",
                                   "--dry-run", "--verbose"]).output  # fmt: skip
    servers = [ln for ln in out.splitlines() if ln.startswith("server for ")]
    assert servers and all("--tensor-parallel-size 8 --decode-context-parallel-size 8" in ln for ln in servers)
    assert "vllm/config/parallel.py decode_context_parallel_size" in out and "Kimi-K2.5.yaml#L31" in out
    # a GQA model is never planned with it, nor SGLang
    _, gqa = resolve(apply_overrides(load_suite("default"), backend="vllm", model="qwen3-8b"), gpus=parse_gpu("8xh100"))
    assert gqa.memory.dcp == 1


def test_qwen35_397b_on_eight_h200s_plans_the_fp8_checkpoint_and_on_b200s_the_bf16_one():
    suite = apply_overrides(load_suite("default"), backend="vllm", model="qwen3.5-397b-a17b")
    resolved, pair = resolve(suite, gpus=parse_gpu("8xh200"))
    assert pair.target == "Qwen/Qwen3.5-397B-A17B-FP8" and pair.memory.fits
    assert any(n.startswith("checkpoint Qwen/Qwen3.5-397B-A17B-FP8 (FP8, 370 GiB)") for n in resolved.notes)
    _, b200 = resolve(suite, gpus=parse_gpu("8xb200"))
    assert b200.target == "Qwen/Qwen3.5-397B-A17B" and b200.memory.fits
    named = apply_overrides(load_suite("default"), backend="vllm", model="Qwen/Qwen3.5-397B-A17B-FP8")
    assert resolve(named, gpus=parse_gpu("8xb200"))[1].target == "Qwen/Qwen3.5-397B-A17B-FP8"


def test_a_refusal_leads_with_the_fixes_that_keep_the_model_and_gpus():
    suite = apply_overrides(load_suite("default"), backend="sglang", model="qwen3-8b")
    _, pair = resolve(suite, gpus=parse_gpu("1xh100"))
    (problem,) = pair.memory.problems
    keep, change = problem.split("Fix, keeping the model and GPUs: ")[1].split(". Or change the GPUs: ")
    assert keep.startswith(f"--concurrency up to {pair.memory.capacity}") and "--gpu 8xh100" in change
    assert "GiB per GPU short even at 0.95" in problem and "of the GPU" not in problem
