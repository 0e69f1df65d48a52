"""One point of a sweep: reset the server's cache, warm up, read the acceptance counters, run the load (closed
loop at the point's concurrency, or open loop at its rate, from client processes, never from this one) while NVML
telemetry samples, read the counters again, and write the point's summaries.

Every request result is appended to the run's ``requests.jsonl`` the moment it finishes and the point's rows
(``category = "all"`` and one per category) to ``points.jsonl`` as soon as it ends, so a crash loses at most
the point in flight. A point that cannot complete (its server died, every request failed) is written with
``status = "failed"`` and the reason; one whose share of failed requests exceeds ``max_error_rate`` with
``status = "degraded"`` (figures kept, marked).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from dflashbench.backends.counters import server_timing, sum_histograms
from dflashbench.backends.endpoint import answers
from dflashbench.load import endpoints as multi
from dflashbench.load import eventloop, usage_check
from dflashbench.load.loadgen import LoadGenConfig, run_closed_loop
from dflashbench.load.loadgen_procs import PointLoad, StopSending, drive
from dflashbench.measure import metrics, observability
from dflashbench.measure import sequential as seq
from dflashbench.measure.client_load import client_stopped
from dflashbench.measure.steady import steady_figures, wave_steady_figures
from dflashbench.plan import precision_plan
from dflashbench.plan.grid import GridPoint, SweepContext, warmup_requests
from dflashbench.plan.suites import Suite
from dflashbench.run import precision, target_tokens, trace_point
from dflashbench.run.load_summary import category_extra, load_extra, point_load
from dflashbench.run.run_books import store_failure
from dflashbench.run.store import RunStore
from dflashbench.run.sweep_console import point_line, point_progress
from dflashbench.types import AcceptCounters, CounterResetError, Method, PointSummary, Request, RequestResult

Echo = Callable[[str], None]


@dataclass(frozen=True)
class ServerTarget:
    """The server a method's points are sent to: the backend that reads its counters, its URL, the load
    generator's settings for it, and the process when the sweep launched it (``None``: someone else runs it)."""

    backend: Any
    base_url: str
    lg: LoadGenConfig
    server: Any = None
    name: str = ""  # the server's name in the placement (``ar``, ``ar#2``)
    gpus: tuple[int, ...] = ()  # its own GPUs (NVML indices) where the placement gave it some


def loadgen_config(ctx: SweepContext, base_url: str, model: str, store_text: bool,
                   backend_fields: dict | None = None) -> LoadGenConfig:  # fmt: skip
    """The load generator's settings for the server at ``base_url``: the model name requests carry (``model``, as
    :func:`dflashbench.backends.endpoint.pick_model_name` chose it), the suite's sampling and timeout, the API key,
    and what each request asks for besides (the backend's own fields for the method: SGLang's per-request
    acceptance)."""
    suite = ctx.suite
    return LoadGenConfig(base_url=base_url, model=model,
                         temperature=suite.temperature, timeout_s=suite.timeout_s, api_key=ctx.api_key,
                         store_text=store_text, extra_body={**_token_ids_body(ctx.backend_name),
                                                            **(backend_fields or {}), **ctx.pair.extra_body()})  # fmt: skip


TOKEN_ID_BACKENDS = ("vllm", "reference")


def _token_ids_body(backend_name: str) -> dict:
    """``return_token_ids``, for servers known to accept it (vLLM >= 0.10.2 streams each chunk's token ids;
    older vLLM ignores the key; the reference server implements it). Other engines may refuse unknown keys. Asked
    for with ``--no-store-text`` too: the ids count what was streamed (:mod:`dflashbench.load.usage_check`), and
    only ``store_text`` keeps them."""
    return {"return_token_ids": True} if backend_name in TOKEN_ID_BACKENDS else {}


@dataclass
class PointRun:
    results: list[RequestResult]
    delta: AcceptCounters | None
    telemetry: Any
    notes: list[str]
    client: dict | None = None  # the client's own overhead (dflashbench.load.loadgen_procs.client_overhead)
    server_timing: dict | None = None  # the engine's own latency histograms over the window (counters.server_timing)
    load: PointLoad | None = None  # the load shape the point was sent with, which its summary records
    started_ns: int | None = None  # when its load started (perf_counter_ns): side by side, the points' common start


