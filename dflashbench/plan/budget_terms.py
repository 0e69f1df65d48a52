"""What each engine takes from a GPU before its KV cache, term by term: the total PyTorch sees, the engine's share,
the weights as the engine loads them, the activation peak it profiles, the memory outside PyTorch, and (vLLM) the
CUDA-graph estimate. Pure arithmetic; every term says where it was read, and the terms no source fixes are taken
from public engine logs and marked as estimates, so the plan can say which of its figures are estimates.

The rule per engine (docs/memory.md has it with every source):

- vLLM: KV = share x total - weights - activation peak - non-torch increase - CUDA-graph estimate
  (vllm@v0.20.0 and vllm@v0.33.0 vllm/v1/worker/gpu_worker.py ``determine_available_memory``:
  ``requested_memory - profile_result.non_kv_cache_memory - cudagraph_memory_estimate_applied``; the estimate is
  applied by default from 0.20.0, vllm@v0.20.0 vllm/envs.py ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` default "1",
  and not in 0.19.0, whose log says "In v0.19, CUDA graph memory profiling will be enabled by default ... To try it
  now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1").
- SGLang: KV = share x (total - non-torch) - weights: the pool is what is free after loading, less
  ``pre_model_load_memory x (1 - mem_fraction_static)`` (sglang@0.5.23 sglang/srt/mem_cache/kv_cache_configurator.py
  ``_profile_available_bytes``), and what is free before loading already lacks the CUDA context and NCCL buffers;
  activations are left to the 1 - share it keeps back.
- TensorRT-LLM: KV = fraction x (total - weights - activation peak - non-torch): ``available_kv_mem =
  (total_gpu_memory - peak_memory + allocated_bytes) * fraction`` with the peak of a profiling forward, torch and
  non-torch (NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor/_util.py ``KvCacheCreator``, read at
  0004396720054fd8e205cbf616f21f0b57c6b412; its log "Peak memory during memory usage profiling (torch + non-torch)").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

GIB = 1 << 30
KIB = 1 << 10

# --- the estimates and the logs they were read from ------------------------------------------------------------
# Every llm-d-planner log cited here is vLLM 0.19.0 on one node of H100 80GB, --max-num-batched-tokens 8192 and
# --max-num-seqs 1024 (vLLM's defaults there), at
# https://github.com/llm-d-incubation/llm-d-planner/tree/d3121e059da88662db39a926a3ead964be97359b/accuracy/results/v0.19.0/logs
# (each log's "Memory profiling takes ... torch peak memory increase ... non-torch forward increase memory ..." and
# "Estimated CUDA graph memory" lines). Only logs of models outside dflashbench's registry set a term, so the
# registry models' logs stay free to check the plan against (docs/memory.md, "Checked against").
LLMD_LOGS = ("https://github.com/llm-d-incubation/llm-d-planner/tree/d3121e059da88662db39a926a3ead964be97359b/"
             "accuracy/results/v0.19.0/logs")  # fmt: skip

# PyTorch's total on an H100 80GB HBM3: "total_memory=79.19GiB" in every worker's init snapshot there (e.g.
# qwen-qwen2-5-7b-instruct--h100-80gb--tp1pp1dp1--8192.log), against NVML's 81,559 MiB = 79.65 GiB. Other GPUs: NVML's
# total scaled by the same ratio (an estimate: no log of theirs was read).
H100_NVML_GIB = 79.6474609375
H100_TORCH_GIB = 79.19
TORCH_TOTAL_SOURCE = f"PyTorch's total on an H100, total_memory=79.19GiB ({LLMD_LOGS}, qwen-qwen2-5-7b-instruct tp1)"

# The activation peak vLLM profiles is the larger of two passes (vllm@v0.33.0 vllm/v1/worker/gpu_model_runner.py
# profile_run: a forward of max_num_batched_tokens, then _dummy_sampler_run over one row per max_num_seqs request,
# which holds logits of the whole vocabulary). The sampler's peak per (request x vocabulary entry), fitted on the
# logs of models outside the registry: Qwen2.5-7B 2.21 GiB (vocab 152,064), phi-4 1.52 (100,352), gemma-2-9b 3.65
# (256,000), gemma-3-12b 3.94 (262,208), Llama-3.3-70B fp8 tp2 1.96 (128,256), Qwen2.5-72B tp2 2.29 (152,064): 14.95 to
# 16.24 bytes at 1,024 requests, so 16.
SAMPLER_BYTES = 16
# The forward's peak per batched token, where it exceeds the sampler's: CodeLlama-7B 0.77 GiB with a 32,016 vocabulary
# (a dense model), Mixtral-8x7B tp2 1.21 GiB with 32,000 (an MoE), at 8,192 tokens; taken to grow with the tokens
# (MiaAI-Lab/DeepSeek-v4-Flash-One-DGX-Spark#4: 5.30 -> 1.39 GiB for 8,224 -> 2,048 batched tokens).
FORWARD_BYTES_PER_TOKEN = {"dense": round(0.77 * GIB / 8192), "moe": round(1.21 * GIB / 8192)}
# An MoE's fused experts keep workspaces beside the sampler's logits (issue #63, item 5): vLLM's Triton experts hold
# (M, topk, max(N // 2, K)) + (M, topk, max(N, K)) + (M, K) elements of the activation dtype (2 bytes), N = 2 x the
# expert's intermediate size per GPU, K = the hidden size, M = the batched tokens up to VLLM_FUSED_MOE_CHUNK_SIZE
# (16,384 by default) (vllm-project/vllm@13cb3e44373beb1c8b9d2c017f565af6f7a1b601
# vllm/model_executor/layers/fused_moe/fused_moe.py TritonExperts.workspace_shapes; vllm/envs.py
# VLLM_FUSED_MOE_CHUNK_SIZE). Read from the source, not fitted: on six MoE logs of vLLM 0.19.0 outside the registry the
# sampler + these workspaces land within 0 to +7 % of the logged peak, where the sampler alone missed by up to -19 %
# (docs/measurements/2026-11-29-dry-run, "MoE activation peaks").
MOE_CHUNK_TOKENS = 16 * 1024
MOE_WORKSPACE_SOURCE = ("vLLM's Triton experts' workspaces, (M, topk, max(I, H)) + (M, topk, max(2I, H)) + (M, H) x 2 B "
                        "(vllm-project/vllm@13cb3e4 vllm/model_executor/layers/fused_moe/fused_moe.py "
                        "TritonExperts.workspace_shapes; M up to VLLM_FUSED_MOE_CHUNK_SIZE 16,384, vllm/envs.py)")


@dataclass(frozen=True)
class MoeShape:
    """An MoE's expert shape as its config.json gives it: what sizes vLLM's fused-experts workspaces."""

    experts_per_token: int  # num_experts_per_tok
    intermediate_size: int  # moe_intermediate_size (an expert's)
    hidden_size: int


def moe_workspace_bytes(shape: MoeShape, batched_tokens: int, tp: int) -> int:
    """vLLM's fused-experts workspaces at the profiling forward (:data:`MOE_WORKSPACE_SOURCE`)."""
    m = min(batched_tokens, MOE_CHUNK_TOKENS)
    i, h, k = -(-shape.intermediate_size // max(tp, 1)), shape.hidden_size, shape.experts_per_token
    return 2 * (m * k * max(i, h) + m * k * max(2 * i, h) + m * h)


# Up to 0.16 vLLM logged 2.53x these peaks (Qwen3-14B on an H100: 5.64 GiB on 0.15.0 and 0.16.0, 2.23 on 0.17.0;
# llm-d-planner accuracy/accuracy_report.md "Part 2: vLLM Version Sensitivity").
OLD_ACTIVATION_FACTOR = 5.64 / 2.23
SMALLER_ACTIVATION_SINCE = "0.17.0"
# Memory outside PyTorch that the profiling run adds, per GPU: NCCL and all-reduce buffers from tp 2. Qwen2.5-7B
# 0.24 / 2.06 / 2.13 GiB at tp 1 / 2 / 4, Llama-3.3-70B fp8 2.10 / 2.21 at tp 2 / 4, Kimi-Dev-72B 2.09 / 2.21.
NON_TORCH_GIB = {1: 0.25, 2: 2.08, 4: 2.17}
# vLLM's CUDA-graph estimate ("Estimated CUDA graph memory: X GiB total"): 0.52 to 1.92 GiB over the 41 logs of
# models outside the registry there, 0.985 on average; 1.0 taken.
CUDA_GRAPH_GIB = 1.0
CUDA_GRAPH_SINCE = "0.20.0"

# vLLM's batch defaults for its OpenAI server on GPUs of >= 70 GiB that are not A100s (H100, H200, B200):
# max_num_batched_tokens 8192 and max_num_seqs 1024 (vllm@v0.33.0 vllm/engine/arg_utils.py get_batch_defaults,
# lines 2984-2991; "Defaulting max_num_batched_tokens to 8192 / max_num_seqs to 1024" in the llm-d-planner logs).
VLLM_BATCHED_TOKENS = 8192
VLLM_MAX_SEQS = 1024
# TensorRT-LLM's max_num_tokens default (its log "max_seq_len=..., max_num_requests=..., max_num_tokens=8192").
TRTLLM_BATCHED_TOKENS = 8192

# MXFP4: 4 bits a weight and one 8-bit scale per 32 weights (the OCP MX block), 0.53125 bytes a weight. vLLM and
# SGLang pad the MoE's hidden size to 256 and its intermediate size per GPU to 128 for their MXFP4 MoE kernels
# (vllm@v0.33.0 vllm/model_executor/layers/fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size,
# lines 869-873, the Marlin and TensorRT-LLM kernels; sglang@0.5.23 sglang/srt/layers/quantization/mxfp4.py lines
# 465-468): gpt-oss's 2880 loads as 3072. The same rule gives the loaded sizes logged for gpt-oss-20b on H100s,
# 13.64 GiB at tp 1 and 7.01 at tp 2 (the rule: 13.66 and 7.06).
MXFP4_BYTES_PER_WEIGHT = 0.53125
MXFP4_HIDDEN_ALIGN = 256
MXFP4_INTERMEDIATE_ALIGN = 128
MXFP4_SOURCE = ("vLLM and SGLang pad MXFP4 MoE weights: hidden to a multiple of 256, intermediate per GPU to 128 "
                "(vllm@v0.33.0 vllm/model_executor/layers/fused_moe/oracle/mxfp4.py#L869-L873; "
                "sglang@0.5.23 sglang/srt/layers/quantization/mxfp4.py#L465-L468)")  # fmt: skip


@dataclass(frozen=True)
class Term:
    """One thing the engine subtracts (or, for ``total``, starts from), per GPU."""

    name: str
    gib: float
    source: str
    estimate: bool = False

    def shown(self) -> str:
        return f"{self.name} {self.gib:.2f}" + (" (estimate)" if self.estimate else "")


@dataclass(frozen=True)
class Mxfp4Moe:
    """An MXFP4 mixture of experts as its checkpoint stores it: what the padding applies to."""

    layers: int
    experts: int
    hidden_size: int
    intermediate_size: int

    def disk_gib(self) -> float:
        """The experts' gate-up and down weights with their scales, as stored."""
        weights = self.layers * self.experts * 3 * self.hidden_size * self.intermediate_size
        return weights * MXFP4_BYTES_PER_WEIGHT / GIB

    def loaded_gib(self, tp: int) -> float:
        """The same on ``tp`` GPUs together, padded as the engines pad them."""
        per_gpu = self.intermediate_size / tp
        hidden = _round_up(self.hidden_size, MXFP4_HIDDEN_ALIGN) / self.hidden_size
        inter = _round_up(math.ceil(per_gpu), MXFP4_INTERMEDIATE_ALIGN) / per_gpu
        return self.disk_gib() * hidden * inter


def _round_up(value: int, align: int) -> int:
    return -(-value // align) * align


def older(version: str | None, minimum: str) -> bool:
    """``version`` is a release before ``minimum`` (``None``: the current releases, never older)."""
    if version is None:
        return False

    def parts(text: str) -> tuple[int, ...]:
        out = []
        for piece in text.split("+")[0].split(".")[:3]:
            digits = "".join(ch for ch in piece if ch.isdigit())
            out.append(int(digits or 0))
        return tuple(out)

    return parts(version) < parts(minimum)


# --- the terms ----------------------------------------------------------------------------------------------------


def torch_total(nvml_gib: float) -> Term:
    """The total PyTorch sees (``torch.cuda.mem_get_info``), which the engines take their share of."""
    if abs(nvml_gib - H100_NVML_GIB) < 0.01:
        return Term("total PyTorch sees", H100_TORCH_GIB, TORCH_TOTAL_SOURCE)
    return Term("total PyTorch sees", nvml_gib * H100_TORCH_GIB / H100_NVML_GIB,
                f"NVML's {nvml_gib:.2f} GiB x the H100's ratio ({TORCH_TOTAL_SOURCE})", estimate=True)  # fmt: skip


def weights(checkpoint_gib: float, tp: int, mxfp4: Mxfp4Moe | None = None, engine: str = "vllm") -> Term:
    """The weights per GPU as the engine loads them: the checkpoint split over tp, MXFP4 experts padded (vLLM and
    SGLang; TensorRT-LLM's MXFP4 layout was not read, so it keeps the checkpoint's size)."""
    if mxfp4 is None or engine == "trtllm":
        return Term("weights", checkpoint_gib / tp, "the model registry's checkpoint size over tp")
    dense = checkpoint_gib - mxfp4.disk_gib()
    return Term("weights", (dense + mxfp4.loaded_gib(tp)) / tp,
                f"the checkpoint over tp with its MXFP4 experts padded, {mxfp4.hidden_size} -> "
                f"{_round_up(mxfp4.hidden_size, MXFP4_HIDDEN_ALIGN)}: {MXFP4_SOURCE}")  # fmt: skip


def activation(engine: str, vocab_size: int | None, batched_tokens: int, max_seqs: int, moe: bool,
               release: str | None = None, moe_shape: MoeShape | None = None, tp: int = 1) -> Term:  # fmt: skip
    """The activation peak the engine profiles (vLLM, TensorRT-LLM; SGLang does not subtract one), an estimate. An
    MoE whose expert shape is known (``moe_shape``) on vLLM: the sampler's logits beside the fused experts'
    workspaces (:func:`moe_workspace_bytes`), or the dense forward's where larger."""
    vocab = vocab_size or ASSUMED_VOCAB
    sampler = max_seqs * vocab * SAMPLER_BYTES if engine == "vllm" else 0
    kind = "moe" if moe and (moe_shape is None or engine != "vllm") else "dense"
    forward = batched_tokens * FORWARD_BYTES_PER_TOKEN[kind]
    workspaces = moe_workspace_bytes(moe_shape, batched_tokens, tp) if moe_shape is not None and engine == "vllm" else 0
    peak = max(sampler + workspaces, forward) / GIB
    beside = f" + the experts' workspaces {workspaces / GIB:.2f} GiB ({MOE_WORKSPACE_SOURCE})" if workspaces else ""
    why = (f"the larger of the sampler's {max_seqs:,} requests x {vocab:,} vocabulary x {SAMPLER_BYTES} B{beside} and "
           f"the forward's {batched_tokens:,} tokens x {FORWARD_BYTES_PER_TOKEN[kind] / KIB:.0f} "
           f"KiB, fitted on vLLM 0.19.0 logs ({LLMD_LOGS})")  # fmt: skip
    if vocab_size is None:
        why += f"; vocabulary assumed {ASSUMED_VOCAB:,} (not in the registry)"
    if engine == "vllm" and older(release, SMALLER_ACTIVATION_SINCE):
        peak *= OLD_ACTIVATION_FACTOR
        why += f"; x {OLD_ACTIVATION_FACTOR:.2f} before vLLM {SMALLER_ACTIVATION_SINCE}"
    if engine == "trtllm":
        why = (f"the forward's {batched_tokens:,} tokens x {FORWARD_BYTES_PER_TOKEN[kind] / KIB:.0f}"
               f" KiB, from vLLM's logs ({LLMD_LOGS}); not measured on TensorRT-LLM")  # fmt: skip
    return Term("activation peak", peak, why, estimate=True)


ASSUMED_VOCAB = 262_144  # the largest vocabulary among the registry's families (Gemma 4): errs toward less KV


def non_torch(tp: int) -> Term:
    """Memory outside PyTorch the engine's profiling adds per GPU (NCCL and all-reduce buffers from tp 2)."""
    key = 1 if tp <= 1 else 2 if tp == 2 else 4
    return Term("outside PyTorch", NON_TORCH_GIB[key],
                f"vLLM 0.19.0 logs of models outside the registry at tp 1/2/4: {NON_TORCH_GIB} GiB ({LLMD_LOGS})"
                + ("; tp 8 taken as tp 4" if tp > 4 else ""), estimate=True)  # fmt: skip


def cuda_graphs(enabled: bool) -> Term | None:
    """vLLM's CUDA-graph estimate, where the release subtracts it and graphs are captured."""
    if not enabled:
        return None
    return Term("CUDA graphs", CUDA_GRAPH_GIB,
                f"vLLM's estimate, subtracted from {CUDA_GRAPH_SINCE} (vllm@v0.20.0 vllm/envs.py "
                f"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1); its size the mean of vLLM 0.19.0 logs "
                f"({LLMD_LOGS})", estimate=True)  # fmt: skip


# --- what the engine's flags say -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The engine settings the terms depend on, as the server's flags, YAML and environment set them."""

    batched_tokens: int  # vLLM --max-num-batched-tokens, TensorRT-LLM max_num_tokens
    max_seqs: int  # vLLM --max-num-seqs (the sampler's rows)
    cuda_graphs: bool  # vLLM subtracts its CUDA-graph estimate
    mamba_ratio: float | None = None  # SGLang --mamba-full-memory-ratio where the flags set it (None: its default)


def _last(args: Sequence[str], name: str) -> str | None:
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def settings(engine: str, args: Sequence[str], config: dict, env: dict[str, str], top: int,
             release: str | None = None) -> Settings:  # fmt: skip
    """The :class:`Settings` of a server launched with ``args`` (recipe, cap and suite flags), TensorRT-LLM's YAML
    ``config`` and ``env``; ``top``: the suite's top concurrency (dflashbench passes --max-num-seqs above vLLM's
    smallest default, :func:`dflashbench.backends.vllm.VllmBackend.launch_plan`)."""
    if engine == "vllm":
        tokens = _last(args, "--max-num-batched-tokens")
        seqs = _last(args, "--max-num-seqs")
        max_seqs = int(seqs) if seqs else (top if top > 256 else VLLM_MAX_SEQS)
        graphs = (env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1") != "0"
                  and "--enforce-eager" not in args and not older(release, CUDA_GRAPH_SINCE))  # fmt: skip
        return Settings(int(tokens) if tokens else VLLM_BATCHED_TOKENS, max_seqs, graphs)
    if engine == "trtllm":
        tokens = config.get("max_num_tokens") or _last(args, "--max_num_tokens")
        return Settings(int(tokens) if tokens else TRTLLM_BATCHED_TOKENS, 0, False)
    if engine == "sglang":
        ratio = _last(args, "--mamba-full-memory-ratio")
        return Settings(0, 0, False, float(ratio) if ratio else None)
    return Settings(0, 0, False)


# --- the budget -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """The KV budget per GPU as ``engine`` counts it, with every term."""

    engine: str
    share: float
    total: Term
    terms: tuple[Term, ...]  # subtracted, weights first

    @property
    def kv_gib(self) -> float:
        taken = sum(t.gib for t in self.terms)
        if self.engine == "trtllm":
            return self.share * (self.total.gib - taken)
        if self.engine == "sglang":
            outside = sum(t.gib for t in self.terms if t.name == "outside PyTorch")
            return self.share * (self.total.gib - outside) - (taken - outside)
        return self.share * self.total.gib - taken

    def term(self, name: str) -> Term | None:
        return next((t for t in self.terms if t.name == name), None)

    def formula(self) -> str:
        """``0.92 x 79.19 - weights 30.95 - activation peak 3.07 (estimate) - ... = 38.12 GiB``."""
        minus = " - ".join(t.shown() for t in self.terms)
        if self.engine == "trtllm":
            body = f"{self.share:g} x ({self.total.gib:.2f} - {minus})"
        elif self.engine == "sglang":
            outside = [t for t in self.terms if t.name == "outside PyTorch"]
            rest = " - ".join(t.shown() for t in self.terms if t.name != "outside PyTorch")
            body = f"{self.share:g} x ({self.total.gib:.2f} - {outside[0].shown()}) - {rest}" if outside else \
                f"{self.share:g} x {self.total.gib:.2f} - {rest}"  # fmt: skip
        else:
            body = f"{self.share:g} x {self.total.gib:.2f} - {minus}"
        return f"{body} = {self.kv_gib:.2f} GiB"

    def estimates(self) -> list[str]:
        return [t.name for t in (self.total, *self.terms) if t.estimate]

    def record(self) -> dict:
        return {"rule": self.engine, "share": self.share, "total_gib": round(self.total.gib, 2),
                "terms": {t.name: {"gib": round(t.gib, 3), "estimate": t.estimate} for t in self.terms},
                "kv_gib": round(self.kv_gib, 3)}  # fmt: skip


def budget(engine: str, share: float, nvml_gib: float, weights_term: Term, tp: int, vocab_size: int | None,
           moe: bool, setting: Settings, release: str | None = None, moe_shape: MoeShape | None = None) -> Budget:  # fmt: skip
    """The KV budget per GPU of one server: ``weights_term`` per GPU (:func:`weights`, drafter included)."""
    total = torch_total(nvml_gib)
    terms: list[Term] = [weights_term]
    if engine in ("vllm", "trtllm"):
        terms.append(activation(engine, vocab_size, setting.batched_tokens, setting.max_seqs, moe, release, moe_shape,
                                tp))  # fmt: skip
    terms.append(non_torch(tp))
    graphs = cuda_graphs(setting.cuda_graphs) if engine == "vllm" else None
    if graphs is not None:
        terms.append(graphs)
    return Budget(engine, share, total, tuple(terms))
