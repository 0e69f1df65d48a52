"""The main job: run a suite's grid and record everything as it happens.

Grid order (:mod:`dflashbench.plan.grid`): repeat round x method (one server launch each, on the suite's backend) x
workload x concurrency (then request rates). Each point's work, from the cache reset to its summary rows, is
:mod:`dflashbench.run.point`'s; the run's books (manifest, resume, how it ended) are :mod:`dflashbench.run.run_books`'s;
what is printed is :mod:`dflashbench.run.sweep_console`'s. A point that fails is written as failed and the sweep goes
on; ``--resume RUN_DIR`` runs again exactly the points that are not ``ok``.

The run directory is locked for the sweep's life (:mod:`dflashbench.run.runlock`); a run file that cannot be
written (disk full) stops the sweep with one line naming the file and the error, the manifest marked
``interrupted`` where it still can be, and everything written so far resumable. Every line printed passes
the redaction function (:mod:`dflashbench.redact`), like every file written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dflashbench.backends import gates, get_backend
from dflashbench.backends.endpoint import (
    EndpointBackend,
    ModelNotServed,
    check_endpoint,
    pick_model_name,
    replicas_model,
    served_context_tokens,
)
from dflashbench.errors import Interrupted, UserError
from dflashbench.load import endpoints as multi
from dflashbench.load.loadgen import API_KEY_ENVS, api_key_from_env
from dflashbench.measure import drift
from dflashbench.model_files import check_access
from dflashbench.plan import pairing
from dflashbench.plan.cpus import available_cpus, ignored_note, pinned, plan_partition
from dflashbench.plan.gpus import resolve_plan
from dflashbench.plan.grid import (
    GridPoint,
    SweepContext,
    build_grid,
    launch_on_free_port,
    load_plan,
    num_gpus_for,
    plan_server_launches,
)
from dflashbench.plan.models import ENGINES
from dflashbench.plan.pairing import ModelPair, capacity_warnings, draft_warnings
from dflashbench.plan.placement import CLOCK_WHY, Placement, plan_placement
from dflashbench.plan.preflight import preflight
from dflashbench.plan.suite_overrides import apply_overrides
from dflashbench.plan.suites import Suite, parse_suite
from dflashbench.plan.trace_plan import Served, plan_traces
from dflashbench.redact import REDACTED, redact_text, remember_secret, remember_url
from dflashbench.run import capacity, launch_checks, tie_probe
from dflashbench.run.budget import Pacer, apply_budget, budget_seconds
from dflashbench.run.engine_quiet import launched_groups
from dflashbench.run.manifest import Manifest, ServerRecord, verifier_record
from dflashbench.run.point import ServerTarget, loadgen_config, measure_point, record_failure
from dflashbench.run.probe import SpeedProbe
from dflashbench.run.run_books import (
    close_store,
    create_store,
    final_status,
    interrupted_reason,
    new_manifest,
    reopen_store,
    stop_on_signals,
)
from dflashbench.run.store import RunStore, StoreWriteError, load_manifest, read_probes
from dflashbench.run.sweep_console import print_dry_run, print_repeats, redacting, summary_table
from dflashbench.types import Method, PointSummary

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
    ready_timeout_s: float | None = None  # the server's readiness; None: the suite's ready_timeout_s
    run_id: str | None = None
    methods_given: bool = False  # --method named them: a method without a draft is an error, not dropped
    store_text: bool = True  # keep each output's text in requests.jsonl (--no-store-text)
    endpoints: tuple[str, ...] = ()  # --endpoint given more than once: every replica (endpoint is the first)
    verbose: bool = False  # a dry run lists every point id and request
    assume_user_tok_per_s: tuple[float, float] | None = None  # a dry run's duration estimate at this rate (range)
    resume_changes: dict = field(default_factory=dict)  # suite keys --resume may change (suite_overrides.RESUMABLE)
    gpu: str | None = None  # --gpu NAME: the GPUs a dry run plans for (dflashbench.plan.gpus)
    model_given: bool = True  # --model or a suite named the target: an --endpoint must serve it (pick_model_name)
    unlisted_model: bool = False  # --unlisted-model: send the model's name although /v1/models does not list it
    labels: tuple[tuple[str, str], ...] = ()  # --label KEY=VALUE: recorded in the manifest (history --by commit)
    flagged_draft_lengths: frozenset = frozenset()  # the methods --num-draft-tokens set (plan.draft_lengths)
    show_commands: bool = False  # a dry run prints each server's command on one line with its environment


@dataclass
class SweepOutcome:
    run_dir: Path | None
    points: list[PointSummary] = field(default_factory=list)  # "all" rows of this invocation

    @property
    def failed(self) -> list[PointSummary]:
        """Points not ``ok``: failed, or degraded (too many failed requests); ``--resume`` runs them again."""
        return [p for p in self.points if p.status != "ok"]

    @property
    def degraded(self) -> list[PointSummary]:
        return [p for p in self.points if p.status == "degraded"]


# -- resolving the configuration ------------------------------------------------------------------------------
def prepare(cfg: SweepConfig) -> SweepContext:
    """The sweep's configuration resolved: suite (or the resumed run's), model pair, launches, grid, requests."""
    manifest = None
    suite, endpoint = cfg.suite, cfg.endpoint
    if cfg.resume is not None:
        manifest = load_manifest(cfg.resume)
        if manifest.suite_config is None:
            raise UserError(f"{cfg.resume}/manifest.json has no suite_config: not a run dflashbench sweep can resume")
        suite = parse_suite(manifest.suite_config, source=f"{cfg.resume}/manifest.json")
        if cfg.resume_changes:  # operational limits only (the command line checked which)
            suite = apply_overrides(suite, **cfg.resume_changes)
        urls = resumed_endpoints(manifest, cfg.endpoints, cfg.resume)
    else:
        urls = multi.normalize(cfg.endpoints or ([endpoint] if endpoint else []))
    endpoint = urls[0] if urls else None
    api_key = api_key_from_env(cfg.api_key_env)
    remember_secret(api_key)  # from now on redacted literally, in whatever form a server echoes it
    for url in urls:
        remember_url(url)
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
        gpus = resolve_plan(cfg.gpu, cfg.dry_run)
        if cfg.gpu is not None and backend_name not in ENGINES:  # said, not silently dropped (issue #63)
            suite = suite.model_copy(update={"notes": [*suite.notes, (
                f"--gpu {cfg.gpu} is ignored: the {backend_name} backend serves on this machine's own devices, with "
                "no memory plan and no GPU placement; --gpu plans an engine backend (--backend vllm, sglang, trtllm)")]})
        suite, pair = pairing.resolve(suite, methods_given=cfg.methods_given, gpus=gpus)
        if backend_name in ENGINES:  # the engine's own files: the block size it will use, the drafter's layers
            if not cfg.dry_run:  # before any server starts: the token can read every gated repository
                check_access(pairing.hub_repos(pair))
            pair, file_notes = pairing.read_own_files(pair, network=not cfg.dry_run)
            suite = suite.model_copy(update={"notes": [*suite.notes, *file_notes]})
    if cfg.api_key_env and api_key is None:
        raise UserError(f"--api-key-env {cfg.api_key_env}: that environment variable is not set")
    backend = None if endpoint else get_backend(backend_name)
    on_cpu = bool(getattr(backend, "computes_on_cpu", False))
    cpus = plan_partition(suite.engine_cpus, available_cpus(), launches=backend is not None, engine_on_cpu=on_cpu,
                          methods=[m.value for m in suite.methods])  # fmt: skip
    if (note := ignored_note(suite.engine_cpus, launches=backend is not None)) and note not in suite.notes:
        suite = suite.model_copy(update={"notes": [*suite.notes, note]})
    plan = load_plan(suite, dry_run=cfg.dry_run)
    num_gpus = num_gpus_for(suite, backend_name, on_cpu)
    suite, traces = _traces(suite, pair.target, plan, endpoint, api_key, cfg.dry_run)
    placement = place_sweep(suite, backend_name, pair, plan, traces, cpus, launches=backend is not None,
                            on_gpu=num_gpus > 0, dry_run=cfg.dry_run, assume_rate=cfg.assume_user_tok_per_s)  # fmt: skip
    servers = {} if backend is None else plan_server_launches(suite, pair, backend, cpus, placement)
    launches = {Method.parse(name): launch for name, launch in servers.items() if "#" not in name}  # arms by name
    return SweepContext(suite=suite, backend_name=backend_name, endpoint=endpoint, pair=pair, num_gpus=num_gpus,
                        flagged_draft_lengths=cfg.flagged_draft_lengths,
                        grid=build_grid(suite, backend_name, launches, interleave=placement.together), plan=plan,
                        api_key=api_key, endpoints=urls, launches=launches, cpus=cpus, interleave=placement.together,
                        traces=traces, placement=placement, server_launches=servers)  # fmt: skip


def _traces(suite: Suite, target: str, plan: dict, endpoint: str | None, api_key: str | None, dry_run: bool):
    """The suite's trace replay planned (:func:`plan_traces`), and the suite with the notes it made. Against a running
    server, the context is what the server says and the Hub is asked briefly, if at all (:class:`Served`)."""
    served = None
    if endpoint:
        served = Served(served_context_tokens(endpoint, api_key, target) if suite.trace and not dry_run else None)
    traces, notes = plan_traces(suite, target, plan, dry_run, served)
    return (suite.model_copy(update={"notes": [*suite.notes, *notes]}) if notes else suite), traces


def place_sweep(suite: Suite, backend_name: str, pair: ModelPair, plan, traces, cpus, *, launches: bool,
                on_gpu: bool, dry_run: bool, assume_rate) -> Placement:  # fmt: skip
    """Where each server runs (dflashbench.plan.placement), its replicas given to the methods whose points take
    longest at the planned rates (dflashbench.plan.pace; equal where no rate is known)."""
    from dflashbench.plan.pace import method_rates
    from dflashbench.plan.wall_time import method_seconds
    from dflashbench.run.sweep_console import trace_sizes, workload_sizes_of

    rates = method_rates(pair, suite, backend_name, assume_rate) if launches and on_gpu else None
    weights = None
    grid = build_grid(suite, backend_name)
    if rates is not None:
        weights = method_seconds(grid, workload_sizes_of(suite, plan), suite, trace_sizes(traces), rates)
    # a rate or trace point keeps its clock: never in turns (dflashbench.plan.placement.keep_clock)
    return plan_placement(list(suite.methods), suite.interleave, launches=launches, on_gpu=on_gpu,
                          tp=method_tps(suite, pair), gpu=pair.gpu, dry_run=dry_run, cpus=cpus, weights=weights,
                          closed_loop=any(p.closed_loop for p in grid),
                          open_loop=any(not p.closed_loop for p in grid), cluster=suite.cluster.kind,
                          nodes={m: pair.memory.nodes for m in suite.methods} if pair.memory else None)  # fmt: skip


def method_tps(suite: Suite, pair: ModelPair) -> dict:
    """Each method's tp: the memory plan's (its record, per method), else the suite's."""
    servers = pair.memory.record().get("servers", {}) if pair.memory is not None else {}
    return {m: int(servers.get(m.value, {}).get("tp") or suite.tp or 1) for m in suite.methods}


