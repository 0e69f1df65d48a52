"""The model registry and the path a GPU user takes first: `dflashbench sweep --backend B --model M --dry-run`
planned on a machine with no GPU, no network and no `datasets` package."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from dflashbench.errors import UserError
from dflashbench.plan import models
from dflashbench.plan.gpus import GpuPlan
from dflashbench.plan.pairing import resolve
from dflashbench.plan.preflight import preflight
from dflashbench.plan.suite_overrides import apply_overrides
from dflashbench.plan.suites import load_suite
from dflashbench.types import Method

# dflashbench's CLI in a fresh interpreter where `datasets` cannot be imported (as in a venv without it), with
# the Hugging Face libraries told to stay offline and no GPU visible.
NO_DATASETS = "import sys; sys.modules['datasets'] = None; from dflashbench.cli import app; sys.exit(app())"


def nvml(count: int, memory_gib: float | None, arch: str = "hopper") -> GpuPlan:
    """GPUs as NVML would report them."""
    return GpuPlan("GPU", arch, memory_gib, count, "nvml")  # type: ignore[arg-type]


def dry_run(*args: str) -> tuple[int, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", NO_DATASETS, "sweep", *args, "--dry-run", "--show-commands"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def servers(out: str) -> dict[str, list[str]]:
    """method -> the argv of its server, from the dry run's `server for M: ENV... ARGV` lines."""
    found = {}
    for line in out.splitlines():
        if line.startswith("server for "):
            method, _, command = line.removeprefix("server for ").partition(": ")
            found[method] = [w for w in shlex.split(command) if "=" not in w or w.startswith(("-", "{"))]
    return found


# --- the registry ------------------------------------------------------------------------------------------


def test_registry_covers_the_published_drafters_with_sources():
    reg = models.registry()
    names = {e.name for e in reg.models}
    assert {"qwen3-4b", "qwen3-8b", "llama-3.1-8b-instruct", "gpt-oss-20b", "gpt-oss-120b", "qwen3-coder-30b-a3b",
            "qwen3-coder-next", "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b",
            "qwen3.6-27b", "qwen3.6-35b-a3b", "kimi-k2.5", "gemma-4-31b-it",
            # published since (issue #33)
            "gemma-4-26b-a4b-it", "qwen3.5-397b-a17b", "kimi-k2.6", "minimax-m2.5", "minimax-m2.7",
            # with a DFlash2 drafter only (issue #56)
            "qwen3.8-27b", "glm-5.3"} <= names  # fmt: skip
    for e in reg.models:
        drafter = e.dflash or e.dflash2
        assert drafter.id.startswith(("z-lab/", "incoai/")) and e.source and drafter.source
        assert e.dflash2 is None or e.dflash2.architecture == "DFlash2DraftModel"
        assert (e.eagle3 is None) != (e.eagle3_none is None)
        assert all(r.source for r in e.recipes.values())
        for recipe in e.recipes.values():  # dflashbench builds these itself; a recipe must not repeat them
            flat = [*recipe.all, *recipe.ar, *recipe.dflash, *recipe.eagle3]
            assert not {"--speculative-config", "--speculative-algorithm", "--tensor-parallel-size", "--tp"} & set(flat)


def test_lookup_by_alias_or_hf_id_any_case():
    assert models.lookup("gpt-oss-120b").hf_id == "openai/gpt-oss-120b"
    assert models.lookup("OpenAI/GPT-OSS-120B").name == "gpt-oss-120b"
    assert models.lookup("Qwen/Qwen3-8B").dflash.id == "z-lab/Qwen3-8B-DFlash-b16"
    assert models.lookup("my-org/unknown") is None
    with pytest.raises(UserError, match="not in the model registry; known: qwen3-4b"):
        models.require("nope")


