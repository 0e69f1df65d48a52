"""The model registry: every target with a published DFlash drafter, with its drafts and engine recipes.

The data is ``dflashbench/data/models.toml`` (each fact with the source it was read from); this module reads
it strictly (unknown keys are errors, as in suites) and answers one question: what does a ``--model`` name
mean. ``lookup("gpt-oss-120b")`` finds an entry by alias or Hugging Face id (case-insensitive); an unknown
name is not an error here (any HF id or local directory may be benchmarked with an explicit ``--draft``).
"""

from __future__ import annotations

import functools
import math
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dflashbench.errors import UserError
from dflashbench.methods import record
from dflashbench.plan.gpus import ASSUMED, Arch
from dflashbench.types import Method

REGISTRY_FILE = Path(__file__).resolve().parent.parent / "data" / "models.toml"
ENGINES = ("vllm", "sglang", "trtllm")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Chat(_Strict):
    """What requests send so the target runs as its drafter was trained and evaluated."""

    chat_template_kwargs: dict[str, bool | str | int] = Field(default_factory=dict)
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    drafter_trained_with_thinking: bool | None = None  # where the drafter's makers say; None: not stated
    source: str


EagleFormat = Literal["eagle3", "speculators"]


class KvFacts(_Strict):
    """What a model keeps per token and per request while serving, from its config.json (the text model's, for a
    multimodal checkpoint): the attention layers that hold every token, the sliding-window layers that hold at most
    their window, a latent (MLA) vector in place of per-head K and V, and the linear-attention (Gated DeltaNet,
    Mamba) layers that keep a fixed state per request instead. :mod:`dflashbench.plan.memory` turns these into
    bytes."""

    full_layers: int = Field(ge=0)  # attention layers over the whole context
    kv_heads: int = Field(ge=1)  # num_key_value_heads
    head_dim: int = Field(ge=1)
    sliding_layers: int = Field(0, ge=0)
    sliding_window: int | None = Field(None, ge=1)
    sliding_kv_heads: int | None = Field(None, ge=1)  # where they differ from the full layers' (Gemma 4)
    sliding_head_dim: int | None = Field(None, ge=1)
    latent_dim: int | None = Field(None, ge=1)  # MLA: kv_lora_rank + qk_rope_head_dim, one vector per token and layer
    linear_layers: int = Field(0, ge=0)  # Gated DeltaNet / Mamba layers
    linear_key_heads: int | None = Field(None, ge=1)  # linear_num_key_heads
    linear_value_heads: int | None = Field(None, ge=1)  # linear_num_value_heads
    linear_key_head_dim: int | None = Field(None, ge=1)
    linear_value_head_dim: int | None = Field(None, ge=1)
    linear_conv_kernel: int | None = Field(None, ge=1)  # linear_conv_kernel_dim
    source: str

    @model_validator(mode="after")
    def _complete(self) -> KvFacts:
        if self.sliding_layers and self.sliding_window is None:
            raise ValueError("sliding_layers needs sliding_window")
        linear = (self.linear_key_heads, self.linear_value_heads, self.linear_key_head_dim,
                  self.linear_value_head_dim, self.linear_conv_kernel)  # fmt: skip
        if self.linear_layers and None in linear:
            raise ValueError("linear_layers needs linear_key_heads, linear_value_heads, linear_key_head_dim, "
                             "linear_value_head_dim and linear_conv_kernel")  # fmt: skip
        return self


class Mxfp4Experts(_Strict):
    """An MXFP4 mixture of experts as its config.json describes it: the engines pad these weights as they load them
    (:mod:`dflashbench.plan.budget_terms`), so the loaded size is larger than the checkpoint's."""

    layers: int = Field(ge=1)  # num_hidden_layers
    experts: int = Field(ge=1)  # num_local_experts
    hidden_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=1)
    source: str