def _dry_run(ctx: SweepContext, cfg: SweepConfig, echo: Echo) -> SweepOutcome:
    """The plan printed; a plan that cannot run ends its dry run with the refusal and its fix."""
    if (line := apply_budget(ctx, cfg.assume_user_tok_per_s)) is not None:
        echo(line)
    print_dry_run(ctx, echo, verbose=cfg.verbose, assume_rate=cfg.assume_user_tok_per_s,
                  show_commands=cfg.show_commands)  # fmt: skip
    from dflashbench.run.launching import dry_run_lines

    # on a cluster: each server's nodes and commands, and the scripts or manifests, written for the scheduler
    folder = cfg.out_dir / f"{ctx.suite.name}-dry-run" if ctx.suite.cluster.kind != "local" else None
    for line in dry_run_lines(ctx, folder):
        echo(line)
    preflight(ctx.pair.memory)
    return SweepOutcome(run_dir=None)


def _preflight(ctx: SweepContext, echo: Echo) -> None:
    """Before any server starts: the memory plan (dflashbench.plan.preflight), then the installed engine's version
    gates (dflashbench.backends.gates); either refuses with its fix. Nothing for a server someone else runs."""
    if ctx.endpoint:
        return
    preflight(ctx.pair.memory)
    if ctx.pair.memory is not None and ctx.pair.memory.at_risk:  # runs, said: the launch reads the real capacity
        echo(f"note: memory plan at risk: {ctx.pair.memory.risk}")
    if note := gates.check(ctx.backend_name, {m: launch.spec for m, launch in ctx.launches.items()}):
        echo(f"note: {note}")


