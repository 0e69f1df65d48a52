"""How fast one server decodes, per user, for any model, GPU, engine and tp: what the dry run's duration, ``--budget``
and the placement's weights are planned at where no rate is given (``--assume-user-tok-per-s``). Pure arithmetic
over the model's facts (:class:`Shape`), the GPU's (:data:`dflashbench.plan.gpus.GPU_SPEEDS`) and four constants
fitted to published decode rates.

A decode step reads, per GPU, the weights its tokens touch and every request's KV, and pays a fixed cost per layer
(kernel launches, the MoE router and its grouped GEMMs, the all-reduces over tp):

    step_s = max(bytes / (bandwidth / k_bw), flops / (peak x COMPUTE_EFFICIENCY))
             + layers x o_layer + moe_layers x o_moe + layers x o_tp (tp > 1)

- bytes: the weights the step's ``n`` tokens touch (a dense model all of them; a mixture of experts the share its
  tokens route to, about ``total x (1 - (1 - active/total)^n)``), over tp, plus each request's KV over its context;
- flops: 2 x active parameters x the step's tokens, over tp (what makes a wide verify step cost more under load);
- AR decodes one token a step; a speculative method verifies ``k + 1`` tokens a step, runs its drafter (a DFlash
  drafter once over the block, an EAGLE-3 head or MTP layer ``k`` times in turn, n-gram and suffix nothing on the
  GPU) and delivers tau tokens (:mod:`dflashbench.plan.pace` says where each tau comes from).

``k_bw`` (1 / the bandwidth efficiency) and the three per-layer costs are fitted by non-negative least squares on
relative error to the rows of ``dflashbench/data/decode_rates.toml`` marked ``role = "fit"``; the rows marked
``held-out`` are never fitted, and their measured / estimated ratios are the error band the dry run prints
(:func:`held_out_band`). docs/sizing.md shows both tables.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import tomllib
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from dflashbench.plan import memory
from dflashbench.plan.gpus import GPU_SPEEDS, GpuSpeed
from dflashbench.plan.models import KvFacts, ModelEntry

GB = 1e9
# Assumed: the share of the tensor-core peak a decode step's GEMMs reach once they are compute bound (no figure in
# the fit set is compute bound, so this is not fitted; it only matters for wide verify steps under high load).
COMPUTE_EFFICIENCY = 0.5
# Bytes per parameter of a checkpoint whose size the registry does not give, by its weights dtype.
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "int8": 1.0, "mxfp4": 0.53, "int4": 0.56, "nvfp4": 0.56}


@dataclass(frozen=True)
class Shape:
    """What a decode step of one model reads and runs: its layers (those with experts apart), its parameters (all
    and active per token), the checkpoint's bytes per parameter and its KV geometry."""

    name: str
    layers: int
    moe_layers: int
    total_b: float  # parameters, billions
    active_b: float  # per token (the whole model for a dense one)
    bytes_per_param: float
    kv: KvFacts | None = None
    source: str = ""

    def weight_bytes(self, tokens: int) -> float:
        """Bytes of weights ``tokens`` tokens in one step touch, whole model (not yet over tp)."""
        total = self.total_b * GB * self.bytes_per_param
        if not self.moe_layers or self.active_b >= self.total_b:
            return total
        share = self.active_b / self.total_b
        return total * (1.0 - (1.0 - share) ** max(tokens, 1))

    def kv_bytes(self, context: float, tp: int) -> float:
        """KV (and linear-attention state) one request reads per step on one GPU at ``context`` tokens."""
        kv = self.kv
        if kv is None:
            return 0.0
        out = context * memory.full_bytes_per_token(kv, tp)
        if kv.sliding_layers:
            out += min(context, kv.sliding_window or context) * memory.sliding_bytes_per_token(kv, tp)
        return out + memory.linear_state_bytes(kv, tp)


def bytes_per_param(entry: ModelEntry) -> float:
    """The checkpoint's size over its parameters (the registry's), else the dtype's bytes."""
    if entry.weights_gib:
        return entry.weights_gib * 2**30 / (entry.params_b * GB)
    return DTYPE_BYTES.get(entry.weights_dtype.lower(), 2.0)


