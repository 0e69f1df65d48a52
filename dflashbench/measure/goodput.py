"""Goodput under a service-level objective: requests per second that met every latency target.

Semantics of ``vllm bench serve --goodput`` (vllm/benchmarks/serve.py, ``calculate_metrics``): a request is
*good* when it completed and, for every SLO given, its metric is at most the target (``slo >= value``); the
metrics are TTFT, TPOT (``(e2e - ttft) / (output_tokens - 1)``, counted as 0 for a single-token output, so such
a request always meets a TPOT target) and E2E latency; ``request_goodput = good / duration`` with the
benchmark's duration. vLLM takes the targets in milliseconds (``ttft:2000``); here they are seconds with the
unit in the key (``ttft_s=2,tpot_s=0.05,e2e_s=30``), like every other name in this project, or, as the report's
``--slo`` writes them, a unit on the value (``ttft=2s,tpot=50ms``). The duration is
the point's measured window (:func:`dflashbench.measure.metrics.window_s`). Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dflashbench.errors import UserError
from dflashbench.measure import observability
from dflashbench.measure.metrics import e2e_s, measured, tpot_s, ttft_s, window_s
from dflashbench.types import RequestResult

SLO_KEYS = ("ttft_s", "tpot_s", "e2e_s")


def parse_slo(text: str | Mapping[str, float] | None) -> dict[str, float]:
    """``"ttft_s=2,tpot_s=0.05"`` (or a mapping, from a suite file) -> ``{"ttft_s": 2.0, "tpot_s": 0.05}``."""
    if not text:
        return {}
    if isinstance(text, Mapping):
        items = list(text.items())
    else:
        items = []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            key, sep, value = part.partition("=")
            if not sep:
                raise UserError(f"--goodput {text}: write KEY=SECONDS pairs like ttft_s=2,tpot_s=0.05")
            items.append((key.strip(), value.strip()))
    slo: dict[str, float] = {}
    for key, value in items:
        if key in ("ttft", "tpot", "e2e"):  # the report's --slo spelling: a unit on the value (tpot=50ms)
            key, value = key + "_s", _seconds(key, value)
        if key not in SLO_KEYS:
            raise UserError(f"--goodput: unknown target {key!r}; use {', '.join(SLO_KEYS)} (seconds), or "
                            "ttft/tpot/e2e with a unit (tpot=50ms)")  # fmt: skip
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise UserError(f"--goodput {key}={value}: expected a number of seconds") from None
        if not seconds > 0:
            raise UserError(f"--goodput {key}={value}: a target must be above 0 seconds")
        slo[key] = seconds
    return slo


_UNIT_S = {"ms": 1e-3, "us": 1e-6, "s": 1.0}


def _seconds(key: str, value: object) -> float:
    text = str(value).strip()
    for unit, scale in _UNIT_S.items():  # "ms" before "s"
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)]) * scale
            except ValueError:
                break
    raise UserError(f"--goodput {key}={value}: give a unit (ms, s, us), e.g. {key}=50ms, or write {key}_s=SECONDS")


def meets_slo(r: RequestResult, slo: Mapping[str, float]) -> bool:
    """Whether one finished request met every target (vLLM: TPOT of a one-token output counts as 0). A request
    whose tokens arrived in bursts (:func:`dflashbench.measure.observability.timing_observable` False) has no TPOT the
    client could see, only a collapsed one: it is not shown to meet a TPOT target, so it does not."""
    if not r.ok or r.first_token_ns is None:
        return False
    if "tpot_s" in slo and observability.timing_observable(r) is False:
        return False
    values = {"ttft_s": ttft_s(r), "tpot_s": tpot_s(r) or 0.0, "e2e_s": e2e_s(r)}
    return all(values[k] is not None and values[k] <= target for k, target in slo.items())


def goodput(results: Sequence[RequestResult], slo: Mapping[str, float]) -> dict | None:
    """``{"slo", "good", "requests", "good_share", "goodput_req_per_s"}`` over the measured results; ``None``
    when no SLO is set or nothing finished."""
    if not slo:
        return None
    rows = measured(results)
    duration = window_s(rows)
    if not rows or not duration:
        return None
    good = sum(meets_slo(r, slo) for r in rows)
    return {"slo": dict(slo), "good": good, "requests": len(rows), "good_share": good / len(rows),
            "goodput_req_per_s": good / duration}  # fmt: skip