def test_registry_schema_is_strict(tmp_path):
    bad = tmp_path / "models.toml"
    bad.write_text('[[models]]\nname = "x"\nhf_id = "a/x"\nparams_b = 1\nweights_dtype = "bfloat16"\nsource = "s"\n'
                   'eagle3_none = "none"\nblock = 3\n[models.dflash]\nid = "z-lab/x"\nsource = "s"\n')  # fmt: skip
    with pytest.raises(UserError, match=r"models\.0\.block: Extra inputs are not permitted"):
        models.load_registry(bad)
    bad.write_text(bad.read_text().replace("block = 3\n", "").replace('eagle3_none = "none"\n', ""))
    with pytest.raises(UserError, match="exactly one of"):
        models.load_registry(bad)


def test_tp_from_weights_and_gpu_memory():
    oss = models.require("gpt-oss-120b")  # ~61 GiB
    assert models.choose_tp(oss, 80, 8) == 1
    assert models.choose_tp(oss, 48, 8) == 2
    kimi = models.require("kimi-k2.5")
    assert models.choose_tp(kimi, 141, 8) == 8
    with pytest.raises(UserError, match="needs tp 16 on 80 GiB GPUs .* but 8 GPU"):
        models.choose_tp(kimi, 80, 8)


# --- resolution ----------------------------------------------------------------------------------------------


def test_suite_drafts_are_dropped_when_model_changes_the_target():
    suite = apply_overrides(load_suite("speed-bench-coding"), model="openai/gpt-oss-120b")
    assert suite.drafts == {} and "are dropped" in suite.notes[0]
    resolved, pair = resolve(suite, gpus=nvml(8, 80.0))
    assert pair.drafts == {Method.DFLASH: "z-lab/gpt-oss-120b-DFlash", Method.EAGLE3: "nvidia/gpt-oss-120b-Eagle3-v3"}
    assert pair.dflash_block_size == 10 and resolved.num_speculative_tokens[Method.EAGLE3] == 7
    assert pair.extra_body() == {"reasoning_effort": "medium"}


def test_a_given_draft_replaces_only_its_method_and_a_new_target_keeps_none_of_the_suites():
    suite = apply_overrides(load_suite("speed-bench-coding"), model="gpt-oss-120b", draft="dflash=me/my-drafter")
    _, pair = resolve(suite, gpus=nvml(1, 80.0))
    assert pair.drafts[Method.DFLASH] == "me/my-drafter" and pair.dflash_block_size is None  # not the registry's
    assert pair.drafts[Method.EAGLE3] == "nvidia/gpt-oss-120b-Eagle3-v3"  # the registry's, not Qwen3-8B's head


def test_no_eagle3_head_drops_the_method_unless_asked_for():
    suite = apply_overrides(load_suite("default"), model="qwen3.5-27b")
    resolved, _ = resolve(suite, gpus=nvml(1, 80.0))
    assert resolved.methods == [Method.AR, Method.DFLASH]
    assert any("eagle3 not planned" in n and "--draft eagle3=" in n for n in resolved.notes)
    with pytest.raises(UserError, match="eagle3 for Qwen/Qwen3.5-27B: .*pass --draft eagle3="):
        resolve(suite, methods_given=True, gpus=nvml(1, 80.0))


def test_unknown_model_needs_draft_and_embedded_drafters_need_the_embedded_target():
    with pytest.raises(UserError, match=r"--model my-org/my-model is not in the model registry, so it brings no drafts: "
                                         r"eagle3 and dflash need one each. Pass --draft eagle3=.*,dflash=.*, or "
                                         r"--method ar"):  # fmt: skip
        apply_overrides(load_suite("default"), model="my-org/my-model")
    ok = apply_overrides(load_suite("default"), model="my-org/my-model", draft="dflash=a/d,eagle3=a/e")
    resolved, pair = resolve(ok, gpus=nvml(0, None))
    assert pair.target == "my-org/my-model" and resolved.tp == 1
    embedded = apply_overrides(load_suite("default"), model="qwen3-8b", draft="dflash=embedded,eagle3=embedded")
    with pytest.raises(UserError, match="pair only with the embedded target"):
        resolve(embedded, gpus=nvml(1, 80.0))


