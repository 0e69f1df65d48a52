"""A trace replay's readings: how faithfully the trace was sent, how well the content matched it, acceptance with
and without the text past the end of sequence, and each method against AR on the same traffic.

Definitions (docs/metrics.md, "Trace replay"):

- **lateness** of a send = ``sent_ns - queued_ns``: how long after its place in the trace (``start + arrival /
  speed``, :mod:`dflashbench.load.trace_replay`) the request left the client (a cap on requests in flight adds
  its wait). Reported as p50 / p99 / max over the point, and over its **peak second**: the second of the
  schedule with the most arrivals, where the client is busiest.
- **length match**: each request's input target (the trace's input times the input scale, clipped to the context)
  against the prompt tokens the server counted (``usage.prompt_tokens``); output: the tokens asked for
  (``max_tokens``, the trace's output) against those generated.
- **tau** = tokens committed per verification step: the output's tokens after the first (the prefill's) over the
  request's steps, pooled over the point's requests (:func:`tau_split` says why not the counters').
- **tau to EOS**: with ``ignore_eos`` the model decodes on past its end of sequence, and that text is often
  repetitive, which a drafter predicts well: tau over every token overstates the acceptance of real answers.
  The same through the first EOS: its tokens up to the EOS over the steps up to the one that committed it (every
  token and step where none came), from the server's own report (the reference server's ``spec_decode.eos``);
  ``None`` where not reported. An engine that reports no per-request counts (vLLM) gets its counters' tau over
  the point instead, said so (``tau_source``).
- **vs AR** at the same trace, speed and content: ``method / AR`` for goodput (requests meeting the SLO per
  second), the share meeting it, throughput, TTFT and TPOT percentiles; 95% intervals by a bootstrap over the
  trace's requests, paired by trace row (both methods were sent the same rows).

Pure functions over results and the points/requests frames; no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from dflashbench.measure import metrics, observability
from dflashbench.measure.analysis import (
    BASELINE,
    SETTING,
    finite_number,
    goodput_of,
    method_sort_key,
    slo_text,
    trace_replay_mask,
)
from dflashbench.measure.noise import N_RESAMPLES
from dflashbench.measure.request_index import index_of
from dflashbench.types import RequestResult

NS = 1e9


# --- one point ---------------------------------------------------------------------------------------------------


def _arrivals(results: Iterable[RequestResult]) -> list[RequestResult]:
    """One result per trace request sent: the measured first turns."""
    return [r for r in metrics.measured(results) if r.turn == 0]


def _quantiles_ms(values_s: Sequence[float]) -> dict:
    if not values_s:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    arr = np.asarray(values_s, dtype=float) * 1e3
    return {"p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99)), "max_ms": float(arr.max())}


def lateness(results: Iterable[RequestResult], speed: float) -> dict:
    """Each send's lateness against its place in the trace: p50/p99/max over the point and over its peak second
    (the schedule's busiest second: ``floor(arrival / speed)`` with the most requests)."""
    rows = _arrivals(results)
    late = [(r.sent_ns - r.queued_ns) / NS for r in rows]
    out = {"requests": len(rows), **_quantiles_ms(late)}
    due = [r.trace_arrival_s / speed if r.trace_arrival_s is not None else (r.queued_ns - rows[0].queued_ns) / NS
           for r in rows] if rows else []  # fmt: skip
    if due:
        start = min(due)
        bins = Counter(math.floor(d - start) for d in due)
        second, n = max(sorted(bins.items()), key=lambda kv: kv[1])
        peak = [x for x, d in zip(late, due, strict=True) if math.floor(d - start) == second]
        out["peak"] = {"second": second, "requests": n, **_quantiles_ms(peak)}
    return out


def lengths(results: Iterable[RequestResult]) -> dict:
    """Input target vs sent (``prompt_tokens``) and output asked vs generated, over the successful requests."""
    rows = [r for r in _arrivals(results) if r.ok]
    pairs = [(r.trace_target_input_tokens, r.prompt_tokens) for r in rows
             if r.trace_target_input_tokens is not None and r.prompt_tokens is not None]  # fmt: skip
    out: dict = {"requests": len(rows), "input_counted": len(pairs)}
    if pairs:
        target, sent = (np.asarray(v, dtype=float) for v in zip(*pairs, strict=True))
        rel = np.abs(sent - target) / np.maximum(target, 1)
        out.update({f"input_target_p{q}": float(np.percentile(target, q)) for q in (10, 50, 90)})
        out.update({f"input_sent_p{q}": float(np.percentile(sent, q)) for q in (10, 50, 90)})
        out.update(input_within_10pct=float(np.mean(rel <= 0.10)), input_median_abs_error=float(np.median(
            np.abs(sent - target))), input_sent_over_target=float(sent.sum() / max(target.sum(), 1)))  # fmt: skip
    asked = [(r.trace_target_output_tokens, r.output_tokens) for r in rows if r.trace_target_output_tokens]
    if asked:
        out["output_as_asked"] = float(np.mean([got == want for want, got in asked]))
        out["output_got_over_asked"] = float(sum(g for _, g in asked) / sum(w for w, _ in asked))
    return out


def tau_split(results: Iterable[RequestResult]) -> dict:
    """tau as tokens committed per verification step (the output's tokens after the first, which the prefill
    made, over the steps), over every token and through the end of sequence (see the module docstring), and the
    share of output tokens that came past an EOS.

    Committed tokens, not the counters' ``1 + accepted / drafts``: where ``max_tokens`` (or the EOS) cuts a step,
    the drafts it accepted past the cut are counted by the counters but never sent, which with a trace's short
    outputs (Azure code: 13 tokens at the median, DFlash blocks of 16) overstates tau several times over."""
    rows = [r for r in _arrivals(results) if r.ok and r.spec_verify_steps]
    steps = sum(r.spec_verify_steps for r in rows)
    tokens = sum(max(r.output_tokens - 1, 0) for r in rows)
    reported = [r for r in rows if r.spec_verify_steps_to_eos]
    steps_eos = sum(r.spec_verify_steps_to_eos for r in reported)
    tokens_eos = sum(r.eos_token_index if r.eos_token_index is not None else max(r.output_tokens - 1, 0)
                     for r in reported)  # through the EOS itself: the first token (index 0) came from the prefill
    every = [r for r in _arrivals(results) if r.ok]
    ended = [r for r in every if r.eos_token_index is not None]
    past = sum(max(r.output_tokens - r.eos_token_index - 1, 0) for r in ended)
    out_tokens = sum(r.output_tokens for r in every)
    eos_said = any(r.spec_verify_steps_to_eos is not None for r in every)
    return {"tau": tokens / steps if steps else None, "tau_to_eos": tokens_eos / steps_eos if steps_eos else None,
            "eos_reported": sum(r.spec_verify_steps_to_eos is not None for r in every), "eos_requests": len(ended),
            "past_eos_share": past / out_tokens if eos_said and out_tokens else None}  # fmt: skip


def point_figures(results: Sequence[RequestResult], speed: float) -> dict:
    """Everything a trace point records about its replay (``extra["trace"]``'s figures)."""
    return {"lateness": lateness(results, speed), "lengths": lengths(results), "acceptance": tau_split(results)}


# --- across points: each method against AR on the same traffic ------------------------------------------------

TRACE_COLUMNS = (
    *SETTING, "method", "trace", "window_s", "speed", "content", "requests", "late_p50_ms", "late_p99_ms",
    "peak_late_p50_ms", "peak_late_p99_ms", "peak_requests", "goodput_req_per_s", "good_share", "slo",
    "throughput_tok_per_s_per_gpu", "ttft_s_p50", "ttft_s_p99", "tpot_s_p50", "tpot_s_p99", "tau", "tau_to_eos", "tau_source",
    "goodput_x", "goodput_x_lo", "goodput_x_hi", "throughput_x", "ttft_p99_x", "ttft_p99_x_lo", "ttft_p99_x_hi",
    "tpot_p50_x", "tpot_p50_x_lo", "tpot_p50_x_hi", "point_id", "run_id",
)  # fmt: skip


def trace_table(points: pd.DataFrame, requests: pd.DataFrame, n: int = N_RESAMPLES) -> pd.DataFrame:
    """One row per setting x trace x speed x method (the "all" rows of trace points), with each figure's ratio
    to AR's at the same trace, speed and content and its paired interval (from ``requests``)."""
    df = points[trace_replay_mask(points)] if not points.empty else points
    if df.empty:
        return pd.DataFrame(columns=list(TRACE_COLUMNS))
    df = df[df["category"] == "all"]
    by_point = _requests_by_point(requests)
    rows = []
    for _key, group in df.groupby([*SETTING], sort=True, dropna=False):
        loads: dict = {}
        for rec in group.to_dict("records"):
            t = rec["extra"]["trace"]
            loads.setdefault((t.get("trace"), float(t.get("speed") or 0)), {})[rec["method"]] = rec
        for (_trace, _speed), by_method in sorted(loads.items()):
            base = by_method.get(BASELINE)
            for method in sorted(by_method, key=method_sort_key):
                rows.append(_row(by_method[method], base if method != BASELINE else None, by_point, n))
    out = pd.DataFrame(rows, columns=list(TRACE_COLUMNS))
    order = out["content"].eq("random").astype(int)  # real content first, random tokens beside it after
    return out.assign(_o=order).sort_values("_o", kind="stable").drop(columns="_o").reset_index(drop=True)


def _requests_by_point(requests: pd.DataFrame) -> dict[tuple[str, str], list[RequestResult]]:
    return index_of(requests).grouped(failed=True)  # failed requests included: lateness counts every request sent


def _row(rec: dict, base: dict | None, by_point: dict, n: int) -> dict:
    t = rec["extra"]["trace"]
    late, peak = t.get("lateness") or {}, (t.get("lateness") or {}).get("peak") or {}
    gp = goodput_of(rec.get("extra"))
    row = {**{k: rec.get(k) for k in SETTING}, "method": rec["method"], "trace": t.get("trace"),
           "window_s": t.get("window_s"), "speed": t.get("speed"), "content": t.get("content"),
           "requests": late.get("requests"), "late_p50_ms": late.get("p50_ms"), "late_p99_ms": late.get("p99_ms"),
           "peak_late_p50_ms": peak.get("p50_ms"), "peak_late_p99_ms": peak.get("p99_ms"),
           "peak_requests": peak.get("requests"), "goodput_req_per_s": finite_number(gp.get("goodput_req_per_s")),
           "good_share": finite_number(gp.get("good_share")), "slo": slo_text(gp.get("slo")),
           **{c: finite_number(rec.get(c)) for c in ("throughput_tok_per_s_per_gpu", "ttft_s_p50", "ttft_s_p99",
                                                     "tpot_s_p50", "tpot_s_p99")},
           **_tau(rec, t.get("acceptance") or {}),
           "point_id": rec.get("point_id"), "run_id": rec.get("run_id")}  # fmt: skip
    if base is None:
        return row
    bgp = goodput_of(base.get("extra"))
    same_slo = bool(gp) and gp.get("slo") == bgp.get("slo")
    row["goodput_x"] = _ratio(row["goodput_req_per_s"], finite_number(bgp.get("goodput_req_per_s"))) if same_slo else None
    row["throughput_x"] = _ratio(row["throughput_tok_per_s_per_gpu"], finite_number(base.get("throughput_tok_per_s_per_gpu")))
    row["ttft_p99_x"] = _ratio(row["ttft_s_p99"], finite_number(base.get("ttft_s_p99")))
    row["tpot_p50_x"] = _ratio(row["tpot_s_p50"], finite_number(base.get("tpot_s_p50")))
    mine = by_point.get((str(rec.get("run_id")), str(rec.get("point_id"))), [])
    theirs = by_point.get((str(base.get("run_id")), str(base.get("point_id"))), [])
    pairs = _paired(theirs, mine)
    if pairs:
        row["ttft_p99_x_lo"], row["ttft_p99_x_hi"] = _quantile_ratio_ci(pairs, metrics.ttft_s, 99, n) or (None, None)
        row["tpot_p50_x_lo"], row["tpot_p50_x_hi"] = _quantile_ratio_ci(pairs, _tpot, 50, n) or (None, None)
        if same_slo and row["goodput_x"] is not None:
            ci = _good_share_ci(pairs, gp["slo"], n)
            share_x = _ratio(row["good_share"], finite_number(bgp.get("good_share")))
            if ci is not None and share_x:  # goodput = good share x requests / window: the window ratio carries over
                scale = row["goodput_x"] / share_x
                row["goodput_x_lo"], row["goodput_x_hi"] = ci[0] * scale, ci[1] * scale
    return row


def _tau(rec: dict, acceptance: dict) -> dict:
    """A speculative method's tau from its requests (committed tokens per step; to the EOS where the server says),
    else from the engine's counters over the point (vLLM reports none per request), said which."""
    if rec["method"] == BASELINE:
        return {"tau": None, "tau_to_eos": None, "tau_source": None}
    if acceptance.get("tau") is not None:
        return {"tau": acceptance["tau"], "tau_to_eos": acceptance.get("tau_to_eos"), "tau_source": "requests"}
    counters = finite_number(rec.get("tau"))
    return {"tau": counters, "tau_to_eos": None, "tau_source": "counters" if counters is not None else None}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _tpot(r: RequestResult) -> float | None:
    return metrics.tpot_s(r) if observability.timing_observable(r) is not False else None


def _paired(base: Sequence[RequestResult], other: Sequence[RequestResult]) -> list[tuple[RequestResult, RequestResult]]:
    """(AR's, the method's) result for each trace row both sent (first turns)."""
    mine = {r.trace_index: r for r in _arrivals(other) if r.trace_index is not None}
    return [(r, mine[r.trace_index]) for r in _arrivals(base) if r.trace_index in mine]


def _resample(pairs: Sequence, n: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, len(pairs), size=(n, len(pairs)))


def _quantile_ratio_ci(pairs, fn, q: float, n: int) -> tuple[float, float] | None:
    """95% interval of ``quantile(method) / quantile(AR)``, the trace rows resampled together for both."""
    both = [(fn(a), fn(b)) for a, b in pairs]
    both = [(a, b) for a, b in both if a is not None and b is not None]
    if len(both) < 2:
        return None
    arr = np.asarray(both, dtype=float)
    idx = _resample(both, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.percentile(arr[:, 1][idx], q, axis=1) / np.percentile(arr[:, 0][idx], q, axis=1)
    ratios = ratios[np.isfinite(ratios)]
    return (float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))) if len(ratios) else None


def _good_share_ci(pairs, slo: dict, n: int) -> tuple[float, float] | None:
    """95% interval of the ratio of shares meeting the SLO (method / AR), paired by trace row."""
    from dflashbench.measure.goodput import meets_slo

    arr = np.asarray([(meets_slo(a, slo), meets_slo(b, slo)) for a, b in pairs], dtype=float)
    if len(arr) < 2 or (arr.min(axis=0) == arr.max(axis=0)).all():
        return None  # each side met it for every request or for none: a count that cannot vary has no interval
    idx = _resample(arr, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = arr[:, 1][idx].mean(1) / arr[:, 0][idx].mean(1)
    ratios = ratios[np.isfinite(ratios)]
    return (float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))) if len(ratios) else None
