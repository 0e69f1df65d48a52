"""The main job: run a suite's grid point by point and record everything as it happens.

Grid order: method (one server launch each, on the suite's backend) x workload x concurrency. Per point:
reset the server's cache, send the warm-up requests (recorded, excluded from metrics), read the acceptance
counters, run the closed loop at the point's concurrency while NVML telemetry samples, read the counters
again; tau comes from the delta. Every request result is appended to the run's ``requests.jsonl`` the moment
it finishes and every point's summaries (``category = "all"`` and one per category) to ``points.jsonl`` as
soon as the point ends, so a crash loses at most the point in flight. A point that cannot complete (its
server died, every request failed) is written with ``status = "failed"`` and the reason, and the sweep goes
on; a point whose share of failed requests exceeds ``max_error_rate`` is written with ``status = "degraded"``
(its figures kept, marked); ``--resume RUN_DIR`` runs again exactly the points that are not ``ok``.

The run directory is locked for the sweep's life (:mod:`dflashbench.runlock`); a run file that cannot be
written (disk full) stops the sweep with one line naming the file and the error, the manifest marked
``interrupted`` where it still can be, and everything written so far resumable. Every line printed passes
the redaction function (:mod:`dflashbench.redact`), like every file written.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import shlex
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from dflashbench import endpoints as multi
from dflashbench import metrics, pairing
from dflashbench.arrivals import rate_label
from dflashbench.backends import get_backend
from dflashbench.errors import UserError
from dflashbench.load_summary import category_extra, console_suffix, load_extra, plan_line, point_load
from dflashbench.loadgen import LoadGenConfig, api_key_from_env, make_session, run_closed_loop
from dflashbench.loadgen_procs import drive
from dflashbench.manifest import environment, now_iso
from dflashbench.pairing import ModelPair, capacity_warnings, server_spec
from dflashbench.redact import redact_text
from dflashbench.repeats import repeat_point_id
from dflashbench.steady import ramp_problem, steady_figures
from dflashbench.store import RunStore, StoreWriteError, new_run_id, read_manifest
from dflashbench.suites import Suite, WorkloadSpec, parse_suite
from dflashbench.types import AcceptCounters, CounterResetError, Method, PointSummary, Request, RequestResult

WARMUP_MAX_TOKENS = 32
Echo = Callable[[str], None]


@dataclass(frozen=True)
class SweepConfig:
    """Everything ``dflashbench sweep`` decided before running: the resolved suite and how to run it."""

    suite: Suite | None  # None with ``resume``: the run's own configuration is used
    out_dir: Path = Path("results")
    endpoint: str | None = None  # benchmark this running server instead of launching one
    resume: Path | None = None
    dry_run: bool = False
    api_key_env: str | None = None
    progress: bool = True
    report: bool = True
    ready_timeout_s: float | None = None  # the server's readiness; None: the suite's ready_timeout_s
    run_id: str | None = None
    methods_given: bool = False  # --method named them: a method without a draft is an error, not dropped
    store_text: bool = True  # keep each output's text in requests.jsonl (--no-store-text)
    endpoints: tuple[str, ...] = ()  # --endpoint given more than once: every replica (endpoint is the first)


@dataclass(frozen=True)
class GridPoint:
    point_id: str
    method: Method
    workload: WorkloadSpec
    concurrency: int  # closed-loop streams; for a rate point its max_concurrency, else 0
    repeat: int = 0  # the round (sweep --repeats): round r runs every method's points before round r + 1
    request_rate: float | None = None  # an open-loop point (dflashbench.openloop), requests per second


@dataclass
class SweepOutcome:
    run_dir: Path | None
    points: list[PointSummary] = field(default_factory=list)  # "all" rows of this invocation
    report: Path | None = None

    @property
    def failed(self) -> list[PointSummary]:
        """Points not ``ok``: failed, or degraded (too many failed requests); ``--resume`` runs them again."""
        return [p for p in self.points if p.status != "ok"]

    @property
    def degraded(self) -> list[PointSummary]:
        return [p for p in self.points if p.status == "degraded"]


# -- resolving the configuration ------------------------------------------------------------------------------
def num_gpus_for(suite: Suite, backend: str) -> int:
    """GPUs in use: the suite's ``num_gpus`` when set; the reference backend counts 0 unless told to use
    CUDA (its server runs on the CPU by default); engines use tp x dp."""
    if suite.num_gpus is not None:
        return suite.num_gpus
    if backend == "reference":
        args = [a for m in suite.methods for a in suite.args_for(m)]
        return 1 if any("cuda" in a for a in args) else 0
    return suite.gpu_count


def build_grid(suite: Suite, backend: str) -> list[GridPoint]:
    """Grid points in run order: repeat round x method x workload x concurrency, so with ``repeats`` > 1 a slow
    drift of the machine hits every method alike; ids are stable across ``--resume`` (a repeat's id ends in
    ``/r<round>``: :func:`dflashbench.repeats.repeat_point_id`)."""
    grid = []
    labels = Counter(w.label for w in suite.workloads)
    for repeat in range(suite.repeats):
        for method in suite.methods:
            for i, spec in enumerate(suite.workloads):
                label = spec.label if labels[spec.label] == 1 else f"{spec.label}#{i}"
                for conc in suite.concurrency:
                    base = f"{backend}:{method.value}:{label}:c{conc}"
                    grid.append(GridPoint(repeat_point_id(base, repeat, suite.repeats), method, spec, conc, repeat))
                for rate in suite.request_rate:  # open-loop points beside the closed-loop ones
                    base = f"{backend}:{method.value}:{label}:{rate_label(rate)}"
                    grid.append(GridPoint(repeat_point_id(base, repeat, suite.repeats), method, spec,
                                          suite.max_concurrency or 0, repeat, rate))  # fmt: skip
    return grid


def load_plan(suite: Suite, dry_run: bool = False) -> dict[int, list[Request] | str]:
    """The requests of every workload (by index in ``suite.workloads``), read and sampled once. A dry run
    reads only what is on disk (generated prompts, ``data`` paths); for a Hub dataset it holds a line saying
    what a real run would load and from where instead."""
    from dflashbench.workloads import hub_source, load_requests

    plan: dict[int, list[Request] | str] = {}
    for i, spec in enumerate(suite.workloads):
        source = hub_source(spec)
        if dry_run and source is not None:
            count = f"{spec.num_prompts} prompts" if spec.num_prompts else "every row"
            plan[i] = (f"a real run loads {source} from the Hugging Face Hub (or its cache; needs the 'datasets' "
                       f"package), {count}, max_tokens {spec.max_tokens}; give --data PATH to see the requests")  # fmt: skip
            continue
        requests = load_requests(spec, num_prompts=spec.num_prompts, seed=suite.seed, data=None)
        if not requests:
            raise UserError(f"workload {spec.label} yields no requests; check its categories and --num-prompts")
        plan[i] = requests
    return plan


def fill_streams(requests: list[Request], concurrency: int, per_stream: int) -> list[Request]:
    """At least ``concurrency x per_stream`` requests, so every stream runs several in turn and the steady
    window is most of the point: the workload's own, then its prompts again in order. A reuse is a new
    request id (``<id>~<k>``) with ``metadata["reuse"] = k``; prefix caches are reset between points, not
    inside one, so a reused prompt may hit the cache its first use filled (the report says so)."""
    want = concurrency * per_stream
    if len(requests) >= want:
        return requests
    out = list(requests)
    for i in range(len(requests), want):
        r, k = requests[i % len(requests)], i // len(requests)
        out.append(dataclasses.replace(r, id=f"{r.id}~{k}", metadata={**r.metadata, "reuse": k}))
    return out


def warmup_requests(requests: list[Request], n: int) -> list[Request]:
    """``n`` warm-up requests: the workload's own prompts (cycled), single turn, at most 32 tokens."""
    return [
        dataclasses.replace(r, id=f"warmup-{i}-{r.id}", followup_turns=(), max_tokens=min(r.max_tokens, WARMUP_MAX_TOKENS))
        for i, r in enumerate(requests[i % len(requests)] for i in range(n))
    ]  # fmt: skip




