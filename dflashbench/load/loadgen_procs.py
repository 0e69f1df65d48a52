"""Driving one point's load from client processes: the requests are sent from worker processes, never from the
process that runs the sweep.

Why (issue #44): the process that runs a sweep keeps its books while a point runs (each result annotated, redacted
and appended to ``requests.jsonl``, the progress bar redrawn, NVML telemetry sampled), and a client whose event loop
did that work too timestamped its chunks late: at 64 streams against the pace-exact stand-in, ``dflashbench sweep``
driving the point in its own loop added 41 ms to the mean TTFT, the same load from a worker process about 14.
So ``processes`` worker processes (one at least) each run the asynchronous load generator on their share of the
point's streams (closed loop) or arrivals (open loop), and the parent only collects.

Workers are forked from a fork server (``forkserver``, started once per sweep with this module imported: a worker
starts in about 20 ms, where a fresh ``spawn`` interpreter takes about a second; ``spawn`` where the platform has
no fork server). Neither start method inherits an event loop or sockets. A worker gets what it must not take from
the fork server's past explicitly: the parent's CPU affinity (``--engine-cpus`` pins the client) and its
``DFLASHBENCH_EVENT_LOOP``.

The seam between the client and whoever consumes its results (the run's store, the progress bar, and later a
point's precision and its stopping rule, or trace replay's send lateness):

- **Results out, off the loop.** Each worker sends its finished :class:`~dflashbench.types.RequestResult` records
  to the parent over one queue, every :data:`RESULTS_FLUSH_S` as one message; a collecting thread in the parent
  hands each to ``on_result`` in the order it finished. Whatever a consumer does there costs the parent's CPU, never
  a client's event loop, so a consumer may be as slow as it needs (results wait in the queue). A worker that fails
  sends what it finished before its error; one killed outright loses at most its last :data:`RESULTS_FLUSH_S` of
  results. Either way the point then fails, naming the worker.
- **Stop in.** :class:`StopSending` (``drive(..., stop=...)``): set from any thread of the parent, it makes every
  worker send no new request (a closed loop's streams end after their request in flight, an open loop schedules no
  further arrival); what is in flight finishes and is recorded, and ``drive`` returns as usual.

Nothing outlives the sweep (issue #52): every client process watches a **lifeline**, a pipe made once per sweep
process whose write end only the sweep holds (:func:`lifeline`). The kernel closes it however the sweep ends
(SIGKILL, the OOM killer, a CI runner's timeout included, which no handler of the sweep ever sees), and a thread in
each client, blocked reading its end, then ends the client at once. The fork server and multiprocessing's resource
tracker go next by CPython's own rule: each reads a pipe whose write ends only the sweep and the processes forked
from the fork server hold, and exits at its end of file. Before this, a client outlived a SIGKILLed sweep: it sent
its remaining requests, then hung for ever on the results pipe nobody read (its queue's feeder blocked on a full
pipe at exit), holding the fork server and the resource tracker with it. Why a pipe rather than
``PR_SET_PDEATHSIG``: a client's parent is the fork server, not the sweep, and the death signal fires when the
*thread* that forked exits (the fork server may be restarted from the collecting thread, which ends with each
point), and it is Linux's alone; an end of file on a pipe is what the launched server's supervisor watches too
(:mod:`dflashbench.backends.supervise`), on every platform (docs/reliability.md, "What ends with the sweep").
Checked by ``tests/run/test_reliability.py``: the sweep SIGKILLed at c=64 against an ``--endpoint``, and at c=48
with a launched server; every descendant recorded from /proc is gone within 5 s.

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
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dflashbench.child_path import own_package_on_path
from dflashbench.errors import UserError
from dflashbench.load import eventloop, outputs, usage_check
from dflashbench.load.arrivals import arrival_offsets_s
from dflashbench.load.loadgen import LoadGenConfig, make_session, open_connections, run_closed_loop
from dflashbench.load.openloop import run_open_loop
from dflashbench.types import Request, RequestResult

# Streams one client process drives before "auto" adds another, read off the sweep's own overhead curve (issue #44:
# `bench loadgen --overhead` runs a sweep's point, store, progress bar and scrapes included), on the project's
# 2-core machine shared with other work, against the pace-exact stand-in, 4 requests per stream:
#   dflashbench bench loadgen --overhead --concurrency 64,128,256,512 --processes 1,2 --repeats 3 --rounds 4
#   dflashbench bench loadgen --overhead --concurrency 32,64 --processes 1,2 --repeats 5 --rounds 4
# TTFT overhead with 2 processes minus with 1, paired by repeat, median [each pair] in ms: 32 streams -6.6
# [-9.8 -5.5 +2.0 -6.6 -8.4]; 64 streams -5.9 [-5.9 -1.8 -8.4] and -2.0 [+0.6 -5.2 -8.3 +2.4 -2.0]; 128 -8.1
# [-14.5 +0.7 -8.1]; 256 -0.9 [+9.2 -0.9 -6.8]; 512 -48.9 [+6.7 -48.9 -58.4]. ITL error against the server's own,
# 2 processes: 0.17 against 0.30% at 32 streams, 0.32 against 0.45% at 64, 1.37 against 1.58% at 256. A second
# process helped from the smallest count measured, 32 streams (the sweep's own process no longer shares a loop
# with the client, so a client process is lighter than when the rule was one per 128). At most one per CPU: 4
# processes on 2 cores were no better than 2 (issue #29).
AUTO_STREAMS_PER_PROCESS = 32
READY_TIMEOUT_S = 120.0  # a worker that has not imported and reported ready by then is broken
CLOCK = time.get_clock_info("perf_counter").implementation
LAG_PROBE_S = 0.01  # the event-loop lag probe's sleep (100 wake-ups a second: negligible load)
# How often a client process sends its finished results to the parent, as one message: a message per result cost
# the client's loop a queue hand-off and its queue thread a wake-up and a pipe write each (issue #44's profile:
# about 0.3 ms of the interpreter's time per request, most of it at a round's end, when the next requests are sent).
RESULTS_FLUSH_S = 0.05


class ClientProcessError(RuntimeError):
    """A client worker process died or raised; the results it sent before are already recorded."""


@dataclass(frozen=True)
class PointLoad:
    """The load one point asks for: ``concurrency`` closed-loop streams, or open-loop arrivals at
    ``request_rate`` (``concurrency`` 0), driven from ``processes`` client processes. A client process's own
    part (:func:`shard`) keeps the point's ``concurrency``, which its request rows record, and drives
    ``process_streams`` of them."""

    concurrency: int = 1
    request_rate: float | None = None
    arrivals: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None  # open loop: cap on requests in flight
    seed: int = 0
    processes: int = 1
    schedule_s: tuple[float, ...] | None = None  # a trace's arrivals (dflashbench.load.trace_replay); request_rate its mean
    process_streams: int | None = None  # one client process's share of the streams, or of an open loop's cap (shard)

    @property
    def streams_here(self) -> int:
        """The closed-loop streams this process drives: its share, or every stream of the point."""
        return self.process_streams if self.process_streams is not None else self.concurrency

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None

    @property
    def connections(self) -> int:
        """HTTP connections the point may hold at once (its session's connector limit)."""
        if self.open_loop:
            return self.process_streams or self.max_concurrency or 0  # 0: aiohttp's "no limit"
        return max(self.streams_here, 1)


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
        share = caps[i] or None if load.open_loop else streams[i]  # the point's own figures stay as they are
        out.append((reqs, offs, dataclasses.replace(load, process_streams=share, processes=1)))
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


_CONTEXT: list = []  # the multiprocessing context, made once
_LIFELINE: list = []  # (read end, write end) of the sweep's lifeline, made once per process
EXIT_SWEEP_GONE = 3  # a client's status when its sweep died (nobody reads it: the sweep is gone)


def context():
    """The start method of client processes: a fork server with this module preloaded where the platform has one
    (Linux, macOS), else ``spawn``. The fork server is started here, by the calling thread: its workers run at that
    thread's CPU priority (a process inherits the niceness of the thread that starts it), so this must be called
    from the sweep's own thread, never from the collecting thread that :func:`_yield_cpu` lowers."""
    if not _CONTEXT:
        if "forkserver" in mp.get_all_start_methods():
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload([__name__])  # a worker is forked with the load generator already imported
        else:
            ctx = mp.get_context("spawn")
        _CONTEXT.append(ctx)
    if _CONTEXT[0].get_start_method() == "forkserver":
        from multiprocessing import forkserver

        with own_package_on_path():  # never a folder named dflashbench in the working directory (child_path)
            forkserver.ensure_running()  # a no-op once it runs; restarted if it died
    return _CONTEXT[0]


def lifeline():
    """The read end of this process's lifeline (module docstring), handed to every client process. The write end
    stays in this process for its whole life and is never sent anywhere: ``os.pipe`` makes both ends close-on-exec,
    so no program this process starts holds it (the fork server and the resource tracker get only the descriptors
    they are passed, a launched server's supervisor none), and a client's end of file means this process is gone."""
    if not _LIFELINE:
        _LIFELINE.extend(mp.Pipe(duplex=False))
    return _LIFELINE[0]


def _die_with_sweep(line) -> None:
    """In a client process: a thread that ends the process as soon as the sweep's lifeline reaches end of file
    (``os._exit``: nothing of a dead sweep's point is worth finishing, and a clean exit could block on the results
    queue nobody reads). The sweep never writes to it, so the read returns only then; it costs the client nothing
    while it runs (a thread blocked in ``read``)."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(line.fileno(), 64):
                pass
        os._exit(EXIT_SWEEP_GONE)

    threading.Thread(target=watch, name="dflashbench-lifeline", daemon=True).start()


class StopSending:
    """A point's "send no new requests" signal (see the module docstring): :meth:`set` from any thread of the
    parent; every client process reads it before it sends its next request."""

    def __init__(self) -> None:
        self._event = context().Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


async def _drive_here(requests, offsets, load: PointLoad, cfg: LoadGenConfig, *, run_id: str, point_id: str,
                      on_result, session, start_ns: int | None = None, lags_s: list[float] | None = None,
                      connected: bool = False, stop=None) -> list[RequestResult]:  # fmt: skip
    """One client process's share, on its own event loop (:func:`_worker_run`)."""
    probe = asyncio.create_task(_loop_lag(lags_s if lags_s is not None else []))
    try:
        if load.open_loop:
            return await run_open_loop(requests, offsets, cfg, max_concurrency=load.process_streams or load.max_concurrency,
                                       point_concurrency=load.max_concurrency,
                                       start_ns=start_ns, run_id=run_id, point_id=point_id, on_result=on_result,
                                       session=session, stop=stop)  # fmt: skip
        return await run_closed_loop(requests, load.streams_here, cfg, run_id=run_id, point_id=point_id,
                                     on_result=on_result, session=session, connected=connected, stop=stop,
                                     point_concurrency=load.concurrency)  # fmt: skip
    finally:
        probe.cancel()


async def drive(
    requests: Sequence[Request], load: PointLoad, cfg: LoadGenConfig, *, run_id: str = "", point_id: str = "",
    on_result: Callable[[RequestResult], None] | None = None, stop: StopSending | None = None,
    count_text: usage_check.CountText | None = None, ready: Callable[[], None] | None = None,
) -> tuple[list[RequestResult], dict]:  # fmt: skip
    """Run the point's measured requests from ``load.processes`` client processes (one at least); return the
    results and the client's overhead figures. ``on_result`` gets each result as it arrives, in the parent's
    collecting thread (never in a client's event loop), its server's token count checked against what it streamed
    (:mod:`dflashbench.load.usage_check`; ``count_text``: the target's tokenizer, for streams without token ids);
    ``stop`` ends sending early (module docstring); ``ready``: called once every client process has its connections
    open, just before they start (in the collecting thread): side by side, the barrier that starts a load's points
    together."""
    offsets = offsets_for(load, len(requests))
    results: list[RequestResult] = []

    def record(r: RequestResult) -> None:
        results.append(r)
        if on_result is not None:
            on_result(r)

    stats = await collected(lambda abort: run_sharded(requests, offsets, load, cfg, run_id, point_id, record, abort,
                                                      stop, count_text, ready), "dflashbench-results")  # fmt: skip
    return results, client_overhead(stats, results)


async def collected(run: Callable[[threading.Event], Any], name: str) -> Any:
    """``run(abort)`` (blocking: it starts client processes and reads their queue) in a collecting thread of lowered
    priority, its result awaited here. Cancelled (Ctrl-C or SIGTERM), it sets ``abort``, so the collector stops the
    workers before the point unwinds. The fork server is started first, from this thread, at the sweep's own
    priority, before the collector's is lowered."""
    context()
    abort = threading.Event()
    loop = asyncio.get_running_loop()
    finished: asyncio.Future = loop.create_future()

    def settle(value, error) -> None:
        if not finished.done():
            finished.set_exception(error) if error is not None else finished.set_result(value)

    def collect() -> None:
        _yield_cpu()
        try:
            value = run(abort)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine, raised there
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, value, None)

    collector = threading.Thread(target=collect, name=name, daemon=True)
    collector.start()
    try:
        return await finished
    except asyncio.CancelledError:
        abort.set()
        collector.join(READY_TIMEOUT_S)
        raise


