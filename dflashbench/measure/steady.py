"""The steady window of a closed-loop point: from when all ``c`` streams are busy until the first runs dry.

A point's whole-run throughput (Σ tokens / (last response − first request)) includes the ramp-up, while
streams are still starting, and the ramp-down, when streams finish one by one with nothing left to send. With
few requests per stream those ramps are most of the run, and the figure says more about the request count than
about the server. The steady window leaves them out:

- **start**: the moment the in-flight count first reaches ``c`` (the last stream has sent its first request);
- **end**: the first response that ends after the last request was sent (from then on a stream that finishes
  has nothing to send, so fewer than ``c`` are busy).

Over it: throughput = output tokens whose chunks arrived inside the window / window length (chunk arrival
times and their token counts are in every :class:`RequestResult`), and latency percentiles over the requests
that ran entirely inside it. A window under :data:`MIN_SHARE` of the run is *ramp-dominated*: send more
requests per stream. Pure functions over results; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dflashbench.measure import observability
from dflashbench.measure.metrics import NS, measured, per_user_tok_per_s, percentile, tpot_s, ttft_s
from dflashbench.types import RequestResult

MIN_SHARE = 0.5  # a steady window shorter than this share of the run flags the point as ramp-dominated


@dataclass(frozen=True)
class SteadyWindow:
    start_ns: int
    end_ns: int
    run_start_ns: int
    run_end_ns: int

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / NS

    @property
    def share(self) -> float:
        """The window's share of the whole run (first request to last response)."""
        run = self.run_end_ns - self.run_start_ns
        return (self.end_ns - self.start_ns) / run if run > 0 else 0.0

    @property
    def ramp_dominated(self) -> bool:
        return self.share < MIN_SHARE


def _end_ns(r: RequestResult) -> int:
    return r.last_token_ns if r.last_token_ns is not None else r.sent_ns


def steady_window(results: Sequence[RequestResult], concurrency: int) -> SteadyWindow | None:
    """The steady window of a point's measured results, or ``None`` when all ``concurrency`` streams were
    never busy at once (fewer requests than streams, or every request failed at once)."""
    rows = [r for r in measured(results) if r.ok]
    if not rows or concurrency < 1:
        return None
    events = sorted([(r.sent_ns, 1) for r in rows] + [(_end_ns(r), -1) for r in rows], key=lambda e: (e[0], -e[1]))
    in_flight, start = 0, None
    for t, step in events:
        in_flight += step
        if in_flight >= concurrency:
            start = t
            break
    if start is None:
        return None
    last_sent = max(r.sent_ns for r in rows)
    ends = [_end_ns(r) for r in rows if _end_ns(r) > last_sent]  # the stream that sent last ended just before
    if not ends:
        return None
    end = min(ends)
    if end <= start:
        return None
    return SteadyWindow(start, end, min(r.sent_ns for r in rows), max(_end_ns(r) for r in rows))


def tokens_between(r: RequestResult, start_ns: int, end_ns: int) -> int:
    """Output tokens of ``r`` whose chunks arrived in ``[start_ns, end_ns]``."""
    return sum(n for t, n in zip(r.chunk_ns, r.chunk_tokens, strict=False) if start_ns <= t <= end_ns)


@dataclass(frozen=True)
class SteadyFigures:
    window_s: float
    share: float
    ramp_dominated: bool
    throughput_tok_per_s: float
    requests: int  # that ran entirely inside the window (the latency percentiles' sample)
    ttft_s_p50: float | None
    tpot_s_p50: float | None
    per_user_tok_per_s_p50: float | None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def steady_figures(results: Sequence[RequestResult], concurrency: int) -> SteadyFigures | None:
    """Throughput and latency over the steady window (``None`` without one)."""
    window = steady_window(results, concurrency)
    if window is None or window.duration_s <= 0:
        return None
    rows = [r for r in measured(results) if r.ok]
    tokens = sum(tokens_between(r, window.start_ns, window.end_ns) for r in rows)
    inside = [r for r in rows if r.sent_ns >= window.start_ns and _end_ns(r) <= window.end_ns]
    # per-token figures only from requests the client could time (the point's own rule, dflashbench.measure.observability)
    timed = observability.observed_requests(inside) if observability.point_observability(inside).measured else []
    return SteadyFigures(
        window_s=window.duration_s, share=window.share, ramp_dominated=window.ramp_dominated,
        throughput_tok_per_s=tokens / window.duration_s, requests=len(inside),
        ttft_s_p50=percentile([ttft_s(r) for r in inside], 50), tpot_s_p50=percentile([tpot_s(r) for r in timed], 50),
        per_user_tok_per_s_p50=percentile([per_user_tok_per_s(r) for r in timed], 50),
    )  # fmt: skip