class MoeExperts(_Strict):
    """A mixture of experts' shape as its config.json gives it: what sizes vLLM's fused-experts workspaces in the
    activation peak (:func:`dflashbench.plan.budget_terms.moe_workspace_bytes`)."""

    experts_per_token: int = Field(ge=1)  # num_experts_per_tok
    intermediate_size: int = Field(ge=1)  # moe_intermediate_size
    hidden_size: int = Field(ge=1)
    source: str


class DFlashDraft(_Strict):
    """A DFlash or DFlash2 drafter (DFlash2: ``architecture = "DFlash2DraftModel"``)."""

    id: str
    architecture: str | None = None  # config.json architectures[0]: what tells an engine DFlash2 from DFlash
    licence: str | None = None  # where the licence restricts use (non-commercial, no derivatives, ...)
    weights_gib: float | None = Field(None, gt=0)  # the drafter's checkpoint
    kv: KvFacts | None = None  # the drafter's own KV cache (its layers attend over the whole context)
    block_size: int | None = Field(None, ge=2, description="None: no source found; read from config.json at launch")
    # The drafter's attention layers: all full, all sliding-window, or mixed (vLLM serves mixed ones from 0.26.0)
    layers: Literal["full", "sliding", "mixed"] | None = None
    target_layer_ids: list[int] | None = None  # config.json dflash_config.target_layer_ids
    gated: bool = False  # the Hugging Face repository asks users to accept terms before they can read it
    source: str
    sources: dict[str, str] = Field(default_factory=dict)  # a source per fact where it differs from `source`


class MtpHeads(_Strict):
    """The target checkpoint's own multi-token-prediction layers: how many (config.json ``mtp_num_hidden_layers`` for
    the Qwen3.5 family, ``num_nextn_predict_layers`` for DeepSeek-V3-style and Qwen3-Next checkpoints: the keys vLLM
    reads, vllm-project/vllm@v0.33.0:vllm/config/speculative.py#L908-L913 and #L987-L998), the family name vLLM's
    source maps the checkpoint to (``mtp`` is what dflashbench passes; the family names are deprecated aliases of it),
    and the draft length a source recommends."""

    layers: int = Field(ge=1)
    config_key: Literal["mtp_num_hidden_layers", "num_nextn_predict_layers"]
    vllm_family: str  # e.g. qwen3_5_mtp (vllm/config/speculative.py MTPModelTypes)
    num_speculative_tokens: int | None = Field(None, ge=1)
    source: str


class Eagle3Head(_Strict):
    id: str
    num_speculative_tokens: int | None = Field(None, ge=1)
    gated: bool = False
    # "speculators": vLLM's speculators layout (config.json speculators_model_type, architectures Eagle3Speculator);
    # "eagle3": the EAGLE authors' layout (LlamaForCausalLMEagle3), which every engine loads
    format: EagleFormat = "eagle3"
    weights_gib: float | None = Field(None, gt=0)
    kv: KvFacts | None = None
    source: str
    sources: dict[str, str] = Field(default_factory=dict)


# Which engines load which EAGLE-3 head layout, read from their source:
# - vLLM reads speculators configs (vllm/transformers_utils/configs/speculators/, 0.33.0);
# - SGLang 0.5.23 registers LlamaForCausalLMEagle3 and Eagle3DeepseekV2ForCausalLM as EAGLE-3 drafts
#   (sglang/srt/models/llama_eagle3.py, kimi_k25_eagle3.py EntryClass) and has neither a class nor a conversion for
#   Eagle3Speculator / speculators_model_type anywhere in the wheel;
# - TensorRT-LLM's Eagle3 worker loads the EAGLE layout; no speculators loader was found in its source.
HEAD_FORMATS: dict[str, frozenset[str]] = {
    "vllm": frozenset({"eagle3", "speculators"}),
    "sglang": frozenset({"eagle3"}),
    "trtllm": frozenset({"eagle3"}),
}