def test_a_plan_that_cannot_fit_stops_before_launching():
    suite = apply_overrides(load_suite("default"), model="kimi-k2.5", draft="dflash=z-lab/Kimi-K2.5-DFlash")
    resolved, pair = resolve(suite, gpus=nvml(8, 79.65))
    assert resolved.tp == 8 and pair.memory is not None and pair.memory.problems  # planned, and refused
    with pytest.raises(UserError, match=r"memory plan refused: .*fits on 8 x B200"):
        preflight(pair.memory)
    resolved, _ = resolve(apply_overrides(suite, tp=4), gpus=nvml(8, 79.65))  # --tp is kept, and still refused
    assert resolved.tp == 4


def test_thinking_default_comes_from_the_registry_unless_the_workload_sets_it():
    resolved, _ = resolve(apply_overrides(load_suite("default"), model="qwen3.5-4b"), gpus=nvml(1, 80.0))
    assert {w.thinking for w in resolved.workloads} == {True}
    resolved, _ = resolve(apply_overrides(load_suite("default"), model="qwen3-8b", thinking=False),
                          gpus=nvml(1, 80.0))  # fmt: skip
    assert {w.thinking for w in resolved.workloads} == {False}


# --- the headline command, as a new user runs it ---------------------------------------------------------


def test_headline_vllm_gpt_oss_120b_dry_run_needs_nothing():
    code, out = dry_run("--backend", "vllm", "--model", "gpt-oss-120b", "--verbose")  # what the data needs: verbose
    assert code == 0, out
    argv = servers(out)
    assert set(argv) == {"ar", "eagle3", "dflash"}
    assert all(a[:3] == ["vllm", "serve", "openai/gpt-oss-120b"] for a in argv.values())
    assert '"model":"z-lab/gpt-oss-120b-DFlash","num_speculative_tokens":9' in " ".join(argv["dflash"])
    assert '"model":"nvidia/gpt-oss-120b-Eagle3-v3"' in " ".join(argv["eagle3"])
    assert "embedded" not in out and "datasets" in out  # says what it would need, imports nothing
    assert "methods ar, eagle3, dflash; concurrency 1, 2, 4, 8, 16, 32, 64, 128" in out
    assert "a real run loads openai/gsm8k" in out and "nvidia/SPEED-Bench" in out
    assert '"reasoning_effort": "medium"' in out


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_headline_on_sglang_and_trtllm(backend):
    code, out = dry_run("--backend", backend, "--model", "gpt-oss-120b")
    assert code == 0, out
    argv = servers(out)
    assert set(argv) == {"ar", "eagle3", "dflash"} and "embedded" not in out
    if backend == "sglang":
        assert all("--max-running-requests" in a and a[a.index("--max-running-requests") + 1] == "128"
                   for a in argv.values())  # fmt: skip
        assert argv["dflash"][argv["dflash"].index("--speculative-num-draft-tokens") + 1] == "10"
    else:
        assert "decoding_type: DFlash" in out and "max_draft_len: 9" in out  # the YAML, printed
        assert "speculative_model: z-lab/gpt-oss-120b-DFlash" in out


@pytest.mark.parametrize(("model", "hf_id", "dflash", "eagle3"), [
    ("qwen3-8b", "Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16", "RedHatAI/Qwen3-8B-speculator.eagle3"),
    ("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat",
     "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"),
    ("qwen3.5-27b", "Qwen/Qwen3.5-27B", "z-lab/Qwen3.5-27B-DFlash", None),
])  # fmt: skip
def test_other_registry_models_plan_their_own_drafts(model, hf_id, dflash, eagle3):
    code, out = dry_run("--backend", "vllm", "--model", model)
    assert code == 0, out
    argv = servers(out)
    assert all(a[2] == hf_id for a in argv.values())
    assert f'"model":"{dflash}"' in " ".join(argv["dflash"])
    if eagle3:
        assert f'"model":"{eagle3}"' in " ".join(argv["eagle3"])
    else:
        assert "eagle3" not in argv and "pass --draft eagle3=" in out


