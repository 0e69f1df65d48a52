"""The memory plan: does each method's server hold the suite's top concurrency, and does every method get the same
KV capacity in requests? Pure arithmetic over the model registry's facts (weights, KV geometry, the drafts' sizes),
the GPUs planned for and each engine's own memory rule; nothing here reads a file or the network.

Each engine's memory share, read from its source (per GPU; weights are split over tp); what each engine subtracts
from it, term by term (the total PyTorch sees, the weights as loaded, the activation peak, memory outside PyTorch,
vLLM's CUDA-graph estimate), is :mod:`dflashbench.plan.budget_terms`'s, and docs/memory.md gives the rule per
engine:

- vLLM: it takes ``total x gpu_memory_utilization`` (default 0.92 from 0.20.0, the first release with DFlash, to
  0.33.0: vllm/config/cache.py, ``Field(default=0.92)``, line 66 in 0.20.0 and 215 in 0.33.0; vllm/v1/worker/utils.py
  request_memory, line 724 in 0.33.0).
- SGLang: ``mem_fraction_static`` is "(model weights + KV cache pool) / GPU memory capacity"
  (sglang/srt/arg_groups/memory_hook.py:60, 0.5.23); the KV pool is the memory free after loading the target and
  the draft, less ``total x (1 - mem_fraction_static)`` (sglang/srt/mem_cache/kv_cache_configurator.py:2990-3038,
  _profile_available_bytes). The recipe's ``--mem-fraction-static`` when given, else SGLang's own choice,
  :func:`sglang_fraction` (memory_hook.py:281-326).
- TensorRT-LLM: ``kv_cache_config.free_gpu_memory_fraction``, 0.9 of what its profiling forward leaves free
  (KvCacheConfig, NVIDIA/TensorRT-LLM@000439672005:tensorrt_llm/llmapi/llm_args.py: "The fraction of GPU memory
  fraction that should be allocated for the KV cache. Default is 90%", as read in an earlier revision of that file).

KV bytes per token and GPU, from the target's config: every full-attention layer keeps K and V of
``ceil(kv_heads / tp)`` heads (at least one: the heads are split over tp, and replicated when tp exceeds them) of
``head_dim`` values, or one latent vector of ``latent_dim`` (MLA, not split over tp); a sliding-window layer keeps at
most its window (vLLM: vllm/v1/kv_cache_interface.py SlidingWindowSpec, ``sliding_window - 1`` tokens plus those in
flight; TensorRT-LLM: ``max_attention_window``), except on SGLang, whose SWA pool is sized at
``swa_full_tokens_ratio`` (0.8) of the full pool's tokens (sglang/srt/arg_groups/fields/schedule.py:150).
Linear-attention layers (Gated DeltaNet) keep a state per request instead: a convolution state of
``(kernel - 1) x (2 x key_heads x key_dim + value_heads x value_dim)`` in the model dtype and a recurrent state of
``value_heads x key_dim x value_dim`` in float32 (``mamba_ssm_dtype`` of the Qwen3.5/3.6 configs), both split over
tp. vLLM keeps ``1 + num_speculative_tokens`` of them per request (vllm/v1/worker/mamba_utils.py:815, 0.33.0);
SGLang splits its pool between states and KV (:func:`sglang_hybrid`); TensorRT-LLM is planned like vLLM.

A request holds ``prompt + max_tokens`` tokens; a speculative server also writes its draft tokens before they are
verified (the verify slots: a DFlash block, or an EAGLE-3 chain plus one) and keeps its draft's own KV cache over the
same tokens (SGLang sizes the draft pool to the target's token count: sglang/srt/model_executor/pool_configurator.py,
DefaultPoolConfigurator; an EAGLE-3 head "shares the target's per-layer KV size" there, which is how a head without
registry facts is counted). A request's tokens are rounded up to the engine's KV block (:data:`KV_BLOCK_TOKENS`).
Capacity in requests is what fits at once. Every method gets the tightest method's capacity: the others are capped
to it in the engine's own unit of KV size, bytes or tokens (:func:`cap_args`), never with a lower memory share, so
what the plan cannot know (the activation peak, memory outside PyTorch) cannot leave a capped server with less.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from dflashbench.backends._engine import last_number
from dflashbench.plan import budget_terms
from dflashbench.plan.models import KvFacts
from dflashbench.types import Method

GIB = 1 << 30
MIB = 1 << 20
KV_DTYPE_BYTES = 2  # every engine keeps the KV cache in the model's dtype (bf16) unless told --kv-cache-dtype
STATE_DTYPE_BYTES = 4  # Gated DeltaNet recurrent state: mamba_ssm_dtype float32 in the Qwen3.5/3.6 configs
SWA_FULL_TOKENS_RATIO = 0.8  # SGLang: swa_full_tokens_ratio fallback (sglang/srt/arg_groups/fields/schedule.py:150)
MAMBA_FULL_MEMORY_RATIO = 0.9  # SGLang: mamba_full_memory_ratio fallback (fields/schedule.py:220)
# SGLang's mamba state slots per running request: 3 (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO) + 2 tracking slots
# with the extra buffer and the overlap schedule (get_mamba_tracking_slots), which dflashbench's SGLang plans use
# (sglang/srt/mem_cache/kv_cache_configurator.py:227 and _calculate_mamba_ratio; allocation_sizing.py:11)
SGLANG_MAMBA_SLOTS = 3 + 2
VLLM_DEFAULT_SHARE = 0.92
TRTLLM_DEFAULT_SHARE = 0.9
ASSUMED_DRAFT_LAYERS = 5  # a DFlash drafter without registry facts: the paper's 5-layer drafters (Qwen3-8B-DFlash-b16)


# --- what a server keeps ------------------------------------------------------------------------------------------


def heads_per_gpu(heads: int, tp: int) -> int:
    """KV heads one GPU holds: split over tp, at least one (replicated when tp exceeds them)."""
    return max(1, math.ceil(heads / tp))


def full_bytes_per_token(kv: KvFacts, tp: int, dcp: int = 1) -> int:
    """KV bytes one token costs on one GPU in the layers that keep the whole context. An MLA latent is the same on
    every tp rank, unless vLLM's decode context parallelism shards the tokens over ``dcp`` of them
    (:data:`DCP_SOURCE`)."""
    if kv.latent_dim is not None:
        return math.ceil(kv.full_layers * kv.latent_dim * KV_DTYPE_BYTES / max(dcp, 1))
    return kv.full_layers * 2 * heads_per_gpu(kv.kv_heads, tp) * kv.head_dim * KV_DTYPE_BYTES


def sliding_bytes_per_token(kv: KvFacts, tp: int) -> int:
    """KV bytes one token costs on one GPU in the sliding-window layers (while it is inside the window)."""
    heads = heads_per_gpu(kv.sliding_kv_heads or kv.kv_heads, tp)
    return kv.sliding_layers * 2 * heads * (kv.sliding_head_dim or kv.head_dim) * KV_DTYPE_BYTES


def linear_state_bytes(kv: KvFacts, tp: int) -> int:
    """One request's linear-attention state on one GPU: every Gated DeltaNet layer's convolution and recurrent state."""
    if not kv.linear_layers:
        return 0
    kh, vh = kv.linear_key_heads or 0, kv.linear_value_heads or 0
    kd, vd, kernel = kv.linear_key_head_dim or 0, kv.linear_value_head_dim or 0, kv.linear_conv_kernel or 1
    conv = (kernel - 1) * (2 * kh * kd + vh * vd) * KV_DTYPE_BYTES
    recurrent = vh * kd * vd * STATE_DTYPE_BYTES
    return kv.linear_layers * math.ceil((conv + recurrent) / tp)


# A request's KV is held in whole blocks: vLLM's default block_size 16 on CUDA (vllm@v0.33.0 vllm/config/cache.py,
# "block_size ... defaults to 16"), SGLang's page_size 1 with its default attention backends (sglang@0.5.23
# sglang/srt/server_args.py page_size default), TensorRT-LLM's tokens_per_block 32 ("Number of tokens per block: 32."
# in its logs; KvCacheConfig tokens_per_block).
KV_BLOCK_TOKENS = {"vllm": 16, "sglang": 1, "trtllm": 32}


def round_to_block(engine: str, tokens: int) -> int:
    block = KV_BLOCK_TOKENS.get(engine, 1)
    return -(-tokens // block) * block


# vLLM's decode context parallelism: "Number of ranks that shard the decode KV cache. DCP does not expand the process
# world size. Without PCP, DCP reuses TP ranks", and "tp_size={tp} must be divisible by dcp_size"
# (vllm-project/vllm@00193b82b0e2:vllm/config/parallel.py, ParallelConfig.decode_context_parallel_size and
# _validate_parallel_config); "DCP multiplies the GPU KV cache size by dcp_world_size" and "Max DCP =
# tensor-parallel-size ÷ num_kv_heads", MLA models only (vllm-project/recipes@8959cf6
# models/moonshotai/Kimi-K2-Thinking.yaml#L194 and src/components/recipes/CommandBuilder.jsx#L56-L62; the Kimi-K2.5
# recipe marks it supports_dcp, models/moonshotai/Kimi-K2.5.yaml#L31). Flag: --decode-context-parallel-size.
DCP_SOURCE = ("vllm/config/parallel.py decode_context_parallel_size (tp divisible by it); vllm-project/recipes "
              "models/moonshotai/Kimi-K2.5.yaml#L31 supports_dcp, Kimi-K2-Thinking.yaml#L194 (KV x dcp)")


def attention_bytes(engine: str, kv: KvFacts, tokens: int, extra: int, tp: int, dcp: int = 1) -> int:
    """KV bytes a request of ``tokens`` (plus ``extra`` verify slots) keeps on one GPU in ``kv``'s attention layers,
    in whole KV blocks of ``engine``."""
    n = round_to_block(engine, tokens + extra)
    out = n * full_bytes_per_token(kv, tp, dcp)
    if kv.sliding_layers:
        window = kv.sliding_window or n
        held = n * SWA_FULL_TOKENS_RATIO if engine == "sglang" else min(window + extra, n)
        out += math.ceil(held * sliding_bytes_per_token(kv, tp))
    return out


# --- each engine's share ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    value: float
    why: str  # where it came from


def _last_float(args, name: str) -> float | None:
    return last_number(args, float, name)


def prefill_graph_sizes(max_bs: int) -> int:
    """How many prefill CUDA graphs SGLang 0.5.23 captures up to ``max_bs`` tokens (its
    generate_prefill_cuda_graph_batch_sizes, sglang/srt/arg_groups/cuda_graph_hook.py:480): steps of 4 to 32, 16 to
    256, 32 to 512, 64 to 1024, 256 to 4096, then 512."""
    ranges = ((4, 33, 4), (48, 257, 16), (288, 513, 32), (576, 1025, 64), (1280, 4097, 256), (4608, max_bs + 1, 512))
    return sum(1 for lo, hi, step in ranges for s in range(lo, hi, step) if s <= max_bs)


def sglang_fraction(gpu_mib: float, tp: int, max_running: int | None) -> float:
    """SGLang 0.5.23's own mem_fraction_static when none is given (memory_hook.py handle_gpu_memory_settings, the
    path without post-capture sizing, which is off by default: SGLANG_ENABLE_POST_CAPTURE_KV_SIZING = EnvBool(False),
    sglang/srt/environ.py:640): reserved MB = 512 + 1.5 x max(chunked_prefill_size, 2048) + tp/8 x 1024 +
    2 x decode graph max batch + 8 x prefill graphs (prefill graphs are captured by default on CUDA,
    model_executor/cuda_graph_config.py:119), at least 10 GiB on GPUs over 60 GB; fraction = (total - reserved)/total."""
    if gpu_mib < 20 * 1024:
        chunked, decode_bs = 2048, 8
    elif gpu_mib < 35 * 1024:
        chunked, decode_bs = 4096, 48 if tp < 4 else 160
    elif gpu_mib < 60 * 1024:
        chunked, decode_bs = 4096, 32 if tp < 4 else 160
    elif gpu_mib < 160 * 1024:
        chunked, decode_bs = 8192, 256 if tp < 4 else 512
    else:
        chunked, decode_bs = 16384, 512
    if max_running is not None and decode_bs > max_running:
        decode_bs = max_running  # memory_hook.py: the decode graph stops at --max-running-requests
    reserved = 512 + max(chunked, 2048) * 1.5 + tp / 8 * 1024 + decode_bs * 2 + prefill_graph_sizes(chunked) * 8
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def engine_share(engine: str, args: tuple[str, ...], config: dict, gpu_gib: float, tp: int,
                 max_running: int | None) -> Share:  # fmt: skip
    """The memory share ``engine`` works with: the flag among ``args`` (the recipe's and the suite's, last wins) or
    the YAML key in ``config``, else the engine's own default."""
    if engine == "vllm":
        given = _last_float(args, "--gpu-memory-utilization")
        return Share(given, "--gpu-memory-utilization") if given else Share(
            VLLM_DEFAULT_SHARE, "vLLM's gpu_memory_utilization default (vllm/config/cache.py, 0.20.0-0.33.0)")
    if engine == "sglang":
        given = _last_float(args, "--mem-fraction-static")
        if given:
            return Share(given, "--mem-fraction-static")
        return Share(sglang_fraction(gpu_gib * 1024, tp, max_running),
                     "SGLang's own choice for this GPU (sglang/srt/arg_groups/memory_hook.py, 0.5.23)")
    kv_config = config.get("kv_cache_config") if isinstance(config.get("kv_cache_config"), dict) else {}
    given = kv_config.get("free_gpu_memory_fraction") or _last_float(args, "--kv_cache_free_gpu_memory_fraction")
    return Share(float(given), "free_gpu_memory_fraction") if given else Share(
        TRTLLM_DEFAULT_SHARE, "TensorRT-LLM's free_gpu_memory_fraction default (KvCacheConfig, llmapi/llm_args.py)")