class MethodFlags(_Strict):
    """Flags for every method (``all``) or one method."""

    all: list[str] = Field(default_factory=list)
    ar: list[str] = Field(default_factory=list)
    dflash: list[str] = Field(default_factory=list)
    eagle3: list[str] = Field(default_factory=list)
    dflash2: list[str] = Field(default_factory=list)
    mtp: list[str] = Field(default_factory=list)
    ngram: list[str] = Field(default_factory=list)
    suffix: list[str] = Field(default_factory=list)

    def args_for(self, method: Method) -> list[str]:
        return [*self.all, *getattr(self, method.base.value)]  # an arm (dflash-k3) takes its method's

    def flat(self) -> list[str]:
        return [*self.all, *(a for m in Method for a in getattr(self, m.value))]


class ArchFlags(MethodFlags):
    """Flags that run on one GPU architecture only (see :mod:`dflashbench.plan.arch_flags` for why each is bound)."""

    source: str


class DraftRecipe(_Strict):
    """A speculative method's draft length and the drafter's own tp as an engine's recipe for the model sets them
    (vLLM ``num_speculative_tokens`` / ``draft_tensor_parallel_size`` in ``--speculative-config``; SGLang
    ``--speculative-num-steps`` and ``--speculative-num-draft-tokens``), with the recipe they were read from."""

    num_speculative_tokens: int | None = Field(None, ge=1)
    draft_tp: int | None = Field(None, ge=1)
    source: str


class Recipe(MethodFlags):
    """Engine flags a source calls for: for every method, or per method, on every GPU or on one architecture
    (``gpu.hopper``, ``gpu.blackwell``); TRT-LLM YAML keys in ``config``; each method's draft length and draft tp
    where the recipe sets them (``draft.<method>``)."""

    gpu: dict[Arch, ArchFlags] = Field(default_factory=dict)
    config: dict = Field(default_factory=dict)
    draft: dict[Method, DraftRecipe] = Field(default_factory=dict)
    source: str

    def args_for(self, method: Method, arch: Arch | None = None) -> list[str]:  # type: ignore[override]
        bound = self.gpu.get(arch) if arch else None
        return [*super().args_for(method), *(bound.args_for(method) if bound else [])]


class Fp8Checkpoint(_Strict):
    """A published FP8 copy of the target: the plan takes it where the registry's own checkpoint does not fit the
    GPUs planned for (Hopper and Blackwell both run FP8 GEMMs), or where ``--model`` names it."""

    hf_id: str = Field(pattern=r"^[^/\s]+/[^/\s]+$")
    weights_gib: float = Field(gt=0)
    source: str
    unverified: list[str] = Field(default_factory=list)


