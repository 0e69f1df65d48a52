"""Trace replay's schedule: each request is due at its arrival in the trace, with time running ``speed`` times
faster (speed 2: the same requests in half the time, twice as dense), as ``vllm bench serve``'s timed traces,
AIPerf's ``--fixed-schedule`` and GuideLLM's ``replay`` send them.

The requests and their arrivals come from the trace plan (:mod:`dflashbench.workloads.trace_content`:
``metadata["trace"]["arrival_s"]``, seconds from the window's first request); the open loop
(:mod:`dflashbench.load.openloop`) sends each at ``start + arrival / speed`` whatever the server's pace, ``start``
being the moment the point's load began: every point (each method's, each repeat round's, a resumed run's) starts
the trace's clock anew. A request's ``queued_ns`` is its moment on that clock, and its lateness is read against
``start + arrival / speed`` (:func:`dflashbench.measure.trace_readings.lateness`). A trace point is never sent in
turn with another method's (:func:`dflashbench.plan.placement.keep_clock`). Pure functions; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dflashbench.errors import UserError
from dflashbench.types import Request


def schedule_s(requests: Sequence[Request], speed: float) -> list[float]:
    """Seconds from the point's start at which each request is due: its trace arrival divided by ``speed``."""
    if not speed > 0 or math.isinf(speed):
        raise UserError(f"trace speed {speed!r}: give a finite speed above 0 (1 = the trace's own pace)")
    offsets = [float(r.metadata["trace"]["arrival_s"]) / speed for r in requests]
    if any(b < a for a, b in zip(offsets, offsets[1:], strict=False)):
        raise ValueError("trace requests must be in arrival order")
    return offsets


def mean_rate_per_s(offsets_s: Sequence[float]) -> float:
    """The schedule's own arrival rate, ``(n - 1) / span`` as :func:`dflashbench.load.arrivals.achieved_rate_per_s`
    measures the sent one; ``n`` per second for a schedule with no span (every request at once)."""
    span = (offsets_s[-1] - offsets_s[0]) if offsets_s else 0.0
    return (len(offsets_s) - 1) / span if span > 0 else float(max(len(offsets_s), 1))


def parse_speeds(text: str | Sequence[float]) -> list[float]:
    """``"1,2.5"`` -> ``[1.0, 2.5]``: positive, finite, no duplicates."""
    items = [x.strip() for x in text.split(",") if x.strip()] if isinstance(text, str) else list(text)
    shown = ",".join(map(str, items))
    try:
        speeds = [float(x) for x in items]
    except (TypeError, ValueError):
        raise UserError(f"--trace-speed {shown}: expected speeds like 1,2 (2 = twice the trace's pace)") from None
    if not speeds or any(not 0 < s < math.inf for s in speeds):
        raise UserError(f"--trace-speed {shown}: every speed must be a finite number above 0 (1 = the trace's pace)")
    if len(set(speeds)) != len(speeds):
        raise UserError(f"--trace-speed {shown}: a speed is listed twice")
    return speeds
