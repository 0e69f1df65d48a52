"""Acceptance by slice, with intervals: τ against input length, position in the output and category.

Each slice reads per-request acceptance (the request's verification steps and accepted tokens, as the reference
server, SGLang and vLLM from 0.29.0 report them: :mod:`dflashbench.measure.acceptance`), pooled as a ratio of sums
over the slice's requests, with a 95 % percentile-bootstrap interval over those requests (τ does not move with the
machine's speed, so no drift term). The rules (docs/metrics.md, "Acceptance by slice"):

- **input length**: bins equal in log(prompt tokens) across the run's requests, read only where the prompts span
  at least a factor of :data:`MIN_SPAN`; a bin with fewer than :data:`MIN_REQUESTS` requests is not read;
- **position in the output**: the tokens each step delivered over the first, middle and last third of each
  request's output, from its chunks where the engine streamed one chunk per step (the request's chunk count is
  its step count + 1: checked, not assumed), over requests of at least :data:`MIN_OUTPUT` tokens;
- **category**: τ per category of the workload;
- **thinking on and off** (a suite's ``thinking_slice``): τ of the same workload's two sides, which are points of
  their own (``gsm8k+thinking``, ``gsm8k+no-thinking``), from per-request acceptance where the engine reports it,
  else from the sides' points' counters at their lowest concurrency (no interval then, and the row says so).

Where the engine reported no per-request acceptance, no slice can be read from one point's requests: a slice then
needs points of its own (a sweep per category, per length), and the engine's counters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from dflashbench.measure import noise, request_terms
from dflashbench.types import RequestResult

MIN_SPAN = 4.0  # prompts this many times longer than the shortest: a length that matters (vLLM #47930: 2.98 -> 1.25)
LENGTH_BINS = 3
MIN_REQUESTS = 5
MIN_OUTPUT = 24  # tokens: thirds of at least eight
THIRDS = ("first third", "middle third", "last third")
INPUT, POSITION, CATEGORY, THINKING = "input length", "output position", "category", "thinking"


@dataclass(frozen=True)
class Slice:
    """τ over one slice of a method's requests: ``tau`` (``1 + accepted / steps``; by position, tokens delivered per
    step) with its 95 % bootstrap interval over the slice's ``requests``."""

    kind: str
    label: str
    requests: int
    tau: float
    lo: float | None
    hi: float | None
    statistic: str  # "τ" or "delivered per step"


def _spec(results: Iterable[RequestResult]) -> list[RequestResult]:
    return [r for r in results if r.ok and not r.warmup and r.spec_verify_steps and r.spec_accepted_tokens is not None]


def pooled(terms: dict[str, tuple[float, float]]) -> tuple[float, float | None, float | None] | None:
    """``sum(num) / sum(den)`` over a slice's requests and its 95 % bootstrap interval: :func:`noise.ratio_ci`
    against a side of ones paired by request, which is the slice's own figure over 1."""
    if not terms:
        return None
    num, den = (sum(v[i] for v in terms.values()) for i in (0, 1))
    if den <= 0:
        return None
    ci = noise.ratio_ci({k: (1.0, 1.0) for k in terms}, terms)
    return num / den, (ci[0] if ci else None), (ci[1] if ci else None)


def _slice(kind: str, label: str, terms: dict[str, tuple[float, float]], statistic: str = "τ") -> Slice | None:
    found = pooled(terms)
    return None if found is None else Slice(kind, label, len(terms), found[0], found[1], found[2], statistic)


def _tau_terms(results: Iterable[RequestResult]) -> dict[str, tuple[float, float]]:
    return {f"{r.point_id}/{r.request_id}": t for r in results if (t := request_terms.tau(r)) is not None}