class ModelEntry(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    hf_id: str = Field(pattern=r"^[^/\s]+/[^/\s]+$")
    aliases: list[str] = Field(default_factory=list)
    params_b: float = Field(gt=0)
    active_params_b: float | None = Field(None, gt=0)
    weights_dtype: str
    weights_gib: float | None = Field(None, gt=0)
    architecture: str | None = None  # config.json architectures[0]: SGLang's hybrid-Mamba handling keys on it
    context_tokens: int | None = Field(None, ge=1)  # max_position_embeddings: vLLM's max_model_len by default
    kv: KvFacts | None = None
    mxfp4: Mxfp4Experts | None = None
    moe_experts: MoeExperts | None = None  # an MoE's expert shape (not for MXFP4 experts: their kernels differ)
    fp8: Fp8Checkpoint | None = None  # a published FP8 copy of the target
    gated: bool = False  # the target's Hugging Face repository asks users to accept terms before they can read it
    vocab_size: int | None = Field(None, gt=0)
    num_hidden_layers: int | None = Field(None, gt=0)
    source: str
    sources: dict[str, str] = Field(default_factory=dict)  # a source per fact where it differs from `source`
    unverified: list[str] = Field(default_factory=list)
    # engine -> the build it needs where no release serves this target with DFlash yet (an unmerged PR)
    engine_builds: dict[Literal["vllm", "sglang", "trtllm"], str] = Field(default_factory=dict)
    notes: str = ""
    chat: Chat | None = None
    dflash: DFlashDraft | None = None
    dflash2: DFlashDraft | None = None  # a DFlash2 drafter (architecture DFlash2DraftModel)
    mtp: MtpHeads | None = None  # the checkpoint's own MTP layers
    eagle3: Eagle3Head | None = None
    eagle3_none: str | None = None
    # An engine that cannot load [models.eagle3] gets its own head here, or the reason it has none
    eagle3_by_engine: dict[Literal["vllm", "sglang", "trtllm"], Eagle3Head] = Field(default_factory=dict)
    eagle3_none_by_engine: dict[Literal["vllm", "sglang", "trtllm"], str] = Field(default_factory=dict)
    recipes: dict[Literal["vllm", "sglang", "trtllm"], Recipe] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _eagle3_said(self) -> ModelEntry:
        if (self.eagle3 is None) == (self.eagle3_none is None):
            raise ValueError("give exactly one of [models.eagle3] (a public head) or eagle3_none (why there is none)")
        if self.dflash is None and self.dflash2 is None:
            raise ValueError("give [models.dflash] or [models.dflash2]: the registry lists targets with a published "
                             "DFlash or DFlash2 drafter")  # fmt: skip
        return self

    def block_drafter(self, method: Method) -> DFlashDraft | None:
        """The registry's DFlash (or DFlash2) drafter for ``method``."""
        return {Method.DFLASH: self.dflash, Method.DFLASH2: self.dflash2}.get(method)

    @property
    def names(self) -> set[str]:
        fp8 = {self.fp8.hf_id.lower()} if self.fp8 is not None else set()
        return {self.name, self.hf_id.lower(), *(a.lower() for a in self.aliases), *fp8}

    def as_fp8(self) -> ModelEntry:
        """This entry on its FP8 checkpoint (the same model, drafts and recipes; 1-byte weights)."""
        assert self.fp8 is not None
        return self.model_copy(update={"hf_id": self.fp8.hf_id, "weights_gib": self.fp8.weights_gib,
                                       "weights_dtype": "fp8"})  # fmt: skip

    def eagle3_for(self, backend: str | None = None) -> Eagle3Head | None:
        """The EAGLE-3 head ``backend`` can load: its own where the registry gives one, else the shared head when
        the engine reads its layout; ``None`` where there is none (:meth:`eagle3_missing` says why)."""
        own = self.eagle3_by_engine.get(backend) if backend else None  # type: ignore[call-overload]
        if own is not None:
            return own
        if self.eagle3 is None or (backend and backend in self.eagle3_none_by_engine):
            return None
        if backend in HEAD_FORMATS and self.eagle3.format not in HEAD_FORMATS[backend]:
            return None
        return self.eagle3

    def eagle3_missing(self, backend: str | None = None) -> str:
        """Why :meth:`eagle3_for` gives no head for ``backend``."""
        if backend and backend in self.eagle3_none_by_engine:
            return self.eagle3_none_by_engine[backend]  # type: ignore[index]
        if self.eagle3 is not None and backend in HEAD_FORMATS and self.eagle3.format not in HEAD_FORMATS[backend]:
            return (f"{self.eagle3.id} is in the {self.eagle3.format} format, which {backend} cannot load "
                    f"(dflashbench.plan.models.HEAD_FORMATS) and the model registry lists no {backend} head")
        return self.eagle3_none or "no EAGLE-3 head in the model registry"

    def draft_for(self, method: Method, backend: str | None = None) -> str | None:
        if method in (Method.DFLASH, Method.DFLASH2):
            drafter = self.block_drafter(method)
            return drafter.id if drafter else None
        if method is Method.EAGLE3:
            head = self.eagle3_for(backend)
            return head.id if head else None
        return None

    def recipe_args(self, backend: str, method: Method, arch: Arch | None = None) -> list[str]:
        recipe = self.recipes.get(backend)  # type: ignore[call-overload]
        return recipe.args_for(method, arch) if recipe else []

    def recipe_config(self, backend: str) -> dict:
        recipe = self.recipes.get(backend)  # type: ignore[call-overload]
        return dict(recipe.config) if recipe else {}

    def draft_recipe(self, backend: str, method: Method) -> DraftRecipe | None:
        """The draft length and draft tp ``backend``'s recipe for this model sets for ``method`` (``None``: none)."""
        recipe = self.recipes.get(backend)  # type: ignore[call-overload]
        return recipe.draft.get(method) if recipe else None


class Registry(_Strict):
    models: list[ModelEntry]

    @model_validator(mode="after")
    def _unique_names(self) -> Registry:
        seen: dict[str, str] = {}
        for entry in self.models:
            for name in entry.names:
                if name in seen and seen[name] != entry.name:
                    raise ValueError(f"name {name!r} belongs to both {seen[name]!r} and {entry.name!r}")
                seen[name] = entry.name
        return self


def load_registry(path: Path | str = REGISTRY_FILE) -> Registry:
    """Read and check the registry file; a one-line :class:`UserError` naming the entry and key if it is bad."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"model registry {path}: {exc}") from None
    try:
        return Registry.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UserError(f"model registry {path}: {where}: {err['msg']}") from None


@functools.cache
def registry() -> Registry:
    return load_registry()


def lookup(name: str | None) -> ModelEntry | None:
    """The entry a ``--model`` value names (alias or HF id, any case), or ``None``."""
    if not name:
        return None
    key = name.strip().lower()
    return next((e for e in registry().models if key in e.names), None)


def draft_kind(draft: str) -> tuple[Method, ModelEntry] | None:
    """Which kind of draft the registry knows ``draft`` (an HF id, any case) as, and for which target: a DFlash
    drafter or an EAGLE-3 head (any engine's); ``None`` for a draft it does not list."""
    key = draft.strip().lower()
    for entry in registry().models:
        heads = [entry.eagle3, *entry.eagle3_by_engine.values()]
        known = [(m, d.id) for m, d in ((Method.DFLASH, entry.dflash), (Method.DFLASH2, entry.dflash2)) if d]
        known += [(Method.EAGLE3, h.id) for h in heads if h is not None]
        for method, draft_id in known:
            if draft_id.lower() == key:
                return method, entry
    return None


def require(name: str) -> ModelEntry:
    entry = lookup(name)
    if entry is None:
        known = ", ".join(e.name for e in registry().models)
        raise UserError(f"{name!r} is not in the model registry; known: {known}")
    return entry


# --- the same budget for every method -----------------------------------------------------------------------

# Scheduler and memory flags: each changes how many requests, tokens or bytes a server works with, so a recipe gives
# each one to every method's server or to none (a comparison of decoding methods, not of budgets). Flag names from
# the engines' own parsers (vLLM EngineArgs, SGLang ServerArgs, trtllm-serve serve options).
BUDGET_FLAGS = frozenset({
    # vLLM
    "--max-num-batched-tokens", "--max-num-seqs", "--gpu-memory-utilization", "--max-model-len", "--swap-space",
    "--kv-cache-memory-bytes", "--num-gpu-blocks-override", "--block-size", "--kv-cache-dtype",
    "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--enable-prefix-caching", "--no-enable-prefix-caching",
    "--disable-hybrid-kv-cache-manager",
    # SGLang
    "--mem-fraction-static", "--max-running-requests", "--max-total-tokens", "--chunked-prefill-size",
    "--max-prefill-tokens", "--context-length", "--page-size", "--cuda-graph-max-bs", "--disable-radix-cache",
    "--mamba-scheduler-strategy", "--mamba-radix-cache-strategy", "--schedule-policy",
    # TensorRT-LLM
    "--max_batch_size", "--max_num_tokens", "--max_seq_len", "--kv_cache_free_gpu_memory_fraction",
})  # fmt: skip


def budget_args(args: list[str]) -> list[tuple[str, str | None]]:
    """The scheduler and memory flags among ``args``, with their values (``--flag=v`` or ``--flag v``)."""
    out = []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name not in BUDGET_FLAGS:
            continue
        if not eq:
            nxt = args[i + 1] if i + 1 < len(args) else None
            value = nxt if nxt is not None and not nxt.startswith("--") else None  # type: ignore[assignment]
        out.append((name, value))
    return sorted(out, key=lambda p: (p[0], p[1] or ""))


def budget_problems(entry: ModelEntry) -> list[str]:
    """Every engine x GPU architecture where one method's server would get a scheduler or memory flag another
    method's does not (``[]`` when the rule holds)."""
    methods = [m for m in Method if m is Method.AR or m is Method.NGRAM or entry.draft_for(m) or
               (m is Method.MTP and entry.mtp is not None)]  # fmt: skip
    out = []
    for engine, recipe in entry.recipes.items():
        for arch in (None, *recipe.gpu):
            seen = {m: budget_args(entry.recipe_args(engine, m, arch)) for m in methods}  # type: ignore[arg-type]
            if len({tuple(v) for v in seen.values()}) > 1:
                detail = "; ".join(f"{m.value}: {v or 'none'}" for m, v in seen.items())
                out.append(f"{entry.name} {engine}{' ' + arch if arch else ''}: {detail}")
    return out


# --- parallelism and memory -------------------------------------------------------------------------------

# Weights take at most this share of each GPU: the rest is KV cache, activations and the drafter. vLLM's
# default --gpu-memory-utilization is 0.9 of the GPU for everything, so 0.8 leaves at least a tenth for the
# KV cache (gpt-oss-120b's 61 GiB on one 80 GB H100, as OpenAI's card says it runs); a suite that sweeps to
# high concurrency on a large model sets tp itself.
WEIGHTS_SHARE = 0.8
ASSUMED_GPU_GIB = ASSUMED.memory_gib  # when no GPU is visible and none is named: plan for an 80 GB H100


def weights_gib(entry: ModelEntry) -> float:
    """The checkpoint's weights in GiB: the registry's figure, else parameters x bytes per parameter."""
    if entry.weights_gib is not None:
        return entry.weights_gib
    per_param = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "int8": 1, "mxfp4": 0.53, "int4": 0.5}
    return entry.params_b * 1e9 * per_param.get(entry.weights_dtype, 2) / 2**30


def choose_tp(entry: ModelEntry, gpu_gib: float, gpus: int) -> int:
    """The smallest power-of-two tensor-parallel size whose weight shard fits ``WEIGHTS_SHARE`` of a GPU;
    raises a :class:`UserError` when even ``gpus`` GPUs cannot hold it."""
    need = weights_gib(entry) / (WEIGHTS_SHARE * gpu_gib)
    tp = 1 << max(0, math.ceil(math.log2(max(need, 1.0))))
    if tp > max(gpus, 1):
        raise UserError(
            f"{entry.hf_id}: about {weights_gib(entry):.0f} GiB of weights needs tp {tp} on {gpu_gib:.0f} GiB GPUs "
            f"(weights within {WEIGHTS_SHARE:.0%} of each), but {gpus} GPU(s) are visible; run it on a bigger node, "
            "or pass --tp N to override"
        )
    return tp


# --- showing ------------------------------------------------------------------------------------------------


def list_text(width: int | None = None) -> str:
    """One row per entry (``dflashbench models list``), as a table that fits ``width`` columns (the terminal's):
    long ids fold within their cell instead of running off the screen."""
    import io
    import shutil

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False)
    for column, justify in (("name", "left"), ("target (HF id)", "left"), ("size", "right"),
                            ("DFlash / DFlash2 drafter (block)", "left"), ("EAGLE-3 head / MTP layers", "left")):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for e in registry().models:
        drafter, kind = (e.dflash, "") if e.dflash else (e.dflash2, " DFlash2")
        assert drafter is not None  # the entry's validator
        block = drafter.block_size or "config.json"
        size = f"{e.params_b:g}B" + (f"/{e.active_params_b:g}A" if e.active_params_b else "")
        extra = (f"{e.eagle3.id if e.eagle3 else '-'}" + (f" / MTP x{e.mtp.layers}" if e.mtp else "")
                 + (f" (+DFlash2 {e.dflash2.id})" if e.dflash and e.dflash2 else ""))  # fmt: skip
        table.add_row(*(escape(c) for c in (e.name, e.hf_id, size, f"{drafter.id} ({block}){kind}", extra)))
    out = io.StringIO()
    columns = width or max(shutil.get_terminal_size((100, 24)).columns, 60)
    Console(file=out, width=columns, color_system=None).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def _sources(source: str, sources: dict[str, str] | None = None, label: str = "source") -> list[str]:
    """The lines ``models show`` gives a source and its per-fact sources: every one an address a user can open
    (tests/test_sources.py)."""
    return [f"               {label}: {source}", *(f"               source of {fact}: {src}"
                                                  for fact, src in (sources or {}).items())]


