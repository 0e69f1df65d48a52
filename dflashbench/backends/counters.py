"""Pure parsers: what each engine reports about speculative decoding -> :class:`AcceptCounters`.

Every function here takes text or decoded JSON and returns cumulative counters (or ``None`` where the
engine reports none, e.g. an AR server). Window deltas are ``later.minus(earlier)``, which raises
:class:`~dflashbench.types.CounterResetError` when a counter went backwards or the server's identity
(:func:`server_identity`: process start time, ``_created`` samples) changed: the server restarted.
tau is computed from the counters by :mod:`dflashbench.measure.metrics`; the mapping onto vLLM's names is chosen
so that ``1 + accepted_tokens / drafts`` is each engine's own acceptance length:

- vLLM: Prometheus counters ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``,
  ``..._num_accepted_tokens`` and ``..._num_accepted_tokens_per_pos{position="i"}`` (the exposition
  adds ``_total``; one series per engine core under data parallelism, summed here).
- SGLang: tau = sum(completion_tokens) / sum(spec_verify_ct), so drafts = spec_verify_ct and accepted =
  completion_tokens - spec_verify_ct; from its Prometheus counters ``sglang:spec_verify_calls`` and
  ``sglang:generation_tokens`` (server-wide).
- TensorRT-LLM: iteration stats ``specDecodingStats``, tau = 1 + sum(numAcceptedTokens) /
  sum(numRequestsWithDraftTokens).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dflashbench.types import AcceptCounters

VLLM_PREFIX = "vllm:spec_decode_"
_DRAFTS, _DRAFT_TOKENS, _ACCEPTED, _PER_POS = (
    "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos",
)  # fmt: skip

def iter_prometheus_samples(text: str) -> Iterable[tuple[str, dict[str, str], float]]:
    """Yield ``(name, labels, value)`` for every sample of a Prometheus text exposition.

    Read with ``prometheus_client``'s parser (labels unescaped, timestamps dropped); non-finite values are
    skipped. A page the parser rejects is read again line by line, so one malformed line costs only itself and
    not the counters around it. Sample names are as exposed (a counter's ``_total``/``_created`` suffixes kept).
    """
    try:
        samples = _samples(text)
    except ValueError:
        samples = []
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                with contextlib.suppress(ValueError):
                    samples += _samples(line)
    for sample in samples:
        if math.isfinite(sample.value):
            yield sample.name, dict(sample.labels), float(sample.value)


def _samples(text: str) -> list[Sample]:
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


# A restarted server whose new counters already exceed the earlier read looks like growth; its identity gives it
# away. prometheus_client (which vLLM exposes its metrics through) adds, on its default registry, a
# ``process_start_time_seconds`` gauge (ProcessCollector, Linux), and, for every labelled counter child, a
# ``<name>_created`` sample holding the child's creation time (unless PROMETHEUS_DISABLE_CREATED_SERIES is set).
# vLLM creates its spec-decode counter children once per engine at start-up: vllm/v1/spec_decode/metrics.py,
# SpecDecodingProm.__init__ builds ``vllm:spec_decode_num_drafts`` and calls make_per_engine(counter, ...) ->
# counter.labels(*labelvalues) for every engine index (read in vllm-project/vllm, vllm/v1/spec_decode/metrics.py),
# so ``vllm:spec_decode_num_drafts_created`` is fixed for a server's life and new after a restart.
PROCESS_START = "process_start_time_seconds"


def server_identity(text: str, created: Iterable[str] = ()) -> str | None:
    """What identifies the server process behind a ``/metrics`` page: its ``process_start_time_seconds`` and the
    ``_created`` timestamps of the counters named in ``created`` (``name_created`` samples, all label sets);
    ``None`` when the page has neither. Two reads of one server give the same string; a restart changes it."""
    wanted = {f"{name}_created" for name in created}
    start: list[str] = []
    stamps: list[str] = []
    for name, labels, value in iter_prometheus_samples(text):
        if name == PROCESS_START:
            start.append(f"{value:.3f}")
        elif name in wanted:
            engine = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            stamps.append(f"{name}{{{engine}}}={value:.3f}")
    if not start and not stamps:
        return None
    parts = [f"started {','.join(sorted(start))}"] if start else []
    return "; ".join(parts + sorted(stamps))


def parse_vllm_prometheus(
    text: str, *, prefix: str = VLLM_PREFIX, model_name: str | None = None
) -> AcceptCounters | None:
    """Cumulative spec-decode counters from a vLLM ``/metrics`` page; ``None`` where there are none.

    Accepts the counter names with the exposition's ``_total`` suffix (what vLLM serves) and without it;
    ``_created`` timestamps are not counts: with ``process_start_time_seconds`` they make the
    ``server_id`` (:func:`server_identity`) that tells a restarted server from a grown one. Series that differ only in labels (``engine`` under data
    parallelism) are summed; per-position counts are summed by their ``position`` label. With
    ``model_name`` given, only series labelled with that ``model_name`` count. A server running without
    speculative decoding (AR) exposes no ``num_drafts`` counter, and this returns ``None``.
    ``prefix`` lets another server that speaks vLLM's schema under its own namespace be read
    (e.g. ``"llamacpp:spec_decode_"``).
    """
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for name, labels, value in iter_prometheus_samples(text):
        if not name.startswith(prefix):
            continue
        if model_name is not None and labels.get("model_name", model_name) != model_name:
            continue
        key = name[len(prefix) :]
        key = key.removesuffix("_total")
        if key == _PER_POS:
            try:
                pos = int(labels["position"])
            except (KeyError, ValueError):
                continue
            per_pos[pos] = per_pos.get(pos, 0.0) + value
        elif key in (_DRAFTS, _DRAFT_TOKENS, _ACCEPTED):
            totals[key] = totals.get(key, 0.0) + value
    if _DRAFTS not in totals:
        return None
    width = max(per_pos) + 1 if per_pos else 0
    return AcceptCounters(
        drafts=_count(totals[_DRAFTS]),
        draft_tokens=_count(totals.get(_DRAFT_TOKENS, 0.0)),
        accepted_tokens=_count(totals.get(_ACCEPTED, 0.0)),
        accepted_per_pos=tuple(_count(per_pos.get(i, 0.0)) for i in range(width)),
        server_id=server_identity(text, created=[prefix + _DRAFTS]),
    )


def _count(value: float) -> int:
    """Counters are exposed as floats (``6.491797e+06``); they count whole things."""
    return int(round(value))


# --- SGLang ---------------------------------------------------------------------------------------


def parse_sglang_prometheus(text: str) -> AcceptCounters | None:
    """Cumulative counters from SGLang's ``/metrics`` (server started with ``--enable-metrics``).

    SGLang counts, per finished request, ``sglang:generation_tokens_total`` (its completion tokens) and
    ``sglang:spec_verify_calls_total`` (its ``spec_verify_ct``); so drafts = verify calls and accepted =
    generation tokens - verify calls give ``1 + accepted/drafts`` = sum(completion_tokens) /
    sum(spec_verify_ct), SGLang's pooled tau over requests. Series are summed
    over labels (``is_streaming``, ranks). ``None`` where there is no verify counter (AR, or an SGLang
    without it). draft_tokens is 0 = not reported (SGLang exposes no proposed-token counter).
    """
    verify = generated = 0.0
    seen = False
    for name, _labels, value in iter_prometheus_samples(text):
        key = name.removesuffix("_total")
        if key == "sglang:spec_verify_calls":
            verify += value
            seen = True
        elif key == "sglang:generation_tokens":
            generated += value
    if not seen:
        return None
    drafts = _count(verify)
    # identity: the process start time only. SGLang's labelled children (is_streaming, ...) may be created with
    # their first request, so their _created samples are not fixed at start-up as vLLM's are (not checked in
    # SGLang's source); under its multiprocess collector neither sample is exposed, and no check is made.
    return AcceptCounters(drafts=drafts, accepted_tokens=max(_count(generated) - drafts, 0),
                          server_id=server_identity(text))  # fmt: skip


def parse_sglang_server_info(info: Mapping[str, Any]) -> float | None:
    """Server-lifetime mean acceptance length from SGLang ``GET /server_info`` (``/get_server_info``).

    Reads ``internal_states[*].avg_spec_accept_length`` (one entry per data-parallel rank; averaged), or
    the top-level ``avg_spec_accept_length`` of older servers.
    It is a lifetime mean, not a counter, so it cannot give a window's tau (the backend reads
    :func:`parse_sglang_prometheus` for that); it is a cross-check of a whole run. ``None`` when absent (AR).
    """
    states = info.get("internal_states")
    if isinstance(states, Mapping):
        states = [states]
    if not isinstance(states, list):
        states = [info]  # older servers put it at the top level
    values = [
        float(s["avg_spec_accept_length"])
        for s in states
        if isinstance(s, Mapping) and isinstance(s.get("avg_spec_accept_length"), int | float)
    ]
    values = [v for v in values if math.isfinite(v) and v > 0]
    return sum(values) / len(values) if values else None


# --- TensorRT-LLM ---------------------------------------------------------------------------------


def trtllm_counters_from_iteration_stats(stats: Iterable[Mapping[str, Any]]) -> AcceptCounters | None:
    """Sum TensorRT-LLM iteration stats (``trtllm-serve GET /metrics`` JSON list) into counters.

    Each entry's ``specDecodingStats`` holds ``numDraftTokens``, ``numAcceptedTokens`` and
    ``numRequestsWithDraftTokens`` for that iteration: drafts = sum(numRequestsWithDraftTokens),
    draft_tokens = sum(numDraftTokens), accepted = sum(numAcceptedTokens), so ``1 + accepted/drafts``
    is 1 + sum(numAcceptedTokens) / sum(numRequestsWithDraftTokens). ``None`` when no entry carries
    spec-decoding stats (AR). Note that trtllm-serve hands each iteration's stats out once: the caller
    accumulates across reads (see :class:`dflashbench.backends.trtllm.TrtllmBackend`).
    """
    drafts = draft_tokens = accepted = 0
    seen = False
    for entry in stats:
        spec = entry.get("specDecodingStats") if isinstance(entry, Mapping) else None
        if not isinstance(spec, Mapping):
            continue
        seen = True
        drafts += int(spec.get("numRequestsWithDraftTokens", 0))
        draft_tokens += int(spec.get("numDraftTokens", 0))
        accepted += int(spec.get("numAcceptedTokens", 0))
    if not seen:
        return None
    return AcceptCounters(drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted)


# --- server-side latency histograms ------------------------------------------------------------------

# Per-request timing an engine measures itself, as Prometheus histograms on /metrics: read before and after a
# point, their deltas sit beside the client's figures (extra["server_timing"]). The engine's clock does not
# depend on the client keeping up, so these survive when the client sees its tokens in bursts.
# vLLM (vllm/v1/metrics/loggers.py, PrometheusStatLogger, and vllm/v1/metrics/stats.py, read in vllm 0.32.0):
# ``vllm:time_to_first_token_seconds`` (arrival to first token), ``vllm:inter_token_latency_seconds`` (one
# observation per engine output, i.e. per step: a speculative step's tokens count once),
# ``vllm:request_time_per_output_token_seconds`` (per finished request: decode time / (tokens - 1), from the
# engine core's timestamps) and ``vllm:e2e_request_latency_seconds``; one series per engine (label ``engine``).
# SGLang exposes the same four names under ``sglang:`` (sglang/srt/observability/metrics_collector.py, read in
# sglang 0.5.23); its inter-token histogram is per token (a chunk's interval split over its tokens), observed in
# its API process. The reference server and the stand-in expose vLLM's names.
SERVER_TIMING = {
    "ttft_s": "time_to_first_token_seconds",
    "tpot_s": "request_time_per_output_token_seconds",
    "itl_s": "inter_token_latency_seconds",
    "e2e_s": "e2e_request_latency_seconds",
}


@dataclass(frozen=True, slots=True)
class Histogram:
    """One Prometheus histogram, its series (engines, label sets) summed: cumulative counts at each upper bound
    ``le`` (the last is +Inf), the observation count and their sum."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    total: float

    def minus(self, earlier: Histogram | None) -> Histogram | None:
        """The observations made since ``earlier``; ``None`` if the buckets changed or a count went backwards
        (another server)."""
        if earlier is None:
            return self
        if earlier.bounds != self.bounds or self.count < earlier.count:
            return None
        return Histogram(self.bounds, tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
                         self.count - earlier.count, self.total - earlier.total)  # fmt: skip

    def plus(self, other: Histogram) -> Histogram | None:
        if other.bounds != self.bounds:
            return None
        return Histogram(self.bounds, tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
                         self.count + other.count, self.total + other.total)  # fmt: skip

    def quantile_le(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q``-quantile (0-1): the quantile is at most that. Buckets
        give no more than that honestly; ``None`` when it lies beyond the last finite bound, or nothing was seen."""
        if self.count <= 0:
            return None
        for bound, cum in zip(self.bounds, self.cumulative, strict=True):
            if cum >= q * self.count:
                return bound if math.isfinite(bound) else None
        return None

    def summary(self) -> dict[str, float | int | None]:
        """count, mean (exact: sum / count) and the bucket bounds holding p50 and p99, in seconds."""
        n = int(round(self.count))
        return {"count": n, "mean_s": self.total / self.count if self.count > 0 else None,
                "p50_le_s": self.quantile_le(0.5), "p99_le_s": self.quantile_le(0.99)}  # fmt: skip


def parse_latency_histograms(text: str, prefix: str = "vllm:") -> dict[str, Histogram]:
    """The :data:`SERVER_TIMING` histograms on a ``/metrics`` page (``prefix``: ``"vllm:"`` or ``"sglang:"``),
    keyed ``ttft_s``, ``tpot_s``, ``itl_s``, ``e2e_s``; series summed over their labels. Missing ones are absent."""
    wanted = {prefix + name: key for key, name in SERVER_TIMING.items()}
    buckets: dict[str, dict[float, float]] = {}
    counts: dict[str, float] = {}
    sums: dict[str, float] = {}
    for name, labels, value in iter_prometheus_samples(text):
        for suffix, into in (("_bucket", None), ("_count", counts), ("_sum", sums)):
            base = name.removesuffix(suffix)
            if base == name or base not in wanted:
                continue
            key = wanted[base]
            if into is None:
                try:
                    le = float(labels["le"])
                except (KeyError, ValueError):
                    continue
                per = buckets.setdefault(key, {})
                per[le] = per.get(le, 0.0) + value
            else:
                into[key] = into.get(key, 0.0) + value
    out = {}
    for key, per in buckets.items():
        if key in counts and key in sums and per:
            bounds = tuple(sorted(per))
            out[key] = Histogram(bounds, tuple(per[b] for b in bounds), counts[key], sums[key])
    return out


def server_timing(before: dict[str, Histogram] | None, after: dict[str, Histogram] | None) -> dict[str, dict]:
    """Each histogram's observations over a window (``after`` minus ``before``) as :meth:`Histogram.summary`;
    only those with observations."""
    out = {}
    for key, hist in (after or {}).items():
        delta = hist.minus((before or {}).get(key))
        if delta is not None and delta.count > 0:
            out[key] = delta.summary()
    return out


def sum_histograms(reads: Iterable[dict[str, Histogram] | None]) -> dict[str, Histogram] | None:
    """Several servers' histograms (replicas) summed per key; ``None`` when none was read. A key whose buckets
    differ between servers is dropped."""
    total: dict[str, Histogram | None] = {}
    seen = False
    for read in reads:
        if read is None:
            continue
        seen = True
        for key, hist in read.items():
            mine = total.get(key, hist) if key in total else None
            total[key] = hist if key not in total else (mine.plus(hist) if mine is not None else None)
    return {k: v for k, v in total.items() if v is not None} if seen else None
