"""Acceptance (τ) as docs/metrics.md defines it, from the requests where the engine reports it per request.

**τ = tokens committed per verification step**, the bonus token included (AR: 1): ``1 + accepted / steps``, as
every engine publishes its acceptance length. It counts the tokens a verification step accepted even where a
stop (end of sequence, ``max_tokens``) then cut the output short: those the user never receives. What the user
receives per step is the **delivered** figure, ``(output tokens - 1) / steps`` (the first token comes from the
prefill, not from a verification step), lower by the share accepted past a stop.

Per request: the reference server and SGLang report steps and accepted tokens in each response, vLLM from 0.29.0
with ``--per-request-spec-decode-metrics summary`` (its ``metrics.speculative_decoding``: ``num_spec_steps``,
``num_accepted_draft_tokens``; ``vllm/config/observability.py``, ``vllm/v1/metrics/stats.py``
``RequestSpecDecodeMetrics``; the field is absent from 0.28.0's ``observability.py``). vLLM counts a step's
accepted tokens before its stop check (``vllm/v1/core/sched/scheduler.py``: ``num_accepted`` is taken from the
sampled tokens, then ``_update_request_with_output`` truncates at the stop), so its τ includes tokens accepted past
a stop as the reference server's does. Pure functions over :class:`~dflashbench.types.RequestResult`.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from dflashbench.measure.request_index import index_of
from dflashbench.types import RequestResult


def _spec(results: Iterable[RequestResult]) -> list[RequestResult]:
    return [r for r in results if r.ok and not r.warmup and r.spec_verify_steps and r.spec_accepted_tokens is not None]


def engine_tau(results: Iterable[RequestResult]) -> float | None:
    """``1 + sum(accepted) / sum(steps)`` over requests that report both; ``None`` where none do."""
    rs = _spec(results)
    steps = sum(r.spec_verify_steps for r in rs)
    return 1.0 + sum(r.spec_accepted_tokens for r in rs) / steps if steps else None


def delivered_tau(results: Iterable[RequestResult]) -> float | None:
    """``sum(output tokens - 1) / sum(steps)``: the tokens each verification step delivered to the user."""
    rs = _spec(results)
    steps = sum(r.spec_verify_steps for r in rs)
    return sum(max(r.output_tokens - 1, 0) for r in rs) / steps if steps else None


def past_stop_share(results: Iterable[RequestResult]) -> float | None:
    """The share of accepted-and-bonus tokens that a stop cut off: ``1 - delivered / engine`` τ."""
    rs = list(results)
    engine, delivered = engine_tau(rs), delivered_tau(rs)
    return 1.0 - delivered / engine if engine and delivered is not None else None


def point_results(requests: pd.DataFrame, run_id: str, point_id: str, category: str = "all") -> list[RequestResult]:
    """The measured, successful requests of one point (its category's, for a category row)."""
    return index_of(requests).of(run_id, point_id, category)


def with_delivered(tau: pd.DataFrame, points: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """``tau`` (:func:`dflashbench.measure.analysis.tau_by_category`) with ``tau_delivered`` and
    ``past_stop_share`` pooled over the requests of the row's points, where they report steps."""
    from dflashbench.measure.analysis import SETTING, usable_points

    if tau.empty:
        return tau.assign(tau_delivered=None, past_stop_share=None)
    usable = usable_points(points)
    delivered, past = [], []
    for rec in tau.to_dict("records"):
        mask = usable["method"] == rec["method"]
        for k in SETTING:
            mask &= usable[k] == rec[k]
        rs = [r for p in usable[mask].to_dict("records")
              for r in point_results(requests, p.get("run_id"), p.get("point_id"), rec["category"])]  # fmt: skip
        delivered.append(delivered_tau(rs))
        past.append(past_stop_share(rs))
    return tau.assign(tau_delivered=delivered, past_stop_share=past)


def missing_category_tau(points: pd.DataFrame) -> list[tuple[dict, str]]:
    """(setting, method) of every speculative method whose category "all" has τ but whose category rows have none:
    the engine's counters are server-wide, so a mixed run cannot split them by category without per-request
    acceptance."""
    from dflashbench.measure.analysis import BASELINE, usable_points

    usable = usable_points(points)
    out = []
    if usable.empty or "tau" not in usable.columns:
        return out
    spec = usable[usable["method"] != BASELINE]
    for (backend, model, workload, method), g in spec.groupby(["backend", "model", "workload", "method"], sort=True):
        cats = g[g["category"] != "all"]
        has_all = pd.to_numeric(g.loc[g["category"] == "all", "tau"], errors="coerce").notna().any()
        if has_all and not cats.empty and pd.to_numeric(cats["tau"], errors="coerce").isna().all():
            out.append(({"backend": backend, "model": model, "workload": workload}, str(method)))
    return out
