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
from dflashbench.measure import metrics, observability
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


def point_percentiles(requests: pd.DataFrame, terms: Sequence[SloTerm]) -> dict[tuple[str, str], dict[str, float | None]]:
    """(run_id, point_id) -> {term.text: the point's percentile in seconds} over its measured, successful
    requests (every category)."""
    by_point: dict[tuple[str, str], list[RequestResult]] = {}
    for record in requests.to_dict("records") if not requests.empty else []:
        r = RequestResult.from_dict(record)
        if r.ok and not r.warmup:
            by_point.setdefault((str(r.run_id), str(r.point_id)), []).append(r)
    return {key: {t.text: term_percentile(rs, t) for t in terms} for key, rs in by_point.items()}


def term_percentile(results: list[RequestResult], term: SloTerm) -> float | None:
    """A point's percentile for ``term``. TPOT, as the point's own figures (:func:`metrics.latency_fields`), only
    from the requests whose per-token timing was observable, and ``None`` (not measured, so not met) where too few
    were: a burst must not pass a TPOT bound."""
    if term.metric == "tpot":
        results = observability.observed_requests(results) if observability.point_observability(results).measured else []
    return metrics.percentile([METRICS[term.metric](r) for r in results], term.percentile)


def meets(values: dict[str, float | None], terms: Sequence[SloTerm]) -> bool:
    """Every term measured and within its bound."""
    return all(values.get(t.text) is not None and values[t.text] <= t.limit_s * (1 + 1e-12) for t in terms)


NOT_MEASURED_NOTE = "per-token timing not observable there (bursts), or no request to time"

SLO_COLUMNS = ("backend", "model", "workload", "method", "best_throughput_per_gpu", "ratio", "concurrency",
               "per_user_tok_per_s", "measured", "note")  # fmt: skip


def best_within(points: pd.DataFrame, percentiles: dict[tuple[str, str], dict[str, float | None]],
                terms: Sequence[SloTerm], baseline: str = "ar") -> pd.DataFrame:  # fmt: skip
    """Per (backend, model, workload) and method, over category "all" points: the highest throughput per GPU
    among points meeting every term, where it was measured, and its ratio to ``baseline``'s best."""
    from dflashbench.measure.analysis import INTERACTIVITY, method_sort_key

    df = points[points["category"] == "all"] if not points.empty else points
    rows = []
    if df.empty:
        return pd.DataFrame(columns=list(SLO_COLUMNS))
    for key, group in df.groupby(["backend", "model", "workload"], sort=True):
        best: dict[str, dict] = {}
        for method in sorted(set(group["method"]), key=method_sort_key):
            mine = group[group["method"] == method]
            ok = []
            for r in mine.to_dict("records"):
                values = percentiles.get((str(r.get("run_id")), str(r.get("point_id"))), {})
                if meets(values, terms) and r.get("throughput_tok_per_s_per_gpu") is not None:
                    ok.append((float(r["throughput_tok_per_s_per_gpu"]), r, values))
            row = dict(zip(("backend", "model", "workload"), key, strict=True), method=method)
            if ok:
                tput, r, values = max(ok, key=lambda t: t[0])
                measured = ", ".join(f"{t.metric.upper()} p{t.percentile:g} {values[t.text] * 1000:,.1f} ms" for t in terms)
                row.update(best_throughput_per_gpu=tput, concurrency=int(r["concurrency"]),
                           per_user_tok_per_s=r.get(INTERACTIVITY), measured=measured)  # fmt: skip
            else:
                unmeasured = sum(any(percentiles.get((str(r.get("run_id")), str(r.get("point_id"))), {}).get(t.text)
                                     is None for t in terms) for r in mine.to_dict("records"))  # fmt: skip
                why = (f" ({unmeasured} with a term not measured: {NOT_MEASURED_NOTE})" if unmeasured else "")
                row.update(note=f"no measured point of {len(mine)} meets every bound{why}")
            best[method] = row
        base = best.get(baseline, {}).get("best_throughput_per_gpu")
        for method, row in best.items():
            mine_best = row.get("best_throughput_per_gpu")
            if method != baseline and mine_best is not None and base:
                row["ratio"] = mine_best / base
            elif method != baseline and mine_best is not None:
                row["note"] = "AR meets the SLO at no measured point: no ratio"
            rows.append(row)
    return pd.DataFrame(rows, columns=list(SLO_COLUMNS))
