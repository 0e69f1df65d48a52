"""Several points' requests sent in turn, wave by wave, from one client process: the methods of one load measured in
the same minutes on a device they share (a CPU, or GPUs that hold every server), never at once (issue #55).

Each point is a **lane**: its server's load generator settings, its requests in order, its "send no new requests"
signal. At ``concurrency`` c a wave is c requests, one per stream, all sent at once on the lane's open connections;
the next lane's wave starts when every request of this one has ended. Wave k goes to the lanes in an order rotated by
k (A B, B A, A B, ...), so no method always goes first. At c=1 a wave is one request: the methods alternate request by
request. A lane whose signal is set (its point is precise enough, :mod:`dflashbench.run.precision`) gets no more
waves; the others go on.

Why waves, and not each point's closed loop split in slices: a speedup's two points should see the same moments of
the machine. On this project's 2-core machine a point's own speed moved 5-9 % (1 sd) between batches 1-2 s apart,
while two servers' batches sent alternately differed by 7-8 % per 6-request batch, about 3 % over a 32-request point
(docs/measurements/2026-11-26-launch-vs-time): alternating request by request leaves the least time between the two
methods' requests. What a wave changes against a closed loop: its streams start together and the wave drains before
the next (its last requests run at a lower batch size), so at c > 1 TTFT is a wave's prefill and the per-user rate is
a wave's, the same for every method of the load (greedy decoding gives the methods the same outputs, so the same
drain); the point's throughput counts its own waves' time only (:func:`dflashbench.measure.metrics.window_s`).

Closed-loop points only: a rate or trace point keeps its own clock (each request due at its arrival time), which a
wave, waiting for the one before, cannot keep; it is never sent here (issue #65, :func:`dflashbench.plan.placement.keep_clock`).

One client process drives every lane (a wave's c streams and their connections), so the sweep's own work (storing,
the progress bar) stays out of it as in :mod:`dflashbench.load.loadgen_procs`, whose lifeline, readiness and
result-streaming it shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dflashbench.load import loadgen_procs as procs
from dflashbench.load import outputs, usage_check
from dflashbench.load.loadgen import LoadGenConfig, make_session, open_connections, run_closed_loop
from dflashbench.types import Request, RequestResult


@dataclass
class Lane:
    """One point of the turns: where its requests go and what stops it."""

    point_id: str
    requests: list[Request]
    cfg: LoadGenConfig
    stop: procs.StopSending
    on_result: Callable[[RequestResult], None] | None = None


def waves(lanes: Sequence[Lane], concurrency: int) -> list[tuple[int, int]]:
    """The order the waves go in: ``(wave, lane index)``, wave k's lanes rotated by k."""
    c = max(concurrency, 1)
    n = max((math.ceil(len(lane.requests) / c) for lane in lanes), default=0)
    order = []
    for k in range(n):
        for j in range(len(lanes)):
            i = (j + k) % len(lanes)
            if k * c < len(lanes[i].requests):
                order.append((k, i))
    return order


async def drive_turns(lanes: Sequence[Lane], concurrency: int, *, run_id: str = "",
                      count_text: usage_check.CountText | None = None) -> tuple[dict, dict]:  # fmt: skip
    """Send every lane's requests in turn (module doc) from one client process; return each lane's results and the
    client's cost, by point id. Each result goes to its lane's ``on_result`` in the parent's collecting thread, its
    token count checked as a point's are (:mod:`dflashbench.load.usage_check`)."""
    by_point = {lane.point_id: lane for lane in lanes}
    results: dict[str, list[RequestResult]] = {lane.point_id: [] for lane in lanes}
    by_id = {lane.point_id: {r.id: r for r in lane.requests} for lane in lanes}

    def record(r: RequestResult) -> None:
        lane = by_point[r.point_id]
        checked = usage_check.usage_fields(r, count_text)  # on the full text and token ids, before they are capped
        r = outputs.finish(r, by_id[r.point_id].get(r.request_id), store_text=lane.cfg.store_text, more=checked)
        results[r.point_id].append(r)
        if lane.on_result is not None:
            lane.on_result(r)

    stats = await procs.collected(lambda abort: _run_process(lanes, concurrency, run_id, record, abort),
                                  "dflashbench-turns")  # fmt: skip
    return results, {pid: procs.client_overhead([stats], rs) for pid, rs in results.items()}


def _run_process(lanes: Sequence[Lane], concurrency: int, run_id: str, record, abort: threading.Event) -> dict:
    ctx = procs.context()
    out, go = ctx.Queue(), ctx.Event()
    payload = [(lane.point_id, list(lane.requests), dataclasses.replace(lane.cfg, raw_outputs=True), lane.stop)
               for lane in lanes]  # fmt: skip
    proc = ctx.Process(target=_worker, args=(payload, concurrency, run_id, out, go, procs._parent_setup(),
                                             procs.lifeline()), daemon=True, name="dflashbench-client-turns")  # fmt: skip
    stats = procs.collect_from([proc], out, go, record, abort, label=lambda _: "client process (turns)")
    return stats[0]


def _worker(payload, concurrency: int, run_id: str, out, go, setup: dict, line) -> None:
    procs.run_worker(0, line, setup, out, lambda: _worker_run(payload, concurrency, run_id, out, go))


async def _worker_run(payload, concurrency: int, run_id: str, out, go) -> dict:
    c = max(concurrency, 1)
    lanes = [Lane(pid, reqs, cfg, stop) for pid, reqs, cfg, stop in payload]
    sessions = [make_session(c) for _ in lanes]
    try:
        for lane, session in zip(lanes, sessions, strict=True):  # every lane's streams on open connections
            await open_connections(session, lane.cfg, lane.requests, min(c, len(lane.requests)))
        out.put(("ready", 0, None))
        await asyncio.to_thread(go.wait)
        cpu0, wall0, lags = time.process_time(), time.perf_counter(), []
        probe = asyncio.create_task(procs._loop_lag(lags))
        batch: list[RequestResult] = []
        try:
            for k, i in waves(lanes, c):
                lane = lanes[i]
                if lane.stop.is_set():
                    continue
                await run_closed_loop(lane.requests[k * c:(k + 1) * c], c, lane.cfg, run_id=run_id,
                                      point_id=lane.point_id, on_result=batch.append, session=sessions[i],
                                      connected=True, stop=lane.stop, point_concurrency=c)  # fmt: skip
                if batch:  # between waves: nothing of the next wave is in flight yet
                    out.put(("results", 0, batch.copy()))
                    batch.clear()
        finally:
            probe.cancel()
            if batch:
                out.put(("results", 0, batch.copy()))
        return procs._stats(cpu0, wall0, lags)
    finally:
        for session in sessions:
            with contextlib.suppress(Exception):
                await session.close()