async def _counters(backend, session, base_url: str, notes: list[str]) -> AcceptCounters | None:
    try:
        return await backend.read_counters(session, base_url)
    except Exception as exc:  # noqa: BLE001 - a counter read must not lose the point
        notes.append(f"counters unreadable: {type(exc).__name__}: {exc}")
        return None


async def _timing(backend, session, base_url: str) -> dict | None:
    """The server's latency histograms where its backend reads any; ``None`` otherwise or when unreadable (server
    timing is a cross-check: its absence must not lose the point)."""
    read = getattr(backend, "read_server_timing", None)
    if read is None:
        return None
    try:
        return await read(session, base_url)
    except Exception:  # noqa: BLE001 - see above
        return None


def counters_delta(before: AcceptCounters | None, after: AcceptCounters | None, notes: list[str]) -> AcceptCounters | None:
    if after is None:
        return None
    if before is None:  # counters that appear with their first increment (Prometheus) started at zero
        return after
    try:
        return after.minus(before)
    except CounterResetError as exc:
        notes.append(f"{exc}: tau comes from the requests' own speculative stats where the server reports them, "
                     "else it is not measured")
        return None


def load_of(suite: Suite, point: GridPoint, requests: list[Request]) -> PointLoad:
    """The load shape one point is sent with and its summary records: the suite's closed or open loop, or a trace
    replay's own arrivals."""
    if point.trace is not None:
        return trace_point.trace_load(suite, point, requests)
    return point_load(suite, point.concurrency, point.request_rate)


@dataclass
class Warm:
    """What a point holds between its preparation and its load: the counters and server timing read before it,
    the telemetry sampler, and when its load started (``perf_counter_ns``)."""

    before: list
    timing_before: dict | None
    sampler: Any = None
    started_ns: int | None = None


async def prepare_point(point: GridPoint, warmups: list[Request], lg: LoadGenConfig, backend, urls: list[str],
                        run_id: str, on_result, notes: list[str], admin) -> Warm:  # fmt: skip
    """Cache resets, warm-up (untimed, sent from here on connections of its own), the cache reset again, counters and
    server timing read before the load."""
    for url in urls:  # every replica starts cold
        with contextlib.suppress(Exception):
            await backend.reset_cache(admin, url)
    if warmups:
        await run_closed_loop(multi.assign(warmups, urls), max(min(point.concurrency, len(warmups)), 1), lg,
                              run_id=run_id, point_id=point.point_id, warmup=True, on_result=on_result)  # fmt: skip
        for url in urls:  # the measured window starts cold again
            with contextlib.suppress(Exception):
                await backend.reset_cache(admin, url)
    before = await multi.read_all(lambda u: _counters(backend, admin, u, notes), urls)
    timing_before = sum_histograms(await multi.read_all(lambda u: _timing(backend, admin, u), urls))
    return Warm(before, timing_before)


async def finish_point(warm: Warm, backend, urls: list[str], notes: list[str], admin, results, client, window,
                       load: PointLoad | None) -> PointRun:  # fmt: skip
    """Counters and server timing read after the load: the point's deltas over its window."""
    after = await multi.read_all(lambda u: _counters(backend, admin, u, notes), urls)
    timing = server_timing(warm.timing_before,
                           sum_histograms(await multi.read_all(lambda u: _timing(backend, admin, u), urls)))
    delta = multi.sum_counters([counters_delta(b, a, notes) for b, a in zip(warm.before, after, strict=True)]) \
        if len(urls) > 1 else counters_delta(warm.before[0], after[0], notes)  # fmt: skip
    return PointRun(results, delta, window, notes, client, timing or None, load, warm.started_ns)


def admin_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))


