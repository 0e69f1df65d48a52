"""How long a sweep takes, one method at a time and as placed (:mod:`dflashbench.plan.placement`), from one
estimator: each point's seconds at its own method's per-user rate and load (:mod:`dflashbench.plan.pace`), every
request to its ``max_tokens`` (:func:`dflashbench.plan.plan_size.run_size` for the point alone), plus server starts.

- one method at a time: every point after another, and a server start per method per round;
- side by side: per round, the cells (a load's points, one per method) on the servers placed, each cell starting
  once a server of every method is free (:func:`dflashbench.plan.placement.simulate`), and one start (the servers
  start together); in stages, each stage's in turn, with a start each;
- in turn or point by point: every point after another (they share the device), one start per round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dflashbench.plan.pace import Rates, server_start_s
from dflashbench.plan.placement import Placement, side_seconds
from dflashbench.plan.plan_size import WorkloadSize, run_size
from dflashbench.types import Method


def cells(points: Sequence) -> list[list]:
    """The grid's points grouped by round, workload and load, in run order: the points measured in the same minutes."""
    out: dict[tuple, list] = {}
    for p in points:
        load = (p.concurrency, p.request_rate, p.trace.label if p.trace is not None else None)
        out.setdefault((p.repeat, p.workload_label, load), []).append(p)
    return list(out.values())


def point_seconds(point, sizes: dict[str, WorkloadSize], suite, traces, rates: Rates, end: int,
                  planned: int | None = None) -> float:  # fmt: skip
    """One point's decode seconds at its method's rate at its load (``end`` 0: the slow end of the band).
    ``planned``: the requests its load plans (a load's points sized by precision plan alike: :func:`cell_seconds`)."""
    per_stream = suite.requests_per_stream_at if suite.slo else suite.requests_per_stream  # sweep --slo raises it
    load = point.concurrency if point.request_rate is None else max(point.concurrency, 1)
    rate = rates.user_tok_per_s(point.method.value, load, end)
    size = sizes.get(point.workload.label) if point.trace is None else None
    if planned is not None and size is not None and point.request_rate is None:
        cap = (size.turns or 1.0) * size.max_tokens
        return math.ceil(planned / max(point.concurrency, 1)) * cap / rate
    size_of = run_size([point], sizes, per_stream, suite.warmup_requests, traces, precision=suite.precision)
    return size_of.decode_tokens_per_stream / rate + size_of.open_loop_s


def cell_seconds(cell: Sequence, sizes: dict[str, WorkloadSize], suite, traces, rates: Rates,
                 end: int) -> dict[str, float]:  # fmt: skip
    """Each point of one load's seconds (by point id), the load sized together as the sweep sizes it."""
    per_stream = suite.requests_per_stream_at if suite.slo else suite.requests_per_stream
    planned = dict(run_size(list(cell), sizes, per_stream, suite.warmup_requests, traces,
                            precision=suite.precision).by_point)  # fmt: skip
    return {p.point_id: point_seconds(p, sizes, suite, traces, rates, end, planned.get(p.point_id)) for p in cell}


@dataclass(frozen=True)
class WallTime:
    serial_s: tuple[float, float]  # one method at a time (fast end, slow end)
    placed_s: tuple[float, float]  # as placed
    mode: str
    starts: str  # how server starts were counted

    @property
    def ratio(self) -> float:
        return self.placed_s[1] / self.serial_s[1] if self.serial_s[1] else 1.0


def method_seconds(points: Sequence, sizes, suite, traces, rates: Rates) -> dict[Method, float]:
    """Each method's points' seconds over the sweep (the slow end): what places its replicas."""
    out: dict[Method, float] = {}
    for cell in cells(points):
        secs = cell_seconds(cell, sizes, suite, traces, rates, 0)
        for p in cell:
            out[p.method] = out.get(p.method, 0.0) + secs[p.point_id]
    return out


def estimate(points: Sequence, sizes: dict[str, WorkloadSize], suite, traces, rates: Rates, placement: Placement,
             backend: str) -> WallTime:  # fmt: skip
    """The sweep's wall time one method at a time and as ``placement`` runs it, at both ends of the rates."""
    start = server_start_s(backend)
    rounds = max(suite.repeats, 1)
    methods = list(dict.fromkeys(p.method for p in points))
    ends = []
    for end in (1, 0):  # the fast end of the band first
        secs = {pid: t for cell in cells(points) for pid, t in cell_seconds(cell, sizes, suite, traces, rates, end).items()}
        serial = sum(secs.values()) + rounds * len(methods) * start
        if placement.mode == "side":
            by_round: dict[int, list] = {}
            for cell in cells(points):
                by_round.setdefault(cell[0].repeat, []).append({p.method: secs[p.point_id] for p in cell})
            stages = len(placement.in_stages(methods))  # in stages, each stage's servers start in turn
            placed = sum(side_seconds(c, placement) for c in by_round.values()) + rounds * stages * start
        elif placement.mode == "off":
            placed = serial
        else:
            placed = sum(secs.values()) + rounds * start
        ends.append((serial, placed))
    (fast_serial, fast_placed), (slow_serial, slow_placed) = ends
    starts = f"{start / 60:g} min server starts" if start >= 60 else f"{start:g} s server starts"
    return WallTime((fast_serial, slow_serial), (fast_placed, slow_placed), placement.mode, starts)
