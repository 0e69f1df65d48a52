"""A trace replay's readings: how faithfully the trace was sent, how well the content matched it, acceptance with
and without the text past the end of sequence, and each method against AR on the same traffic.

Definitions (docs/metrics.md, "Trace replay"):

- **lateness** of a send = ``sent_ns - (start + arrival / speed)``: how long after its moment on the trace's own
  clock the request left the client (a cap on requests in flight adds its wait). ``start`` is the moment the
  point's replay began, the trace's time 0 (:func:`clock_start_ns`); every point starts its own clock, so each
  repeat round and a resumed run replay the trace from its beginning. Reported as p50 / p99 / max over the point,
  and over its **peak second**: the second of the schedule with the most arrivals, where the client is busiest.
- **the schedule kept**: the achieved arrival rate (``(n - 1) / (last send - first send)``) against the asked one
  (the schedule's own, :func:`dflashbench.load.trace_replay.mean_rate_per_s`); more than :data:`RATE_TOLERANCE`
  away, the point did not carry the traffic asked and no verdict is read from it (:func:`schedule_kept`).
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
  trace's requests, paired by trace row (both methods were sent the same rows). A p99 is read only over as many
  requests as the SLO reading asks for it (:func:`dflashbench.measure.slo.supported`: 1,000); fewer, it is left out.
- **the readings the verdict decides on** (:func:`pair_readings`): the closed loop's own
  (:mod:`dflashbench.measure.readings`): request latency, throughput and TTFT, each a ratio of sums over the
  requests both points sent (paired by trace row), with the noise rule's interval (the machine's drift between the
  two points included where the speed probe measured it).

Pure functions over results and the points/requests frames; no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from dflashbench.measure import metrics, noise, observability, readings, slo, verdict
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
from dflashbench.types import ProbeReading, RequestResult

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


def clock_start_ns(rows: Sequence[RequestResult], speed: float) -> int | None:
    """The moment the point's replay began on the trace's own clock (its time 0): the earliest of its requests'
    ``queued_ns - arrival / speed``. The open loop stamps each request due at ``start + arrival / speed``
    (:mod:`dflashbench.load.openloop`), so every request gives that one moment; a sender that stamped a request
    only when it went (after the one before, as in turn) gives a later one for it, and the earliest is the start."""
    starts = [r.queued_ns - round(r.trace_arrival_s / speed * NS) for r in rows if r.trace_arrival_s is not None]
    return min(starts) if starts else None


def lateness(results: Iterable[RequestResult], speed: float) -> dict:
    """Each send's lateness against its moment on the trace's clock, ``start + arrival / speed``
    (:func:`clock_start_ns`): p50/p99/max over the point and over its peak second (the schedule's busiest second:
    ``floor(arrival / speed)`` with the most requests). A request without its trace row counts from its own
    ``queued_ns``."""
    rows = _arrivals(results)
    start = clock_start_ns(rows, speed)
    due_ns = [start + round(r.trace_arrival_s / speed * NS) if start is not None and r.trace_arrival_s is not None
              else r.queued_ns for r in rows]  # fmt: skip
    late = [(r.sent_ns - d) / NS for r, d in zip(rows, due_ns, strict=True)]
    out = {"requests": len(rows), **_quantiles_ms(late)}
    due = [(d - min(due_ns)) / NS for d in due_ns] if rows else []  # seconds from the first request's moment
    if due:
        bins = Counter(math.floor(d) for d in due)
        second, n = max(sorted(bins.items()), key=lambda kv: kv[1])
        peak = [x for x, d in zip(late, due, strict=True) if math.floor(d) == second]
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

RATE_TOLERANCE = 0.05  # an achieved arrival rate further than this from the asked one: the schedule was not kept
TAIL = 99  # the tail percentile a trace row shows, where its requests support it (slo.supported)

TRACE_COLUMNS = (
    *SETTING, "method", "trace", "window_s", "speed", "content", "requests", "late_p50_ms", "late_p99_ms",
    "peak_late_p50_ms", "peak_late_p99_ms", "peak_requests", "asked_rate_per_s", "achieved_rate_per_s", "kept",
    "goodput_req_per_s", "good_share", "slo", "throughput_tok_per_s_per_gpu", "ttft_s_p50", "ttft_s_p99", "tpot_s_p50",
    "tpot_s_p99", "tau", "tau_to_eos", "tau_source", "tau_counters", "latency_x", "latency_x_lo", "latency_x_hi", "latency_verdict",
    "goodput_x", "goodput_x_lo", "goodput_x_hi", "throughput_x", "ttft_p50_x", "ttft_p50_x_lo", "ttft_p50_x_hi",
    "tpot_p50_x", "tpot_p50_x_lo", "tpot_p50_x_hi", "point_id", "run_id",
)  # fmt: skip


def rates_of(extra: object) -> tuple[float | None, float | None]:
    """A rate or trace point's asked and achieved arrival rates (``extra["load"]``), per second."""
    load = (extra.get("load") if isinstance(extra, dict) else None) or {}
    return finite_number(load.get("request_rate")), finite_number(load.get("achieved_rate_per_s"))