def shape_of(entry: ModelEntry, bpp: float | None = None) -> Shape | None:
    """A registry entry's :class:`Shape`; ``None`` where it lacks the layers (no KV facts, no layer count)."""
    layers = entry.num_hidden_layers
    if entry.kv is not None:
        layers = layers or (entry.kv.full_layers + entry.kv.sliding_layers + entry.kv.linear_layers)
    if not layers:
        return None
    moe = entry.active_params_b is not None and entry.active_params_b < entry.params_b
    return Shape(entry.name, layers, layers if moe else 0, entry.params_b, entry.active_params_b or entry.params_b,
                 bpp or bytes_per_param(entry), entry.kv, "the model registry (dflashbench/data/models.toml)")  # fmt: skip


@dataclass(frozen=True)
class Drafter:
    """What a speculative method adds to a step: ``kind`` "block" (DFlash: one pass over k + 1 tokens), "chain"
    (EAGLE-3, MTP: k passes in turn), "free" (n-gram, suffix: nothing on the GPU), "none" (AR)."""

    kind: str
    k: int = 0
    weights_gib: float = 0.0  # one copy of the drafter
    layers: int = 1
    tp: int = 1  # the drafter's own tensor-parallel size (vLLM's draft_tensor_parallel_size)
    kv: KvFacts | None = None  # a DFlash drafter's own KV over the context


@dataclass(frozen=True)
class Constants:
    """The fitted step costs: 1 / bandwidth efficiency, seconds per layer, per MoE layer, per layer at tp > 1."""

    k_bw: float
    o_layer_s: float
    o_moe_s: float
    o_tp_s: float
    o_verify_s: float = 0.0  # per layer and verified token past the first (a speculative step's wider forward)

    def describe(self) -> str:
        return (f"bandwidth efficiency {1 / self.k_bw:.2f}; {self.o_layer_s * 1e6:.0f} µs a layer, "
                f"+{self.o_moe_s * 1e6:.0f} µs an MoE layer, +{self.o_tp_s * 1e6:.0f} µs a layer at tp > 1, "
                f"+{self.o_verify_s * 1e6:.1f} µs a layer per verified token past the first")  # fmt: skip


def peak_flops(speed: GpuSpeed, shape: Shape) -> float:
    """The tensor-core peak a checkpoint's GEMMs run at: BF16's, or twice it for an FP8 (or smaller) checkpoint."""
    return speed.bf16_dense_tflops * 1e12 * (2.0 if shape.bytes_per_param <= 1.0 else 1.0)


def _terms(shape: Shape, speed: GpuSpeed, tp: int, users: int, tokens_each: int, context: float,
           prefill_share: float = 0.0) -> tuple[float, ...]:  # fmt: skip
    """(memory seconds at full bandwidth, layers, MoE layers, layers at tp > 1, layer-tokens past the first,
    compute seconds at full peak, prefill seconds at full peak)."""
    users = max(users, 1)
    n = users * tokens_each
    read = shape.weight_bytes(n) / tp + users * shape.kv_bytes(context, tp)
    peak = peak_flops(speed, shape)
    flops = 2.0 * shape.active_b * GB * n / tp
    # A closed loop's new requests are prefilled between decode steps (chunked into them): per step, each user's
    # prompt tokens over its output tokens
    prefill = 2.0 * shape.active_b * GB * users * prefill_share / tp
    return (read / (speed.bandwidth_tb_s * 1e12), float(shape.layers), float(shape.moe_layers),
            float(shape.layers if tp > 1 else 0), float(shape.layers * (tokens_each - 1)), flops / peak,
            prefill / peak)  # fmt: skip


def target_step_s(c: Constants, shape: Shape, speed: GpuSpeed, tp: int, users: int, tokens_each: int,
                  context: float, prefill_share: float = 0.0) -> float:  # fmt: skip
    """Seconds of one target forward of ``users`` requests, ``tokens_each`` tokens each (1: AR, k + 1: a verify),
    with the prompts' prefill spread over the decode steps."""
    mem, layers, moe, tp_layers, wide, compute, prefill = _terms(shape, speed, tp, users, tokens_each, context,
                                                                 prefill_share)  # fmt: skip
    return (max(mem * c.k_bw, compute / COMPUTE_EFFICIENCY) + prefill / COMPUTE_EFFICIENCY + layers * c.o_layer_s
            + moe * c.o_moe_s + tp_layers * c.o_tp_s + wide * c.o_verify_s)  # fmt: skip


