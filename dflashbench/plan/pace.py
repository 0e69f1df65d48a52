"""How fast each method decodes per user, at each load: the rates a sweep's duration is planned at (the dry run's
serial and side-by-side wall times, ``--budget``, the placement's weights, the ETA's shape). Pure over the model
registry, the GPUs planned for, the published figures and the committed runs' rates.

Where the rates come from, first that applies:

1. ``--assume-user-tok-per-s``: the rate given is every method's, at every load.
2. The embedded pair: the rates a committed demo run measured on the same backend
   (``dflashbench/data/embedded_rates.toml``, written by ``tools/embedded_rates.py``), between its concurrencies
   interpolated on log c and held flat past them; a method it did not run at AR's.
3. Any other model whose layers and parameters are known (the registry, or a local config.json): the estimate of
   :mod:`dflashbench.plan.decode_rate` for the GPUs planned for, the engine, the tp and each method's draft length
   (:mod:`dflashbench.plan.draft_lengths`), with tau per method:

   - where the published figures give the model a speedup over AR for the method (``suites/published/``, the mean
     over its tasks, single-stream or at matched concurrency), the tau at which the estimate at c=1 reproduces it;
   - DFlash otherwise: the DFlash paper's acceptance (mean tau over its tasks at block 16, Qwen3-8B) as the same
     share of this drafter's draft tokens;
   - EAGLE-3 otherwise: the mean of the published EAGLE-3 / DFlash speedup ratios (the models with both) times
     DFlash's estimated speedup;
   - MTP otherwise: the one MTP acceptance the project holds (vLLM's Qwen3.8-27B recipe, 92.2 % of draft tokens);
     n-gram and suffix: an assumed acceptance, said as such.

   The band printed around the estimate is the held-out error (:func:`dflashbench.plan.decode_rate.held_out_band`).

A model none of these covers has no rate: the dry run says so and names ``--assume-user-tok-per-s``.
Server starts are assumed (:data:`SERVER_START_S`): no committed run on a GPU measures them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources

from dflashbench.types import Method

# Assumed seconds for a launched server to be ready: a GPU engine loads its weights from local disk, captures CUDA
# graphs and compiles (vLLM's CPU build starts the embedded target in about 50 s with torch.compile,
# /work/shared/reference/engine-install-notes.md); the reference server loads the tiny pair in seconds.
SERVER_START_S = {"reference": 10.0, "vllm": 300.0, "sglang": 300.0, "trtllm": 300.0}
SERVER_START_WHY = "assumed: 5 min per GPU engine start (weights from local disk, CUDA graphs, compilation; not measured)"
# MTP's acceptance where the model has no published speedup: the one MTP acceptance the project holds, vLLM's recipe
# for Qwen3.8-27B ("Measured acceptance on short prompts: 92.2% (BF16)" of 3 draft tokens,
# vllm-project/recipes@8959cf6 models/Qwen/Qwen3.8-27B.yaml#L91-L92), as each draft token's share accepted:
# tau = 1 + 0.922 k; said in the plan as another model's figure. n-gram and suffix: a flat tau, assumed (prompt
# lookup pays on repetitive text only).
MTP_ACCEPTED_SHARE = 0.922
MTP_ACCEPT_SOURCE = ("vLLM's recipe for Qwen3.8-27B measured 92.2 % of 3 MTP draft tokens accepted on short prompts "
                     "(vllm-project/recipes@8959cf6 models/Qwen/Qwen3.8-27B.yaml#L91-L92): another model's figure")
DRAFT_FREE_TAU = 1.5
PROMPT_TOKENS_ASSUMED = 2048  # a prompt the dry run cannot read (as the memory plan assumes)


@dataclass(frozen=True)
class Rates:
    """Each method's per-user rate at any load (``curve``), the band around it (slow and fast factors), and where
    every part came from. ``basis``: "given", "measured" or "estimated"."""

    curve: Callable[[str, int], float]
    methods: tuple[str, ...]
    band: tuple[float, float] = (1.0, 1.0)
    sources: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    basis: str = "estimated"
    setting: str = ""  # what the estimate is for: GPUs, engine, tp
    shown_at: tuple[int, ...] = (1,)
    taus: dict[str, str] = field(default_factory=dict)  # method -> its tau and where it came from

    def user_tok_per_s(self, method: str, concurrency: int, end: int = 0) -> float:
        """``method``'s per-user rate at ``concurrency`` (``end`` 0: the slow end of its band, 1: the fast end)."""
        name = method if method in self.methods else Method.AR.value
        return self.curve(name, max(int(concurrency), 1)) * self.band[end]

    def headline(self) -> str:
        """The rates at c=1 (and at the top load) in one line."""

        def shown(c: int) -> str:
            parts = []
            for m in self.methods:
                lo, hi = self.user_tok_per_s(m, c, 0), self.user_tok_per_s(m, c, 1)
                parts.append(f"{m} {lo:.0f}" + (f"–{hi:.0f}" if round(hi) != round(lo) else ""))
            return ", ".join(parts)

        loads = "; ".join(f"c={c}: {shown(c)}" for c in self.shown_at)
        basis = {"given": "given by --assume-user-tok-per-s", "measured": "measured", "estimated": "estimated"}[self.basis]
        return f"rates (tok/s/user, {basis}{', ' + self.setting if self.setting else ''}): {loads}"

    def lines(self) -> list[str]:
        """The rates as the dry run prints them: the headline, then (verbose) each source and assumption."""
        return [self.headline(), *(f"  rate: {s}" for s in self.sources),
                *(f"  tau: {m}: {t}" for m, t in self.taus.items()), *(f"  assumed: {a}" for a in self.assumed)]