def sent_rate_per_s(results: Iterable[RequestResult]) -> float | None:
    """The arrival rate a point achieved, read again from its requests: ``(n - 1) / (last send - first send)`` over
    the measured first turns sent (failed ones too: each was sent); with several repeat rounds (each its own replay)
    the slowest round's; ``None`` under 2 sends."""
    rounds: dict[tuple, list[int]] = {}
    for r in _arrivals(results):
        if r.sent_ns is not None:
            rounds.setdefault((r.point_id, r.repeat), []).append(r.sent_ns)
    found = [(len(ns) - 1) / ((max(ns) - min(ns)) / NS) for ns in rounds.values() if len(ns) >= 2 and max(ns) > min(ns)]
    return min(found) if found else None


def rates_sent(rec: Mapping, sent: Sequence[RequestResult] | None) -> tuple[float | None, float | None]:
    """A trace point's asked rate (``extra["load"]``) and the rate it achieved: from its requests where they are
    stored (:func:`sent_rate_per_s`: the schedule as sent, however the point row was stamped; the lateness is read
    from the same requests), else the point row's own (review 2026-11-29, probe p10b)."""
    asked, achieved = rates_of(rec.get("extra"))
    again = sent_rate_per_s(sent) if sent else None
    return asked, again if again is not None else achieved


def schedule_kept(asked: float | None, achieved: float | None, over: bool = True) -> bool | None:
    """Whether a point sent the arrivals asked: its achieved rate within :data:`RATE_TOLERANCE` of the asked one
    (short of it, the server's pace set the traffic; over it, the schedule was not followed either); ``None``
    where either is unknown. ``over`` False: short of it only (a Poisson schedule's own rate is the target's only on
    average, above it by chance; never more than 1/n below it)."""
    if asked is None or achieved is None or asked <= 0:
        return None
    off = achieved / asked - 1.0
    return (abs(off) if over else -off) <= RATE_TOLERANCE + 1e-12


def not_kept_words(method: str, asked: float | None, achieved: float | None) -> str:
    """``DFlash sent 2.59/s of 23.59 asked (11 %)``."""
    from dflashbench.measure.analysis import method_label

    share = f" ({achieved / asked:.0%})" if asked and achieved is not None else ""
    return f"{method_label(method)} sent {achieved or 0:.2f}/s of {asked or 0:.2f} asked{share}"


def trace_points(points: pd.DataFrame) -> pd.DataFrame:
    """The "all" rows of trace points (``sweep --trace``)."""
    df = points[trace_replay_mask(points)] if not points.empty else points
    return df[df["category"] == "all"] if not df.empty else df


def finished(points: pd.DataFrame) -> pd.DataFrame:
    """The trace points (every category's rows) that finished (status ok)."""
    usable = points[trace_replay_mask(points)] if not points.empty else points
    return usable[usable["status"].fillna("ok") == "ok"] if "status" in usable.columns else usable


def contents(points: pd.DataFrame) -> list[dict]:
    """Each trace x window x content's record (``extra["trace"]``), its lengths' figures as ``_<name>``: the one
    whose input lengths were counted where the points differ."""
    seen: dict = {}
    for rec in points.to_dict("records"):
        t = rec["extra"]["trace"]
        key, lengths = (t.get("trace"), t.get("window_s"), t.get("content")), t.get("lengths") or {}
        if key not in seen or lengths.get("input_counted"):
            seen[key] = {**t, **{f"_{k}": v for k, v in lengths.items()}}
    return list(seen.values())


def _loads(df: pd.DataFrame, by_run: bool) -> dict:
    """(setting[, run], trace, speed) -> {method: its point}: the points sent the same traffic (the content is
    in the setting's workload)."""
    loads: dict = {}
    for rec in df.to_dict("records"):
        t = rec["extra"]["trace"]
        key = (*(rec.get(k) for k in SETTING), *((str(rec.get("run_id")),) if by_run else ()), t.get("trace"),
               float(t.get("speed") or 0))  # fmt: skip
        loads.setdefault(key, {})[rec["method"]] = rec
    return loads