def waves_of(results: Sequence[RequestResult]) -> list[list[RequestResult]]:
    """A point's measured requests split into the waves they were sent in (:mod:`dflashbench.load.waves`): a wave
    ends when its last request has, and the next starts after it (another method's wave in between)."""
    rows = sorted((r for r in measured(results) if r.ok), key=lambda r: r.sent_ns)
    out: list[list[RequestResult]] = []
    end = None
    for r in rows:
        if end is None or r.sent_ns > end:
            out.append([])
            end = _end_ns(r)
        out[-1].append(r)
        end = max(end, _end_ns(r))
    return out


def wave_steady_figures(results: Sequence[RequestResult], concurrency: int) -> SteadyFigures | None:
    """The steady figures of a point sent in waves taken in turn with other methods' (the methods in turn): each
    wave's own window (all its ``concurrency`` streams busy), summed; the share is the windows' time over the waves'
    time (not the other methods' waves between them)."""
    windows, inside, tokens, span_ns = [], [], 0, 0
    for wave in waves_of(results):
        span_ns += max(_end_ns(r) for r in wave) - min(r.sent_ns for r in wave)
        w = steady_window(wave, concurrency)
        if w is None or w.duration_s <= 0:
            continue
        windows.append(w)
        tokens += sum(tokens_between(r, w.start_ns, w.end_ns) for r in wave)
        inside += [r for r in wave if r.sent_ns >= w.start_ns and _end_ns(r) <= w.end_ns]
    seconds = sum(w.duration_s for w in windows)
    if not windows or seconds <= 0:
        return None
    share = seconds * NS / span_ns if span_ns > 0 else 0.0
    timed = observability.observed_requests(inside) if observability.point_observability(inside).measured else []
    return SteadyFigures(
        window_s=seconds, share=share, ramp_dominated=share < MIN_SHARE, throughput_tok_per_s=tokens / seconds,
        requests=len(inside), ttft_s_p50=percentile([ttft_s(r) for r in inside], 50),
        tpot_s_p50=percentile([tpot_s(r) for r in timed], 50),
        per_user_tok_per_s_p50=percentile([per_user_tok_per_s(r) for r in timed], 50),
    )  # fmt: skip


def ramp_problem(share: float | None, concurrency: int) -> str | None:
    """What is wrong with a point's steady window, in words (``None``: nothing). ``share`` is its
    ``steady_share``: ``None`` (or NaN) when all ``concurrency`` streams were never busy at once."""
    if share is None or share != share:
        return f"never had all {concurrency} streams busy, so its throughput is all ramp"
    if share < MIN_SHARE:
        return f"ramp-dominated, steady window {share:.0%} of the run (whole-run throughput understates the server)"
    return None


def ramp_warnings(points) -> list[str]:
    """One warning per measured "all" point whose steady window was short or missing (``points``: a
    DataFrame of PointSummary rows, as a run directory's points.jsonl reads). Runs from before steady windows
    (no ``extra.steady``) have nothing to say."""
    if points is None or points.empty or "steady_share" not in points.columns:
        return []
    out = []
    rows = points[(points["category"] == "all") & (points.get("status", "ok") == "ok")]
    for p in rows.itertuples():
        extra = p.extra if isinstance(getattr(p, "extra", None), dict) else {}
        if (extra.get("pairing") or {}).get("mode") == "turns":  # sent in waves: each drains by design, no ramp
            continue
        share = p.steady_share
        unknown = (share is None or share != share) and not (isinstance(getattr(p, "extra", None), dict)
                                                             and "steady" in p.extra)  # fmt: skip
        problem = None if unknown else ramp_problem(share, p.concurrency)
        if problem:
            out.append(f"{p.method} {p.workload} c={p.concurrency}: {problem}; send more requests per stream "
                       "(--requests-per-stream)")  # fmt: skip
    return out


def reuse_note(requests) -> str | None:
    """A note when points reused prompts to fill their streams (ids ``<id>~k``): caching effects are possible."""
    if requests is None or requests.empty or "request_id" not in requests.columns:
        return None
    reused = requests["request_id"].astype(str).str.contains("~", regex=False)
    if not reused.any():
        return None
    return (f"{int(reused.sum())} requests reuse a prompt already sent in the same point (requests_per_stream): "
            "prefix caches are reset between points, not inside one, so an engine may serve a repeat from cache")