def flat(methods, lo_hi: tuple[float, float], why: str) -> Rates:
    """Every method at one rate band at every load (``--assume-user-tok-per-s``)."""
    names = tuple(m.value if isinstance(m, Method) else str(m) for m in methods)
    lo, hi = lo_hi
    return Rates(lambda m, c: lo, names, (1.0, hi / lo if lo else 1.0), (why,), basis="given")


def published_speedups(model: str) -> dict[str, float]:
    """Each method's mean published speedup over AR for ``model``: single-stream or at matched concurrency, over
    the figures' tasks (a task named "Average" is itself a mean and is left out)."""
    from dflashbench.plan.published import _same_model, load_published, normalize_name

    figures = load_published()
    if figures.empty:
        return {}
    out: dict[str, list[float]] = {}
    for row in figures.to_dict("records"):
        if (row.get("metric") in ("speedup_matched_concurrency", "speedup_single_stream")
                and (row.get("baseline") or "ar") == "ar" and normalize_name(row.get("task")) != "average"
                and _same_model(model, row.get("model")) and isinstance(row.get("value"), int | float)):  # fmt: skip
            out.setdefault(str(row["method"]), []).append(float(row["value"]))
    return {m: statistics.fmean(v) for m, v in out.items()}


@functools.cache
def paper_dflash_acceptance() -> tuple[float, int, str]:
    """The DFlash paper's mean tau over its tasks (Qwen3-8B, block 16): (tau, block, where)."""
    from dflashbench.plan.published import load_published, normalize_name

    figures = load_published(["dflash-paper"])
    taus = [float(r["value"]) for r in figures.to_dict("records")
            if r["metric"] == "tau" and r["method"] == "dflash" and normalize_name(r["task"]) != "average"
            and str(r["source"]).startswith("DFlash paper")]  # fmt: skip
    return statistics.fmean(taus), 16, "suites/published/dflash-paper.toml, mean tau over the paper's tasks"


@functools.cache
def eagle_to_dflash() -> tuple[float, str]:
    """The mean over published models of EAGLE-3's speedup over DFlash's (each model's mean over its tasks)."""
    from dflashbench.plan.published import load_published

    models = {str(r["model"]) for r in load_published().to_dict("records")}
    ratios = []
    for model in sorted(models):
        s = published_speedups(model)
        if Method.EAGLE3.value in s and Method.DFLASH.value in s:
            ratios.append((model, s[Method.EAGLE3.value] / s[Method.DFLASH.value]))
    mean = statistics.fmean(r for _, r in ratios)
    shown = ", ".join(f"{m.rsplit('/', 1)[-1]} {r:.2f}" for m, r in ratios)
    return mean, f"the mean published EAGLE-3 / DFlash speedup ratio {mean:.2f} ({shown}; suites/published/)"


@functools.cache
def embedded_rates() -> dict:
    return tomllib.loads(resources.files("dflashbench").joinpath("data", "embedded_rates.toml").read_text("utf-8"))


def _interpolated(by_c: dict[int, float]) -> Callable[[int], float]:
    """A rate between measured concurrencies on log c (flat past the ends)."""
    points = sorted(by_c.items())

    def at(c: int) -> float:
        if c <= points[0][0]:
            return points[0][1]
        for (c0, r0), (c1, r1) in zip(points, points[1:], strict=False):
            if c <= c1:
                w = (math.log(c) - math.log(c0)) / (math.log(c1) - math.log(c0))
                return math.exp(math.log(r0) + w * (math.log(r1) - math.log(r0)))
        return points[-1][1]

    return at