async def run_point(
    point: GridPoint, requests: list[Request], warmups: list[Request], lg: LoadGenConfig, backend, base_url: str,
    run_id: str, on_result: Callable[[RequestResult], None], sampler_factory, suite: Suite,
    urls: list[str] | None = None, stop: StopSending | None = None, count_text: usage_check.CountText | None = None,
    ready: Callable[[], None] | None = None,
) -> PointRun:  # fmt: skip
    """The point's work in this process's event loop: cache resets, warm-up, counters and server timing before and
    after, telemetry around the load. The measured load itself is sent from client processes
    (:func:`dflashbench.load.loadgen_procs.drive`), so nothing done here or in ``on_result`` delays a chunk's
    timestamp. ``ready``: called (in a thread) once the point is warm, just before its load: side by side, it waits
    until every point of the load is warm, so they start together (:mod:`dflashbench.run.side`)."""
    notes: list[str] = []
    urls = urls or [base_url]
    load = load_of(suite, point, requests) if suite is not None else None
    async with admin_session() as admin:
        warm = await prepare_point(point, warmups, lg, backend, urls, run_id, on_result, notes, admin)
        sampler = sampler_factory()

        def go() -> None:  # the clients are connected: wait for the load's other points, then start
            if ready is not None:
                ready()
            warm.started_ns = time.perf_counter_ns()

        sampler.start()
        try:
            results, client = await drive(multi.assign(requests, urls), load, lg, run_id=run_id,
                                          point_id=point.point_id, on_result=on_result, stop=stop,
                                          count_text=count_text, ready=go)  # fmt: skip
        finally:
            window = sampler.stop()
        return await finish_point(warm, backend, urls, notes, admin, results, client, window, load)


class _NoSampler:
    def start(self):
        return self

    def stop(self):
        return None


def sampler_factory(interval_s: float, device_indices: list[int] | None = None):
    try:
        from dflashbench.telemetry import NvmlSampler
    except ImportError:
        return _NoSampler
    return functools.partial(NvmlSampler, interval_s=interval_s, device_indices=device_indices)


@dataclass
class PointSession:
    """One point being measured: its requests, warm-ups, load generator settings, stopping rule and where its results
    go (the store, the progress bar, the rule), from :func:`begin_point` to :func:`conclude_point`. Several are open
    at once where the methods of one load run together (:mod:`dflashbench.run.side`, :mod:`dflashbench.run.turns`)."""

    point: GridPoint
    target: ServerTarget
    label: str
    requests: list[Request]
    warmups: list[Request]
    lg: LoadGenConfig
    urls: list[str]
    stop: StopSending
    watch: precision.PointWatch | None = None
    received: list[RequestResult] = field(default_factory=list)  # what reached the store, should the point fail
    on_result: Callable[[RequestResult], None] = print
    failed: PointSummary | None = None  # a point that could not start: its failure row, already written
    pairing: dict | None = None  # who it was measured with, and how (extra["pairing"])
    count_text: Any = None  # the target's tokenizer for streams without token ids (counter_for)


def together(ctx: SweepContext) -> bool:
    """A load's points run at once or in turn (placement side or turns), not one after another."""
    placement = getattr(ctx, "placement", None)
    return placement is not None and placement.mode in ("side", "turns")