def draft_step_s(c: Constants, shape: Shape, speed: GpuSpeed, drafter: Drafter, users: int, context: float) -> float:
    """Seconds the drafter adds to a step of ``users`` requests."""
    if drafter.kind in ("none", "free") or drafter.k < 1:
        return 0.0
    bw = speed.bandwidth_tb_s * 1e12
    weights = drafter.weights_gib * 2**30 if drafter.weights_gib else _assumed_head_bytes(shape)
    per_pass = weights / drafter.tp / bw * c.k_bw + (drafter.layers + 1) * c.o_layer_s
    if drafter.kind == "block":
        kv = drafter.kv
        kv_read = max(users, 1) * context * memory.full_bytes_per_token(kv, drafter.tp) if kv else 0.0
        flops = 2.0 * weights / 2.0 * max(users, 1) * (drafter.k + 1) / drafter.tp  # bf16 drafter: bytes / 2 params
        mem = per_pass + kv_read / bw * c.k_bw
        return max(mem, flops / (speed.bf16_dense_tflops * 1e12) / COMPUTE_EFFICIENCY)
    return drafter.k * per_pass  # a chain: k passes in turn


def _assumed_head_bytes(shape: Shape) -> float:
    """An EAGLE-3 head or MTP layer without a size in the registry: one of the target's layers and its LM head,
    taken as twice the active bytes of one layer (assumed; said in the plan)."""
    return 2.0 * shape.active_b * GB * shape.bytes_per_param / max(shape.layers, 1)


def per_user_tok_per_s(c: Constants, shape: Shape, speed: GpuSpeed, tp: int, users: int, context: float,
                       drafter: Drafter = Drafter("none"), tau: float = 1.0, prefill_share: float = 0.0) -> float:  # fmt: skip
    """Tokens a second one of ``users`` requests receives: tau tokens per (target + drafter) step."""
    verify = 1 + (drafter.k if drafter.kind != "none" else 0)
    step = (target_step_s(c, shape, speed, tp, users, verify, context, prefill_share / tau)
            + draft_step_s(c, shape, speed, drafter, users, context))  # fmt: skip
    return tau / step


# --- the published rates and the fit ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One published decode rate: a model on some GPUs, an engine, tp and load, as its source states it."""

    id: str
    role: str  # "fit" | "held-out"
    shape: Shape
    gpu: str
    engine: str
    tp: int
    concurrency: int
    input_tokens: int
    output_tokens: int
    measured: float  # tok/s per user (1000 / TPOT ms where the source gives TPOT or ITL), or a speedup over AR
    source: str
    method: str = "ar"
    tau: float | None = None  # a speculative row: the acceptance the source states
    k: int = 0
    draft_gib: float = 0.0
    draft_layers: int = 1
    note: str = ""
    is_speedup: bool = False  # ``measured`` is the method's speedup over AR on the same setting

    @property
    def unit(self) -> str:
        return "x AR" if self.is_speedup else "tok/s/user"

    @property
    def speed(self) -> GpuSpeed:
        return GPU_SPEEDS[self.gpu]

    @property
    def context(self) -> float:
        return self.input_tokens + self.output_tokens / 2

    @property
    def prefill_share(self) -> float:
        """Prompt tokens per output token: what a closed loop prefills between its decode steps (none at c=1)."""
        return self.input_tokens / self.output_tokens if self.concurrency > 1 else 0.0

    def drafter(self) -> Drafter:
        kind = {"dflash": "block", "dflash2": "block", "eagle3": "chain", "mtp": "chain"}.get(self.method, "none")
        return Drafter(kind, self.k, self.draft_gib, self.draft_layers, self.tp)

    def estimate(self, c: Constants) -> float:
        """The estimate of what was measured: the rate, or the speedup over AR's estimate."""
        rate = per_user_tok_per_s(c, self.shape, self.speed, self.tp, self.concurrency, self.context, self.drafter(),
                                  self.tau or 1.0, self.prefill_share)  # fmt: skip
        if not self.is_speedup:
            return rate
        return rate / per_user_tok_per_s(c, self.shape, self.speed, self.tp, self.concurrency, self.context,
                                         prefill_share=self.prefill_share)  # fmt: skip


