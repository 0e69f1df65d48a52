"""How big a sweep is before it runs: requests, the output-token budget, and how long it would take at a given
per-user decode rate. Pure arithmetic over the grid; the dry run (:mod:`dflashbench.run.sweep_console`) prints it.

A closed-loop point at concurrency ``c`` sends ``R = max(prompts, c x requests_per_stream)`` requests
(:func:`dflashbench.plan.grid.fill_streams`), ``c`` streams taking them in turn. Each stream runs ``ceil(R / c)`` of
them one after another; at ``r`` tokens/s per user, a request that runs to its ``max_tokens`` cap ``M`` takes
``M / r`` seconds, so the point takes about ``ceil(R / c) x M / r`` (decode only: prefill, TTFT and server
launches come on top; outputs that stop before their cap take less). An open-loop point at ``q`` requests/s
sends its ``R`` requests over ``R / q`` seconds, plus the last one's decode.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dflashbench.errors import UserError


@dataclass(frozen=True)
class WorkloadSize:
    """What one workload sends per point."""

    label: str
    prompts: int | None  # requests the workload yields; None: unknown without reading it
    exact: bool  # False: an upper bound (rows may be left out, or the dataset card does not say)
    max_tokens: int  # the output cap per turn
    turns: float | None = None  # turns per request (each turn gets max_tokens); None: rows not read, first turns


def point_requests(prompts: int, concurrency: int, per_stream: int) -> int:
    """Requests a point sends: the workload's, reused until every stream has ``per_stream`` of them."""
    return max(prompts, max(concurrency, 1) * per_stream)


@dataclass(frozen=True)
class RunSize:
    points: int
    requests: int  # measured requests over every point (warm-up excluded)
    warmup_requests: int
    output_tokens_max: int  # every turn of every request to its cap
    decode_tokens_per_stream: float  # sum over points of the tokens one stream decodes in turn, every turn capped
    open_loop_s: float  # the open-loop points' arrival spans
    exact: bool  # False: some counts are upper bounds
    from_cards: bool = False  # some counts are the dataset cards' (rows not read): first turns only
    unknown: tuple[str, ...] = ()  # workloads whose size is not known: left out of the sums
    short: tuple[str, ...] = ()  # points sized by precision whose prompts run out first (reach less than asked)
    by_point: tuple[tuple[str, int], ...] = ()  # (point id, requests planned), sized by precision


@dataclass(frozen=True)
class TraceSize:
    """What one trace point sends (each content's plan): its requests, their output tokens, the arrivals' span
    at 1x and the last request's output (decoded after the last arrival)."""

    requests: int
    output_tokens: int
    span_s: float
    last_tokens: int


