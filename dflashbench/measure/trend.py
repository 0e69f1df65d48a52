"""A point whose server slowed down while it ran: its last part read against its own first part.

A point's figures are means over its window; a server that slows down steadily through the point (a GPU heating up
into its clock limit, a cache filling, another tenant arriving) gives figures that describe neither its start nor its
end, and no drift between points (the speed probe reads the machine between points, not the server within one) says
so. The reading here: the point's measured requests in the order they were sent, the per-request TPOT (decode time
per token after the first, :func:`dflashbench.measure.metrics.tpot_s`; requests whose per-token timing was not
observable left out) of the first third against the last third. A **slowdown** is a last third slower by at least
:data:`MIN_SLOWDOWN` at the median and beyond noise (one-sided Mann-Whitney U below :data:`ALPHA`).

TPOT, not TTFT or throughput: a closed loop ramps down at its end (streams run dry) and an open loop's queue comes and
goes with its arrivals, which move the waiting and the throughput but make decoding faster, never slower, at the
end; a decode that gets slower is the server's. A trace replay's load follows the trace's own, so its points are
not read.

A point too small to read (fewer than :data:`MIN_REQUESTS` measured requests, or fewer than
:data:`MIN_PART_REQUESTS` with per-token timing in a third) is said to be so (``unread``), on its console line and in
its row, rather than read as steady: a server slowing 15 % a request over a point of 8 is not flagged, and its line
says why.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from dflashbench.measure import metrics, noise, observability
from dflashbench.types import RequestResult

PART = 3  # the first and the last third
MIN_PART_REQUESTS = 6  # fewer requests a part than this: no reading
MIN_REQUESTS = PART * MIN_PART_REQUESTS  # a point's measured requests, at the least, for a reading
MIN_SLOWDOWN = 0.2  # the last part's median TPOT at least 20 % above the first's
ALPHA = 0.01  # one-sided, per point: a sweep of many points should rarely flag an unchanged server


def _tpots(reqs: Sequence[RequestResult]) -> list[float]:
    return [t for r in reqs if observability.timing_observable(r) is not False and (t := metrics.tpot_s(r))]


def unread(why: str, requests: int) -> dict:
    """A point whose trend could not be read, and why: ``slowed`` is ``None`` (not read, which is not steady)."""
    return {"slowed": None, "unread": why, "measured_requests": requests}


def slowdown(results: Sequence[RequestResult]) -> dict | None:
    """The point's first part against its last (module docstring): ``first_tpot_s``, ``last_tpot_s`` (medians),
    ``change`` (last / first - 1), ``p`` (one-sided, slower), ``requests`` (a part's) and ``slowed`` (the flag);
    where the point is too small to read, :func:`unread` with why; ``None`` where it measured no request."""
    done = sorted((r for r in metrics.measured(results) if r.ok), key=lambda r: r.sent_ns)
    if not done:
        return None
    n = len(done) // PART
    if n < MIN_PART_REQUESTS:
        return unread(f"too few requests to read a trend ({len(done)} < {MIN_REQUESTS})", len(done))
    first, last = _tpots(done[:n]), _tpots(done[-n:])
    if (timed := min(len(first), len(last))) < MIN_PART_REQUESTS:
        return unread(f"too few requests with per-token timing to read a trend ({timed} < {MIN_PART_REQUESTS} in "
                      f"a third of {n})", len(done))  # fmt: skip
    a, b = statistics.median(first), statistics.median(last)
    if a <= 0:
        return unread("no decode time in the first third to read a trend against", len(done))
    p = noise.mann_whitney_p_worse(first, last, "rise")
    change = b / a - 1
    return {"first_tpot_s": round(a, 6), "last_tpot_s": round(b, 6), "change": round(change, 4),
            "p": round(p, 6), "requests": n, "slowed": bool(change >= MIN_SLOWDOWN and p < ALPHA)}  # fmt: skip


def unread_words(trend: dict | None) -> str | None:
    """Why the point's trend was not read (``too few requests to read a trend (8 < 18)``), where it was not."""
    return str(trend["unread"]) if trend and trend.get("unread") else None


def slowdown_line(trend: dict | None) -> str | None:
    """The point's slowdown in words, where it was flagged."""
    if not trend or not trend.get("slowed"):
        return None
    return (f"the server slowed down during the point: TPOT {trend['first_tpot_s'] * 1e3:.1f} ms over its first "
            f"{trend['requests']} requests, {trend['last_tpot_s'] * 1e3:.1f} ms over its last ({trend['change']:+.0%}, "
            f"p = {trend['p']:.2g}): its figures average a moving server")


def slowed_at(points) -> dict[tuple[str, int], list[str]]:
    """(run id, concurrency) -> the methods whose server slowed down during their point there (category "all" rows
    of a points table whose ``extra["trend"]`` flagged it)."""
    from dflashbench.measure.analysis import method_label

    out: dict[tuple[str, int], list[str]] = {}
    for r in points[points["category"] == "all"].to_dict("records") if not points.empty else []:
        if isinstance(r.get("extra"), dict) and slowdown_line(r["extra"].get("trend")):
            out.setdefault((str(r["run_id"]), int(r["concurrency"])), []).append(method_label(r["method"]))
    return out
