"""The methods of one load side by side, each on its own devices (placement ``side``,
:mod:`dflashbench.plan.placement`): a load's points, one per method, each warm on its own server, start their load
at the same moment, and run at once.

The schedule is the one the dry run simulates (:func:`dflashbench.plan.placement.simulate`): the loads go in grid
order; a load starts once a server of every one of its methods is free (a method with replicas has several), and
its points hold their servers until each ends, so a replica lets its method's next load start while the slower
method's point still runs, never a share of one point's streams. Each point runs in a thread of its own with its
own client processes; the common start is a barrier every point of the load passes once warm. A point that cannot
start (its server gone) releases the others at once.

Each row records its pairing (``extra["pairing"]``): the mode, the points of its load, its server and devices, and
its load's start (``perf_counter_ns``, one clock for every process of the machine), so "started together" can be
checked on the run directory.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from dflashbench.plan.grid import GridPoint, SweepContext
from dflashbench.plan.wall_time import cells
from dflashbench.run.point import LoadStop, ServerTarget, measure_point
from dflashbench.run.store import RunStore
from dflashbench.run.turns import pairing_of
from dflashbench.types import Method, PointSummary

Echo = Callable[[str], None]


def run_round(ctx: SweepContext, store: RunStore, todo: list[GridPoint], targets: dict[str, ServerTarget],
              echo: Echo, before_cell: Callable[[list[GridPoint]], None] = lambda cell: None,
              after_point: Callable[[GridPoint], None] = lambda point: None) -> list[PointSummary]:  # fmt: skip
    """Every point of ``todo`` on the servers up (``targets`` by server name), load by load; the "all" rows.
    ``before_cell``: called before a load's points start (the speed probe); ``after_point``: after each ends."""
    pool: dict[Method, queue.Queue[ServerTarget]] = {}
    for target in targets.values():
        method = Method.parse(target.name.split("#")[0])
        pool.setdefault(method, queue.Queue()).put(target)
    rows: list[PointSummary] = []
    errors: list[BaseException] = []  # a store that cannot be written stops the sweep: raised here, after the join
    threads: list[threading.Thread] = []
    lock = threading.Lock()
    for cell in cells(todo):
        cell = [p for p in cell if p.method in pool]
        if not cell:
            continue
        if errors:
            break
        chosen = {p.method: pool[p.method].get() for p in cell}  # blocks until a server of each method is free
        before_cell(cell)
        barrier, group = threading.Barrier(len(cell)), LoadStop()  # they start together and stop together
        for point in cell:
            target = chosen[point.method]
            pairing = {**pairing_of("side", cell, point), "server": target.name, "gpus": list(target.gpus)}
            thread = threading.Thread(target=_one, args=(ctx, store, point, target, echo, barrier, group, pairing,
                                                         pool, rows, errors, lock, after_point),
                                      name=f"dflashbench-{point.point_id}", daemon=True)  # fmt: skip
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return rows


def _one(ctx, store, point, target, echo, barrier: threading.Barrier, group: LoadStop, pairing: dict, pool, rows,
         errors, lock, after_point) -> None:  # fmt: skip
    passed = []

    def ready() -> None:  # every point of the load warm: they start together
        passed.append(True)
        try:
            barrier.wait()
        except threading.BrokenBarrierError:  # a point of the load could not start: the others go on
            pairing["started_alone"] = True

    try:
        row = measure_point(ctx, store, point, target, echo, progress=False, ready=ready, pairing=pairing, group=group)
        with lock:
            rows.append(row)
        after_point(point)
    except BaseException as exc:  # noqa: BLE001 - handed to the sweep's thread
        errors.append(exc)
    finally:
        if not passed:  # it never reached the start (its server was gone): release the others
            barrier.abort()
        pool[point.method].put(target)