# -- talking to a server outside the load loop -----------------------------------------------------------------
ENDPOINT_CHECK_TIMEOUT_S = 10.0


async def _served_models(base_url: str, api_key: str | None, timeout_s: float = ENDPOINT_CHECK_TIMEOUT_S) -> list[str]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        async with session.get(base_url.rstrip("/") + "/v1/models", headers=headers) as resp:
            if resp.status != 200:
                raise UserError(f"{base_url}/v1/models answered HTTP {resp.status}")
            body = await resp.json(content_type=None)
    return [m.get("id") for m in (body or {}).get("data", []) if isinstance(m, dict) and m.get("id")]


def check_endpoint(base_url: str, api_key: str | None) -> list[str]:
    """The model ids a running server serves; a :class:`UserError` saying so if it cannot be reached."""
    try:
        return asyncio.run(_served_models(base_url, api_key))
    except UserError as exc:
        raise UserError(f"the server at {base_url} is not usable: {exc}") from None
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        if isinstance(exc, TimeoutError):  # it took the connection and said nothing (str(exc) is empty)
            reason = f"no HTTP response within {ENDPOINT_CHECK_TIMEOUT_S:g} s"
        else:
            reason = getattr(exc, "os_error", None) or str(exc) or type(exc).__name__
        raise UserError(
            f"cannot reach the server at {base_url} ({reason}); is it running, and is the URL right "
            "(scheme, host, port, no /v1)?"
        ) from None


def _answers(base_url: str, api_key: str | None) -> bool:
    try:
        check_endpoint(base_url, api_key)
    except UserError:
        return False
    return True


def pick_model_name(served: list[str], wanted: str) -> str:
    """The model name to send: ``wanted`` if served under that name (or its directory name), else the first."""
    if wanted in served or not served:
        return wanted
    name = Path(wanted).name
    return name if name in served else served[0]


# -- one point ---------------------------------------------------------------------------------------------------
@dataclass
class _PointRun:
    results: list[RequestResult]
    delta: AcceptCounters | None
    telemetry: Any
    notes: list[str]
    client: dict | None = None  # the client's own overhead (dflashbench.loadgen_procs.client_overhead)