def _kv_lines(name: str, kv: KvFacts | None) -> list[str]:
    if kv is None:
        return []
    facts = kv.model_dump(exclude={"source"}, exclude_defaults=True)
    return [f"  {name:<12} " + ", ".join(f"{k} {v}" for k, v in facts.items()), *_sources(kv.source)]


def _mxfp4_lines(moe: Mxfp4Experts | None) -> list[str]:
    if moe is None:
        return []
    facts = moe.model_dump(exclude={"source"})
    return [f"  {'mxfp4 moe':<12} " + ", ".join(f"{k} {v}" for k, v in facts.items()), *_sources(moe.source)]


def _draft_recipe_lines(entry: ModelEntry) -> list[str]:
    """Each engine recipe's draft length (and draft tp) for the model, with its source."""
    out = []
    for engine, recipe in entry.recipes.items():
        for method, d in recipe.draft.items():
            tp = f", draft tp {d.draft_tp}" if d.draft_tp else ""
            out += [f"  {'draft ' + method.value:<12} {d.num_speculative_tokens} tokens a step{tp} on {engine}",
                    *_sources(d.source)]
    return out


def draft_free_text() -> str:
    """The draft-free methods' defaults per engine, from their method records (the same for every target)."""
    rec = record(Method.NGRAM)
    parts = [f"{engine} {', '.join(f'{k} {v}' for k, v in how.defaults.items())}"
             for engine, how in rec.engines.items() if how.defaults and engine != "reference"]  # fmt: skip
    return "; ".join(parts) + " (dflashbench/data/methods.toml, each with its source)"