# --- the readings the verdict decides on ----------------------------------------------------------------------

# paired over the trace's rows; throughput is the points' own beside them (_points_own)
PAIRED = (readings.LATENCY, readings.TTFT)
PAIR_COLUMNS = (*SETTING, "run_id", "trace", "window_s", "speed", "content", "method", "baseline", "figure", "value",
                "lo", "hi", "decision", "verdict", "covers", "why", "common", "kept", "launch_sd",
                "launch_source", "requests_sd", "drift_sd", "n_method", "n_base", "rounds", "concurrency")  # fmt: skip


def pair_readings(points: pd.DataFrame, requests: pd.DataFrame,
                  probes: Mapping[str, Sequence[ProbeReading]] | None = None,
                  terms: Mapping[str, object] | None = None) -> pd.DataFrame:  # fmt: skip
    """The closed loop's readings (:mod:`dflashbench.measure.readings`: request latency, throughput, TTFT, method ÷
    baseline as a ratio of sums over the requests both points sent, paired by trace row, with the noise rule's
    interval) for every pair of :func:`readings.pairs_of` at each trace, speed and content of one run. A pair
    whose either point did not keep its schedule (:func:`schedule_kept`) is read but not decided (``verdict``
    undecided, ``why`` naming the rate sent). ``terms``: each run's run-to-run term, as the closed loop's readings
    take it (:func:`dflashbench.measure.readings.pair_readings`), so that both verdicts decide on one interval."""
    df = trace_points(points)
    if not df.empty and "status" in df.columns:
        df = df[df["status"].fillna("ok") == "ok"]
    if df.empty:
        return pd.DataFrame(columns=list(PAIR_COLUMNS))
    index, rows = index_of(requests), []
    for key, by_method in _loads(df, by_run=True).items():
        run_id = key[len(SETTING)]
        for method, base in readings.pairs_of(by_method):
            mine, theirs = by_method[method], by_method[base]
            short = [not_kept_words(rec["method"], *rates) for rec in (theirs, mine) if schedule_kept(*(
                rates := rates_sent(rec, _point_results(index, rec, failed=True)))) is False]  # fmt: skip
            sd = readings.point_drift((probes or {}).get(run_id) or (), str(mine["point_id"]), str(theirs["point_id"]))
            sides = [_point_results(index, rec) for rec in (theirs, mine)]
            t = mine["extra"]["trace"]
            rows.append(_points_own(run_id, t, method, base, mine, theirs))
            for figure in PAIRED:
                p = readings.paired(readings.terms(sides[0], figure), readings.terms(sides[1], figure))
                d = readings.decided(p, sd, (terms or {}).get(run_id))
                interval, covers = d.interval, d.covers
                decision = noise.decide(interval)
                verdict = readings.oriented(figure, decision) if p.value is not None and not short else readings.UNDECIDED
                why = ("schedule not kept: " + "; ".join(short)) if short else d.why if interval else \
                    (readings.TOO_FEW if p.value is not None or p.common < 2 else "no requests")
                rows.append({**{k: mine.get(k) for k in SETTING}, "run_id": run_id, "trace": t.get("trace"),
                             "window_s": t.get("window_s"), "speed": t.get("speed"), "content": t.get("content"),
                             "method": method, "baseline": base, "figure": figure, "value": p.value,
                             "lo": interval[0] if interval else None, "hi": interval[1] if interval else None,
                             "decision": decision, "verdict": verdict, "covers": covers or None, "why": why,
                             "common": p.common, "kept": not short, "launch_sd": d.launch_sd,
                             "launch_source": d.launch_source, "requests_sd": d.requests_sd, "drift_sd": d.drift_sd,
                             "n_method": p.n_method, "n_base": p.n_base, "rounds": d.rounds,
                             "concurrency": mine.get("concurrency")})  # fmt: skip
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS))


def _points_own(run_id: str, trace: Mapping, method: str, base: str, mine: Mapping,
                theirs: Mapping) -> dict:  # fmt: skip
    """The throughput row of a trace pair: the two points' own throughput (output tokens over the measured window),
    one figure each, no interval, as the closed loop's (:func:`dflashbench.measure.readings.pair_readings`). Not the
    requests' tokens over their time in flight: on a trace both methods send the same arrivals, so that ratio is one
    over the request-latency ratio (1.80x beside 0.56x in the trace example), while each point's throughput is the
    trace's rate (1.01x; second verdict review, docs/measurements/2026-11-29-verdict-review2)."""
    return {**dict.fromkeys(PAIR_COLUMNS), **{k: mine.get(k) for k in SETTING}, "run_id": run_id,
            "trace": trace.get("trace"), "window_s": trace.get("window_s"), "speed": trace.get("speed"),
            "content": trace.get("content"), "method": method, "baseline": base,
            "concurrency": mine.get("concurrency"), **readings.points_own(mine, theirs)}  # fmt: skip