# --- one server ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerNeeds:
    """What one method's server loads and keeps: its inputs to :func:`server_memory`."""

    method: Method
    target_kv: KvFacts
    weights_gib: float  # target + draft, the whole checkpoints (split over tp)
    draft_kv: KvFacts | None = None
    verify_tokens: int = 0  # draft tokens written before verification: DFlash block, EAGLE-3 chain + 1
    draft_tokens: int = 0  # draft tokens per step (vLLM keeps one linear-attention state per draft token too)
    assumed: tuple[str, ...] = ()  # facts the registry lacks that the plan assumed, said in the plan
    draft_gib: float = 0.0  # the draft's part of weights_gib
    mxfp4: budget_terms.Mxfp4Moe | None = None  # the target's MXFP4 experts, which the engines pad as they load them
    vocab_size: int | None = None  # the sampler's rows are this wide (vLLM's activation peak)
    moe: bool = False
    moe_shape: budget_terms.MoeShape | None = None  # the experts' shape (vLLM's fused-experts workspaces)
    settings: budget_terms.Settings = field(default_factory=lambda: budget_terms.Settings(
        budget_terms.VLLM_BATCHED_TOKENS, budget_terms.VLLM_MAX_SEQS, True))  # fmt: skip


def pipeline_stage(needs: ServerNeeds, pp: int) -> ServerNeeds:
    """What one GPU of a ``pp``-stage pipeline holds: 1/pp of the target's layers, so 1/pp of its weights and of
    each token's KV and each request's states (whole layers per stage, so the largest stage: ceil). The draft is
    counted whole on every stage, as if each held it (the engines keep it on one: a conservative reading)."""
    if pp <= 1:
        return needs
    kv = needs.target_kv
    per_stage = kv.model_copy(update={"full_layers": -(-kv.full_layers // pp),
                                      "sliding_layers": -(-kv.sliding_layers // pp),
                                      "linear_layers": -(-kv.linear_layers // pp)})  # fmt: skip
    target_gib = (needs.weights_gib - needs.draft_gib) / pp
    return dataclasses.replace(needs, target_kv=per_stage, weights_gib=target_gib + needs.draft_gib,
                               assumed=(*needs.assumed, f"pp {pp}: each GPU holds 1/{pp} of the target's layers "
                                        "(weights and KV); the draft counted whole on every stage"))  # fmt: skip


@dataclass(frozen=True)
class ServerMemory:
    method: Method
    weights_gib: float  # per GPU, as the engine loads them
    share: Share
    kv_gib: float  # per GPU, for the KV cache and states
    request_mib: float  # one request, per GPU: KV of target and draft over prompt + output + verify slots, states
    requests: int  # requests that fit at once
    limit: str = ""  # what bounds it besides the KV cache (SGLang's mamba state slots)
    assumed: tuple[str, ...] = ()
    budget: budget_terms.Budget | None = None  # the terms the engine subtracts
    request_tokens: int = 0  # one request's tokens in the engine's pool: prompt + max_tokens + verify, in blocks


def sglang_hybrid(rest_bytes: float, state: int, draft_tokens: int, attn_request: int,
                  max_running: int, ratio: float = MAMBA_FULL_MEMORY_RATIO) -> tuple[int, str]:  # fmt: skip
    """Requests SGLang 0.5.23 holds on a hybrid (linear-attention) target: it gives the states
    ``mamba_full_memory_ratio / (1 + ratio)`` of the memory, ``SGLANG_MAMBA_SLOTS`` slots per request, and a
    speculative server also keeps an intermediate state per draft token of every running request
    (kv_cache_configurator.py _handle_max_mamba_cache and resolve_max_num_reqs); the KV cache gets the rest."""
    budget = rest_bytes * ratio / (1 + ratio)
    if draft_tokens:
        d = draft_tokens
        slots = int((budget - state * (1 + d)) // (state * (1 + d / SGLANG_MAMBA_SLOTS)))
        capped = min(max_running, slots // SGLANG_MAMBA_SLOTS)
        rest_bytes -= state * (capped + 1) * d
    else:
        slots = int(budget // state) - 1
    kv_bytes = rest_bytes - (slots + 1) * state
    by_state = max(slots, 0) // SGLANG_MAMBA_SLOTS
    by_kv = int(kv_bytes // attn_request) if kv_bytes > 0 else 0
    if by_state < by_kv:
        per_draft = (f", and {draft_tokens} intermediate states per running request, one per draft token"
                     if draft_tokens else "")  # fmt: skip
        return by_state, f"mamba state slots ({SGLANG_MAMBA_SLOTS} per request{per_draft})"
    return by_kv, ""


# The splits of SGLang's pool between states and KV tried when the states bind (its --mamba-full-memory-ratio; it
# logs "To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size", kv_cache_configurator.py
# #L3137-L3148, 0.5.23): whether any split would hold more is what a refusal should say
SGLANG_RATIOS = (0.25, 0.5, 0.9, 1.5, 2, 3, 4, 6, 8, 12, 16, 32)


def sglang_best_split(rest_bytes: float, state: int, draft_tokens: int, attn_request: int,
                      max_running: int) -> tuple[int, float]:  # fmt: skip
    """The most requests any of :data:`SGLANG_RATIOS` holds, and that ratio (the default's on a tie)."""
    found = [(sglang_hybrid(rest_bytes, state, draft_tokens, attn_request, max_running, r)[0], r == MAMBA_FULL_MEMORY_RATIO, r)
             for r in SGLANG_RATIOS]  # fmt: skip
    held, _, ratio = max(found)
    return held, ratio


def server_budget(engine: str, needs: ServerNeeds, share: Share, gpu_gib: float, tp: int,
                  release: str | None = None) -> budget_terms.Budget:  # fmt: skip
    """The server's KV budget per GPU as ``engine`` counts it (:mod:`dflashbench.plan.budget_terms`)."""
    target = budget_terms.weights(needs.weights_gib - needs.draft_gib, tp, needs.mxfp4, engine)
    if needs.draft_gib:
        target = budget_terms.Term(target.name, target.gib + needs.draft_gib / tp,
                                   target.source + "; the draft's checkpoint over tp")  # fmt: skip
    return budget_terms.budget(engine, share.value, gpu_gib, target, tp, needs.vocab_size, needs.moe,
                               needs.settings, release, needs.moe_shape)  # fmt: skip


def request_bytes(engine: str, needs: ServerNeeds, tokens: int, tp: int, dcp: int = 1) -> tuple[int, int]:
    """One request's attention KV (target and draft) and its linear-attention state, in bytes per GPU; ``dcp``
    shards the target's MLA KV (the draft's own is counted whole: a conservative reading)."""
    attn = attention_bytes(engine, needs.target_kv, tokens, needs.verify_tokens, tp, dcp)
    if needs.draft_kv is not None:
        attn += attention_bytes(engine, needs.draft_kv, tokens, needs.verify_tokens, tp)
    return attn, linear_state_bytes(needs.target_kv, tp)


def server_memory(engine: str, needs: ServerNeeds, share: Share, gpu_gib: float, tp: int, tokens: int,
                  max_running: int, release: str | None = None, dcp: int = 1) -> ServerMemory:  # fmt: skip
    """How many requests of ``tokens`` one method's server holds at once on ``tp`` GPUs of ``gpu_gib`` (NVML's)."""
    budget = server_budget(engine, needs, share, gpu_gib, tp, release)
    kv_gib = budget.kv_gib
    attn, state = request_bytes(engine, needs, tokens, tp, dcp)
    limit = ""
    if kv_gib <= 0:
        requests = 0
    elif state and engine == "sglang":
        d = needs.verify_tokens if needs.draft_tokens else 0
        given = needs.settings.mamba_ratio
        requests, limit = sglang_hybrid(kv_gib * GIB, state, d, attn, max_running, given or MAMBA_FULL_MEMORY_RATIO)
        if limit:  # SGLang's own advice is a larger state share: say what the best split would hold, and how to ask
            best, ratio = sglang_best_split(kv_gib * GIB, state, d, attn, max_running)
            split = (f"--mamba-full-memory-ratio {given}" if given else
                     f"--mamba-full-memory-ratio, default {MAMBA_FULL_MEMORY_RATIO}")  # fmt: skip
            limit += (f"; the best split of states and KV ({split}) is {ratio:g}, holding {best} (a suite's "
                      f'[extra_args] {needs.method.value} = ["--mamba-full-memory-ratio", "{ratio:g}"])' if best > requests
                      else f"; no other split of states and KV ({split}) holds more")  # fmt: skip
    else:
        per_request = attn + state * (1 + needs.draft_tokens)
        requests = int(kv_gib * GIB // per_request)
    per_request_mib = (attn + state * (1 + needs.draft_tokens if engine != "sglang" else SGLANG_MAMBA_SLOTS)) / MIB
    weights = budget.terms[0].gib
    return ServerMemory(needs.method, weights, share, kv_gib, per_request_mib, max(requests, 0), limit, needs.assumed,
                        budget, round_to_block(engine, tokens + needs.verify_tokens))  # fmt: skip


# --- the plan -----------------------------------------------------------------------------------------------------

HEADROOM = 1.1  # the tightest server holds at least this times the top concurrency, or the plan says "at risk"


@dataclass(frozen=True)
class MemoryPlan:
    """Every method's server on ``tp`` GPUs, the capacity they all get, and why the plan is refused (if it is)."""

    engine: str
    gpu_label: str
    gpu_gib: float
    tp: int
    tokens: int  # per request: the longest workload's prompt + max_tokens
    tokens_why: str
    concurrency: int  # the suite's top concurrency
    servers: dict[Method, ServerMemory]
    problems: tuple[str, ...] = ()  # each a reason the plan cannot run, with its fix
    notes: tuple[str, ...] = ()
    caps: dict[Method, int] = field(default_factory=dict)  # each method's cap to the common capacity (engine units)
    risk: str = ""  # why the plan is at risk (thin headroom), "" when it is not
    dcp: int = 1  # vLLM's decode context parallel size (an MLA target's KV sharded over the tp ranks)
    smaller: str = ""  # why the next smaller tp was not chosen (what bound its tightest server)
    pp: int = 1  # pipeline stages: each GPU holds 1/pp of the target's layers (pipeline_stage)
    nodes: int = 1  # machines each server spans (issue #67): tp x pp GPUs over them

    @property
    def gpus(self) -> int:
        """GPUs one server takes."""
        return self.tp * self.pp

    @property
    def capacity(self) -> int:
        """Requests every method's server holds at once: the tightest server's."""
        return min((s.requests for s in self.servers.values()), default=0)

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def margin(self) -> float | None:
        """The tightest server's capacity over the top concurrency (``None`` without a top concurrency)."""
        return self.capacity / self.concurrency if self.concurrency else None

    @property
    def at_risk(self) -> bool:
        return bool(self.risk)

    def tightest(self) -> Method | None:
        """The method whose server holds the fewest requests: the sweep starts it first and caps the rest to it."""
        return min(self.servers, key=lambda m: self.servers[m].requests) if self.servers else None

    def lines(self) -> list[str]:
        """The plan as the dry run prints it: the budget of each server term by term, its capacity and cap, then
        the common capacity with its margin over the top concurrency, and any refusal."""
        dcp = f", decode context parallel {self.dcp}" if self.dcp > 1 else ""
        dcp += f", pp {self.pp}" if self.pp > 1 else ""
        dcp += f", across {self.nodes} nodes" if self.nodes > 1 else ""
        out = [f"memory plan ({self.engine}, tp {self.tp} x {self.gpu_gib:.1f} GiB {self.gpu_label}{dcp}): a request "
               f"holds {self.tokens:,} tokens ({self.tokens_why}); top concurrency {self.concurrency}"]  # fmt: skip
        for method, s in self.servers.items():
            cap = self.caps.get(method)
            shown = "" if cap is None else f"; capped to the common capacity: {cap_unit(self.engine)} {cap:,}" + (
                f" ({cap / GIB:.2f} GiB)" if self.engine == "vllm" else " tokens")  # fmt: skip
            limit = f", bound by {s.limit}" if s.limit else ""
            out.append(f"  {method.value:<6} KV/GPU = {s.budget.formula() if s.budget else f'{s.kv_gib:.2f} GiB'}")
            out.append(f"         share {s.share.value:g} ({s.share.why}); {s.request_mib:,.1f} MiB/request/GPU "
                       f"({s.request_tokens:,} tokens in KV blocks) -> {s.requests:,} requests{limit}{shown}")  # fmt: skip
            for assumed in s.assumed:
                out.append(f"         assumed: {assumed}")
        estimates = sorted({e for s in self.servers.values() if s.budget for e in s.budget.estimates()})
        if estimates:
            out.append(f"  estimates (from public engine logs, docs/memory.md): {', '.join(estimates)}; a launched "
                       "server's own KV report is read and recorded beside these figures")  # fmt: skip
        margin = f" ({self.margin:.2f}x)" if self.margin is not None else ""
        out.append(f"  every method holds {self.capacity:,} requests at once (the tightest server's, "
                   f"{self.tightest().value if self.tightest() else '-'}), "
                   f"{'>=' if self.capacity >= self.concurrency else '<'} c={self.concurrency}{margin}")  # fmt: skip
        if self.risk:
            out.append(f"  at risk: {self.risk}")
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  refused: {p}" for p in self.problems]
        return out

    def record(self) -> dict:
        """What the manifest keeps (``memory_plan``), the report's "Measured on" line reads, and a placement of
        several servers on one node can use: per method its tp, budget terms, capacity and cap."""
        return {
            "engine": self.engine, "gpu": self.gpu_label, "gpu_gib": round(self.gpu_gib, 2), "tp": self.tp,
            **({"dcp": self.dcp} if self.dcp > 1 else {}),
            **({"pp": self.pp} if self.pp > 1 else {}), **({"nodes": self.nodes} if self.nodes > 1 else {}),
            "tokens_per_request": self.tokens, "top_concurrency": self.concurrency, "capacity_requests": self.capacity,
            "margin": round(self.margin, 3) if self.margin is not None else None, "at_risk": self.risk or None,
            "tightest": self.tightest().value if self.tightest() else None, "cap_unit": cap_unit(self.engine),
            "servers": {m.value: {"tp": self.tp, **({"pp": self.pp} if self.pp > 1 else {}),
                                  **({"nodes": self.nodes} if self.nodes > 1 else {}), "weights_gib": round(s.weights_gib, 2), "share": s.share.value,
                                  "kv_gib": round(s.kv_gib, 2), "request_mib": round(s.request_mib, 2),
                                  "request_tokens": s.request_tokens, "requests": s.requests,
                                  **({"budget": s.budget.record()} if s.budget else {}),
                                  **({"cap": self.caps[m]} if m in self.caps else {})}
                        for m, s in self.servers.items()},
            "problems": list(self.problems),
        }  # fmt: skip


def cap_unit(engine: str) -> str:
    return {"vllm": "--kv-cache-memory-bytes", "sglang": "--max-total-tokens"}.get(
        engine, "kv_cache_config.max_tokens")


def cap_for(engine: str, capacity: int, server: ServerMemory) -> int:
    """The KV size, in ``engine``'s unit, that holds ``server`` to ``capacity`` requests: vLLM bytes per GPU
    (``--kv-cache-memory-bytes``: vLLM then skips its profiling and keeps exactly these bytes, vllm@v0.33.0
    vllm/v1/worker/gpu_worker.py#L656-L681; the option exists from vLLM 0.10.2, vllm@v0.10.2 vllm/config/cache.py
    kv_cache_memory_bytes, absent from 0.10.1.1), rounded up to a MiB; SGLang and TensorRT-LLM tokens of the
    target's pool, each request in whole blocks."""
    if engine == "vllm":
        return math.ceil(capacity * server.request_mib) * MIB
    return capacity * server.request_tokens


def equal_caps(engine: str, servers: dict[Method, ServerMemory]) -> dict[Method, int]:
    """The cap that holds each roomier server to the tightest one's capacity, in the engine's unit of KV size
    (:func:`cap_for`), never a lower memory share: a share cap still loses the whole of what the plan cannot know
    (activations, memory outside PyTorch) from the capped server, and AR, whose requests cost least, loses the most
    requests to it. SGLang's ``--max-total-tokens`` and TensorRT-LLM's ``kv_cache_config.max_tokens`` are ceilings
    under what the engine profiles. The tightest server keeps the engine's own sizing."""
    capacity = min((s.requests for s in servers.values()), default=0)
    return {m: cap_for(engine, capacity, s) for m, s in servers.items() if s.requests > capacity > 0}


CAP_FLAGS = {"vllm": "--kv-cache-memory-bytes", "sglang": "--max-total-tokens"}


def cap_args(engine: str, cap: int | None) -> tuple[list[str], list[str], dict]:
    """The engine's flags (and, for TensorRT-LLM, YAML keys) that hold a server to ``cap`` (:func:`equal_caps`), as
    (flags before the recipe's, flags after them, YAML): vLLM ``--kv-cache-memory-bytes``, SGLang
    ``--max-total-tokens`` (a ceiling under what it profiles, kv_cache_configurator.py _apply_token_constraints),
    TensorRT-LLM ``kv_cache_config.max_tokens`` ("If both max_tokens and free_gpu_memory_fraction are specified,
    memory corresponding to the minimum will be used")."""
    if cap is None:
        return [], [], {}
    if engine in CAP_FLAGS:
        return [CAP_FLAGS[engine], str(int(cap))], [], {}
    return [], [], {"kv_cache_config": {"max_tokens": int(cap)}}


def plan_servers(engine: str, needs: dict[Method, ServerNeeds], shares: dict[Method, Share], gpu_label: str,
                 gpu_gib: float, tp: int, tokens: int, tokens_why: str, concurrency: int,
                 release: str | None = None, dcp: int = 1) -> MemoryPlan:  # fmt: skip
    """Every method's server at ``tp``, the caps that give them all the tightest one's capacity, and whether the
    tightest holds :data:`HEADROOM` times the top concurrency."""
    servers = {m: server_memory(engine, n, shares[m], gpu_gib, tp, tokens, concurrency, release, dcp)
               for m, n in needs.items()}  # fmt: skip
    caps = equal_caps(engine, servers)
    capacity = min((s.requests for s in servers.values()), default=0)
    risk = ""
    if concurrency and concurrency <= capacity < HEADROOM * concurrency:
        risk = (f"the tightest server holds {capacity} requests, under {HEADROOM}x c={concurrency} "
                f"({math.ceil(HEADROOM * concurrency)}): the plan's estimates (activation peak, memory outside "
                "PyTorch) may be off by that much")  # fmt: skip
    return MemoryPlan(engine, gpu_label, gpu_gib, tp, tokens, tokens_why, concurrency, servers, caps=caps, risk=risk,
                      dcp=dcp)