async def _counters(backend, session, base_url: str, notes: list[str]) -> AcceptCounters | None:
    try:
        return await backend.read_counters(session, base_url)
    except Exception as exc:  # noqa: BLE001 - a counter read must not lose the point
        notes.append(f"counters unreadable: {type(exc).__name__}: {exc}")
        return None


def _delta(before: AcceptCounters | None, after: AcceptCounters | None, notes: list[str]) -> AcceptCounters | None:
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


async def _run_point(
    point: GridPoint, requests: list[Request], warmups: list[Request], lg: LoadGenConfig, backend, base_url: str,
    run_id: str, on_result: Callable[[RequestResult], None], sampler_factory, suite: Suite | None = None,
    urls: list[str] | None = None,
) -> _PointRun:  # fmt: skip
    notes: list[str] = []
    urls = urls or [base_url]
    load = point_load(suite, point.concurrency, point.request_rate) if suite is not None else None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as admin:
        session = make_session(load.connections if load is not None else point.concurrency)
        try:
            for url in urls:  # every replica starts cold
                with contextlib.suppress(Exception):
                    await backend.reset_cache(admin, url)
            if warmups:
                await run_closed_loop(multi.assign(warmups, urls), max(min(point.concurrency, len(warmups)), 1), lg,
                                      run_id=run_id, point_id=point.point_id, warmup=True, on_result=on_result,
                                      session=session)  # fmt: skip
                for url in urls:  # the measured window starts cold again
                    with contextlib.suppress(Exception):
                        await backend.reset_cache(admin, url)
            before = await multi.read_all(lambda u: _counters(backend, admin, u, notes), urls)
            sampler = sampler_factory()
            sampler.start()
            client = None
            try:
                if load is None:
                    results = await run_closed_loop(requests, point.concurrency, lg, run_id=run_id,
                                                    point_id=point.point_id, on_result=on_result, session=session)  # fmt: skip
                else:  # one or several client processes; closed or open loop
                    results, client = await drive(multi.assign(requests, urls), load, lg, run_id=run_id,
                                                  point_id=point.point_id, on_result=on_result, session=session)  # fmt: skip
            finally:
                window = sampler.stop()
            after = await multi.read_all(lambda u: _counters(backend, admin, u, notes), urls)
        finally:
            await session.close()
    delta = multi.sum_counters([_delta(b, a, notes) for b, a in zip(before, after, strict=True)]) if len(urls) > 1 \
        else _delta(before[0], after[0], notes)  # fmt: skip
    return _PointRun(results, delta, window, notes, client)


class _NoSampler:
    def start(self):
        return self

    def stop(self):
        return None


def _sampler_factory(interval_s: float):
    try:
        from dflashbench.telemetry import NvmlSampler
    except ImportError:
        return _NoSampler
    return functools.partial(NvmlSampler, interval_s=interval_s)


# -- progress and summary output -----------------------------------------------------------------------------------
@contextlib.contextmanager
def _point_progress(enabled: bool, label: str, total: int):
    """A rich progress bar over one point's requests while it runs, where stderr is a terminal; yields the
    function that advances it (a no-op otherwise: each point ends with one plain line either way)."""
    if not (enabled and sys.stderr.isatty()):
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:  # fmt: skip
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def point_line(p: PointSummary) -> str:
    if p.status == "failed":
        return f"FAILED: {p.failure_reason}"
    degraded = f"DEGRADED ({p.failure_reason}): " if p.status == "degraded" else ""
    line = (f"{degraded}{p.num_requests} requests, {p.num_errors} errors, {_fmt(p.throughput_tok_per_s)} tok/s, "
            f"{_fmt(p.per_user_tok_per_s_p50)} tok/s/user p50, TPOT p50 {_fmt(p.tpot_s_p50, 1e3)} ms, "
            f"tau {_fmt(p.tau, digits=2)}")  # fmt: skip
    problem = None if (p.extra or {}).get("load") else ramp_problem(p.steady_share, p.concurrency)  # open loop: no ramp
    return line + console_suffix(p) + (f"; {problem}: send more requests per stream" if problem else "")