def as_readings(pairs: pd.DataFrame) -> pd.DataFrame:
    """A trace replay's readings (:func:`pair_readings`) as rows of the report's readings table
    (:data:`dflashbench.measure.readings.COLUMNS`, ``speed`` set: the trace's speed), so that the table under the
    verdict and ``report --format json`` hold the readings the trace verdict decides on (review 2026-11-29, X12)."""
    if pairs.empty:
        return pd.DataFrame(columns=list(readings.COLUMNS))
    return pd.DataFrame([{**{c: r.get(c) for c in readings.COLUMNS}, "category": "all", "speed": float(r["speed"])}
                         for r in pairs.to_dict("records")], columns=list(readings.COLUMNS))  # fmt: skip


def choose(pairs: pd.DataFrame) -> tuple[dict, dict]:
    """What to serve at each speed by the closed loop's rule (:func:`dflashbench.measure.verdict.outcome` on the
    request latency and throughput of :func:`pair_readings`, then :func:`~dflashbench.measure.verdict.choose`), and
    the readings by (method, baseline, speed, figure)."""
    rows = {(r["method"], r["baseline"], float(r["speed"]), r["figure"]): r for r in pairs.to_dict("records")}
    outcomes: dict = {}
    for m, b, speed, _f in rows:
        words = {f: rows[(m, b, speed, f)]["verdict"] for f in verdict.WAITED_FOR if (m, b, speed, f) in rows}
        outcomes.setdefault((m, b), {})[speed] = verdict.outcome(words)
    return verdict.choose(outcomes), rows


def _point_results(index, rec: Mapping, failed: bool = False) -> list[RequestResult]:
    """A point's measured, successful requests (``failed``: every one sent), every repeat round's."""
    ids = rec.get("repeat_point_ids")
    ids = [str(i) for i in ids] if isinstance(ids, list) and ids else [str(rec.get("point_id"))]
    return [r for pid in ids for r in index.of(str(rec.get("run_id")), pid, failed=failed)]


# --- the table: each method against AR on the same traffic ------------------------------------------------------