def run_size(points, sizes: dict[str, WorkloadSize], per_stream, warmup: int,
             traces: dict[str, TraceSize] | None = None, precision: float | None = None) -> RunSize:  # fmt: skip
    """The size of ``points`` (:class:`dflashbench.plan.grid.GridPoint`), each workload's from ``sizes`` by label,
    a trace point's from ``traces`` by its content (left out where not planned yet); with ``precision``, each
    closed-loop point sized by it (:mod:`dflashbench.plan.precision_plan`), every point of a load planned alike (a
    load's points stop together: the later ones send the first one's prompts, which it sizes for every pair of the
    load). ``per_stream``: requests per stream, or a function of the concurrency (``Suite.requests_per_stream_at``,
    which ``sweep --slo`` raises)."""
    from dflashbench.plan.precision_plan import planned_requests, request_spread

    spread = request_spread() if precision is not None else None
    at = per_stream if callable(per_stream) else (lambda _c: per_stream)
    load_n: dict[tuple, tuple[int, bool]] = {}
    if spread is not None:
        for p in points:
            size = sizes.get(p.workload.label) if getattr(p, "trace", None) is None else None
            if size is None or size.prompts is None or p.request_rate is not None:
                continue
            found = planned_requests(size.prompts, p.concurrency, at(p.concurrency), precision, spread.of(p.method.value))
            key = (p.workload.label, p.concurrency, p.repeat)
            load_n[key] = max(load_n.get(key, found), found)
    requests = tokens = 0
    per_stream_tokens = open_s = 0.0
    exact, from_cards, unknown = True, False, []
    short, by_point = [], []
    for p in points:
        if getattr(p, "trace", None) is not None:  # a trace replay: its own requests, over its arrivals' span
            t = (traces or {}).get(p.trace.content)
            if t is None:
                unknown.append(p.trace.workload_label)
                continue
            requests, tokens = requests + t.requests, tokens + t.output_tokens
            open_s += t.span_s / p.trace.speed
            per_stream_tokens += t.last_tokens
            continue
        size = sizes[p.workload.label]
        if size.prompts is None:
            unknown.append(size.label)
            continue
        exact &= size.exact
        from_cards |= size.turns is None
        n = point_requests(size.prompts, p.concurrency, at(p.concurrency))
        if spread is not None and p.request_rate is None:
            n, reaches = load_n[(p.workload.label, p.concurrency, p.repeat)]
            by_point.append((p.point_id, n))
            if not reaches:
                short.append(p.point_id)
        cap = (size.turns or 1.0) * size.max_tokens
        requests += n
        tokens += math.ceil(n * cap)
        if p.request_rate is not None:
            open_s += n / p.request_rate
            per_stream_tokens += cap  # the last arrival's decode
        else:
            per_stream_tokens += math.ceil(n / max(p.concurrency, 1)) * cap
    counted = len(points) - len(unknown)
    return RunSize(points=len(points), requests=requests, warmup_requests=warmup * counted,
                   output_tokens_max=tokens, decode_tokens_per_stream=per_stream_tokens, open_loop_s=open_s,
                   exact=exact, from_cards=from_cards, unknown=tuple(dict.fromkeys(unknown)), short=tuple(short),
                   by_point=tuple(by_point))  # fmt: skip


def duration_s(size: RunSize, tok_per_s_user: float) -> float:
    """Seconds the sweep takes if every stream decodes at ``tok_per_s_user`` and every turn runs to its cap."""
    return size.decode_tokens_per_stream / tok_per_s_user + size.open_loop_s


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:-\s*(\d+(?:\.\d+)?)\s*)?$")


def parse_rate(text: str, flag: str = "--assume-user-tok-per-s") -> tuple[float, float]:
    """``"100"`` -> ``(100.0, 100.0)``; ``"50-200"`` -> ``(50.0, 200.0)``: a per-user rate, or a range."""
    m = _RATE.match(text)
    if not m:
        raise UserError(f"{flag} {text!r}: expected tokens/s per user, e.g. 100, or a range LO-HI, e.g. 50-200")
    lo, hi = float(m.group(1)), float(m.group(2) or m.group(1))
    if not 0 < lo <= hi:
        raise UserError(f"{flag} {text!r}: need 0 < LO <= HI")
    return lo, hi


def _duration_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 2 * 86400:
        return 86400, "days"
    if seconds >= 3600:
        return 3600, "h"
    if seconds >= 60:
        return 60, "min"
    return 1, "s"


def human_duration(seconds: float) -> str:
    """``5400`` -> ``"1.5 h"``; ``90`` -> ``"1.5 min"``; two days and more in days."""
    scale, unit = _duration_unit(seconds)
    return f"{seconds / scale:.{0 if scale == 1 else 1}f} {unit}"


def human_duration_range(lo_s: float, hi_s: float) -> str:
    """``(3600, 5400)`` -> ``"1.0–1.5 h"``: one unit, the longer end's."""
    scale, unit = _duration_unit(hi_s)
    digits = 0 if scale == 1 else 1
    if f"{lo_s / scale:.{digits}f}" == f"{hi_s / scale:.{digits}f}":
        return human_duration(hi_s)
    return f"{lo_s / scale:.{digits}f}–{hi_s / scale:.{digits}f} {unit}"


def human_count(n: float) -> str:
    """``40_200_000`` -> ``"40.2 M"``; ``12_345`` -> ``"12,345"``."""
    if n >= 10_000_000:
        return f"{n / 1e6:.1f} M"
    if n >= 1_000_000:
        return f"{n / 1e6:.2f} M"
    return f"{n:,.0f}"