def resumed_endpoints(manifest: Manifest, given: Sequence[str], run: Path) -> list[str]:
    """The endpoints a resumed run sends to: its own, or the same ones given again with their credentials (the
    manifest keeps ``http://***@host``, never the password)."""
    recorded = manifest.endpoints or ([manifest.endpoint] if manifest.endpoint else [])
    if not given:
        hidden = [u for u in recorded if f"{REDACTED}@" in u]
        if hidden:
            raise UserError(f"{run} sent to {hidden[0]}, whose credentials the manifest does not keep: give the URL "
                            f"again with them, dflashbench sweep --resume {run} --endpoint URL")  # fmt: skip
        return list(recorded)
    urls = multi.normalize(given)
    if [redact_text(u) for u in urls] != recorded:
        raise UserError(f"--endpoint with --resume gives the run's own endpoint(s) again, with their credentials: "
                        f"{', '.join(recorded) or 'this run launched its servers'}")  # fmt: skip
    return urls


# -- the sweep -------------------------------------------------------------------------------------------------------
@stop_on_signals()  # SIGTERM and Ctrl-C stop every kind of sweep the same way, its books closed
def run_sweep(cfg: SweepConfig, echo: Echo = print) -> SweepOutcome:
    """Run (or resume, or dry-run) a sweep; returns the run directory and the "all" rows it wrote."""
    echo = redacting(echo)
    ctx = prepare(cfg)
    if cfg.dry_run:
        return _dry_run(ctx, cfg, echo)
    if cfg.resume is None and (line := apply_budget(ctx, cfg.assume_user_tok_per_s)) is not None:
        echo(line)  # a resumed run keeps the precision its manifest's suite holds
    _preflight(ctx, echo)
    sent, model_notes = check_before_writing(ctx, cfg)
    for line in [*(f"note: {n}" for n in [*ctx.suite.notes, *model_notes]), *_credentials_note(ctx, cfg.api_key_env),
                 *([] if ctx.endpoint else [*draft_warnings(ctx.suite),
                                            *capacity_warnings(ctx.suite, ctx.pair, get_backend(ctx.backend_name))])]:
        echo(line)

    if cfg.resume is None:
        manifest = {**new_manifest(ctx, api_key_env=cfg.api_key_env, store_text=cfg.store_text),
                    "memory_plan": ctx.pair.memory.record() if ctx.pair.memory is not None else None,
                    "labels": dict(cfg.labels),
                    **({"model_sent": sent, "model_unlisted": cfg.unlisted_model} if sent else {})}  # fmt: skip
        store, finished = create_store(ctx, manifest, out_dir=cfg.out_dir, run_id=cfg.run_id, echo=echo), set()
    else:
        store, finished = reopen_store(ctx, cfg.resume, echo, store_text=cfg.store_text)
    outcome = SweepOutcome(run_dir=store.run_dir)
    status, reason = "interrupted", "interrupted"
    write_error: StoreWriteError | None = None
    if ctx.cpus is not None and ctx.cpus.split:
        echo(f"cpus: {ctx.cpus.describe()}")
    try:
        _measure(ctx, cfg, store, finished, sent, outcome, echo)
        tie_probe.probe(ctx, store, echo, launch=True, ready_timeout_s=cfg.ready_timeout_s)  # divergences left
        status, reason = final_status(outcome.points), None
    except StoreWriteError as exc:
        write_error = exc
        status, reason = "interrupted", str(exc)
    except Interrupted as exc:  # SIGTERM or Ctrl-C: the books say so, and the user is told how to go on
        reason = interrupted_reason(exc)
        exc.message = (f"interrupted by {exc.signal_name}: {len(outcome.points)} point(s) finished in this sweep are "
                       f"kept, the one in flight is not; finish the run with: dflashbench sweep --resume "
                       f"{store.run_dir}")  # fmt: skip
        raise
    except Exception as exc:
        status, reason = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        manifest_error = close_store(store, outcome.points, status, reason)
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
            print_repeats(store.run_dir, echo)
    return outcome