def measured_embedded(methods, backend: str, shown_at: tuple[int, ...]) -> Rates:
    """The embedded pair's rates as a committed demo run on ``backend`` (else the reference backend's) measured."""
    table = embedded_rates()
    own = backend in table
    found = table[backend] if own else table["reference"]
    names = tuple(m.value if isinstance(m, Method) else str(m) for m in methods)
    base = {m: Method.parse(m).base.value for m in names}  # an arm (dflash-k3, tune's) at its method's measured rate
    curves = {m: _interpolated({int(c): float(v) for c, v in found[base[m]].items()}) for m in names if base[m] in found}
    ar = curves.get(Method.AR.value) or _interpolated({int(c): float(v) for c, v in found[Method.AR.value].items()})
    missing = [m for m in names if m not in curves]
    source = (f"measured by {found['run']} ({backend if own else 'the reference'} backend, {found['machine']}; "
              "dflashbench/data/embedded_rates.toml): another machine differs")  # fmt: skip
    return Rates(lambda m, c: (curves.get(m) or ar)(c), names, sources=(source,), basis="measured",
                 assumed=tuple(f"{m} at AR's rate (the committed run did not measure it)" for m in missing),
                 setting=f"the embedded pair on {backend if own else 'reference'}, {found['run'].rsplit('/', 1)[-1]}",
                 shown_at=shown_at)  # fmt: skip


def method_rates(pair, suite, backend: str, assume: tuple[float, float] | None = None,
                 flagged: frozenset[Method] = frozenset()) -> Rates | None:  # fmt: skip
    """The rates to plan ``suite``'s methods of ``pair`` (a :class:`dflashbench.plan.pairing.ModelPair`) on
    ``backend`` at; ``None`` where nothing gives one (the dry run then says how to give one)."""
    from dflashbench.plan.suites import EMBEDDED

    methods = list(suite.methods)
    top = max(suite.concurrency) if suite.concurrency else 1
    shown_at = (1, top) if top > 1 else (1,)
    if assume is not None:
        return flat(methods, assume, "given by --assume-user-tok-per-s, for every method and load")
    if suite.model == EMBEDDED or (pair is not None and str(pair.target).startswith("dflashbench/embedded")):
        return measured_embedded(methods, backend, shown_at)
    return estimated(pair, suite, backend, methods, shown_at, flagged)


def _drafter(m: Method, length, entry, backend: str, tp: int):
    from dflashbench.plan import decode_rate as dr

    if length is None:
        return dr.Drafter("none")
    draft_tp = length.draft_tp or tp
    if m in (Method.DFLASH, Method.DFLASH2):
        d = entry.block_drafter(m) if entry is not None else None
        layers = d.kv.full_layers if d is not None and d.kv is not None else 5
        return dr.Drafter("block", length.k, (d.weights_gib or 0.0) if d else 0.0, layers, draft_tp,
                          d.kv if d is not None else None)  # fmt: skip
    if m is Method.EAGLE3:
        head = entry.eagle3_for(backend) if entry is not None else None
        return dr.Drafter("chain", length.k, (head.weights_gib or 0.0) if head else 0.0, 1, draft_tp)
    if m is Method.MTP:
        return dr.Drafter("chain", length.k, 0.0, 1, draft_tp)
    return dr.Drafter("free", length.k)


def estimated(pair, suite, backend: str, methods: list[Method], shown_at: tuple[int, ...],
              flagged: frozenset[Method] = frozenset()) -> Rates | None:  # fmt: skip
    """:mod:`dflashbench.plan.decode_rate`'s estimate for each method (module doc, step 3)."""
    from dflashbench.plan import decode_rate as dr
    from dflashbench.plan.draft_lengths import draft_length
    from dflashbench.plan.gpus import assumed_plan, speed_of

    if pair is None:
        return None
    described = pair.entry if pair.entry is not None else getattr(pair, "described", None)
    shape = dr.shape_of(described) if described is not None else None
    gpu = pair.gpu if pair.gpu is not None else assumed_plan()
    speed = speed_of(gpu.label)
    if shape is None or speed is None:
        return None
    consts = dr.constants()
    tp = (pair.memory.tp if pair.memory is not None else None) or suite.tp or 1
    max_tokens = max((w.max_tokens for w in suite.workloads), default=1024)
    request = pair.memory.tokens if pair.memory is not None else PROMPT_TOKENS_ASSUMED + max_tokens
    prompt = max(request - max_tokens, 0)
    context = prompt + max_tokens / 2
    prefill_share = prompt / max_tokens if max_tokens else 0.0
    drafters = {Method.AR.value: dr.Drafter("none")}  # AR's step: every tau is solved against it
    drafters.update({m.value: _drafter(m, draft_length(m, suite, pair, backend, flagged), pair.entry, backend, tp)
                     for m in methods})  # fmt: skip
    notes = [f"the {m} drafter's size as one target layer and its LM head (not in the registry)"
             for m, d in drafters.items() if d.kind in ("block", "chain") and not d.weights_gib]  # fmt: skip

    def rate(m: str, c: int, tau: float = 1.0) -> float:
        return dr.per_user_tok_per_s(consts, shape, speed, tp, c, context, drafters[m], tau, prefill_share)

    taus, tau_why = _taus(pair, methods, drafters, rate, tp)

    @functools.lru_cache(maxsize=4096)
    def curve(m: str, c: int) -> float:
        return rate(m, c, taus.get(m, 1.0))

    band = dr.held_out_band()
    sources = (f"estimated from {shape.name}'s {shape.active_b:g}B active of {shape.total_b:g}B parameters "
               f"({shape.bytes_per_param:.2f} bytes each) and its KV; {speed.source}; step costs fitted to published "
               f"rates: {consts.describe()} (dflashbench/data/decode_rates.toml, docs/sizing.md)",
               f"error band {band.describe()}",
               f"load: each request {context:,.0f} tokens of context on average, {prefill_share:.2f} prompt tokens "
               "prefilled per output token")  # fmt: skip
    setting = f"{gpu.label} x tp {tp}, {backend}, band x{band.low:.2f}-{band.high:.2f}"
    return Rates(curve, tuple(m.value for m in methods), (band.low, band.high), sources, tuple(notes),
                 "estimated", setting, shown_at, tau_why)  # fmt: skip