def _shape_from(row: dict) -> Shape:
    from dflashbench.plan.models import lookup

    if "model" in row:
        entry = lookup(row["model"])
        if entry is None:
            raise ValueError(f"decode_rates.toml {row['id']}: {row['model']} is not in the model registry")
        shape = shape_of(entry, row.get("bytes_per_param"))
        if shape is None:
            raise ValueError(f"decode_rates.toml {row['id']}: the registry lacks {row['model']}'s layers")
        return shape
    s = row["shape"]
    kv = KvFacts(**s["kv"]) if "kv" in s else None
    return Shape(s["name"], s["layers"], s.get("moe_layers", 0), s["total_params_b"], s["active_params_b"],
                 s["bytes_per_param"], kv, s["source"])  # fmt: skip


@functools.cache
def figures() -> tuple[Figure, ...]:
    """The published rates of ``dflashbench/data/decode_rates.toml``, read once."""
    table = tomllib.loads(resources.files("dflashbench").joinpath("data", "decode_rates.toml").read_text("utf-8"))
    out = []
    for row in table["figures"]:
        value = row.get("speedup") or row.get("user_tok_per_s") or 1000.0 / row["tpot_ms"]
        out.append(Figure(row["id"], row["role"], _shape_from(row), row["gpu"], row["engine"], row["tp"],
                          row.get("concurrency", 1), row["input_tokens"], row["output_tokens"], float(value),
                          row["source"], row.get("method", "ar"), row.get("tau"), row.get("k", 0),
                          row.get("draft_gib", 0.0), row.get("draft_layers", 1), row.get("note", ""),
                          "speedup" in row))  # fmt: skip
    return tuple(out)


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by trying every set of free columns (four unknowns: 16 sets)."""
    best, best_err = np.zeros(a.shape[1]), float("inf")
    for n in range(1, a.shape[1] + 1):
        for cols in itertools.combinations(range(a.shape[1]), n):
            x, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if (x < 0).any():
                continue
            full = np.zeros(a.shape[1])
            full[list(cols)] = x
            err = float(np.sum((a @ full - b) ** 2))
            if err < best_err:
                best, best_err = full, err
    return best


@functools.cache
def constants() -> Constants:
    """The step costs fitted to the ``fit`` rows. First the AR rows at concurrency 1 (step seconds = 1 / the rate),
    each row's equation divided by its measured seconds so that every row weighs by its relative error; then the
    one speculative ``fit`` row's speedup fixes the cost of a wider verify (by bisection: the speedup falls as it
    grows)."""
    rows = [f for f in figures() if f.role == "fit" and f.method == "ar"]
    a, b = [], []
    for f in rows:
        mem, layers, moe, tp_layers, *_ = _terms(f.shape, f.speed, f.tp, f.concurrency, 1, f.context)
        t = 1.0 / f.measured
        a.append([mem / t, layers / t, moe / t, tp_layers / t])
        b.append(1.0)
    k_bw, o_layer, o_moe, o_tp = _nnls(np.array(a), np.array(b))
    base = Constants(max(k_bw, 1.0), o_layer, o_moe, o_tp)
    spec = [f for f in figures() if f.role == "fit" and f.method != "ar" and f.is_speedup]
    if not spec:
        return base
    lo, hi = 0.0, 1e-4
    for _ in range(60):
        mid = (lo + hi) / 2
        trial = dataclasses.replace(base, o_verify_s=mid)
        too_fast = sum(f.estimate(trial) - f.measured for f in spec) > 0
        lo, hi = (mid, hi) if too_fast else (lo, mid)
    return dataclasses.replace(base, o_verify_s=(lo + hi) / 2)


@dataclass(frozen=True)
class Check:
    figure: Figure
    estimated: float

    @property
    def ratio(self) -> float:
        return self.figure.measured / self.estimated


def checks(role: str | None = None) -> list[Check]:
    """Every published rate beside the estimate (``role``: only the fit or the held-out rows)."""
    c = constants()
    return [Check(f, f.estimate(c)) for f in figures() if role is None or f.role == role]


@dataclass(frozen=True)
class Band:
    """The held-out rows' measured / estimated ratios: the estimate times ``low`` to ``high`` covers every one."""

    low: float
    high: float
    rows: int
    ids: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        return f"x{self.low:.2f}-{self.high:.2f} (measured / estimated on {self.rows} published rates not fitted)"


@functools.cache
def held_out_band() -> Band:
    held = checks("held-out")
    ratios = [h.ratio for h in held]
    return Band(min(ratios), max(ratios), len(held), tuple(h.figure.id for h in held))