class LoadStop:
    """A load's points measured together stop together (docs/metrics.md, "Sizing a point"): each point's stopping
    rule reports itself precise here, and once every point of the load has, all of them stop sending, so every
    ratio of the load is read on the prompts both sides sent. A point that runs out of prompts first never reports,
    and the others run to their own ceilings."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stops: dict[str, StopSending] = {}
        self._precise: set[str] = set()

    def join(self, method: str, stop: StopSending) -> None:
        with self._lock:
            self._stops[method] = stop

    def precise(self, method: str) -> None:
        with self._lock:
            self._precise.add(method)
            if self._precise >= set(self._stops):
                for stop in self._stops.values():
                    stop.set()


def begin_point(ctx: SweepContext, store: RunStore, point: GridPoint, target: ServerTarget, echo: Echo,
                advance=lambda steps=1, note=None: None, pairing: dict | None = None,
                group: LoadStop | None = None) -> PointSession:  # fmt: skip
    """Open ``point``'s session: its requests and warm-ups, its stopping rule, and what each result does (annotated,
    stored, counted on ``advance``, fed to the rule). A point whose server is gone is written as failed here
    (``session.failed``)."""
    label = point.label(ctx.backend_name, len(ctx.grid), ctx.suite.repeats)
    # in turn or side by side a load's points all send its requests at once: no prefix of an earlier point to keep
    requests = ctx.requests_for(point) if together(ctx) else load_prefix(ctx, point, ctx.requests_for(point))
    lg = trace_point.loadgen_config(target.lg, point, ctx.backend_name, ctx.suite)  # a trace's: ignore_eos
    tag = trace_point.tagger(point, requests)  # a trace's results: each tagged with its row
    urls = ctx.endpoints or [target.base_url]
    session = PointSession(point, target, label, requests, warmup_requests(requests, ctx.suite.warmup_requests), lg,
                           urls, StopSending(), pairing=pairing, count_text=counter_for(ctx))  # fmt: skip
    server = target.server
    if server is not None and not server.is_running():
        reason = f"not run: the server had exited ({server.describe_exit()}) during an earlier point; its log: {server.log_path}"
        session.failed = record_failure(ctx, store, point, [], None, reason, echo, label)
        return session
    if server is None and (dead := silent(urls, lg.api_key)):  # no load sent to a replica that is gone
        session.failed = record_failure(ctx, store, point, [], None, f"not run: {dead}", echo, label)
        return session
    stop = session.stop.set
    if together(ctx):  # the load's other points read this one's results as they come, and they stop together
        ctx.finished_results.setdefault(load_key(point), {})[point.method.value] = session.received
        if group is not None:
            group.join(point.method.value, session.stop)
            stop = lambda: group.precise(point.method.value)  # noqa: E731
    session.watch = precision_watch(ctx, point, requests, stop, lambda check: advance(0, watched(check)))

    def on_result(r: RequestResult) -> None:  # in the thread that collects the results, off every client's loop
        r = tag(observability.annotated(r))  # its per-token timing verdict, for readers of requests.jsonl
        store.append_request(dataclasses.replace(r, repeat=point.repeat) if point.repeat else r)
        if not r.warmup:
            session.received.append(r)
            advance()
            if session.watch is not None:
                session.watch.add(r)

    session.on_result = on_result
    return session


def conclude_point(ctx: SweepContext, store: RunStore, session: PointSession, run: PointRun | None, echo: Echo,
                   error: BaseException | None = None) -> PointSummary:  # fmt: skip
    """Write the point: its summary rows (``status`` ok, degraded, or failed with the reason) and telemetry, from
    ``run``; or, where its load raised ``error``, as failed with what was received. Returns the "all" row."""
    point, label, server = session.point, session.label, session.target.server
    if error is not None:
        if (write_error := store_failure(error)) is not None:
            raise write_error from None  # a full disk loses every later point too: stop the sweep
        # its row counts the requests already in requests.jsonl (a killed client process's included)
        return record_failure(ctx, store, point, session.received, None, f"{type(error).__name__}: {error}", echo,
                              label)  # fmt: skip
    assert run is not None
    measured = [r for r in run.results if not r.warmup]
    reason = None
    if server is not None and _server_ended(server, measured):
        reason = _server_gone(server)
    elif server is None and any(not r.ok for r in measured) and (dead := silent(session.urls, session.lg.api_key)):
        reason = f"{dead} during the point"
    elif measured and not any(r.ok for r in measured):
        reason = f"every request failed; first error: {measured[0].error}"
    if reason:
        return record_failure(ctx, store, point, run.results, run.delta, reason, echo, label)
    for sample in getattr(run.telemetry, "samples", None) or []:
        store.append_telemetry({"point_id": point.point_id, **sample})
    sized = session.watch.summary() if session.watch is not None else None
    run.notes.extend(usage_checked(measured, session.count_text))
    keep_load(ctx, point, session.watch, run.results)
    rows = _summaries(ctx, store, point, run.results, run.delta, run.telemetry, run.notes, run.client,
                      run.server_timing, sized, run.load, pairing=session.pairing, gpus=session.target.gpus)  # fmt: skip
    degraded = degraded_reason(measured, ctx.suite.max_error_rate) or client_stopped(run.client)
    if degraded:
        rows = [dataclasses.replace(r, status="degraded", failure_reason=degraded) for r in rows]
    for row in rows:
        store.append_point(row)
    echo(f"{label}: {point_line(rows[0])}{notes_suffix(run.notes)}" + (f"; {precision.line(sized)}" if sized else ""))
    return rows[0]


def counter_for(ctx: SweepContext) -> target_tokens.TargetTokenizer:
    """The target's tokenizer, to count streams without token ids: loaded now (before the measured window) where
    the backend streams none, else after a point whose streams came without them (:mod:`dflashbench.run.target_tokens`)."""
    if ctx.backend_name in TOKEN_ID_BACKENDS:
        return target_tokens.tokenizer_for(ctx.pair.target)
    return target_tokens.prepare(ctx.pair.target)


def usage_checked(measured: list[RequestResult], count_text: target_tokens.TargetTokenizer) -> list[str]:
    """After a point: its notes where a server's token counts disagreed with its streams, were no integers, or could
    be checked by bounds alone (:mod:`dflashbench.load.usage_check`), or none; where its streams came without token
    ids and the tokenizer was not tried yet, it is loaded now, between points, for the next ones."""
    if any(r.streamed_tokens_source == "chunks" for r in measured) and not count_text.tried:
        count_text.ready()
    checked = [r for r in measured if r.ok and r.streamed_tokens is not None]
    notes = []
    if flagged := [r for r in checked if r.usage_mismatch]:
        notes.append(f"the server's usage.completion_tokens disagreed with what it streamed on {len(flagged)} of "
                     f"{len(checked)} requests (e.g. {usage_check.mismatch_words(flagged[0])}): throughput, TPOT and "
                     "per-user rates use the streamed count")  # fmt: skip
    if invalid := [r for r in checked if r.server_usage_invalid is not None]:
        notes.append(f"the server's usage.completion_tokens was no integer on {len(invalid)} of {len(checked)} "
                     f"requests (e.g. {invalid[0].server_usage_invalid}): read as missing, their output tokens "
                     "counted from the stream")  # fmt: skip
    if unverified := [r for r in checked if usage_check.unverified(r)]:
        why = count_text.missing or "the target's tokenizer was loaded only after this point (token ids were expected)"
        notes.append(f"the server's usage.completion_tokens could not be checked on {len(unverified)} of "
                     f"{len(checked)} requests (e.g. {usage_check.unverified_words(unverified[0])}): no token ids in "
                     f"their streams and {why}, so only its bounds applied (chunks below, bytes above); throughput, "
                     "TPOT and per-user rates rest on the server's own count")  # fmt: skip
    return notes


def usage_extra(results: list[RequestResult]) -> dict | None:
    """How the point's streams were counted (``{"token_ids": 30, "tokenizer": 2}``), its first request whose server
    count disagreed, in words, and how many counts were no integers or unverified (each with its first);
    ``None`` where none was checked."""
    checked = [r for r in results if not r.warmup and r.ok and r.streamed_tokens_source is not None]
    if not checked:
        return None
    first = next((r for r in checked if r.usage_mismatch), None)
    by: dict[str, int] = {}
    for r in checked:
        by[r.streamed_tokens_source] = by.get(r.streamed_tokens_source, 0) + 1
    out: dict = {"counted_by": by, **({"first_mismatch": usage_check.mismatch_words(first)} if first else {})}
    if invalid := [r for r in checked if r.server_usage_invalid is not None]:
        out.update(invalid=len(invalid), first_invalid=invalid[0].server_usage_invalid)
    if unverified := [r for r in checked if usage_check.unverified(r)]:
        out.update(unverified=len(unverified), first_unverified=usage_check.unverified_words(unverified[0]))
    return out


def measure_point(ctx: SweepContext, store: RunStore, point: GridPoint, target: ServerTarget, echo: Echo,
                  progress: bool, *, progress_console=None, ready: Callable[[], None] | None = None,
                  pairing: dict | None = None, group: LoadStop | None = None) -> PointSummary:  # fmt: skip
    """Run one point against ``target`` and write it: its requests as they finish, then its summary rows
    (``status`` ok, degraded, or failed with the reason). Returns the "all" row. ``progress_console``: a rich
    ``Console`` to draw the progress bar on where stderr is no terminal (the benchmarks). ``ready`` and
    ``pairing``: side by side, the common start and who the point was measured with (:mod:`dflashbench.run.side`)."""
    label = point.label(ctx.backend_name, len(ctx.grid), ctx.suite.repeats)
    total = sum(1 + len(r.followup_turns) for r in ctx.requests_for(point))
    with point_progress(progress, label, total, progress_console) as advance:
        session = begin_point(ctx, store, point, target, echo, advance, pairing, group)
        if session.failed is not None:
            return session.failed
        try:
            run = eventloop.run(run_point(point, session.requests, session.warmups, session.lg, target.backend,
                                          target.base_url, store.run_id, session.on_result,
                                          point_sampler(ctx, target), ctx.suite, session.urls, stop=session.stop,
                                          count_text=session.count_text, ready=ready))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - one broken point must not lose the sweep
            return conclude_point(ctx, store, session, None, echo, exc)
    if pairing is not None and run.started_ns is not None:
        pairing["load_started_ns"] = run.started_ns
    return conclude_point(ctx, store, session, run, echo)


def point_sampler(ctx: SweepContext, target: ServerTarget):
    """The NVML sampler of a point's server: its own GPUs where the placement gave it some (telemetry per server),
    else every GPU this process sees."""
    gpus = list(target.gpus) if target.gpus else None
    return sampler_factory(ctx.suite.telemetry_interval_s, gpus)



def load_key(point: GridPoint) -> tuple:
    """What the points of one load share: workload, concurrency, arrival rate and round (every method's)."""
    return (point.workload_label, point.concurrency, point.request_rate, point.repeat)


def keep_load(ctx: SweepContext, point: GridPoint, watch: precision.PointWatch | None,
              results: list[RequestResult]) -> None:  # fmt: skip
    """A point sized by precision: its measured results, for the later points of its load (they send the same
    prompts and pair with it); nothing is kept for any other point."""
    if watch is not None:
        ctx.finished_results.setdefault(load_key(point), {})[point.method.value] = [r for r in results if not r.warmup]


def load_prefix(ctx: SweepContext, point: GridPoint, requests: list[Request]) -> list[Request]:
    """The requests of a later point of a load sized by precision: exactly the prefix the load's first point sent
    (docs/metrics.md, "Sizing a point": a load's points stop together), so every ratio of the load pairs the same
    prompts; a first point, or a point not sized by precision, keeps its own."""
    earlier = ctx.finished_results.get(load_key(point)) or {}
    if ctx.suite.precision is None or not earlier or point.method.value in earlier:
        return requests
    sent = {r.request_id for r in next(iter(earlier.values()))}
    n = next((i for i, r in enumerate(requests) if r.id not in sent), len(requests))
    return requests[:n] if n else requests


def precision_watch(ctx: SweepContext, point: GridPoint, requests: list[Request], stop, on_check) -> precision.PointWatch | None:
    """The point's stopping rule where the suite asks for a precision (a closed-loop point that is no trace
    replay), else ``None``: the point sends every request. A load's first point sends at least what every pair of
    the load is planned to need; a later one sends the first one's prompts (:func:`load_prefix`) and pairs with
    every earlier point of the load."""
    if ctx.suite.precision is None or not point.closed_loop or point.trace is not None:
        return None
    floors = seq.floors_for(point.concurrency, ctx.suite.requests_per_stream, len(requests),
                            [r.category for r in requests])  # fmt: skip
    live = together(ctx)  # the load's other points run beside this one: their results are read as they come
    earlier = {m: rs for m, rs in (ctx.finished_results.get(load_key(point)) or {}).items() if m != point.method.value}
    if live:  # the load's live mapping itself: points that begin after this one are read too
        earlier = ctx.finished_results.setdefault(load_key(point), {})
    others = [m.value for m in ctx.suite.methods if m is not point.method]
    if earlier and not live:  # the load's prefix is set: send it, no fewer (a floor of the category counts is no use)
        floors = dataclasses.replace(floors, min_requests=len(requests), ceiling=len(requests), min_per_category=0)
    elif others:  # the load's first point (together: every point): it sends what the load's pairs plan to need
        floors = precision_plan.baseline_floors(floors, others, ctx.suite.precision, point.concurrency)
    if (live or not earlier) and ctx.suite.slo_requests:  # sweep --slo: what its highest percentile needs
        floors = dataclasses.replace(floors, min_requests=max(floors.min_requests, min(ctx.suite.slo_requests,
                                                                                       floors.ceiling)))
    return precision.PointWatch(ctx.suite.precision, point.concurrency, requests, floors, stop, earlier=earlier,
                                live=live, own=point.method.value, speculative=point.method is not Method.AR,
                                on_check=on_check)  # fmt: skip


def watched(check: seq.Check) -> str | None:
    """The progress bar's words at a check: the widest interval so far."""
    widest = check.widest
    return f"±{widest[1]:.1%} {widest[0]}" if widest else None


def notes_suffix(notes: list[str]) -> str:
    """The point's notes on its console line (a counter reset says why tau is not measured, where the line
    shows only "tau -")."""
    return "".join(f"; note: {n}" for n in notes)


def silent(urls: list[str], api_key: str | None) -> str | None:
    """Which of the endpoints give no HTTP answer, said in words (``None`` when all of them answer): every
    replica is checked, since one that died takes its share of the load with it."""
    dead = [u for u in urls if not answers(u, api_key)]
    if not dead:
        return None
    which = [f"{u} (replica {urls.index(u) + 1} of {len(urls)})" if len(urls) > 1 else u for u in dead]
    return f"the server at {', '.join(which)} stopped answering"


def degraded_reason(measured: list[RequestResult], max_error_rate: float) -> str | None:
    """Why a point whose share of failed requests exceeds ``max_error_rate`` is degraded, else ``None``: its
    figures come from the requests that succeeded, which under heavy errors are not the load it was asked for."""
    errors = [r for r in measured if not r.ok]
    if not measured or len(errors) <= max_error_rate * len(measured):
        return None
    return (f"{len(errors)} of {len(measured)} requests failed ({len(errors) / len(measured):.0%} > max_error_rate "
            f"{max_error_rate:.0%}); first error: {errors[0].error}")  # fmt: skip


def _server_ended(server, measured: list[RequestResult]) -> bool:
    """Whether the launched server has exited. When requests failed, it is given a moment: the client sees its
    connections drop while the process is still being torn down."""
    if not server.is_running():
        return True
    return any(not r.ok for r in measured) and server.wait_exit(timeout_s=1.0) is not None


def _summaries(ctx: SweepContext, store: RunStore, point: GridPoint, results: list[RequestResult],
               delta: AcceptCounters | None, window, notes: list[str], client: dict | None = None,
               server_timing: dict | None = None, sized: dict | None = None,
               load: PointLoad | None = None, pairing: dict | None = None,
               gpus: tuple[int, ...] = ()) -> list[PointSummary]:  # fmt: skip
    """The point's rows. ``gpus``: its server's own GPUs where the placement gave it some: its per-GPU figures
    (throughput per GPU, hence GPU-seconds per million tokens) count those, and its energy is theirs
    (:func:`point_sampler`)."""
    kw = dict(run_id=store.run_id, point_id=point.point_id, backend=ctx.backend_name, method=point.method.value,
              model=ctx.pair.target, draft=ctx.pair.drafts.get(point.method.base),
              workload=point.workload_label, concurrency=point.concurrency, num_gpus=len(gpus) or ctx.num_gpus)  # fmt: skip
    extra: dict[str, Any] = {"notes": notes} if notes else {}
    if gpus:
        extra["gpus"] = list(gpus)
    if sized is not None:  # the point stopped by precision (dflashbench.run.precision)
        extra["precision"] = sized
    if ctx.endpoint:
        extra["endpoint"] = ctx.endpoint
    if server_timing:
        extra["server_timing"] = {"source": f"{ctx.backend_name} /metrics", **server_timing}
    if window is not None and getattr(window, "reason", None):
        extra["telemetry"] = window.reason
    elif getattr(window, "energy_j", None) is not None:  # the two energy figures side by side: a cross-check
        extra["energy"] = {"energy_j": window.energy_j, "source": window.energy_source,
                           "power_integral_j": window.energy_j_power_integral, "window_s": window.duration_s,
                           "samples": len(window.samples), "interval_s": window.interval_s}  # fmt: skip
    estimated = sum(r.chunk_tokens_estimated for r in results if not r.warmup)
    if estimated:
        extra["chunk_tokens_estimated_requests"] = estimated
    if (check := usage_extra(results)) is not None:
        extra["usage_check"] = check
    energy = dict(energy_j=getattr(window, "energy_j", None), mean_power_w=getattr(window, "mean_power_w", None),
                  gpu_util_pct_mean=getattr(window, "gpu_util_pct_mean", None))  # fmt: skip
    load = load or load_of(ctx.suite, point, ctx.requests_for(point))  # a failed point's: made here, once
    if point.trace is not None:  # a trace replay: extra["trace"] (lateness, lengths, content)
        extra["trace"] = trace_point.trace_extra(point, ctx.traces[point.trace.content], results, ctx.backend_name,
                                                 ctx.suite)  # fmt: skip
    extra.update(load_extra(load, results, client, ctx.suite.goodput, ctx.endpoints))
    waves = pairing is not None and pairing.get("mode") == "turns"  # sent in waves, in turn with the other methods'
    if pairing is not None:
        extra["pairing"] = pairing
    # a point sent in waves has a window per wave (all its streams busy), summed; an open loop none
    steady = (wave_steady_figures if waves else steady_figures)(results, point.concurrency) if point.closed_loop \
        else None  # fmt: skip
    if point.closed_loop:
        extra["steady"] = steady.to_dict() if steady else None
    rows = [dataclasses.replace(
        metrics.summarize_point(results, delta, category="all", extra=extra, busy_only=waves, **energy, **kw),
        steady_throughput_tok_per_s=steady.throughput_tok_per_s if steady else None,
        steady_share=steady.share if steady else None)]  # fmt: skip
    categories = sorted({r.category for r in results if not r.warmup})
    per_category = {k: v for k, v in extra.items() if k != "server_timing"}  # the histograms cover the whole point
    if len(categories) > 1:
        rows += [metrics.summarize_point(results, delta, category=c, extra=category_extra(per_category, results, c, ctx.suite.goodput),
                                         busy_only=waves, **kw) for c in categories]  # fmt: skip
    return [dataclasses.replace(r, repeat=point.repeat) for r in rows] if point.repeat else rows


def record_failure(ctx: SweepContext, store: RunStore, point: GridPoint, results: list[RequestResult],
                   delta: AcceptCounters | None, reason: str, echo: Echo, label: str | None = None) -> PointSummary:  # fmt: skip
    """Write ``point`` as failed, with the reason and whatever was measured before it failed."""
    row = _summaries(ctx, store, point, results, delta, None, [])[0]
    row = dataclasses.replace(row, status="failed", failure_reason=reason)
    store.append_point(row)
    echo(f"{label or point.point_id}: {point_line(row)}")
    return row


def _server_gone(server) -> str:
    """How the server ended (an exit status; a cluster job's state, which says who ended it) and its log's end."""
    tail = server.log_tail(10)
    shown = f"; last lines of {server.log_path}:\n{tail}" if tail else ""
    return f"the server exited during the point ({server.describe_exit()}){shown}"