def by_input_length(results: Sequence[RequestResult]) -> tuple[list[Slice], str | None]:
    """τ per input-length bin, or why there is none (no per-request acceptance, prompts too alike)."""
    rs = [r for r in _spec(results) if r.prompt_tokens]
    if not rs:
        return [], "no request carries per-request acceptance and its prompt length"
    lengths = [int(r.prompt_tokens) for r in rs]
    lo, hi = min(lengths), max(lengths)
    if hi < MIN_SPAN * lo:
        return [], (f"the prompts span {lo}–{hi} tokens ({hi / lo:.1f}×): too alike to read τ against input length "
                    f"(the bins need a {MIN_SPAN:g}× span; a workload with long prompts gives it)")  # fmt: skip
    edges = [math.exp(math.log(lo) + i * (math.log(hi) - math.log(lo)) / LENGTH_BINS) for i in range(LENGTH_BINS + 1)]
    out, thin = [], []
    for i in range(LENGTH_BINS):
        last = i == LENGTH_BINS - 1
        mine = [r for r in rs if edges[i] <= r.prompt_tokens and (r.prompt_tokens < edges[i + 1] or last)]
        start = lo if i == 0 else math.ceil(edges[i] - 1e-9)
        label = f"{start}–{hi if last else math.ceil(edges[i + 1] - 1e-9) - 1} tokens"
        if len(mine) < MIN_REQUESTS:
            thin.append(f"{label} ({len(mine)} requests)")
            continue
        if (s := _slice(INPUT, label, _tau_terms(mine))) is not None:
            out.append(s)
    note = f"bins with fewer than {MIN_REQUESTS} requests not read: {', '.join(thin)}" if thin else None
    return out, note


def _one_chunk_per_step(r: RequestResult) -> bool:
    return bool(r.chunk_tokens) and len(r.chunk_tokens) - 1 == r.spec_verify_steps


def _third_terms(rs: Sequence[RequestResult], third: int) -> dict[str, tuple[float, float]]:
    """request -> (tokens, steps) of the steps whose first token falls in the given third of the output (the prefill's
    first chunk left out: it is no verification step)."""
    out = {}
    for r in rs:
        n = r.output_tokens - r.chunk_tokens[0]
        start, tokens, steps = r.chunk_tokens[0], 0, 0
        for k in r.chunk_tokens[1:]:
            if int(3 * (start - r.chunk_tokens[0]) / n) == third:
                tokens, steps = tokens + k, steps + 1
            start += k
        if steps:
            out[f"{r.point_id}/{r.request_id}"] = (float(tokens), float(steps))
    return out


def by_position(results: Sequence[RequestResult]) -> tuple[list[Slice], str | None]:
    """Tokens delivered per step over the thirds of each output, or why there is none."""
    rs = [r for r in _spec(results) if r.output_tokens >= MIN_OUTPUT]
    if not rs:
        return [], f"no request of {MIN_OUTPUT}+ tokens carries per-request acceptance"
    streamed = [r for r in rs if _one_chunk_per_step(r) and sum(r.chunk_tokens) == r.output_tokens]
    if len(streamed) < MIN_REQUESTS:
        return [], ("the engine did not stream one chunk per verification step (chunks − 1 ≠ steps), so a step's "
                    "position in the output is not known")  # fmt: skip
    out = [s for i, label in enumerate(THIRDS)
           if (s := _slice(POSITION, label, _third_terms(streamed, i), "delivered per step")) is not None]  # fmt: skip
    left = len(rs) - len(streamed)
    return out, (f"{left} of {len(rs)} requests left out: not one chunk per step" if left else None)


def by_category(results: Sequence[RequestResult]) -> tuple[list[Slice], str | None]:
    rs = _spec(results)
    if not rs:
        return [], "no request carries per-request acceptance"
    cats = sorted({r.category for r in rs})
    return [s for c in cats if (s := _slice(CATEGORY, c, _tau_terms([r for r in rs if r.category == c])))], None


READERS: dict[str, Callable[[Sequence[RequestResult]], tuple[list[Slice], str | None]]] = {
    INPUT: by_input_length, POSITION: by_position, CATEGORY: by_category,
}  # fmt: skip