def show_text(entry: ModelEntry, marks: dict[str, str] | None = None) -> str:
    """Everything the registry says of one entry, with the source of every fact (``dflashbench models show NAME``),
    and which facts the models' own files confirmed (``marks``: fact -> what the file said, from the local cache)."""
    size = f"{entry.params_b:g}B parameters" + (f" ({entry.active_params_b:g}B active)" if entry.active_params_b else "")
    lines = [
        f"{entry.name}: {entry.hf_id}",
        f"  aliases      {', '.join(sorted(entry.names - {entry.hf_id.lower()}))}",
        f"  size         {size}, {entry.weights_dtype}, ~{weights_gib(entry):.0f} GiB of weights",
        f"  source       {entry.source}",
        *_sources(entry.source, entry.sources)[1:],
        *_kv_lines("kv", entry.kv),
        *_mxfp4_lines(entry.mxfp4),
        *([f"  {'moe experts':<12} {entry.moe_experts.experts_per_token} a token, intermediate "
           f"{entry.moe_experts.intermediate_size}, hidden {entry.moe_experts.hidden_size} (vLLM's experts' workspaces)",
           *_sources(entry.moe_experts.source)] if entry.moe_experts else []),
        *([f"  {'fp8':<12} {entry.fp8.hf_id}, ~{entry.fp8.weights_gib:.0f} GiB: planned where the checkpoint above "
           "does not fit the GPUs", *_sources(entry.fp8.source)] if entry.fp8 else []),
        *_draft_recipe_lines(entry),
    ]
    for name, drafter in (("dflash", entry.dflash), ("dflash2", entry.dflash2)):
        if drafter is None:
            continue
        lines += [
            f"  {name:<12} {drafter.id}, block size {drafter.block_size or 'unknown (read from config.json at launch)'}"
            + (f", {drafter.architecture}" if drafter.architecture else "")
            + (", gated (accept its terms on Hugging Face)" if drafter.gated else "")
            + (f", {drafter.layers} attention layers" if drafter.layers else "")
            + (f"; licence: {drafter.licence}" if drafter.licence else ""),
            *_sources(drafter.source, drafter.sources),
            *_kv_lines(f"{name} kv", drafter.kv),
        ]
    if entry.mtp:
        k = f", {entry.mtp.num_speculative_tokens} draft tokens" if entry.mtp.num_speculative_tokens else ""
        lines += [f"  mtp          {entry.mtp.layers} MTP layer(s) in the checkpoint (config.json {entry.mtp.config_key}), "
                  f"vLLM family {entry.mtp.vllm_family} (run as method mtp){k}", *_sources(entry.mtp.source)]  # fmt: skip
    lines.append(f"  draft-free   ngram: {draft_free_text()}")
    heads = {"eagle3": entry.eagle3, **{f"eagle3 {e}": h for e, h in entry.eagle3_by_engine.items()}}
    for label, head in heads.items():
        if head is None:
            lines.append(f"  eagle3       none: {entry.eagle3_none}")
            continue
        k = f", {head.num_speculative_tokens} draft tokens" if head.num_speculative_tokens else ""
        lines += [f"  {label:<12} {head.id}{k}", *_sources(head.source, head.sources), *_kv_lines("eagle3 kv", head.kv)]
    if entry.chat:
        settings = {**entry.chat.chat_template_kwargs}
        if entry.chat.reasoning_effort:
            settings["reasoning_effort"] = entry.chat.reasoning_effort
        lines += [f"  chat         {settings}", *_sources(entry.chat.source)]
    for engine, recipe in entry.recipes.items():
        parts = [f"{m}: {' '.join(getattr(recipe, m))}" for m in ("all", *(x.value for x in Method)) if getattr(recipe, m)]
        parts += [f"config: {recipe.config}"] if recipe.config else []
        lines += [f"  {engine:<12} {'; '.join(parts) or '(no flags)'}", *_sources(recipe.source)]
        for arch, bound in recipe.gpu.items():
            flags = [f"{m}: {' '.join(getattr(bound, m))}" for m in ("all", "ar", "eagle3", "dflash") if getattr(bound, m)]
            lines += [f"               on {arch}: {'; '.join(flags)}", *_sources(bound.source, label=f"{arch} source")]
    if entry.unverified:
        lines.append("  unverified   " + "\n               ".join(entry.unverified))
    if entry.engine_builds:
        lines += [f"  needs        {engine}: {build}" for engine, build in entry.engine_builds.items()]
    if entry.notes:
        lines.append(f"  notes        {entry.notes}")
    if marks:
        lines.append("  own files    " + "\n               ".join(f"{fact}: {said}" for fact, said in marks.items()))
    else:
        lines.append("  own files    none read here (not in a local Hugging Face cache); dflashbench models check "
                     f"{entry.name} reads them from the Hub")
    return "\n".join(lines)
