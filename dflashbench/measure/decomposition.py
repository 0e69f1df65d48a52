"""Why a speculative method pays here: its speedup over a baseline as acceptance over step cost.

A point's per-user rate is tokens per decode time. With τ tokens committed per verification step and a step taking
``t`` seconds, it is ``τ / t`` (AR: ``1 / t_AR``). So at one concurrency

    speedup = (τ_method / τ_baseline) ÷ (t_method / t_baseline) = τ ratio ÷ step-cost ratio.

The step time is measured apart from τ, so the identity is a check, not a definition:

- **the engine's own step time** where it exposes one: vLLM's ``vllm:inter_token_latency_seconds`` (and the
  reference server's, in vLLM's names) is observed once per engine output, i.e. once per step (a speculative step
  counts once: ``vllm/v1/metrics/loggers.py``, vllm 0.32.0), so its mean over the point (``extra["server_timing"]``)
  is the mean step time;
- else **the client's gap between chunks**: decode time ÷ (chunks − 1) pooled over the point's observable requests,
  the step time where the engine streams one chunk per step (the reference server does, and vLLM unless its
  consumer lags).

The identity then holds up to what τ counts that the user never receives, tokens accepted past a stop (τ ÷ τ
delivered, :mod:`dflashbench.measure.acceptance`), and, with the engine's step time, to the difference between the
engine's clock and the client's (queueing, another request's prefill between two steps, bursts).

A draft-free method (n-gram, suffix decoding) drafts nothing at a step with no match, and its τ counts only the steps
that drafted (vLLM's rule, 1 + accepted / drafts); the identity needs the tokens of every step, so for it ``tau`` here
is the tokens delivered per step over every step the engine timed (its inter-token histogram's count), and
``tau_drafting`` keeps the point's own τ. A point whose
tokens arrived partly in bursts is left out of the check (its client timing is not per step), and said so.
Pure functions over points and requests; docs/metrics.md, "Why it pays: acceptance over step cost".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from dflashbench.measure import acceptance, metrics, observability
from dflashbench.measure.analysis import BASELINE, INTERACTIVITY, finite_number, usable_points
from dflashbench.types import RequestResult

ENGINE, CLIENT = "engine", "client"  # where a step time came from


@dataclass(frozen=True)
class Decomposition:
    """One pair at one concurrency: ``predicted = (tau / tau_base) / cost_ratio`` against the measured
    matched-concurrency speedup."""

    backend: str
    model: str
    workload: str
    method: str
    baseline: str
    concurrency: int
    tau: float  # tokens per step the identity uses: the point's τ, or over every step for a draft-free method
    tau_base: float
    step_s: float | None
    step_s_base: float | None
    step_source: str | None  # ENGINE, CLIENT, or None (no step time on one side)
    cost_ratio: float | None
    predicted: float | None
    measured: float | None
    error: float | None  # predicted / measured - 1; None where left out
    past_stop: float | None  # the part of the error that is tokens accepted past a stop (tau over delivered)
    left_out: str | None  # why the identity is not checked at this point
    tau_drafting: float | None = None  # a draft-free method's τ over the steps that drafted (the point's); else None

    @property
    def timing_error(self) -> float | None:
        """The rest of the error: the engine's step time against the client's clock (queueing, prefill, bursts)."""
        if self.error is None or self.past_stop is None:
            return None
        return (1 + self.error) / (1 + self.past_stop) - 1


COLUMNS = (*Decomposition.__dataclass_fields__, "timing_error")


def engine_step_s(point: dict) -> float | None:
    """The engine's mean step time over the point: its per-output inter-token histogram's mean."""
    timing = (point.get("extra") or {}).get("server_timing") if isinstance(point.get("extra"), dict) else None
    itl = (timing or {}).get("itl_s") or {}
    return finite_number(itl.get("mean_s"))


def engine_steps(point: dict) -> float | None:
    """How many steps the engine timed over the point (its inter-token histogram's count)."""
    timing = (point.get("extra") or {}).get("server_timing") if isinstance(point.get("extra"), dict) else None
    return finite_number(((timing or {}).get("itl_s") or {}).get("count"))


def client_step_s(results: list[RequestResult]) -> float | None:
    """Decode time ÷ (chunks − 1) pooled over the observable requests: the step time, one chunk per step."""
    seen = [r for r in results if observability.timing_observable(r) is not False and len(r.chunk_ns) > 1]
    gaps = sum(len(r.chunk_ns) - 1 for r in seen)
    decode = sum(d for r in seen if (d := metrics.decode_s(r)) is not None)
    return decode / gaps if gaps else None


def delivered_tau(point: dict, results: list[RequestResult]) -> float | None:
    """Tokens delivered per step: from the requests' own step counts, else the engine's step count (its
    inter-token histogram counts one per step after the first token)."""
    found = acceptance.delivered_tau(results)
    if found is not None:
        return found
    steps, n = engine_steps(point), finite_number(point.get("output_tokens"))
    requests = finite_number(point.get("num_requests"))
    if steps and n is not None and requests is not None:
        return (n - requests) / steps
    return None


def every_step_tau(point: dict) -> float | None:
    """Tokens delivered per step over every step the engine timed (one inter-token observation per step after the
    first token): ``(output tokens - requests) / steps``; ``None`` without the engine's step count."""
    steps, n = engine_steps(point), finite_number(point.get("output_tokens"))
    requests = finite_number(point.get("num_requests"))
    return (n - requests) / steps if steps and n is not None and requests is not None else None


def _draft_free(method: str) -> bool:
    from dflashbench.methods import record

    try:
        return record(method).draft_free
    except ValueError:  # a method name from another dflashbench: read as a drafter
        return False


def bursty(point: dict) -> str | None:
    """Why a point is flagged as bursty (as the report flags it): its per-token timing was not measured, or some
    of its requests were left out of it because most of their tokens arrived in bursts."""
    if isinstance(point.get("latency_not_measured_reason"), str):
        return "per-token timing not measured (bursts)"
    share = finite_number(point.get("timing_observed_share"))
    if share is not None and share < 1.0 - 1e-9:
        seen, asked = finite_number(point.get("timing_observed_requests")), finite_number(point.get("timing_requests"))
        where = f" ({int(asked - seen)} of {int(asked)} requests)" if seen is not None and asked else ""
        return f"requests left out of its per-token timing for bursts{where}"
    return None


def _results(requests: pd.DataFrame, point: dict) -> list[RequestResult]:
    return acceptance.point_results(requests, point.get("run_id"), point.get("point_id"))


def decompose(points: pd.DataFrame, requests: pd.DataFrame, baseline: str = BASELINE,
              methods: tuple[str, ...] | None = None) -> pd.DataFrame:  # fmt: skip
    """One :class:`Decomposition` per setting (category "all"), method (``methods``: those to read against
    ``baseline``; default every other one but AR) and concurrency both were measured at."""
    usable = usable_points(points) if not points.empty else points
    rows: list[dict] = []
    if usable.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    alls = usable[usable["category"] == "all"]
    for key, group in alls.groupby(["backend", "model", "workload"], sort=True):
        base_rows = {int(r["concurrency"]): r for r in group[group["method"] == baseline].to_dict("records")}
        others = [m for m in sorted(set(group["method"])) if m not in (baseline, BASELINE)]
        for method in methods if methods is not None else others:
            for p in group[group["method"] == method].sort_values("concurrency").to_dict("records"):
                b = base_rows.get(int(p["concurrency"]))
                if b is not None:
                    d = _one(key, method, baseline, p, b, requests)
                    rows.append({**asdict(d), "timing_error": d.timing_error})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _one(key: tuple, method: str, baseline: str, p: dict, b: dict, requests: pd.DataFrame) -> Decomposition:
    mine, theirs = _results(requests, p), _results(requests, b)
    tau, tau_b = finite_number(p.get("tau")), 1.0 if baseline == BASELINE else finite_number(b.get("tau"))
    drafting = None
    if _draft_free(method):  # its τ counts the steps that drafted; the identity needs every step's tokens
        drafting, tau = tau, every_step_tau(p)
    if baseline != BASELINE and _draft_free(baseline):
        tau_b = every_step_tau(b)
    step, step_b, source = engine_step_s(p), engine_step_s(b), ENGINE
    if step is None or step_b is None:
        step, step_b, source = client_step_s(mine), client_step_s(theirs), CLIENT
    if step is None or step_b is None:
        source = None
    a, z = finite_number(p.get(INTERACTIVITY)), finite_number(b.get(INTERACTIVITY))
    measured = a / z if a is not None and z else None
    cost = step / step_b if step and step_b else None
    predicted = (tau / tau_b) / cost if cost and tau and tau_b else None
    left = bursty(p) or bursty(b)
    left = None if left is None else f"left out: {left} at the {'method' if bursty(p) else 'baseline'}'s point"
    if predicted is None and left is None:
        left = ("left out: no count of the engine's steps, which a draft-free method's tokens per step needs"
                if drafting is not None and tau is None else "left out: no τ or no step time on a side")  # fmt: skip
    error = predicted / measured - 1 if predicted and measured and left is None else None
    d_m = tau if drafting is not None else delivered_tau(p, mine)  # over every step, already delivered tokens
    d_b = 1.0 if baseline == BASELINE else tau_b if _draft_free(baseline) else delivered_tau(b, theirs)
    past = (tau / d_m) / (tau_b / d_b) - 1 if tau and tau_b and d_m and d_b and error is not None else None
    return Decomposition(backend=key[0], model=key[1], workload=key[2], method=method, baseline=baseline,
                         concurrency=int(p["concurrency"]), tau=tau or float("nan"), tau_base=tau_b or float("nan"),
                         step_s=step, step_s_base=step_b, step_source=source, cost_ratio=cost, predicted=predicted,
                         measured=measured, error=error, past_stop=past, left_out=left, tau_drafting=drafting)  # fmt: skip