def trace_table(points: pd.DataFrame, requests: pd.DataFrame, n: int = N_RESAMPLES,
                pairs: pd.DataFrame | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per setting x trace x speed x method (the "all" rows of trace points), with each figure's ratio
    to AR's at the same trace, speed and content and its paired interval (from ``requests``); the request-latency
    reading beside it from ``pairs`` (:func:`pair_readings`, made here where not given)."""
    df = trace_points(points)
    if df.empty:
        return pd.DataFrame(columns=list(TRACE_COLUMNS))
    pairs = pair_readings(df, requests) if pairs is None else pairs
    by_point = _requests_by_point(requests)
    rows = []
    for _key, by_method in sorted(_loads(df, by_run=False).items(), key=lambda kv: str(kv[0])):
        base = by_method.get(BASELINE)
        for method in sorted(by_method, key=method_sort_key):
            rows.append(_row(by_method[method], base if method != BASELINE else None, by_point, n, pairs))
    out = pd.DataFrame(rows, columns=list(TRACE_COLUMNS))
    order = out["content"].eq("random").astype(int)  # real content first, random tokens beside it after
    return out.assign(_o=order).sort_values(["_o", "speed"], kind="stable").drop(columns="_o").reset_index(drop=True)


def _requests_by_point(requests: pd.DataFrame) -> dict[tuple[str, str], list[RequestResult]]:
    return index_of(requests).grouped(failed=True)  # failed requests included: lateness counts every request sent


def _tail(rec: dict, n: int | None) -> dict:
    """The point's p99s, where its requests support them as the SLO reading asks (else ``None``)."""
    ok = n is not None and slo.supported(int(n), TAIL) is not None
    return {c: finite_number(rec.get(c)) if ok else None for c in ("ttft_s_p99", "tpot_s_p99")}


def _row(rec: dict, base: dict | None, by_point: dict, n: int, pairs: pd.DataFrame) -> dict:
    t = rec["extra"]["trace"]
    sent = by_point.get((str(rec.get("run_id")), str(rec.get("point_id"))))
    # lateness on the trace's clock, from the requests where stored (a run from before it was measured so: again)
    late = lateness(sent, float(t.get("speed") or 1)) if sent else (t.get("lateness") or {})
    peak = late.get("peak") or {}
    gp = goodput_of(rec.get("extra"))
    asked, achieved = rates_sent(rec, sent)
    row = {**{k: rec.get(k) for k in SETTING}, "method": rec["method"], "trace": t.get("trace"),
           "window_s": t.get("window_s"), "speed": t.get("speed"), "content": t.get("content"),
           "requests": late.get("requests"), "late_p50_ms": late.get("p50_ms"), "late_p99_ms": late.get("p99_ms"),
           "peak_late_p50_ms": peak.get("p50_ms"), "peak_late_p99_ms": peak.get("p99_ms"),
           "peak_requests": peak.get("requests"), "asked_rate_per_s": asked, "achieved_rate_per_s": achieved,
           "kept": schedule_kept(asked, achieved),
           "goodput_req_per_s": finite_number(gp.get("goodput_req_per_s")),
           "good_share": finite_number(gp.get("good_share")), "slo": slo_text(gp.get("slo")),
           **{c: finite_number(rec.get(c)) for c in ("throughput_tok_per_s_per_gpu", "ttft_s_p50", "tpot_s_p50")},
           **_tail(rec, late.get("requests")), **_tau(rec, t.get("acceptance") or {}),
           "point_id": rec.get("point_id"), "run_id": rec.get("run_id")}  # fmt: skip
    if base is None:
        return row
    bgp = goodput_of(base.get("extra"))
    same_slo = bool(gp) and gp.get("slo") == bgp.get("slo")
    row["goodput_x"] = _ratio(row["goodput_req_per_s"], finite_number(bgp.get("goodput_req_per_s"))) if same_slo else None
    row["throughput_x"] = _ratio(row["throughput_tok_per_s_per_gpu"], finite_number(base.get("throughput_tok_per_s_per_gpu")))
    row["ttft_p50_x"] = _ratio(row["ttft_s_p50"], finite_number(base.get("ttft_s_p50")))
    row["tpot_p50_x"] = _ratio(row["tpot_s_p50"], finite_number(base.get("tpot_s_p50")))
    lat = pairs[(pairs["run_id"].astype(str) == str(rec.get("run_id"))) & (pairs["method"] == rec["method"])
                & (pairs["baseline"] == BASELINE) & (pairs["figure"] == readings.LATENCY)
                & (pairs["workload"] == rec.get("workload")) & (pairs["speed"] == t.get("speed"))] \
        if not pairs.empty else pairs  # fmt: skip
    if not lat.empty:
        got = lat.iloc[0]
        row.update(latency_x=got["value"], latency_x_lo=got["lo"], latency_x_hi=got["hi"],
                   latency_verdict=got["verdict"])  # fmt: skip
    mine = by_point.get((str(rec.get("run_id")), str(rec.get("point_id"))), [])
    theirs = by_point.get((str(base.get("run_id")), str(base.get("point_id"))), [])
    pairs_ = _paired(theirs, mine)
    if pairs_:
        row["ttft_p50_x_lo"], row["ttft_p50_x_hi"] = _quantile_ratio_ci(pairs_, metrics.ttft_s, 50, n) or (None, None)
        row["tpot_p50_x_lo"], row["tpot_p50_x_hi"] = _quantile_ratio_ci(pairs_, _tpot, 50, n) or (None, None)
        if same_slo and row["goodput_x"] is not None:
            ci = _good_share_ci(pairs_, gp["slo"], n)
            share_x = _ratio(row["good_share"], finite_number(bgp.get("good_share")))
            if ci is not None and share_x:  # goodput = good share x requests / window: the window ratio carries over
                scale = row["goodput_x"] / share_x
                row["goodput_x_lo"], row["goodput_x_hi"] = ci[0] * scale, ci[1] * scale
    return row


def _tau(rec: dict, acceptance: dict) -> dict:
    """A speculative method's tau from its requests (committed tokens per step; to the EOS where the server says),
    else from the engine's counters over the point (vLLM reports none per request), said which; and the counters'
    own tau beside it (1 + accepted / steps: it counts drafts accepted past a stop too)."""
    if rec["method"] == BASELINE:
        return {"tau": None, "tau_to_eos": None, "tau_source": None, "tau_counters": None}
    counters = finite_number(rec.get("tau"))  # the counters' τ beside it: 1 + accepted / steps over the point
    if acceptance.get("tau") is not None:
        return {"tau": acceptance["tau"], "tau_to_eos": acceptance.get("tau_to_eos"), "tau_source": "requests",
                "tau_counters": counters}  # fmt: skip
    return {"tau": counters, "tau_to_eos": None, "tau_source": "counters" if counters is not None else None,
            "tau_counters": counters}  # fmt: skip


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
