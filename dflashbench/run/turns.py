"""The methods of one load in turn, on the device their servers share (placement ``turns``,
:mod:`dflashbench.plan.placement`): every method's point of a load is warmed up, then their requests go wave by
wave, in turn (:mod:`dflashbench.load.waves`), then each point is written. Their points share the same minutes
without sharing the device at once: a drift of the machine reaches a speedup's two points alike.

Each point keeps what a point measured alone keeps (its own cache reset, warm-up, counters before and after, its
stopping rule; AR's results read live by the pairs' rules), and records the pairing in ``extra["pairing"]``: the
mode, the points of its load, the waves. GPU telemetry is not per point here: the device is shared, so a point's
window would hold the others' waves (``extra["telemetry"]`` says so).
"""

from __future__ import annotations

from collections.abc import Callable

from dflashbench.load import eventloop
from dflashbench.load.waves import Lane, drive_turns
from dflashbench.plan.grid import GridPoint, SweepContext
from dflashbench.run.point import (
    LoadStop,
    PointRun,
    PointSession,
    ServerTarget,
    admin_session,
    begin_point,
    conclude_point,
    finish_point,
    load_of,
    prepare_point,
)
from dflashbench.run.store import RunStore
from dflashbench.types import Method, PointSummary

Echo = Callable[[str], None]
SHARED = "not measured per point: the methods' servers share the device in turn (placement turns)"


class _Shared:
    """The telemetry window of a point sent in turn: none, and why (no GPU here, or a device the methods share)."""

    def __init__(self) -> None:
        from dflashbench.telemetry import gpu_info

        info = gpu_info()
        self.reason = info.get("reason") or SHARED if not info.get("gpu_count") else SHARED


# A point of one load measured one after another with the others (placement point, or a rate or trace point that
# keeps its clock): the drift between them is what the speed probe read before each (dflashbench.measure.drift).
POINT_DRIFT = "measured: the speed probe read before each point"


def pairing_of(mode: str, cell: list[GridPoint], point: GridPoint) -> dict:
    """What a point's row keeps of who it was measured with (``extra["pairing"]``): the mode, the other points of
    its load, in turn a wave's requests (one per stream), point by point how the drift between them was measured."""
    out: dict = {"mode": mode, "with": [p.point_id for p in cell if p is not point]}
    if mode == "turns":
        out["wave_requests"] = max(point.concurrency, 1)
    elif mode == "point":
        out["drift"] = POINT_DRIFT
    return out


def run_cell(ctx: SweepContext, store: RunStore, cell: list[GridPoint], targets: dict[Method, ServerTarget],
             echo: Echo) -> list[PointSummary]:  # fmt: skip
    """One load's points (``cell``, one per method whose server is up), in turn; their "all" rows. A rate or trace
    load never comes here (its clock: :func:`dflashbench.plan.placement.keep_clock`)."""
    if any(not p.closed_loop for p in cell):
        raise ValueError("a rate or trace point keeps its own clock: it is never sent in turns")
    cell = sorted(cell, key=lambda p: p.method is not Method.AR)  # AR's session first: the pairs read it live
    group = LoadStop()  # the load's points stop together
    sessions = [begin_point(ctx, store, p, targets[p.method], echo, pairing=pairing_of("turns", cell, p), group=group)
                for p in cell]  # fmt: skip
    rows = [s.failed for s in sessions if s.failed is not None]
    live = [s for s in sessions if s.failed is None]
    if not live:
        return rows
    try:
        runs = eventloop.run(_cell(live, store.run_id, cell[0].concurrency, ctx))
    except Exception as exc:  # noqa: BLE001 - the load failed: each point written as failed, the sweep goes on
        return rows + [conclude_point(ctx, store, s, None, echo, exc) for s in live]
    for session, run in zip(live, runs, strict=True):
        rows.append(conclude_point(ctx, store, session, run, echo))
    return rows


async def _cell(sessions: list[PointSession], run_id: str, concurrency: int, ctx: SweepContext) -> list[PointRun]:
    async with admin_session() as admin:
        notes: list[list[str]] = [[] for _ in sessions]
        warm = [await prepare_point(s.point, s.warmups, s.lg, s.target.backend, s.urls, run_id, s.on_result, n, admin)
                for s, n in zip(sessions, notes, strict=True)]  # fmt: skip
        lanes = [Lane(s.point.point_id, s.requests, s.lg, s.stop, s.on_result) for s in sessions]
        results, client = await drive_turns(lanes, max(concurrency, 1), run_id=run_id)
        runs, shared = [], _Shared()
        for s, w, n in zip(sessions, warm, notes, strict=True):
            pid = s.point.point_id
            runs.append(await finish_point(w, s.target.backend, s.urls, n, admin, results[pid], client[pid],
                                           shared, load_of(ctx.suite, s.point, s.requests)))  # fmt: skip
        return runs