# The collecting thread's niceness above the sweep's own: on a machine where the clients, the server and the sweep
# share few cores, the consumers of results (the store, the progress bar) then take the CPU the clients and the
# server leave, and catch up between a closed loop's rounds or after the point (5 paired sweeps at 64 streams on 2
# shared cores: TTFT overhead 2.2 ms lower, median, than at the sweep's own niceness, lower in 4 of 5 pairs).
COLLECTOR_NICE = 10


def _yield_cpu() -> None:
    """Lower the calling thread's CPU priority by :data:`COLLECTOR_NICE` (Linux schedules threads one by one and
    lets a thread set its own)."""
    if sys.platform != "linux":
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + COLLECTOR_NICE))


def _worker(index: int, requests: list[Request], offsets: list[float] | None, load: PointLoad, cfg: LoadGenConfig,
            run_id: str, point_id: str, out, go, start_ns, stop, setup: dict, line) -> None:  # fmt: skip
    """One client process: end with the sweep (``line``, its lifeline), take the parent's settings, open its
    connections, report ready, wait for the common start, run its share, stream each result back."""
    run_worker(index, line, setup, out, lambda: _worker_run(index, requests, offsets, load, cfg, run_id, point_id,
                                                            out, go, start_ns, stop))  # fmt: skip