def _measure(ctx: SweepContext, cfg: SweepConfig, store: RunStore, finished: set[str], sent: str | None,
             outcome: SweepOutcome, echo: Echo) -> None:  # fmt: skip
    """The points, with the speed probe read at the start, before each point and at the end, and its summary
    written to the manifest (a resumed run's summary covers every sitting's readings)."""
    if cfg.resume is None:
        store.update_manifest(interleaved=ctx.interleave,
                              placement=ctx.placement.record() if ctx.placement is not None else None)  # fmt: skip
    else:  # the common capacity a first sitting's servers reported still caps the servers of this one
        ctx.capacity.update(getattr(store.manifest, "capacity", None) or {})
    split = ctx.cpus is not None and ctx.cpus.split
    # the engines' own idle spin is waited out where the probe shares their CPUs (a CPU engine: vLLM's CPU build);
    # a GPU engine's host threads may poll for good, beside a probe that has the other cores (engine_quiet)
    engines = (lambda: launched_groups(store.manifest.servers)) if split and not ctx.endpoint else None
    probe = SpeedProbe(store.append_probe, cpus=ctx.cpus.engine if split else None,
                       gpu=not ctx.endpoint and ctx.num_gpus > 0, engines=engines)  # fmt: skip
    pacer = Pacer(ctx, [p for p in ctx.grid if p.point_id not in finished], budget_seconds(ctx.suite))
    with pinned(ctx.cpus.client_mask if ctx.cpus is not None else None):
        probe.read("start")
        _run_rounds(ctx, cfg, store, finished, sent, outcome, echo, probe, pacer)
        probe.read("end")
    store.update_manifest(probe=drift.summary(read_probes(store.run_dir)) or None)


