"""Driving one point's load: in this process, or sharded over several client processes.

One Python process runs out of CPU somewhere near a few hundred streams (``dflashbench bench loadgen`` measures
where), and from then on its timestamps measure its own event loop as much as the server. With ``processes > 1``
a point's streams (closed loop) or arrivals (open loop) are split over that many worker processes (the
``spawn`` start method: a fresh interpreter, no inherited event loop or sockets), each running the same
asynchronous load generator on its share. Every result is sent back over a queue the moment it finishes and
handed to ``on_result`` in the parent (the sweep appends it to the run's store), so a worker that crashes loses
nothing already measured; the point then fails, naming the worker and its exit status.

One clock: results carry ``time.perf_counter_ns()`` values, which on Linux are ``clock_gettime(CLOCK_MONOTONIC)``
(``time.get_clock_info("perf_counter")``), a single clock for all processes of the machine, so merged results
share one time axis and an open-loop schedule can start every worker at the same instant.

Client overhead, recorded per point (``extra["client"]``): each process's CPU time over its wall time (its busy
share: near 100% means the client, not the server, set the pace), CPU time per output token, and the event
loop's lag (how late a 10 ms sleep wakes: a chunk arriving then waits that long before it is timestamped; the
worst process's p99 and maximum). Busy share averages over the point, so it misses bursts; the lag does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import multiprocessing as mp
import os
import queue as queue_mod
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from dflashbench.errors import UserError
from dflashbench.load import eventloop
from dflashbench.load.arrivals import arrival_offsets_s
from dflashbench.load.loadgen import LoadGenConfig, make_session, open_connections, run_closed_loop
from dflashbench.load.openloop import run_open_loop
from dflashbench.types import Request, RequestResult

# Streams one client process drives before "auto" adds another. Measured on the project's 2-core machine, shared
# with other work (load average 3-7: noisy), against the pace-exact stand-in; median [min-max] of 3 repeats each:
#   dflashbench bench loadgen --overhead --processes 1,2,4 --repeats 3                 (64, 256, 1024 x 1, 2, 4)
#   dflashbench bench loadgen --overhead --concurrency 128 --processes 1,2 --repeats 3
#   dflashbench bench loadgen --overhead --concurrency 64,128 --processes 1,2 --repeats 3
# TTFT overhead, 1 vs 2 processes, in ms: 64 streams 88 vs 80, 79 vs 55, 39 vs 29; 128 streams 129 vs 87, 71 vs 72;
# 256 streams 306 vs 224, 225 vs 216; 1024 streams 1694 vs 1815, 1100 vs 694 (the stand-in itself 70-280 ms late).
# TTFT is mostly the synchronised burst of a closed loop on 2 shared cores, so it separates 1 from 2 processes only
# within the noise. ITL error (|mean ITL - pace| / pace) does separate them from 256 streams on, in every run:
# 64 streams 0.3 vs 0.4%, 0.6 vs 0.7%, 0.2 vs 0.5%; 128 streams 1.8 vs 0.8%, 0.5 vs 0.6%; 256 streams 6.3 vs 1.6%,
# 3.0 vs 1.0%; and one process's event loop lags 258 ms-3.1 s (p99) at 1024 streams. So one process per 128
# streams, at most one per CPU (4 processes on 2 cores were no better than 2).
AUTO_STREAMS_PER_PROCESS = 128
READY_TIMEOUT_S = 120.0  # a worker that has not imported and reported ready by then is broken
CLOCK = time.get_clock_info("perf_counter").implementation
LAG_PROBE_S = 0.01  # the event-loop lag probe's sleep (100 wake-ups a second: negligible load)


class ClientProcessError(RuntimeError):
    """A client worker process died or raised; the results it sent before are already recorded."""


@dataclass(frozen=True)
class PointLoad:
    """The load one point asks for: ``concurrency`` closed-loop streams, or open-loop arrivals at
    ``request_rate`` (``concurrency`` 0), driven from ``processes`` client processes."""

    concurrency: int = 1
    request_rate: float | None = None
    arrivals: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None  # open loop: cap on requests in flight
    seed: int = 0
    processes: int = 1
    schedule_s: tuple[float, ...] | None = None  # a trace's arrivals (dflashbench.load.trace_replay); request_rate its mean

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None

    @property
    def connections(self) -> int:
        """HTTP connections the point may hold at once (its session's connector limit)."""
        if self.open_loop:
            return self.max_concurrency or 0  # 0: aiohttp's "no limit"
        return max(self.concurrency, 1)


def choose_processes(setting: int | str, streams: int | None, cpus: int | None = None) -> int:
    """Client processes for a point: ``setting`` when it is a number; ``"auto"``: one per
    :data:`AUTO_STREAMS_PER_PROCESS` streams (``streams``: the concurrency, or an open loop's cap; unknown = 1),
    at most one per CPU."""
    if setting != "auto":
        n = int(setting)
        if n < 1:
            raise UserError(f"--client-processes {setting}: give 1 or more, or auto")
        return n
    if not streams or streams <= AUTO_STREAMS_PER_PROCESS:
        return 1
    return max(1, min(math.ceil(streams / AUTO_STREAMS_PER_PROCESS), cpus or os.cpu_count() or 1))


def split_even(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` shares differing by at most one, larger first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def shard(requests: Sequence[Request], load: PointLoad, offsets_s: Sequence[float] | None
          ) -> list[tuple[list[Request], list[float] | None, PointLoad]]:  # fmt: skip
    """Each worker's requests (every ``n``-th, so each shard is a fair sample of the plan), arrival times and
    load: its share of the streams, or of the open loop's cap."""
    n = load.processes if load.open_loop else min(load.processes, max(load.concurrency, 1))
    n = max(1, min(n, len(requests))) if requests else 1
    streams = split_even(load.concurrency, n) if not load.open_loop else [0] * n
    caps = split_even(load.max_concurrency, n) if load.max_concurrency else [None] * n
    out = []
    for i in range(n):
        reqs = list(requests[i::n])
        offs = list(offsets_s[i::n]) if offsets_s is not None else None
        out.append((reqs, offs, dataclasses.replace(load, concurrency=streams[i], max_concurrency=caps[i] or None,
                                                    processes=1)))  # fmt: skip
    return out


def offsets_for(load: PointLoad, n: int) -> list[float] | None:
    """The open loop's arrival schedule for ``n`` requests (seeded; a trace's own), or ``None`` for a closed loop."""
    if not load.open_loop:
        return None
    if load.schedule_s is not None:  # a trace replay: the trace's own arrivals
        return list(load.schedule_s)
    return arrival_offsets_s(n, load.request_rate, load.arrivals, seed=load.seed, burstiness=load.burstiness)


async def _loop_lag(lags_s: list[float]) -> None:
    """How late this event loop wakes from a short sleep, every :data:`LAG_PROBE_S`: the delay any chunk that
    arrives then waits before it is timestamped (the client's own share of TTFT and ITL)."""
    loop = asyncio.get_running_loop()
    while True:
        t = loop.time()
        await asyncio.sleep(LAG_PROBE_S)
        lags_s.append(max(loop.time() - t - LAG_PROBE_S, 0.0))


async def _drive_here(requests, offsets, load: PointLoad, cfg: LoadGenConfig, *, run_id: str, point_id: str,
                      on_result, session, start_ns: int | None = None, lags_s: list[float] | None = None,
                      connected: bool = False) -> list[RequestResult]:  # fmt: skip
    probe = asyncio.create_task(_loop_lag(lags_s if lags_s is not None else []))
    try:
        if load.open_loop:
            return await run_open_loop(requests, offsets, cfg, max_concurrency=load.max_concurrency,
                                       start_ns=start_ns, run_id=run_id, point_id=point_id, on_result=on_result,
                                       session=session)  # fmt: skip
        return await run_closed_loop(requests, load.concurrency, cfg, run_id=run_id, point_id=point_id,
                                     on_result=on_result, session=session, connected=connected)  # fmt: skip
    finally:
        probe.cancel()


async def drive(
    requests: Sequence[Request], load: PointLoad, cfg: LoadGenConfig, *, run_id: str = "", point_id: str = "",
    on_result: Callable[[RequestResult], None] | None = None, session: aiohttp.ClientSession | None = None,
) -> tuple[list[RequestResult], dict]:  # fmt: skip
    """Run the point's measured requests; return the results and the client's overhead figures."""
    offsets = offsets_for(load, len(requests))
    if load.processes <= 1:
        cpu0, wall0, lags = time.process_time(), time.perf_counter(), []
        results = await _drive_here(requests, offsets, load, cfg, run_id=run_id, point_id=point_id,
                                    on_result=on_result, session=session, lags_s=lags)  # fmt: skip
        stats = [_stats(cpu0, wall0, lags)]
        return results, client_overhead(stats, results)
    stop = threading.Event()
    results: list[RequestResult] = []

    def record(r: RequestResult) -> None:
        results.append(r)
        if on_result is not None:
            on_result(r)

    try:
        stats = await asyncio.to_thread(run_sharded, requests, offsets, load, cfg, run_id, point_id, record, stop)
    except asyncio.CancelledError:  # Ctrl-C: the collecting thread stops the workers and returns
        stop.set()
        raise
    return results, client_overhead(stats, results)


def _worker(index: int, requests: list[Request], offsets: list[float] | None, load: PointLoad, cfg: LoadGenConfig,
            run_id: str, point_id: str, out, go, start_ns) -> None:  # fmt: skip
    """One client process: open its connections, report ready, wait for the common start, run its share, stream
    each result back."""
    try:
        stats = eventloop.run(_worker_run(index, requests, offsets, load, cfg, run_id, point_id, out, go, start_ns))
    except BaseException as exc:  # the parent names it; the results sent so far are kept
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # a task's error, not the TaskGroup's
            exc = exc.exceptions[0]
        out.put(("error", index, f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None
    out.put(("done", index, stats))


async def _worker_run(index: int, requests: list[Request], offsets: list[float] | None, load: PointLoad,
                      cfg: LoadGenConfig, run_id: str, point_id: str, out, go, start_ns) -> dict:  # fmt: skip
    """The worker's event loop: its closed loop's connections are opened before it says ready, so every
    process starts its measured requests together, on open connections (:func:`dflashbench.load.loadgen.open_connections`)."""
    session = make_session(load.connections)
    try:
        if not load.open_loop:
            await open_connections(session, cfg, requests, min(load.concurrency, len(requests)))
        out.put(("ready", index, None))
        await asyncio.to_thread(go.wait)
        cpu0, wall0, lags = time.process_time(), time.perf_counter(), []

        def send(r: RequestResult) -> None:
            out.put(("result", index, r))

        await _drive_here(requests, offsets, load, cfg, run_id=run_id, point_id=point_id, on_result=send,
                          session=session, start_ns=start_ns.value or None, lags_s=lags, connected=True)  # fmt: skip
        return _stats(cpu0, wall0, lags)
    finally:
        await session.close()


def _stats(cpu0: float, wall0: float, lags_s: list[float]) -> dict:
    """One client process's cost since ``cpu0`` / ``wall0``: CPU and wall seconds, event-loop lag p50/p99/max."""
    lag = sorted(lags_s)
    pick = (lambda q: lag[min(int(q * len(lag)), len(lag) - 1)] * 1e3) if lag else (lambda q: None)  # noqa: E731
    return {"cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - wall0,
            "loop_lag_ms_p50": pick(0.5), "loop_lag_ms_p99": pick(0.99), "loop_lag_ms_max": pick(1.0)}  # fmt: skip


def run_sharded(requests: Sequence[Request], offsets: Sequence[float] | None, load: PointLoad, cfg: LoadGenConfig,
                run_id: str, point_id: str, record: Callable[[RequestResult], None],
                stop: threading.Event | None = None) -> list[dict]:  # fmt: skip
    """Run the shards in worker processes, passing every result to ``record`` as it arrives (in this thread);
    return each worker's CPU and wall time. Raises :class:`ClientProcessError` when a worker fails."""
    ctx = mp.get_context("spawn")
    out, go, start_ns = ctx.Queue(), ctx.Event(), ctx.Value("q", 0)
    shards = shard(requests, load, offsets)
    procs = [ctx.Process(target=_worker, args=(i, reqs, offs, part, cfg, run_id, point_id, out, go, start_ns),
                         daemon=True, name=f"dflashbench-client-{i}")  # fmt: skip
             for i, (reqs, offs, part) in enumerate(shards)]
    stats: dict[int, dict] = {}
    try:
        for p in procs:
            p.start()
        _wait_ready(out, procs, stop)
        if load.open_loop:  # one start instant for every worker's schedule (one system-wide clock)
            start_ns.value = time.perf_counter_ns() + 50_000_000
        go.set()
        while len(stats) < len(procs):
            if stop is not None and stop.is_set():
                raise ClientProcessError("stopped")
            try:
                kind, index, payload = out.get(timeout=0.2)
            except queue_mod.Empty:
                _check_alive(procs, stats, out, record)
                continue
            if kind == "result":
                record(payload)
            elif kind == "done":
                stats[index] = payload
            elif kind == "error":
                raise ClientProcessError(f"client process {index} failed: {payload}")
    except ClientProcessError:
        _stop(procs)
        _drain(out, record)  # what the other workers had already sent is measured: keep it
        raise
    finally:
        _stop(procs)
        out.close()
    return [stats[i] for i in sorted(stats)]


def _stop(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
        p.join(5)


def _drain(out, record) -> None:
    """Record every result still queued (after the workers stopped); a message a killed worker left half
    written ends the draining."""
    while True:
        try:
            kind, _index, payload = out.get(timeout=0.2)
        except Exception:  # noqa: BLE001 - Empty, or a truncated message from a terminated worker
            return
        if kind == "result":
            record(payload)


def _wait_ready(out, procs, stop) -> None:
    ready, deadline = 0, time.monotonic() + READY_TIMEOUT_S
    while ready < len(procs):
        if time.monotonic() > deadline or (stop is not None and stop.is_set()):
            raise ClientProcessError(f"{len(procs) - ready} client process(es) did not start within {READY_TIMEOUT_S:g} s")
        try:
            kind, index, payload = out.get(timeout=0.2)
        except queue_mod.Empty:
            dead = [p for p in procs if p.exitcode is not None]
            if dead:
                raise ClientProcessError(f"client process {dead[0].name} exited with status {dead[0].exitcode} "
                                         "while starting (its traceback is above)") from None  # fmt: skip
            continue
        if kind == "ready":
            ready += 1


def _check_alive(procs, stats: dict, out, record) -> None:
    """A worker that exited without saying it was done: keep what is still queued, then fail the point."""
    for i, p in enumerate(procs):
        if i not in stats and p.exitcode is not None:
            with contextlib.suppress(queue_mod.Empty):
                while True:
                    kind, index, payload = out.get(timeout=0.5)
                    if kind == "result":
                        record(payload)
                    elif kind == "done":
                        stats[index] = payload
            if i not in stats:
                raise ClientProcessError(f"client process {i} exited with status {p.exitcode} before finishing "
                                         "its share; the requests it finished are counted in this failed point's "
                                         "row, and --resume measures the whole point again")  # fmt: skip


def client_overhead(stats: Sequence[dict], results: Sequence[RequestResult]) -> dict:
    """The client's own cost over the point: per process CPU seconds and busy share (CPU / wall), the busiest
    share, and CPU microseconds per output token; with the clock the timestamps came from."""
    tokens = sum(r.output_tokens for r in results if r.ok and not r.warmup)
    cpu = sum(s["cpu_s"] for s in stats)
    shares = [s["cpu_s"] / s["wall_s"] for s in stats if s["wall_s"] > 0]
    p99 = [s["loop_lag_ms_p99"] for s in stats if s.get("loop_lag_ms_p99") is not None]
    worst = [s["loop_lag_ms_max"] for s in stats if s.get("loop_lag_ms_max") is not None]
    return {"processes": len(stats), "clock": CLOCK, "cpu_s": [round(s["cpu_s"], 4) for s in stats],
            "busy_share": [round(x, 4) for x in shares], "busy_share_max": round(max(shares), 4) if shares else None,
            "cpu_us_per_tok": round(cpu / tokens * 1e6, 3) if tokens else None,
            "loop_lag_ms_p99": round(max(p99), 3) if p99 else None,  # the worst process's
            "loop_lag_ms_max": round(max(worst), 3) if worst else None}  # fmt: skip