def slice_rows(points, requests) -> tuple[list[dict], list[str]]:
    """Every slice of every setting's speculative methods (category "all" points; τ follows the prompts, not the
    load, so each prompt is read once, at its lowest concurrency), and per setting x method x slice kind why a slice
    is missing."""
    from dflashbench.measure.acceptance import point_results
    from dflashbench.measure.analysis import BASELINE, method_label, method_sort_key, usable_points

    usable = usable_points(points) if not points.empty else points
    rows: list[dict] = []
    notes: list[str] = []
    alls = usable[(usable["category"] == "all") & (usable["method"] != BASELINE)] if not usable.empty else usable
    for (backend, model, workload, method), g in (alls.groupby(["backend", "model", "workload", "method"], sort=True)
                                                  if not alls.empty else []):  # fmt: skip
        every = [r for p in g.sort_values("concurrency").to_dict("records")
                 for r in point_results(requests, p.get("run_id"), p.get("point_id"))]  # fmt: skip
        # each prompt once (its lowest concurrency's request): a sweep sends the same prompts at every concurrency,
        # and counting them once per concurrency would narrow the interval as if they were independent draws
        results = list({r.request_id: r for r in reversed(every)}.values())
        where = {"backend": backend, "model": model, "workload": workload, "method": method}
        if not _spec(results):
            notes.append(f"{method_label(method)} on {backend} · {workload}: the engine reported no per-request "
                         "acceptance, so no slice is read")  # fmt: skip
            continue
        for kind, read in READERS.items():
            found, why = read(results)
            rows += [{**where, "kind": s.kind, "slice": s.label, "requests": s.requests, "tau": s.tau, "lo": s.lo,
                      "hi": s.hi, "statistic": s.statistic} for s in found]  # fmt: skip
            if why:
                notes.append(f"{method_label(method)} on {backend} · {workload}, {kind}: {why}")
    rows += thinking_rows(alls, requests)
    kinds = [*READERS, THINKING]
    rows.sort(key=lambda r: (r["backend"], r["workload"], method_sort_key(r["method"]), kinds.index(r["kind"])))
    return rows, notes


def thinking_rows(alls, requests) -> list[dict]:
    """The thinking slice: per setting, base workload and method with both sides measured, τ of each side."""
    from dflashbench.measure.acceptance import point_results
    from dflashbench.workloads.spec import THINKING_OFF, THINKING_ON

    if alls.empty:
        return []
    rows = []
    sides = {THINKING_ON: "thinking on", THINKING_OFF: "thinking off"}
    for (backend, model, method), g in alls.groupby(["backend", "model", "method"], sort=True):
        bases = {str(w)[: -len(end)] for w in g["workload"] for end in sides if str(w).endswith(end)}
        for base in sorted(bases):
            found = []
            for end, label in sides.items():
                side = g[g["workload"] == base + end].sort_values("concurrency")
                if side.empty:
                    break
                lowest = side.iloc[0].to_dict()
                results = _spec(point_results(requests, lowest.get("run_id"), lowest.get("point_id")))
                if (s := _slice(THINKING, label, _tau_terms(results))) is not None:
                    found.append({"slice": label, "requests": s.requests, "tau": s.tau, "lo": s.lo, "hi": s.hi,
                                  "statistic": s.statistic})  # fmt: skip
                elif lowest.get("tau") is not None and lowest["tau"] == lowest["tau"]:
                    found.append({"slice": label, "requests": int(lowest.get("num_requests") or 0),
                                  "tau": float(lowest["tau"]), "lo": None, "hi": None,
                                  "statistic": "τ (the engine's counters, c=" + str(int(lowest["concurrency"])) + ")"})  # fmt: skip
            if len(found) == 2:
                where = {"backend": backend, "model": model, "workload": base, "method": method, "kind": THINKING}
                rows += [{**where, **f} for f in found]
    return rows


def falling(rows: Sequence[Mapping], setting: Mapping, kind: str = INPUT) -> dict[str, tuple[Mapping, Mapping]]:
    """method -> (its first slice, its last) of ``kind`` in ``setting`` (backend, model, workload) where τ clearly
    falls across them (the first slice's interval above the last's): acceptance that a longer prompt undoes."""
    from dflashbench.measure.analysis import method_sort_key

    by: dict[str, list[Mapping]] = {}
    for r in rows:
        if r.get("kind") == kind and all(str(r.get(k)) == str(setting[k]) for k in ("backend", "model", "workload")):
            by.setdefault(str(r["method"]), []).append(r)
    return {m: (rs[0], rs[-1]) for m, rs in sorted(by.items(), key=lambda kv: method_sort_key(kv[0]))
            if len(rs) > 1 and (rs[0].get("lo") or 0) > (rs[-1].get("hi") or math.inf)}  # fmt: skip