def summary_table(points: list[PointSummary]):
    """A rich table of the "all" rows, narrow enough for an 80-column terminal: the error column only when
    there were errors, the per-GPU column only when more than one GPU served."""
    from rich import box
    from rich.table import Table

    show_err = any(p.num_errors or p.status != "ok" for p in points)
    show_gpu = any(p.num_gpus > 1 for p in points)
    show_repeat = any(p.repeat for p in points)  # sweep --repeats: "1 r2" = concurrency 1, round 2
    backends = ", ".join(sorted({p.backend for p in points}))
    table = Table(title=f"dflashbench sweep ({backends})", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                  collapse_padding=True)  # fmt: skip
    cols = {"method": "method", "workload": "workload", "conc": "conc", "req": "req", "err": "err",
            "tok/s": "tok/s", "gpu": "tok/s\n/gpu", "user": "user\ntok/s", "ttft": "TTFT\np50 ms",
            "tpot": "TPOT\np50 ms", "itl": "ITL\np50 ms", "tau": "tau"}  # fmt: skip
    keys = [k for k in cols if (k != "err" or show_err) and (k != "gpu" or show_gpu)]
    for k in keys:
        if k in ("method", "workload"):
            table.add_column(cols[k], justify="left", overflow="fold")
        else:
            table.add_column(cols[k], justify="right", no_wrap=True)
    for p in points:
        rate = ((p.extra or {}).get("load") or {}).get("request_rate")
        conc = f"{rate:g}/s" if rate is not None else str(p.concurrency)  # a rate point: its arrival rate
        cells = {"method": p.method, "workload": p.workload, "req": str(p.num_requests),
                 "conc": f"{conc} r{p.repeat}" if show_repeat else conc,
                 "err": str(p.num_errors), "tok/s": _fmt(p.throughput_tok_per_s),
                 "gpu": _fmt(p.throughput_tok_per_s_per_gpu), "user": _fmt(p.per_user_tok_per_s_p50),
                 "ttft": _fmt(p.ttft_s_p50, 1e3), "tpot": _fmt(p.tpot_s_p50, 1e3, 2),
                 "itl": _fmt(p.itl_s_p50, 1e3, 2), "tau": _fmt(p.tau, digits=2)}  # fmt: skip
        if p.status == "degraded":
            cells["err"] = f"[red]{p.num_errors} degraded[/red]"
        elif p.status != "ok":
            cells = {k: (cells[k] if k in ("method", "workload", "conc", "req", "err") else "") for k in keys}
            cells["tok/s"] = "[red]failed[/red]"
        table.add_row(*(cells[k] for k in keys))
    return table


# -- the sweep -------------------------------------------------------------------------------------------------------
@dataclass
class _Context:
    suite: Suite
    backend_name: str  # what points record: the engine (for --endpoint: its flavour)
    endpoint: str | None
    pair: ModelPair
    num_gpus: int
    grid: list[GridPoint]
    plan: dict[int, list[Request]]
    api_key: str | None
    endpoints: list[str] = field(default_factory=list)  # every replica when several (the first is endpoint)


def _prepare(cfg: SweepConfig) -> tuple[_Context, dict | None]:
    manifest = None
    suite, endpoint = cfg.suite, cfg.endpoint
    if cfg.resume is not None:
        manifest = read_manifest(cfg.resume)
        if "suite_config" not in manifest:
            raise UserError(f"{cfg.resume}/manifest.json has no suite_config: not a run dflashbench sweep can resume")
        suite = parse_suite(manifest["suite_config"], source=f"{cfg.resume}/manifest.json")
        endpoint = manifest.get("endpoint")
    urls = multi.normalize(manifest.get("endpoints") or [] if manifest is not None else cfg.endpoints)
    assert suite is not None
    if suite.backend == "endpoint" and not endpoint:
        raise UserError("backend endpoint benchmarks a running server: pass --endpoint URL")
    if endpoint and len(suite.methods) > 1:
        raise UserError(
            f"--endpoint benchmarks one running server, which serves one method, but the run asks for "
            f"{', '.join(m.value for m in suite.methods)}: pass --method with the server's method"
        )
    backend_name = suite.backend
    if endpoint:  # the running server has its own model and drafts: resolve only to name them
        pair = ModelPair(suite.model, dict(suite.drafts))
        with contextlib.suppress(UserError):  # tp is the running server's business: plan none
            suite, pair = pairing.resolve(suite.model_copy(update={"tp": suite.tp or 1}), methods_given=True)
    else:
        suite, pair = pairing.resolve(suite, methods_given=cfg.methods_given)
    api_key = api_key_from_env(cfg.api_key_env)
    if cfg.api_key_env and api_key is None:
        raise UserError(f"--api-key-env {cfg.api_key_env}: that environment variable is not set")
    if not endpoint:  # a launch that cannot be built is a configuration error: say so before anything runs
        backend = get_backend(backend_name)
        for method in suite.methods:
            backend.launch_plan(server_spec(suite, method, pair, port=8000))
    ctx = _Context(suite=suite, backend_name=backend_name, endpoint=endpoint, pair=pair,
                   num_gpus=num_gpus_for(suite, backend_name), grid=build_grid(suite, backend_name),
                   plan=load_plan(suite, dry_run=cfg.dry_run), api_key=api_key, endpoints=urls)  # fmt: skip
    return ctx, manifest