def _taus(pair, methods: list[Method], drafters: dict, rate, tp: int) -> tuple[dict[str, float], dict[str, str]]:
    """Each speculative method's tau and where it came from (module doc, step 3); ``rate(method, c, tau)`` is the
    estimate, linear in tau."""
    from dflashbench.plan import decode_rate as dr

    ar1 = rate(Method.AR.value, 1)
    published = published_speedups(pair.target)
    taus: dict[str, float] = {}
    why: dict[str, str] = {}
    paper_tau, block, where = paper_dflash_acceptance()
    share = (paper_tau - 1) / (block - 1)

    def solved(m: str, speedup: float) -> float:
        return speedup * ar1 / rate(m, 1)

    for m in methods:
        k = drafters[m.value].k
        if m is Method.AR:
            continue
        if m.value in published:
            taus[m.value] = solved(m.value, published[m.value])
            why[m.value] = f"{taus[m.value]:.2f}: reproduces the published {published[m.value]:.2f}x over AR at c=1"
        elif m in (Method.DFLASH, Method.DFLASH2):
            taus[m.value] = 1 + share * k
            why[m.value] = (f"{taus[m.value]:.2f}: the paper's acceptance ({paper_tau:.2f} at block {block}, {where}) "
                            f"as the same share of {k} draft tokens")  # fmt: skip

    def dflash_speedup() -> float:
        """DFlash's estimated speedup at c=1: the planned DFlash's, else the registry drafter's by the paper's rule."""
        key = Method.DFLASH.value
        if key in taus:
            return rate(key, 1, taus[key]) / ar1
        k = (pair.dflash_block_size or block) - 1
        d = pair.entry.dflash if pair.entry is not None else None
        drafters[key] = dr.Drafter("block", k, (d.weights_gib or 0.0) if d else 0.0,
                                   d.kv.full_layers if d is not None and d.kv is not None else 5, tp)  # fmt: skip
        return rate(key, 1, 1 + share * k) / ar1

    for m in methods:
        if m.value in taus or m is Method.AR:
            continue
        k = drafters[m.value].k
        if m is Method.EAGLE3:
            ratio, whence = eagle_to_dflash()
            base = dflash_speedup()
            taus[m.value] = solved(m.value, max(ratio * base, 1.0))
            why[m.value] = f"{taus[m.value]:.2f}: {whence}, times DFlash's estimated {base:.2f}x (assumed)"
        elif m is Method.MTP:
            taus[m.value] = 1 + MTP_ACCEPTED_SHARE * k
            why[m.value] = f"{taus[m.value]:.2f}: 1 + {MTP_ACCEPTED_SHARE} x {k} draft tokens; {MTP_ACCEPT_SOURCE}"
        else:
            taus[m.value] = DRAFT_FREE_TAU
            why[m.value] = f"{DRAFT_FREE_TAU}: assumed (prompt lookup pays on repeated text only; not published)"
    return taus, why


def sweep_rates(ctx, assume: tuple[float, float] | None) -> Rates | None:
    """:func:`method_rates` for a resolved sweep (a :class:`dflashbench.plan.grid.SweepContext`), as the dry run,
    ``--budget`` and the ETA plan with."""
    return method_rates(ctx.pair, ctx.suite, ctx.backend_name, assume, ctx.flagged_draft_lengths)


def with_band(rates: Rates, band: tuple[float, float]) -> Rates:
    return dataclasses.replace(rates, band=band)


def server_start_s(backend: str) -> float:
    return SERVER_START_S.get(backend, SERVER_START_S["vllm"])