def _run_rounds(ctx: SweepContext, cfg: SweepConfig, store: RunStore, finished: set[str],
                sent: str | None, outcome: SweepOutcome, echo: Echo, probe: SpeedProbe,
                pacer: Pacer | None = None) -> None:  # fmt: skip
    """Every point not yet finished, round by round (a round runs every method before the next starts), in grid
    order, as placed (dflashbench.plan.placement): side by side, every server up and each load's points started
    together; in turn, every server up and each load's points sent wave by wave; point by point, every server up
    and the points one after another; else one method's server at a time. ``sent``: the model name an
    ``--endpoint``'s requests carry."""
    mode = ctx.placement.mode if ctx.placement is not None else ("point" if ctx.interleave else "off")
    if ctx.placement is not None and ctx.placement.why == CLOCK_WHY:  # placed point by point for their clock
        echo(f"note: {CLOCK_WHY}")
    for repeat in range(ctx.suite.repeats):
        todo = [p for p in ctx.grid if p.repeat == repeat and p.point_id not in finished]
        if not todo:
            continue
        if mode in ("side", "turns"):
            # in stages (the GPUs hold some servers at once, not all), each stage's servers up in turn, the stage of
            # the plan's tightest server first (run.capacity)
            stages = ctx.placement.in_stages(capacity.launch_order(ctx)) if ctx.placement else [()]
            for i, stage in enumerate(stages):
                points = [p for p in todo if not stage or p.method in stage]
                if points:  # the interference probe beside the first stage's servers only
                    _run_together(ctx, cfg, store, points, repeat, sent, outcome, echo, probe, pacer, i == 0)
            continue
        order = capacity.launch_order(ctx)  # the tightest server first: its real capacity caps the others
        groups = [todo] if mode == "point" else [[p for p in todo if p.method is m] for m in order]
        for group in groups:
            if group:
                _run_points(ctx, cfg, store, group, sent, outcome, echo, probe, pacer, mode)


def _run_together(ctx: SweepContext, cfg: SweepConfig, store: RunStore, todo: list[GridPoint], repeat: int,
                  sent: str | None, outcome: SweepOutcome, echo: Echo, probe: SpeedProbe,
                  pacer: Pacer | None, first_stage: bool = True) -> None:  # fmt: skip
    """One round side by side or in turn: every server of the round's placement up (side by side, moved over the
    GPU sets from round to round), then each load's points together (dflashbench.run.side, dflashbench.run.turns)."""
    from dflashbench.plan.grid import server_launch
    from dflashbench.run import side

    assert ctx.placement is not None
    placement = ctx.placement.for_round(repeat)
    backend = get_backend(ctx.backend_name)
    with contextlib.ExitStack() as stack:
        targets: dict[str, ServerTarget] = {}
        failed: dict[Method, str] = {}
        order = capacity.launch_order(ctx)  # the tightest first: its real capacity caps the others (run.capacity)
        wanted = sorted((s for s in placement.servers if any(p.method is s.method for p in todo)),
                        key=lambda s: (order.index(s.method), s.replica))  # fmt: skip
        # the tightest server alone and ready first where a plan caps the others to it; then the rest load at once
        batches = [wanted[:1], wanted[1:]] if ctx.pair.memory is not None else [wanted]
        for batch in batches:
            waits = []
            for server in batch:
                planned = ctx.server_launches.get(server.name)
                launch = planned if repeat == 0 or planned is None else \
                    server_launch(ctx.suite, ctx.pair, backend, server, ctx.cpus, port=planned.spec.port)  # fmt: skip
                waits.append((server, _launch_server(ctx, cfg, store, server.method, launch, sent, stack, echo,
                                                     server.name, server.gpus)))  # fmt: skip
            for server, ready in waits:
                target = ready()
                if isinstance(target, str):
                    failed[server.method] = target
                else:
                    targets[server.name] = target
        stack.push(tie_probe.when_done(ctx, store, echo, targets.get("ar")))  # on AR's server, before it stops
        up = {t.name.split("#")[0] for t in targets.values()}
        for method, reason in failed.items():  # a method with no server up: its points fail; a replica's loss is said
            if method.value in up:
                echo(f"note: a {method.value} replica did not start ({reason}); its other server(s) take its points")
            else:
                outcome.points += [record_failure(ctx, store, p, [], None, reason, echo) for p in todo if p.method is method]
        todo = [p for p in todo if p.method.value in up]
        if placement.mode == "side" and repeat == 0 and cfg.resume is None and len(targets) > 1 and first_stage:
            placement = _interference(ctx, store, targets, placement, echo)

        def before_cell(cell: list[GridPoint]) -> None:
            probe.read(drift.before_tag([p.point_id for p in cell]))  # one reading for the points measured together
            if pacer is not None:
                pacer.mark()

        def after_point(point: GridPoint) -> None:
            for line in pacer.after(point) if pacer is not None else ():
                echo(line)

        if placement.mode == "side":
            outcome.points += side.run_round(ctx, store, todo, targets, echo, before_cell, after_point)
            return
        _in_turn(ctx, cfg, store, todo, targets, outcome, echo, probe, pacer, before_cell)