def dry_run(ctx: _Context, echo: Echo) -> None:
    """Print the exact server command(s) and the request plan; launch nothing."""
    from dflashbench.backends.process import free_port

    suite = ctx.suite
    echo(f"suite {suite.name} (version {suite.version}, {suite.source_file or 'built in'})")
    for note in suite.notes:
        echo(f"note: {note}")
    if ctx.endpoint:
        echo(f"server: the running server at {ctx.endpoint} (nothing is launched; counters read as {ctx.backend_name})")
    else:
        backend = get_backend(ctx.backend_name)
        for line in capacity_warnings(suite, ctx.pair, backend):
            echo(line)
        for method in suite.methods:
            plan = backend.launch_plan(server_spec(suite, method, ctx.pair, free_port()))
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env.items())
            echo(f"server for {method.value}: {(env + ' ') if env else ''}{shlex.join(plan.argv)}")
            for path, content in plan.files.items():
                echo(f"  writes {path} before launch:")
                echo("\n".join(f"    {line}" for line in content.splitlines()))
    if ctx.pair.extra_body():
        echo(f"every request also sends {json.dumps(ctx.pair.extra_body())} (the model registry's chat settings)")
    echo(f"methods: {', '.join(m.value for m in suite.methods)}; concurrency: {suite.concurrency}; "
         f"warm-up: {suite.warmup_requests} request(s) per point; temperature {suite.temperature}; "
         f"seed {suite.seed}; timeout {suite.timeout_s:g} s per request, {suite.ready_timeout_s:g} s for a launched server to be ready; at least {suite.requests_per_stream} "
         "requests per stream (a workload's prompts are reused where it has fewer)"
         + (f"; every point measured {suite.repeats} times, in rounds across methods (a server launched per "
            "method per round)" if suite.repeats > 1 else ""))  # fmt: skip
    echo(plan_line(suite))
    for i, spec in enumerate(suite.workloads):
        reqs = ctx.plan[i]
        if isinstance(reqs, str):  # not on disk: a dry run reads nothing from the network
            echo(f"workload {spec.label}: {reqs}")
            continue
        cats = Counter(r.category for r in reqs)
        turns = sum(1 + len(r.followup_turns) for r in reqs)
        echo(f"workload {spec.label}: {len(reqs)} requests ({turns} turns), max_tokens {spec.max_tokens}, "
             f"categories: {', '.join(f'{c} {n}' for c, n in sorted(cats.items()))}")  # fmt: skip
        for r in reqs:
            echo(f"  {r.id} [{r.category}] max_tokens={r.max_tokens}: {_preview(r.prompt_text)}")
    echo(f"{len(ctx.grid)} points:")
    for p in ctx.grid:
        echo(f"  {p.point_id}")