def test_a_registered_drafter_given_as_the_other_kind_is_warned_about():
    """`--method eagle3 --draft z-lab/Qwen3-8B-DFlash-b16`: the registry lists that draft as Qwen3-8B's DFlash
    drafter, so giving it to EAGLE-3 gets a warning that names both kinds and the fix."""
    code, out = dry_run("--backend", "vllm", "--model", "qwen3-8b", "--method", "eagle3",
                        "--draft", "z-lab/Qwen3-8B-DFlash-b16")  # fmt: skip
    assert code == 0, out
    assert ("warning: the eagle3 draft z-lab/Qwen3-8B-DFlash-b16 is the model registry's DFlash drafter for "
            "Qwen/Qwen3-8B, not an EAGLE-3 head: measure it with --method dflash --draft z-lab/Qwen3-8B-DFlash-b16, "
            "or give eagle3 its own (--draft eagle3=ID)") in out  # fmt: skip
    code, right = dry_run("--backend", "vllm", "--model", "qwen3-8b", "--method", "dflash",
                          "--draft", "z-lab/Qwen3-8B-DFlash-b16")  # fmt: skip
    assert code == 0 and "warning:" not in right
    assert models.draft_kind("Z-LAB/qwen3-8b-dflash-b16")[0] is Method.DFLASH and models.draft_kind("my/own") is None


def test_gsm8k_dry_run_without_datasets_package():
    code, out = dry_run("--backend", "vllm", "--model", "Qwen/Qwen3-8B", "--draft", "z-lab/Qwen3-8B-DFlash-b16",
                        "--suite", "gsm8k", "--method", "ar,dflash", "--verbose")  # fmt: skip
    assert code == 0, out
    assert "a real run loads openai/gsm8k (config main, split test)" in out


def test_models_list_shows_every_entry():
    from typer.testing import CliRunner

    from dflashbench.cli import app

    result = CliRunner().invoke(app, ["models", "list"], env={"COLUMNS": "250"})  # a wide terminal: one row each
    assert result.exit_code == 0
    for entry in models.registry().models:
        assert entry.hf_id in result.output and (entry.dflash or entry.dflash2).id in result.output
    shown = CliRunner().invoke(app, ["models", "show", "gpt-oss-120b"])
    assert "block size 10" in shown.output and "source:" in shown.output


def test_models_list_gives_every_drafter_a_block_size_or_where_it_comes_from():
    from typer.testing import CliRunner

    from dflashbench.cli import app

    rows = CliRunner().invoke(app, ["models", "list"], env={"COLUMNS": "250"}).output.splitlines()[1:]
    assert len(rows) == len(models.registry().models) >= 21
    for entry, row in zip(models.registry().models, rows, strict=True):
        drafter = entry.dflash or entry.dflash2
        block = drafter.block_size
        assert f"{drafter.id} ({block if block else 'config.json'})" in row
    assert "z-lab/Kimi-K2.5-DFlash (8)" in "\n".join(rows) and "z-lab/Qwen3.6-35B-A3B-DFlash (16)" in "\n".join(rows)
    assert "z-lab/Qwen3.8-27B-DFlash2 (8) DFlash2" in "\n".join(rows)


# --- recipes per GPU architecture (issue #33) -----------------------------------------------------------------


def test_no_recipe_gives_an_architecture_bound_flag_to_every_gpu():
    from dflashbench.plan.arch_flags import recipe_problems

    assert [(e.name, p) for e in models.registry().models for eng, r in e.recipes.items()
            for p in recipe_problems(eng, r)] == []  # fmt: skip
    bad = models.require("qwen3.5-35b-a3b").recipes["sglang"].model_copy(update={"all": ["--attention-backend", "fa3"]})
    assert recipe_problems("sglang", bad) == ["--attention-backend fa3 runs on hopper only: move it under gpu.<arch>"]


def test_sglang_qwen35_moe_on_h100_has_no_blackwell_only_backend():
    code, out = dry_run("--backend", "sglang", "--model", "qwen3.5-35b-a3b", "--gpu", "8xh100", "--verbose")
    assert code == 0, out
    argv = servers(out)
    assert set(argv) == {"ar", "dflash"}
    for args in argv.values():
        assert "trtllm_mha" not in args and "fa4" not in args
        assert args[args.index("--attention-backend") + 1] == "fa3"
    assert "plan: GPUs: 8 x H100 (Hopper, 79.6 GiB each), from --gpu 8xh100" in out
    assert ("plan: sglang architecture-bound flags: out all: --attention-backend trtllm_mha; dflash: "
            "--speculative-draft-attention-backend fa4 (blackwell only: ") in out