def _in_turn(ctx: SweepContext, cfg: SweepConfig, store: RunStore, todo: list[GridPoint],
             targets: dict[str, ServerTarget], outcome: SweepOutcome, echo: Echo, probe: SpeedProbe,
             pacer: Pacer | None, before_cell: Callable[[list[GridPoint]], None]) -> None:  # fmt: skip
    """A round's loads in turn (dflashbench.run.turns) on the servers up; a rate or trace load's points one after
    another instead, each keeping its clock (dflashbench.plan.placement.keep_clock), said once."""
    from dflashbench.plan.wall_time import cells
    from dflashbench.run import turns

    first = {t.name: t for t in targets.values() if "#" not in t.name}
    said = False
    for cell in cells(todo):
        chosen = {p.method: first[p.method.value] for p in cell}
        if not cell[0].closed_loop:  # a rate or a trace keeps its clock: its points one after another
            if not said:
                echo(f"note: {CLOCK_WHY}")
                said = True
            _one_after_another(ctx, cfg, store, cell, chosen, outcome, echo, probe, pacer)
            continue
        before_cell(cell)
        outcome.points += turns.run_cell(ctx, store, cell, chosen, echo)
        etas = [pacer.after(point) for point in cell] if pacer is not None else []
        for line in etas[-1] if etas else ():  # the load's points ended together: one ETA for them
            echo(line)


def _interference(ctx: SweepContext, store: RunStore, targets: dict[str, ServerTarget], placement: Placement,
                  echo: Echo) -> Placement:  # fmt: skip
    """The interference probe (dflashbench.run.interference) into the manifest; where it is above its threshold and
    the placement was ``auto``'s, the methods go in turn from now on, said and recorded."""
    from dflashbench.run import interference

    record = interference.measure(ctx, targets, store.run_id, echo)
    if record is None:
        return placement
    echo(interference.line(record))
    if record.get("flagged") and ctx.suite.interleave == "auto":
        why = (f"fell back to the methods in turn: {record['server']} ran {record['slowdown']:.0%} slower beside the "
               f"others (threshold {record['threshold']:.0%})")  # fmt: skip
        placement = dataclasses.replace(placement, mode="turns", notes=(*placement.notes, why))
        ctx.placement = dataclasses.replace(ctx.placement, mode="turns", notes=placement.notes)
        echo(f"note: {why}")
    elif record.get("flagged"):
        echo("note: --interleave side keeps the methods side by side as asked; the report flags the interference")
    store.update_manifest(interference=record, placement=ctx.placement.record() if ctx.placement else None)
    return placement


def _credentials_note(ctx: SweepContext, api_key_env: str | None) -> list[str]:
    """Why the API key is not sent to an endpoint whose URL carries credentials (:func:`endpoints.auth_headers`)."""
    if not (ctx.api_key and any(multi.has_credentials(u) for u in ctx.endpoints)):
        return []
    source = api_key_env or next((n for n in API_KEY_ENVS if os.environ.get(n)), "the environment")
    return [f"note: an --endpoint URL carries its own credentials: they are sent (HTTP Basic) and the API key from "
            f"{source} is not sent to it"]  # fmt: skip


def _one_after_another(ctx: SweepContext, cfg: SweepConfig, store: RunStore, cell: list[GridPoint],
                       targets: dict[Method, ServerTarget], outcome: SweepOutcome, echo: Echo, probe: SpeedProbe,
                       pacer: Pacer | None) -> None:  # fmt: skip
    """A rate or trace load's points where the others go in turn: one after another on the servers up, each on its
    own clock, the speed probe read before each (the drift between them measured), their pairing recorded as
    ``point`` (dflashbench.plan.placement.keep_clock)."""
    from dflashbench.run.turns import pairing_of

    for point in cell:
        probe.read(f"before {point.point_id}")
        if pacer is not None:
            pacer.mark()
        outcome.points.append(measure_point(ctx, store, point, targets[point.method], echo, cfg.progress,
                                            pairing=pairing_of("point", cell, point)))  # fmt: skip
        for line in pacer.after(point) if pacer is not None else ():
            echo(line)