def _preview(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _manifest(ctx: _Context, cfg: SweepConfig) -> dict:
    suite = ctx.suite
    return {
        "status": "running",
        "created_at": now_iso(),
        "started_at": now_iso(),
        "finished_at": None,
        "suite": {"name": suite.name, "version": suite.version, "file": suite.source_file,
                  "description": suite.description},  # fmt: skip
        "suite_config": suite.model_dump(mode="json", exclude={"source_file"}),
        "backend": ctx.backend_name,
        "endpoint": ctx.endpoint,
        "endpoints": ctx.endpoints if len(ctx.endpoints) > 1 else None,
        "model": ctx.pair.target,
        "drafts": {m.value: d for m, d in ctx.pair.drafts.items()},
        "num_gpus": ctx.num_gpus,
        "api_key_env": cfg.api_key_env,
        "grid": [p.point_id for p in ctx.grid],
        "outputs": _outputs_policy(cfg.store_text),
        "servers": {},
        **environment(),
    }


def _redacting(echo: Echo) -> Echo:
    """``echo`` with every line passed through the redaction function first."""
    return lambda text: echo(redact_text(str(text)))


def _final_status(outcome: SweepOutcome) -> str:
    if any(p.status == "failed" for p in outcome.points):
        return "partial"
    return "degraded" if outcome.degraded else "complete"


def _stop_leftover_servers(manifest: dict, echo: Echo) -> None:
    """Stop servers an earlier sweep of this run launched and recorded, if they still run. The run directory's
    lock is held, so the sweep that launched them is gone: a server still running is an orphan (its supervisor
    could not stop it), holding GPU memory and a port."""
    from dflashbench.backends.process import stop_leftover

    for method, server in (manifest.get("servers") or {}).items():
        pid = server.get("pid") if isinstance(server, dict) else None
        if isinstance(pid, int) and stop_leftover(pid, server.get("pid_start_ticks")):
            echo(f"stopped the {method} server (PID {pid}) that an earlier sweep of this run launched and that "
                 "was still running")  # fmt: skip


def _store_failure(exc: BaseException) -> StoreWriteError | None:
    """The run-file write error inside ``exc`` (raised in a load-generator task, it arrives in an
    ExceptionGroup), if there is one."""
    if isinstance(exc, StoreWriteError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _store_failure(inner)
        if found is not None:
            return found
    return None


def _open_store(cfg: SweepConfig, ctx: _Context, echo: Echo) -> tuple[RunStore, set[str]]:
    """The run's store, locked, and the ids of its finished points: a new run directory, or the one resumed
    (leftover servers of its earlier sweep stopped, unfinished points' rows discarded)."""
    if cfg.resume is None:
        store = RunStore.create(cfg.out_dir, _manifest(ctx, cfg), run_id=cfg.run_id or new_run_id(ctx.suite.name))
        echo(f"run directory: {store.run_dir}")
        return store, set()
    store = RunStore.open(cfg.resume)  # locks the run directory: a second sweep on it stops here
    try:
        manifest = store.manifest  # read again under the lock
        _stop_leftover_servers(manifest, echo)
        finished = store.finished_point_ids()
        redo = [p.point_id for p in ctx.grid if p.point_id not in finished]
        dropped = store.discard_points(redo)
        history = list(manifest.get("resumes", []))
        env = environment()  # the resumed points may run on other software than the first ones
        history.append({"at": now_iso(), "points_to_run": redo, "rows_discarded": dropped,
                        **{k: env[k] for k in ("dflashbench_version", "git_sha", "git_dirty", "versions", "gpu")}})  # fmt: skip
        store.update_manifest(status="running", resumes=history, finished_at=None)
    except BaseException:
        store.close()
        raise
    echo(f"resuming {store.run_dir}: {len(finished)} point(s) done, {len(redo)} to run")
    return store, finished


def _close_store(store: RunStore, outcome: SweepOutcome, status: str, reason: str | None) -> StoreWriteError | None:
    """Record how the sweep ended in the manifest, close the files and release the lock; the error if the
    manifest could not be written (a full disk), which leaves it saying "running" (resumable all the same)."""
    try:
        store.update_manifest(status=status, status_reason=reason, finished_at=now_iso(),
                              failed_points=[p.point_id for p in outcome.points if p.status == "failed"],
                              degraded_points=[p.point_id for p in outcome.degraded])  # fmt: skip
    except StoreWriteError as exc:
        return exc
    finally:
        store.close()
    return None


def run_sweep(cfg: SweepConfig, echo: Echo = print) -> SweepOutcome:
    """Run (or resume, or dry-run) a sweep; returns the run directory and the "all" rows it wrote."""
    echo = _redacting(echo)
    ctx, _ = _prepare(cfg)
    if cfg.dry_run:
        dry_run(ctx, echo)
        return SweepOutcome(run_dir=None)
    served = check_endpoint(ctx.endpoint, ctx.api_key) if ctx.endpoint else None  # before anything is written
    for url in ctx.endpoints[1:]:  # every replica answers, before anything is written
        check_endpoint(url, ctx.api_key)
    for line in [*(f"note: {n}" for n in ctx.suite.notes),
                 *([] if ctx.endpoint else capacity_warnings(ctx.suite, ctx.pair, get_backend(ctx.backend_name)))]:
        echo(line)

    store, finished = _open_store(cfg, ctx, echo)
    outcome = SweepOutcome(run_dir=store.run_dir)
    status, reason = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
    write_error: StoreWriteError | None = None
    try:
        for repeat in range(ctx.suite.repeats):  # a round runs every method before the next round starts
            for method in ctx.suite.methods:
                todo = [p for p in ctx.grid
                        if p.method is method and p.repeat == repeat and p.point_id not in finished]  # fmt: skip
                if todo:
                    _run_method(ctx, cfg, store, method, todo, served, outcome, echo)
        status, reason = _final_status(outcome), None
    except StoreWriteError as exc:
        write_error = exc
        status, reason = "interrupted", str(exc)
    except Exception as exc:
        status, reason = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        manifest_error = _close_store(store, outcome, status, reason)
    if write_error or manifest_error:  # one line: what could not be written, why, and what is kept
        note = " (manifest.json could not be updated either and still says running; --resume works all the " \
               "same)" if write_error and manifest_error else ""  # fmt: skip
        raise StoreWriteError(f"{write_error or manifest_error}; the sweep stopped{note}. Everything finished "
                              f"before is kept: free space, then dflashbench sweep --resume {store.run_dir}")  # fmt: skip

    if outcome.points:
        from rich.console import Console

        console = Console()
        if not console.is_terminal:  # logs and CI: no terminal width to fit, keep the columns readable
            console = Console(width=160)
        console.print(summary_table(outcome.points))
        if ctx.suite.repeats > 1:
            _print_repeats(store.run_dir, echo)
    if cfg.report:
        outcome.report = _write_report(store.run_dir, echo)
    return outcome


def _print_repeats(run_dir: Path, echo: Echo) -> None:
    """Each point's mean and interval over its repeats (earlier sweeps of a resumed run included)."""
    from dflashbench.repeats import summary_lines
    from dflashbench.store import load_run

    run = load_run(run_dir)
    for line in summary_lines(run.repeat_points if run.repeat_points is not None else run.points):
        echo(line)


def report_path(run_dir: Path) -> Path:
    """Where a sweep writes its report: the run's own ``-o`` folder decides. The repository's layout puts
    ``reports/`` beside ``results/`` (``results/<run-id>`` -> ``reports/<run-id>.html``); any other ``-o`` keeps
    its report inside (``-o out/base`` -> ``out/base/reports/<run-id>.html``), so a sweep writes nothing outside
    the folder it was given (``-o .`` or ``-o /data`` would otherwise reach ``../reports`` or ``/reports``)."""
    out = run_dir.parent
    if out.resolve().name == "results" and out.resolve() != Path.cwd().resolve():
        return out.parent / "reports" / f"{run_dir.name}.html"
    return out / "reports" / f"{run_dir.name}.html"


def _write_report(run_dir: Path, echo: Echo) -> Path | None:
    """The HTML report at :func:`report_path`."""
    try:
        from dflashbench.report import write_report
    except ImportError:
        echo("report: dflashbench.report is not available in this installation; skipped")
        return None
    try:
        path = write_report([run_dir], out=report_path(run_dir))
    except (UserError, OSError) as exc:
        echo(f"report not written: {exc}")
        return None
    echo(f"report written to {path}")
    return path


def _run_method(ctx: _Context, cfg: SweepConfig, store: RunStore, method: Method, todo: list[GridPoint],
                served: list[str] | None, outcome: SweepOutcome, echo: Echo) -> None:  # fmt: skip
    from dflashbench.backends.process import ServerProcess, ServerStartError, free_port

    suite = ctx.suite
    with contextlib.ExitStack() as stack:
        server = None
        if ctx.endpoint:
            from dflashbench.backends.endpoint import EndpointBackend

            backend = EndpointBackend(ctx.backend_name)
            base_url = ctx.endpoint.rstrip("/")
        else:
            backend = get_backend(ctx.backend_name)
            spec = server_spec(suite, method, ctx.pair, free_port())
            plan = backend.launch_plan(spec)
            servers = dict(store.manifest.get("servers") or {})
            servers[method.value] = {"argv": list(plan.argv), "env": plan.env, "port": spec.port}
            store.update_manifest(servers=servers)
            base_url = spec.base_url
            log = store.server_log_path(ctx.backend_name, method.value)
            server = stack.enter_context(ServerProcess(plan, log, name=f"{ctx.backend_name} {method.value} server"))
            # what identifies it to a later --resume, should it outlive this sweep
            servers[method.value].update(pid=server.pid, pid_start_ticks=server.start_ticks())
            store.update_manifest(servers=servers)
            try:
                server.wait_ready(base_url + backend.health_path(), timeout_s=cfg.ready_timeout_s or suite.ready_timeout_s, progress=cfg.progress,
                                  echo=echo)  # fmt: skip
            except ServerStartError as exc:
                for point in todo:
                    _record_failure(ctx, store, point, [], None, f"server did not start: {exc}", outcome, echo)
                return
            try:
                served = check_endpoint(base_url, ctx.api_key)
            except UserError as exc:
                served = []
                echo(f"note: {exc}")
        store_text = cfg.store_text and (store.manifest.get("outputs") or {}).get("store_text", True) is not False
        lg = LoadGenConfig(base_url=base_url, model=pick_model_name(served or [], ctx.pair.target),
                           temperature=suite.temperature, timeout_s=suite.timeout_s, api_key=ctx.api_key,
                           store_text=store_text, extra_body={**_token_ids_body(ctx.backend_name, store_text),
                                                              **ctx.pair.extra_body()})  # fmt: skip
        for point in todo:
            _one_point(ctx, store, point, backend, base_url, lg, server, outcome, echo, cfg.progress)


def _outputs_policy(store_text: bool) -> dict:
    """What requests.jsonl keeps of each output (the manifest's ``outputs``; ``--resume`` honours it)."""
    from dflashbench.quality import TEXT_CAP_CHARS, TOKEN_CAP

    if not store_text:
        return {"store_text": False, "note": "--no-store-text: no output text, hash or token ids kept; only grades"}
    return {"store_text": True, "text_cap_chars": TEXT_CAP_CHARS, "token_cap": TOKEN_CAP}


def _token_ids_body(backend_name: str, store_text: bool) -> dict:
    """``return_token_ids``, for servers known to accept it (vLLM >= 0.10.2 streams each chunk's token ids;
    older vLLM ignores the key; the reference server implements it). Other engines may refuse unknown keys."""
    return {"return_token_ids": True} if store_text and backend_name in ("vllm", "reference") else {}


def _one_point(ctx: _Context, store: RunStore, point: GridPoint, backend, base_url: str, lg: LoadGenConfig,
               server, outcome: SweepOutcome, echo: Echo, progress: bool) -> None:  # fmt: skip
    index = ctx.grid.index(point) + 1
    load = f"rate={point.request_rate:g}/s" if point.request_rate is not None else f"c={point.concurrency}"
    label = f"[{index}/{len(ctx.grid)}] {ctx.backend_name} {point.method.value} {point.workload.label} {load}"
    if ctx.suite.repeats > 1:
        label += f" repeat {point.repeat + 1}/{ctx.suite.repeats}"
    workload_index = ctx.suite.workloads.index(point.workload)
    requests = fill_streams(ctx.plan[workload_index], max(point.concurrency, 1), ctx.suite.requests_per_stream)
    if server is not None and not server.is_running():
        reason = f"not run: the server had exited (exit status {server.returncode}) during an earlier point; its log: {server.log_path}"
        _record_failure(ctx, store, point, [], None, reason, outcome, echo, label)
        return
    warmups = warmup_requests(requests, ctx.suite.warmup_requests)
    total = sum(1 + len(r.followup_turns) for r in requests)
    try:
        with _point_progress(progress, label, total) as advance:
            def on_result(r: RequestResult) -> None:
                store.append_request(dataclasses.replace(r, repeat=point.repeat) if point.repeat else r)
                if not r.warmup:
                    advance()

            run = asyncio.run(_run_point(point, requests, warmups, lg, backend, base_url, store.run_id, on_result,
                                         _sampler_factory(ctx.suite.telemetry_interval_s), ctx.suite,
                                         ctx.endpoints or [base_url]))  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - one broken point must not lose the sweep
        if (write_error := _store_failure(exc)) is not None:
            raise write_error from None  # a full disk loses every later point too: stop the sweep
        _record_failure(ctx, store, point, [], None, f"{type(exc).__name__}: {exc}", outcome, echo, label)
        return
    measured = [r for r in run.results if not r.warmup]
    reason = None
    if server is not None and _server_ended(server, measured):
        reason = _server_gone(server)
    elif server is None and any(not r.ok for r in measured) and not _answers(base_url, lg.api_key):
        reason = f"the server at {base_url} stopped answering during the point"
    elif measured and not any(r.ok for r in measured):
        reason = f"every request failed; first error: {measured[0].error}"
    if reason:
        _record_failure(ctx, store, point, run.results, run.delta, reason, outcome, echo, label)
        return
    for sample in getattr(run.telemetry, "samples", None) or []:
        store.append_telemetry({"point_id": point.point_id, **sample})
    rows = _summaries(ctx, store, point, run.results, run.delta, run.telemetry, run.notes, run.client)
    degraded = degraded_reason(measured, ctx.suite.max_error_rate)
    if degraded:
        rows = [dataclasses.replace(r, status="degraded", failure_reason=degraded) for r in rows]
    for row in rows:
        store.append_point(row)
    outcome.points.append(rows[0])
    echo(f"{label}: {point_line(rows[0])}")


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


def _summaries(ctx: _Context, store: RunStore, point: GridPoint, results: list[RequestResult],
               delta: AcceptCounters | None, window, notes: list[str], client: dict | None = None
               ) -> list[PointSummary]:  # fmt: skip
    kw = dict(run_id=store.run_id, point_id=point.point_id, backend=ctx.backend_name, method=point.method.value,
              model=ctx.pair.target, draft=ctx.pair.drafts.get(point.method) if point.method is not Method.AR else None,
              workload=point.workload.label, concurrency=point.concurrency, num_gpus=ctx.num_gpus)  # fmt: skip
    extra: dict[str, Any] = {"notes": notes} if notes else {}
    if ctx.endpoint:
        extra["endpoint"] = ctx.endpoint
    if window is not None and getattr(window, "reason", None):
        extra["telemetry"] = window.reason
    elif getattr(window, "energy_j", None) is not None:  # the two energy figures side by side: a cross-check
        extra["energy"] = {"energy_j": window.energy_j, "source": window.energy_source,
                           "power_integral_j": window.energy_j_power_integral, "window_s": window.duration_s,
                           "samples": len(window.samples), "interval_s": window.interval_s}  # fmt: skip
    estimated = sum(r.chunk_tokens_estimated for r in results if not r.warmup)
    if estimated:
        extra["chunk_tokens_estimated_requests"] = estimated
    energy = dict(energy_j=getattr(window, "energy_j", None), mean_power_w=getattr(window, "mean_power_w", None),
                  gpu_util_pct_mean=getattr(window, "gpu_util_pct_mean", None))  # fmt: skip
    extra.update(load_extra(point_load(ctx.suite, point.concurrency, point.request_rate), results, client,
                            ctx.suite.goodput, ctx.endpoints))  # fmt: skip
    steady = steady_figures(results, point.concurrency) if point.request_rate is None else None
    if point.request_rate is None:  # an open loop has no "all streams busy" window
        extra["steady"] = steady.to_dict() if steady else None
    rows = [dataclasses.replace(
        metrics.summarize_point(results, delta, category="all", extra=extra, **energy, **kw),
        steady_throughput_tok_per_s=steady.throughput_tok_per_s if steady else None,
        steady_share=steady.share if steady else None)]  # fmt: skip
    categories = sorted({r.category for r in results if not r.warmup})
    if len(categories) > 1:
        rows += [metrics.summarize_point(results, delta, category=c, extra=category_extra(extra, results, c, ctx.suite.goodput),
                                         **kw) for c in categories]  # fmt: skip
    return [dataclasses.replace(r, repeat=point.repeat) for r in rows] if point.repeat else rows


def _record_failure(ctx: _Context, store: RunStore, point: GridPoint, results: list[RequestResult],
                    delta: AcceptCounters | None, reason: str, outcome: SweepOutcome, echo: Echo,
                    label: str | None = None) -> None:  # fmt: skip
    row = _summaries(ctx, store, point, results, delta, None, [])[0]
    row = dataclasses.replace(row, status="failed", failure_reason=reason)
    store.append_point(row)
    outcome.points.append(row)
    echo(f"{label or point.point_id}: {point_line(row)}")


def _server_gone(server) -> str:
    code = server.returncode
    tail = server.log_tail(10)
    shown = f"; last lines of {server.log_path}:\n{tail}" if tail else ""
    return f"the server exited during the point (exit status {code}){shown}"