def _parent_setup() -> dict:
    """What a worker takes from the parent rather than from the fork server it was forked from: the CPUs the
    client may use, and the event-loop choice."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpus": cpus, "env": {eventloop.ENV: os.environ.get(eventloop.ENV)}}


def _adopt(setup: dict) -> None:
    if setup.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, setup["cpus"])
    for name, value in setup.get("env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


async def _worker_run(index: int, requests: list[Request], offsets: list[float] | None, load: PointLoad,
                      cfg: LoadGenConfig, run_id: str, point_id: str, out, go, start_ns, stop) -> dict:  # fmt: skip
    """The worker's event loop: its closed loop's connections are opened before it says ready, so every
    process starts its measured requests together, on open connections (:func:`dflashbench.load.loadgen.open_connections`)."""
    session = make_session(load.connections)
    try:
        if not load.open_loop:
            await open_connections(session, cfg, requests, min(load.streams_here, len(requests)))
        out.put(("ready", index, None))
        await asyncio.to_thread(go.wait)
        cpu0, wall0, lags = time.process_time(), time.perf_counter(), []
        continued = _count_continues()  # a stop (Ctrl-Z, SIGSTOP) cannot be caught; the SIGCONT after it can
        batch: list[RequestResult] = []

        def flush() -> None:
            if batch:
                out.put(("results", index, batch.copy()))
                batch.clear()

        async def flush_every() -> None:
            while True:
                await asyncio.sleep(RESULTS_FLUSH_S)
                flush()

        flusher = asyncio.create_task(flush_every())
        try:
            await _drive_here(requests, offsets, load, cfg, run_id=run_id, point_id=point_id, on_result=batch.append,
                              session=session, start_ns=start_ns.value or None, lags_s=lags, connected=True,
                              stop=stop)  # fmt: skip
        finally:  # on an error too: what finished before it is sent ahead of the error
            flusher.cancel()
            flush()
        return {**_stats(cpu0, wall0, lags), "continued": len(continued)}
    finally:
        await session.close()


def _count_continues() -> list[int]:
    """The times (``perf_counter_ns``) this process is continued after a stop (SIGCONT: the shell's ``fg`` after
    Ctrl-Z, or ``kill -CONT``), counted from now on this event loop: a point whose client stood still while its
    server went on measured the stop, not the server (:func:`dflashbench.measure.client_load.client_stopped`)."""
    found: list[int] = []
    with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError, ValueError):  # no signals here
        asyncio.get_running_loop().add_signal_handler(signal.SIGCONT, lambda: found.append(time.perf_counter_ns()))
    return found


def _stats(cpu0: float, wall0: float, lags_s: list[float]) -> dict:
    """One client process's cost since ``cpu0`` / ``wall0``: CPU and wall seconds, event-loop lag p50/p99/max;
    the event loop it ran on and the CPUs it was allowed (what it took from the parent: :func:`_adopt`)."""
    lag = sorted(lags_s)
    pick = (lambda q: lag[min(int(q * len(lag)), len(lag) - 1)] * 1e3) if lag else (lambda q: None)  # noqa: E731
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    nice = os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else None
    return {"cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - wall0,
            "loop_lag_ms_p50": pick(0.5), "loop_lag_ms_p99": pick(0.99), "loop_lag_ms_max": pick(1.0),
            "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0], "cpus": cpus,
            "nice": nice}  # fmt: skip


def run_sharded(requests: Sequence[Request], offsets: Sequence[float] | None, load: PointLoad, cfg: LoadGenConfig,
                run_id: str, point_id: str, record: Callable[[RequestResult], None],
                abort: threading.Event | None = None, stop: StopSending | None = None,
                count_text: usage_check.CountText | None = None,
                ready: Callable[[], None] | None = None) -> list[dict]:  # fmt: skip
    """Run the shards in worker processes, passing every result to ``record`` as it arrives (in this thread), its
    token count checked against its stream first (:func:`dflashbench.load.usage_check.reconcile`); return each
    worker's CPU and wall time. ``abort`` (Ctrl-C) ends the workers at once, ``stop`` lets them finish what is in
    flight; ``ready`` is called between the workers' readiness and their start. Raises :class:`ClientProcessError`
    when a worker fails."""
    ctx = context()
    out, go, start_ns = ctx.Queue(), ctx.Event(), ctx.Value("q", 0)
    stop = stop if stop is not None else StopSending()
    setup = _parent_setup()
    shards = shard(requests, load, offsets)
    by_id = {r.id: r for r in requests}

    def deliver(r: RequestResult) -> None:  # the workers leave outputs raw: checked, graded, hashed and capped here
        checked = usage_check.usage_fields(r, count_text)  # on the full text and token ids, before they are capped
        record(outputs.finish(r, by_id.get(r.request_id), store_text=cfg.store_text, more=checked))

    raw = dataclasses.replace(cfg, raw_outputs=True)
    line = lifeline()
    procs = [ctx.Process(target=_worker, args=(i, reqs, offs, part, raw, run_id, point_id, out, go, start_ns,
                                               stop, setup, line),
                         daemon=True, name=f"dflashbench-client-{i}")  # fmt: skip
             for i, (reqs, offs, part) in enumerate(shards)]

    def started() -> None:
        if ready is not None:
            ready()
        if load.open_loop:  # one start instant for every worker's schedule (one system-wide clock)
            start_ns.value = time.perf_counter_ns() + 50_000_000

    stats = collect_from(procs, out, go, deliver, abort, started)
    return [stats[i] for i in sorted(stats)]


def collect_from(procs, out, go, deliver, abort: threading.Event | None, started: Callable[[], None] | None = None,
                 label: Callable[[int], str] = lambda i: f"client process {i}") -> dict[int, dict]:  # fmt: skip
    """Start ``procs``, wait until every one has its connections open, call ``started`` and let them go; then hand
    each result they send to ``deliver`` until every one is done, and return each one's stats by its index. A
    failed or vanished process (or ``abort``) stops them all, after what the others had sent is delivered: it is
    measured, so it is kept."""
    stats: dict[int, dict] = {}
    try:
        for p in procs:
            p.start()
        _wait_ready(out, procs, abort)
        if started is not None:
            started()
        go.set()
        while len(stats) < len(procs):
            if abort is not None and abort.is_set():
                raise ClientProcessError("stopped")
            try:
                kind, index, payload = out.get(timeout=0.2)
            except queue_mod.Empty:
                _check_alive(procs, stats, out, deliver)
                continue
            if kind == "results":
                for r in payload:
                    deliver(r)
            elif kind == "done":
                stats[index] = payload
            elif kind == "error":
                raise ClientProcessError(f"{label(index)} failed: {payload}")
    except ClientProcessError:
        _stop(procs)
        _drain(out, deliver)  # what the other workers had already sent is measured: keep it
        raise
    finally:
        _stop(procs)
        out.close()
    return stats


def run_worker(index: int, line, setup: dict, out, run: Callable[[], Any]) -> None:
    """A client process's life: end with the sweep (``line``, its lifeline), take the parent's settings, run
    ``run()`` (its event loop's coroutine) and send its stats, or its error (the parent names it; the results
    sent so far are kept)."""
    _die_with_sweep(line)
    try:
        _adopt(setup)
        stats = eventloop.run(run())
    except BaseException as exc:
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # a task's error, not the TaskGroup's
            exc = exc.exceptions[0]
        out.put(("error", index, f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None
    out.put(("done", index, stats))


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
        if kind == "results":
            for r in payload:
                record(r)


def _wait_ready(out, procs, abort) -> None:
    ready, deadline = 0, time.monotonic() + READY_TIMEOUT_S
    while ready < len(procs):
        if time.monotonic() > deadline or (abort is not None and abort.is_set()):
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
                    if kind == "results":
                        for r in payload:
                            record(r)
                    elif kind == "done":
                        stats[index] = payload
            if i not in stats:
                raise ClientProcessError(f"client process {i} exited with status {p.exitcode} before finishing "
                                         "its share; the requests it finished are counted in this failed point's "
                                         "row, and --resume measures the whole point again")  # fmt: skip


def client_overhead(stats: Sequence[dict], results: Sequence[RequestResult]) -> dict:
    """The client's own cost over the point: per process CPU seconds and busy share (CPU / wall), the busiest
    share, and CPU microseconds per output token; with the clock the timestamps came from, the event loop
    (``uvloop`` or ``asyncio``) the clients ran on and their niceness (the highest: a client below the sweep's own
    priority waits for the CPU behind everything else)."""
    tokens = sum(r.output_tokens for r in results if r.ok and not r.warmup)
    cpu = sum(s["cpu_s"] for s in stats)
    shares = [s["cpu_s"] / s["wall_s"] for s in stats if s["wall_s"] > 0]
    p99 = [s["loop_lag_ms_p99"] for s in stats if s.get("loop_lag_ms_p99") is not None]
    worst = [s["loop_lag_ms_max"] for s in stats if s.get("loop_lag_ms_max") is not None]
    return {"processes": len(stats), "clock": CLOCK, "cpu_s": [round(s["cpu_s"], 4) for s in stats],
            "busy_share": [round(x, 4) for x in shares], "busy_share_max": round(max(shares), 4) if shares else None,
            "cpu_us_per_tok": round(cpu / tokens * 1e6, 3) if tokens else None,
            "loop_lag_ms_p99": round(max(p99), 3) if p99 else None,  # the worst process's
            "loop_lag_ms_max": round(max(worst), 3) if worst else None,
            # SIGCONTs the client processes got during the point: each a stop (Ctrl-Z, SIGSTOP) it measured
            "continued": sum(int(s.get("continued") or 0) for s in stats),
            "event_loop": next((s["event_loop"] for s in stats if s.get("event_loop")), None),
            "nice": max((s["nice"] for s in stats if s.get("nice") is not None), default=None)}  # fmt: skip