def _run_points(ctx: SweepContext, cfg: SweepConfig, store: RunStore, todo: list[GridPoint],
                sent: str | None, outcome: SweepOutcome, echo: Echo, probe: SpeedProbe,
                pacer: Pacer | None = None, mode: str = "off") -> None:  # fmt: skip
    """A server for each method of ``todo`` (launched on the plan its grid points carry, or the running one of
    ``--endpoint``), all up together; then each point in ``todo``'s order, the probe read before it. A server
    that does not start fails its own points; the other methods' points still run. ``mode``: the placement's
    (``point``: a rate or trace point records its load's other points, ``extra["pairing"]``)."""
    from dflashbench.plan.wall_time import cells
    from dflashbench.run.turns import pairing_of

    with contextlib.ExitStack() as stack:
        targets: dict[Method, ServerTarget] = {}
        order = capacity.launch_order(ctx)
        for method in sorted(dict.fromkeys(p.method for p in todo), key=order.index):
            points = [p for p in todo if p.method is method]
            target = _start_server(ctx, cfg, store, method, points[0].launch, sent, stack, echo)
            if isinstance(target, str):
                outcome.points += [record_failure(ctx, store, p, [], None, target, echo) for p in points]
            else:
                targets[method] = target
        loads = {p.point_id: cell for cell in cells(todo) for p in cell} if mode == "point" else {}
        stack.push(tie_probe.when_done(ctx, store, echo, targets.get(Method.AR)))  # on AR's server, before it stops
        for point in todo:
            if point.method in targets:
                probe.read(f"before {point.point_id}")  # the machine's speed now: the noise rule reads its drift
                if pacer is not None:
                    pacer.mark()
                # a rate or trace point says how its methods shared the minutes: one after another, the probe between
                pairing = pairing_of("point", loads[point.point_id], point) \
                    if point.point_id in loads and not point.closed_loop else None  # fmt: skip
                outcome.points.append(measure_point(ctx, store, point, targets[point.method], echo, cfg.progress,
                                                    pairing=pairing))  # fmt: skip
                for line in pacer.after(point) if pacer is not None else ():  # the time left; a budget re-planned
                    echo(line)


def _start_server(ctx: SweepContext, cfg: SweepConfig, store: RunStore, method: Method, planned, sent: str | None,
                  stack: contextlib.ExitStack, echo: Echo, name: str | None = None,
                  gpus: tuple[int, ...] = ()) -> ServerTarget | str:  # fmt: skip
    """A server of ``method`` (``planned``: its launch; ``name``: its name in the placement, ``ar#2`` for a replica;
    ``gpus``: its own GPUs), kept up until ``stack`` closes: launched and ready, or the running one of ``--endpoint``
    (``sent``: the model name its requests carry); the reason where a launched server did not start or serves no
    model the sweep can name."""
    return _launch_server(ctx, cfg, store, method, planned, sent, stack, echo, name, gpus)()


def _launch_server(ctx: SweepContext, cfg: SweepConfig, store: RunStore, method: Method, planned, sent: str | None,
                   stack: contextlib.ExitStack, echo: Echo, name: str | None = None,
                   gpus: tuple[int, ...] = ()) -> Callable[[], ServerTarget | str]:  # fmt: skip
    """:func:`_start_server` in two steps: the process started now, and what waits for it to be ready (several
    servers placed side by side or in turn load at once, then each is waited for)."""
    from dflashbench.backends.process import ServerStartError
    from dflashbench.run.launching import launcher_of, own_nodes, request_for

    suite = ctx.suite
    name = name or method.value

    def target(backend, base_url: str, sent: str | None, server=None) -> ServerTarget:
        store_text = cfg.store_text and store.manifest.outputs.store_text  # a resumed run keeps its first choice
        lg = loadgen_config(ctx, base_url, sent or ctx.pair.target, store_text, backend.request_fields(method)
                            if hasattr(backend, "request_fields") else None)  # fmt: skip
        return ServerTarget(backend, base_url, lg, server, name, tuple(gpus))

    if ctx.endpoint:
        running = target(EndpointBackend(ctx.backend_name), ctx.endpoint.rstrip("/"), sent)
        return lambda: running
    backend = get_backend(ctx.backend_name)
    launch, capped = capacity.capped_launch(ctx, method, planned)
    if capped:
        echo(f"note: {capped}")
    launch, moved = launch_on_free_port(launch, backend)
    if moved:
        echo(f"note: {moved}")
    plan = launch.plan
    record = ServerRecord(argv=list(plan.argv), env=plan.env, port=launch.spec.port,
                          verifier=verifier_record(ctx.backend_name, method.value, list(plan.argv)))  # fmt: skip
    if record.verifier and record.verifier.get("lossless_by_design") is False:
        echo(f"note: {name}'s server is not lossless by design: {record.verifier['why']}")
    _record_server(store, name, record)
    log = store.server_log_path(ctx.backend_name, name)
    # where it runs is the launcher's (this machine, a Slurm job, Kubernetes objects: dflashbench.launchers)
    request = request_for(ctx, launch, name, log, store.run_id, own_nodes=own_nodes(ctx, name))
    server = stack.enter_context(launcher_of(ctx).start(request))
    # what identifies it to a later --resume, should it outlive this sweep (a PID, a job id)
    _record_server(store, name, record.model_copy(update=server.record()))

    def ready() -> ServerTarget | str:
        try:
            server.wait_ready(backend.health_path(), timeout_s=cfg.ready_timeout_s or suite.ready_timeout_s,
                              progress=cfg.progress, echo=echo)  # fmt: skip
        except ServerStartError as exc:
            return f"server did not start: {exc}"
        base_url = server.base_url  # known once it runs: a cluster's scheduler picks the host
        _read_capacity(ctx, store, method, log, echo, name)
        try:
            served = check_endpoint(base_url, ctx.api_key)
        except UserError as exc:
            served = []
            echo(f"note: {exc}")
        try:  # launched with the one target: the engine names it as it likes (pick_model_name)
            chosen, note = pick_model_name(served, model_names(ctx, cfg), base_url, named=False)
        except ModelNotServed as exc:
            return str(exc)
        if note:
            echo(f"note: {note}")
        # with where it ran, once the scheduler has said (a cluster's job: its nodes)
        _record_server(store, name, store.manifest.servers[name].model_copy(update=dict(model_sent=chosen,
                                                                                    **server.record())))  # fmt: skip
        return target(backend, base_url, chosen, server)

    return ready


