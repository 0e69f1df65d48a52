"""Service-level objectives: which measured points meet them, and each method's best throughput within them.

An SLO is a latency percentile bound, e.g. ``tpot_p90=20ms``: the 90th percentile of the point's per-request
TPOT must be at most 20 ms. This is GuideLLM's reading of a sweep: the highest load at which a latency percentile
(TTFT, ITL) stays inside its bound for 99 % of users (paraphrased from GuideLLM's README results section,
vllm-project/guidellm commit fbc8821f3f1e). Here the load axis is the concurrency ladder, and the answer is
the best throughput per GPU among the points that meet every bound, with its ratio to AR's.

Percentiles are computed from ``requests.jsonl`` (the point's successful, measured requests) with
:func:`dflashbench.measure.metrics.percentile`, the same function the points' own p50/p99 use. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from dflashbench.errors import UserError
from dflashbench.measure import metrics, noise, observability
from dflashbench.measure.request_index import index_of
from dflashbench.types import RequestResult

# dflashbench's default: a first token within 2 s for 99 % of requests, and 90 % of requests streaming at
# 20 tok/s or faster (TPOT 50 ms), roughly reading speed. A default to start from, not a published figure.
DEFAULT_SLO = "ttft_p99=2s,tpot_p90=50ms"
METRICS = {"ttft": metrics.ttft_s, "tpot": metrics.tpot_s, "e2e": metrics.e2e_s}
_TERM = re.compile(r"^\s*(ttft|tpot|e2e)_p(\d{1,2}(?:\.\d+)?)\s*=\s*(\d*\.?\d+)\s*(ms|s|us)\s*$")
_UNIT_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class SloError(UserError):
    pass


@dataclass(frozen=True, slots=True)
class SloTerm:
    metric: str  # ttft | tpot | e2e
    percentile: float  # 0-100
    limit_s: float
    text: str

    @property
    def label(self) -> str:
        return f"{self.metric.upper()} p{self.percentile:g} ≤ {_fmt_s(self.limit_s)}"


def _fmt_s(v: float) -> str:
    return f"{v * 1000:g} ms" if v < 1 else f"{v:g} s"


def parse_slo(text: str | None) -> list[SloTerm]:
    """``"tpot_p90=20ms,ttft_p99=2s"`` -> two terms. Empty or None: the default set."""
    text = DEFAULT_SLO if text is None or not text.strip() else text
    terms = []
    for part in text.split(","):
        m = _TERM.match(part)
        if not m:
            raise SloError(f"bad --slo term {part.strip()!r}: expected METRIC_pNN=VALUE with METRIC one of "
                           f"ttft, tpot, e2e and a unit ms, s or us, e.g. tpot_p90=20ms,ttft_p99=2s")  # fmt: skip
        q = float(m.group(2))
        if not 0 < q < 100:
            raise SloError(f"bad --slo term {part.strip()!r}: the percentile must lie between 0 and 100")
        terms.append(SloTerm(m.group(1), q, float(m.group(3)) * _UNIT_S[m.group(4)], part.strip()))
    return terms


def _by_point(requests: pd.DataFrame) -> dict[tuple[str, str], list[RequestResult]]:
    return index_of(requests).grouped()


def point_percentiles(requests: pd.DataFrame, terms: Sequence[SloTerm]) -> dict[tuple[str, str], dict[str, float | None]]:
    """(run_id, point_id) -> {term.text: the point's percentile in seconds} over its measured, successful
    requests (every category), read at the percentile asked, or ``None`` where their number does not support it
    (:func:`supported`)."""
    return {key: {t.text: term_percentile(rs, t) for t in terms} for key, rs in _by_point(requests).items()}


def point_support(requests: pd.DataFrame, terms: Sequence[SloTerm]) -> dict[tuple[str, str], dict[str, tuple]]:
    """(run_id, point_id) -> {term.text: (the percentile read or ``None``, the requests it was asked over)}."""
    return {key: {t.text: (supported(len(_timed(rs, t)), t.percentile), len(_timed(rs, t))) for t in terms}
            for key, rs in _by_point(requests).items()}  # fmt: skip


def supported(n: int, asked: float) -> float | None:
    """The percentile asked where a point of ``n`` requests supports it: at least
    :data:`dflashbench.measure.noise.TAIL_REQUESTS` requests beyond it (``compare``'s rule for a gated quantile: p99
    needs 1,000 requests, p90 100); ``None`` otherwise. A percentile is read as asked or not at all: p99 of 32
    requests is their largest, and a lower percentile under its name would pass points the SLO fails."""
    return asked if n > 0 and n >= noise.requests_for_quantile(asked / 100) else None


def needs(term: SloTerm) -> int:
    """How many requests a point needs for ``term``'s percentile (:func:`supported`); what ``sweep --slo`` sizes
    its points to."""
    return int(noise.requests_for_quantile(term.percentile / 100))


def _timed(results: list[RequestResult], term: SloTerm) -> list[RequestResult]:
    """The requests a term is read over: TPOT, as the point's own figures (:func:`metrics.latency_fields`), only
    from the requests whose per-token timing was observable, none where too few were."""
    if term.metric == "tpot":
        return observability.observed_requests(results) if observability.point_observability(results).measured else []
    return results


def term_percentile(results: list[RequestResult], term: SloTerm) -> float | None:
    """A point's percentile for ``term``, as asked; ``None`` (not measured, so not met) where too few requests were
    timed for it: a burst must not pass a TPOT bound, nor a lower percentile stand in for the one asked."""
    timed = _timed(results, term)
    q = supported(len(timed), term.percentile)
    return None if q is None else metrics.percentile([METRICS[term.metric](r) for r in timed], q)


def meets(values: dict[str, float | None], terms: Sequence[SloTerm]) -> bool:
    """Every term measured and within its bound."""
    return all(values.get(t.text) is not None and values[t.text] <= t.limit_s * (1 + 1e-12) for t in terms)


NOT_MEASURED_NOTE = "per-token timing not observable there (bursts), or no request to time"


def unmeasured_why(values: dict, support: dict | None, terms: Sequence[SloTerm]) -> str:
    """Why a point's percentiles were not read: too few requests for the percentile asked (``p99 needs at least
    1,000 requests; this point has 32``), or (TPOT) per-token timing that was not observable (bursts)."""
    why = []
    for t in terms:
        if values.get(t.text) is not None:
            continue
        _, n = (support or {}).get(t.text, (None, None))
        if n:
            why.append(f"{t.metric.upper()} p{t.percentile:g} needs at least {needs(t):,} requests; this point has {n}")
        elif t.metric == "tpot":
            why.append(f"TPOT: {NOT_MEASURED_NOTE}")
        else:
            why.append(f"{t.metric.upper()}: no request to time")
    return "; ".join(dict.fromkeys(why)) or NOT_MEASURED_NOTE

SLO_COLUMNS = ("backend", "model", "workload", "method", "best_throughput_per_gpu", "ratio", "concurrency",
               "per_user_tok_per_s", "measured", "note", "binds", "top_concurrency", "known", "point_id", "run_id", "read_at")  # fmt: skip


def _measured_text(values: dict, terms: Sequence[SloTerm]) -> str:
    """``TTFT p99 92.1 ms, TPOT p90 7.9 ms``: each percentile as asked."""
    return ", ".join(f"{t.metric.upper()} p{t.percentile:g} {values[t.text] * 1000:,.1f} ms" for t in terms)


def best_within(points: pd.DataFrame, percentiles: dict[tuple[str, str], dict[str, float | None]],
                terms: Sequence[SloTerm], baseline: str = "ar", support: dict | None = None) -> pd.DataFrame:  # fmt: skip
    """Per (backend, model, workload) and method, over category "all" points: the highest throughput per GPU
    among points meeting every term, where it was measured, and its ratio to ``baseline``'s best.

    A best is **known** only when every point with more throughput was measured and failed a bound: a point with
    more throughput whose percentile was not measured (bursts) might have met it, so the reading stops there and
    says so instead of reaching past it to a lower point (``known`` False, the note names the point). ``binds``:
    some measured point of the method failed a bound; where none did, the best is just the top concurrency swept
    (``top_concurrency``)."""
    from dflashbench.measure.analysis import INTERACTIVITY, method_sort_key

    df = points[points["category"] == "all"] if not points.empty else points
    rows = []
    if df.empty:
        return pd.DataFrame(columns=list(SLO_COLUMNS))
    for key, group in df.groupby(["backend", "model", "workload"], sort=True):
        best: dict[str, dict] = {}
        for method in sorted(set(group["method"]), key=method_sort_key):
            mine = group[group["method"] == method]
            row = dict(zip(("backend", "model", "workload"), key, strict=True), method=method)
            found = None
            ranked = sorted((r for r in mine.to_dict("records") if r.get("throughput_tok_per_s_per_gpu") is not None),
                            key=lambda r: -float(r["throughput_tok_per_s_per_gpu"]))  # fmt: skip
            for r in ranked:
                pkey = (str(r.get("run_id")), str(r.get("point_id")))
                values = percentiles.get(pkey, {})
                if meets(values, terms):
                    found = (float(r["throughput_tok_per_s_per_gpu"]), r, values, pkey)
                    break
                if any(values.get(t.text) is None for t in terms):  # not measured: it might have met the bounds
                    why = unmeasured_why(values, (support or {}).get(pkey), terms)
                    row.update(known=False, note=f"not read: at c={int(r['concurrency'])} (its most throughput not yet "
                               f"ruled out) {why}")  # fmt: skip
                    break
            measured_all = [percentiles.get((str(r.get("run_id")), str(r.get("point_id"))), {})
                            for r in mine.to_dict("records")]  # fmt: skip
            binds = any(all(v.get(t.text) is not None for t in terms) and not meets(v, terms) for v in measured_all)
            row.update(binds=binds, top_concurrency=int(mine["concurrency"].max()))
            if row.get("known") is False:
                pass
            elif found is not None:
                tput, r, values, pkey = found
                row.update(best_throughput_per_gpu=tput, concurrency=int(r["concurrency"]), known=True,
                           per_user_tok_per_s=r.get(INTERACTIVITY), run_id=pkey[0], point_id=pkey[1],
                           measured=_measured_text(values, terms), read_at=(support or {}).get(pkey))  # fmt: skip
            else:
                unmeasured = sum(any(percentiles.get((str(r.get("run_id")), str(r.get("point_id"))), {}).get(t.text)
                                     is None for t in terms) for r in mine.to_dict("records"))  # fmt: skip
                why = (f" ({unmeasured} with a term not measured: {NOT_MEASURED_NOTE})" if unmeasured else "")
                row.update(known=True, note=f"no measured point of {len(mine)} meets every bound{why}")
            best[method] = row
        base_row = best.get(baseline, {})
        base = base_row.get("best_throughput_per_gpu")
        for method, row in best.items():
            mine_best = row.get("best_throughput_per_gpu")
            if method != baseline and mine_best is not None and base:
                row["ratio"] = mine_best / base
            elif method != baseline and mine_best is not None and base_row.get("known") is False:
                row["note"] = f"no ratio: AR's best within the SLO is not known ({base_row['note']})"
            elif method != baseline and mine_best is not None:
                row["note"] = "AR meets the SLO at no measured point: no ratio"
            rows.append(row)
    return pd.DataFrame(rows, columns=list(SLO_COLUMNS))


@dataclass(frozen=True, slots=True)
class Reach:
    """Where one method met the SLO asked: the loads of its points (category "all") meeting every bound, those read
    and failing one (with their percentiles), and those whose percentiles could not be read (with why)."""

    method: str
    met: tuple[int, ...]
    failed: tuple[tuple[int, dict], ...]
    unread: tuple[tuple[int, str], ...]


def reach(points: pd.DataFrame, percentiles: dict, terms: Sequence[SloTerm], support: dict | None = None
          ) -> dict[tuple, list[Reach]]:  # fmt: skip
    """(backend, model, workload) -> each method's :class:`Reach`, from the points' percentiles read as asked
    (:func:`point_percentiles`, :func:`point_support`)."""
    from dflashbench.measure.analysis import method_sort_key

    df = points[points["category"] == "all"] if not points.empty else points
    out: dict[tuple, list[Reach]] = {}
    for key, group in df.groupby(["backend", "model", "workload"], sort=True) if not df.empty else []:
        for method in sorted(set(group["method"]), key=method_sort_key):
            met, failed, unread = [], [], []
            for r in group[group["method"] == method].sort_values("concurrency").to_dict("records"):
                pkey = (str(r.get("run_id")), str(r.get("point_id")))
                values, c = percentiles.get(pkey, {}), int(r["concurrency"])
                if meets(values, terms):
                    met.append(c)
                elif any(values.get(t.text) is None for t in terms):
                    unread.append((c, unmeasured_why(values, (support or {}).get(pkey), terms)))
                else:
                    failed.append((c, values))
            out.setdefault(tuple(key), []).append(Reach(method, tuple(met), tuple(failed), tuple(unread)))
    return out


def nearest(reaches: Sequence[Reach], terms: Sequence[SloTerm]) -> tuple[str, int, dict] | None:
    """The failing point nearest the SLO (the smallest of its worst value ÷ bound): method, load, percentiles."""
    found = [(max(v[t.text] / t.limit_s for t in terms), r.method, c, v) for r in reaches for c, v in r.failed]
    return min(found, key=lambda f: f[0])[1:] if found else None