def test_sglang_qwen35_moe_on_b200_is_z_labs_published_launch():
    code, out = dry_run("--backend", "sglang", "--model", "qwen3.5-35b-a3b", "--gpu", "8xb200", "--verbose")
    assert code == 0, out
    argv = servers(out)
    tail = argv["dflash"][argv["dflash"].index("--mem-fraction-static"):]
    assert tail == ["--mem-fraction-static", "0.75", "--trust-remote-code", "--attention-backend", "trtllm_mha",
                    "--speculative-draft-attention-backend", "fa4"]  # fmt: skip
    assert "fa3" not in argv["ar"] and argv["ar"][-2:] == ["--attention-backend", "trtllm_mha"]
    assert "plan: sglang architecture-bound flags: in  all: --attention-backend trtllm_mha" in out
    assert "no mamba radix-cache flag" in out  # SGLang not installed here: planned for 0.5.14+, said so


def test_gpu_sets_tp_and_the_plan_says_so():
    code, out = dry_run("--backend", "vllm", "--model", "qwen3.5-397b-a17b", "--gpu", "8xh100")
    assert code != 0 and "memory plan refused" in out and "wider than one node (8 x H100)" in out
    code, out = dry_run("--backend", "vllm", "--model", "kimi-k2.5", "--gpu", "8xb300")
    assert code == 0, out
    assert "plan: tp 4: the smallest on one node where every method's server holds 1.1x c=128 (the memory plan)" in out
    code, out = dry_run("--backend", "vllm", "--model", "kimi-k2.5")  # no GPU here, no --gpu: said, not silent
    assert "plan: GPUs: 8 x H100 (Hopper, 79.6 GiB each), assumed: no GPU visible and no --gpu" in out


def test_trtllm_kimi_k25_plans_with_the_drafters_block_size():
    code, out = dry_run("--backend", "trtllm", "--model", "kimi-k2.5", "--gpu", "8xh200", "--verbose")
    assert code == 0, out
    assert "max_draft_len: 7" in out and "speculative_model: z-lab/Kimi-K2.5-DFlash" in out
    assert "plan: DFlash block 8 (7 draft tokens a step), from the model registry: " in out


def test_gated_drafters_and_engine_builds_are_in_the_plan():
    code, out = dry_run("--backend", "sglang", "--model", "minimax-m2.7", "--gpu", "8xb200")
    assert code == 0, out
    assert "plan: gated: z-lab/MiniMax-M2.7-DFlash; a real run checks your Hugging Face token" in out
    assert "plan: engine build: no sglang release serves MiniMaxAI/MiniMax-M2.7 with DFlash yet; needs an SGLang" in out
    assert "plan: DFlash block size unknown here" in out


def test_a_dflash2_drafters_block_comes_from_the_registry_on_both_engines():
    """Issue #56: Qwen3.8-27B's DFlash2 drafter drafts blocks of 8 (its config.json's dflash_config.block_size, as
    read by third parties and kept in the registry), not the released DFlash drafters' 16 that an unknown drafter
    falls back to: 7 tokens on vLLM, a block of 8 on SGLang."""
    code, out = dry_run("--backend", "vllm", "--model", "qwen3.8-27b", "--method", "ar,dflash2", "--gpu", "8xh100")
    assert code == 0, out
    config = next(w for w in servers(out)["dflash2"] if w.startswith("{"))
    assert '"model":"z-lab/Qwen3.8-27B-DFlash2"' in config and '"num_speculative_tokens":7' in config
    assert "DFlash block 8 (7 draft tokens a step), from the model registry" in out
    code, out = dry_run("--backend", "sglang", "--model", "qwen3.8-27b", "--method", "ar,dflash2", "--gpu", "8xh100",
                        "--concurrency", "1,2,4,8,16,32,64")  # fmt: skip
    argv = servers(out)["dflash2"]
    assert code == 0 and argv[argv.index("--speculative-num-draft-tokens") + 1] == "8", out