def _read_capacity(ctx: SweepContext, store: RunStore, method: Method, log: Path, echo: Echo,
                   name: str | None = None) -> None:  # fmt: skip
    """The server's own KV report, read before its first point and kept in the manifest beside the plan's figures;
    a server that holds fewer requests than the top concurrency stops the sweep here (dflashbench.run.capacity)."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    record, lines, refusal = capacity.after_ready(ctx, method, text)
    if record:
        name = name or method.value  # a replica's own record
        _record_server(store, name, store.manifest.servers[name].model_copy(update={"kv": record}))
        store.update_manifest(capacity=capacity.summary(ctx))
    for line in lines:
        echo(line)
    if refusal:
        raise capacity.CapacityRefused(f"{refusal}; then dflashbench sweep --resume {store.run_dir} runs what is "
                                       "left")  # fmt: skip


def check_before_writing(ctx: SweepContext, cfg: SweepConfig) -> tuple[str | None, list[str]]:
    """What can be found wrong before a run directory exists, found there (a resume could not fix it): an
    ``--endpoint``'s replicas answer and serve the model measured, under one name (which is returned, with notes on
    how it was chosen); a launched server's model, program, install and arguments (:mod:`dflashbench.run.launch_checks`)."""
    if ctx.endpoint:
        return endpoint_model(ctx, cfg)
    launch_checks.check_before_writing(ctx)
    if hasattr(backend := get_backend(ctx.backend_name), "check_install"):
        backend.check_install()  # an engine install that cannot serve (vLLM's CPU build with its broken wheels)
    return None, []


def model_names(ctx: SweepContext, cfg: SweepConfig) -> list[str]:
    """The names the target goes by, the user's first: as typed (``qwen3-8b``), then as resolved
    (``Qwen/Qwen3-8B``, a local path)."""
    return [*([cfg.suite.model] if cfg.suite is not None else []), ctx.suite.model, ctx.pair.target]


def endpoint_model(ctx: SweepContext, cfg: SweepConfig) -> tuple[str, list[str]]:
    """The model name requests to the ``--endpoint`` replicas carry, and the notes on how it was chosen: the
    servers must serve the model the run names (:func:`dflashbench.backends.endpoint.replicas_model`). A resumed
    run sends the name it sent before, which the servers must still serve; a run from before that name was kept
    sent the one model its server served, as it may again."""
    wanted, named, unlisted = model_names(ctx, cfg), cfg.model_given, cfg.unlisted_model
    if cfg.resume is not None:
        recorded = load_manifest(cfg.resume)
        before = getattr(recorded, "model_sent", None)
        wanted, named, unlisted = ([before], True, bool(getattr(recorded, "model_unlisted", None))) if before \
            else (wanted, False, False)  # fmt: skip
    return replicas_model(ctx.endpoints, ctx.api_key, wanted, named=named, unlisted=unlisted)


def _record_server(store: RunStore, method: str, record: ServerRecord) -> None:
    servers = {name: r.model_dump(exclude_none=True) for name, r in store.manifest.servers.items()}
    store.update_manifest(servers={**servers, method: record.model_dump(exclude_none=True)})
