"""``dflashbench tune``'s work: the K x load grid swept, the fits read from it, the schedule each engine takes, the
check swept (the fixed K beside the tuned schedule, threshold loads included), and the files it leaves.

A tune folder ``<out>/tune-<method>-<time>/`` holds two run directories, ``grid/`` and ``check/`` (ordinary sweeps:
``report``, ``compare`` and ``--resume`` read them), and beside them ``schedule.json`` (the schedule, and its form for
each engine), ``speculation_profile.json`` (the acceptance measured, specdec_bench's schema) and ``tune.json`` (the
fits, every prediction, the hold-out errors, the recommended K against the best measured, the measured gains).
``--from FOLDER`` reads an earlier tune's grid instead of measuring one (what is made of it goes to a new folder);
``--profile FILE`` takes acceptance from a profile measured elsewhere (the step cost is still this grid's).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.measure import speculation_profile as sp
from dflashbench.measure import tune_readings as tr
from dflashbench.measure.slo import parse_slo
from dflashbench.plan import pairing
from dflashbench.plan.suites import Suite
from dflashbench.plan.tune_grid import SCHEDULE_FORMAT, TUNED, TunePlan, check_bound, plan_tune
from dflashbench.reference.draft_length import DraftSchedule
from dflashbench.types import Method

Echo = Callable[[str], None]


@dataclass(frozen=True)
class TuneConfig:
    base: Suite  # the suite the sweep would run (model, drafts, workloads, limits), --method resolved into it
    method: Method
    ks: tuple[int, ...] | None = None
    loads: tuple[int, ...] | None = None
    objective: str = "per-user"
    slo: str | None = None
    out_dir: Path = Path("results")
    dry_run: bool = False
    check: bool = True
    check_repeats: int | None = None
    profile: Path | None = None
    reuse: Path | None = None  # an earlier tune folder: its grid is read, not measured
    assume_user_tok_per_s: tuple[float, float] | None = None


@dataclass
class TuneOutcome:
    folder: Path | None
    plan: TunePlan
    grid_run: Path | None = None
    check_run: Path | None = None
    reading: tr.TuneReading | None = None
    gains: list[tr.Gain] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)


def tpot_limits(objective: str, slo: str | None) -> list[tuple[float, float]]:
    """Goodput's bounds as (percentile, seconds): TPOT terms only, the one latency the per-user rate predicts."""
    if objective != "goodput":
        if slo:
            raise UserError("--slo goes with --objective goodput (the throughput of the K whose TPOT meets it)")
        return []
    if not slo:
        raise UserError("--objective goodput needs --slo, e.g. --slo tpot_p90=50ms")
    terms = parse_slo(slo)
    other = [t.text for t in terms if t.metric != "tpot"]
    if other:
        raise UserError(f"--slo {slo}: tune predicts TPOT (one over the per-user rate) and not {', '.join(other)}; give "
                        "tpot_pNN terms only")  # fmt: skip
    return [(t.percentile, t.limit_s) for t in terms]


def block_size_of(base: Suite, method: Method) -> tuple[int | None, str]:
    """The block of ``method``'s drafter where it has one (DFlash), from the model registry or the drafter's own
    config.json on this machine; ``(None, why)`` else."""
    from dflashbench.model_files import draft_facts, read_json

    if method not in (Method.DFLASH, Method.DFLASH2):
        return None, ""
    _, pair = pairing.resolve(base.model_copy(update={"methods": [method]}), methods_given=True)
    if pair.dflash_block_size:
        return pair.dflash_block_size, pair.dflash_block_source or "the model registry"
    draft = pair.drafts.get(method)
    found = read_json(draft, network=False) if draft else None
    block = draft_facts(found.data).block_size if found else None
    return (block, f"{found.where}" if block else "not known here")


def run_tune(cfg: TuneConfig, echo: Echo = print) -> TuneOutcome:
    from dflashbench.run.sweep import SweepConfig, run_sweep

    limits = tpot_limits(cfg.objective, cfg.slo)
    block, why = block_size_of(cfg.base, cfg.method)
    plan = plan_tune(cfg.base, cfg.method, ks=cfg.ks, loads=cfg.loads, block_size=block, block_why=why)
    echo(plan_line(plan))
    if cfg.dry_run:
        if cfg.reuse is None:
            run_sweep(SweepConfig(suite=plan.grid, dry_run=True, methods_given=True,
                                  assume_user_tok_per_s=cfg.assume_user_tok_per_s), echo=echo)  # fmt: skip
        points, loads = check_bound(plan)
        echo(f"then the check: {cfg.method.value} at its own K beside {cfg.method.value}-{TUNED} (the schedule the grid "
             f"recommends) at the grid's loads and both sides of each threshold: at most {points} points over {loads} "
             f"loads, about as long per point as the grid's")  # fmt: skip
        return TuneOutcome(None, plan)
    profile = sp.read_profile(cfg.profile) if cfg.profile else None
    if cfg.reuse is not None and not (cfg.reuse / "grid" / "manifest.json").is_file():
        raise UserError(f"--from {cfg.reuse}: no grid/ run in it (a folder dflashbench tune wrote)")
    folder = new_folder(cfg.out_dir, f"tune-{cfg.method.value}-{time.strftime('%Y%m%d-%H%M%S')}")
    if cfg.reuse is not None:  # the grid read where it is; what is made of it goes to the new folder
        grid_run = cfg.reuse / "grid"
    else:
        run_sweep(SweepConfig(suite=plan.grid, out_dir=folder, run_id="grid", methods_given=True), echo=echo)
        grid_run = folder / "grid"
    out = TuneOutcome(folder, plan, grid_run=grid_run)
    out.reading = read_grid(grid_run, cfg, limits, profile)
    if out.reading.schedule is None:
        raise UserError(f"tune could not fit {grid_run}: {out.reading.why_not}")
    out.files["schedule"] = write_schedule(folder, cfg, plan, out.reading.schedule)
    if profile is None and out.reading.acceptance is not None:
        out.files["profile"] = sp.write_profile(folder / "speculation_profile.json",
                                                grid_profile(cfg, plan, out.reading, grid_run))  # fmt: skip
    refused = check_refused(cfg, plan, out.reading.schedule) if cfg.check else None
    if refused:
        echo(f"note: no check: {refused}")
    elif cfg.check:
        run_sweep(SweepConfig(suite=plan.check(out.reading.schedule, cfg.check_repeats), out_dir=folder, run_id="check",
                              methods_given=True), echo=echo)  # fmt: skip
        out.check_run = folder / "check"
        out.gains = check_gains(out.check_run)
    out.files["tune"] = write_tune_json(folder, cfg, out)
    return out


def new_folder(out_dir: Path, name: str) -> Path:
    """``out_dir/name``, made now; ``name-2``, ``-3``... where a tune of the same second holds it."""
    for n in range(1, 1000):
        folder = out_dir / (name if n == 1 else f"{name}-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
        except OSError as exc:
            raise UserError(f"cannot make {folder}: {exc.strerror or exc}") from None
    raise UserError(f"{out_dir}: a thousand tune folders named {name}: clear some out")


def plan_line(plan: TunePlan) -> str:
    return (f"tune {plan.method.value}: K {', '.join(map(str, plan.ks))} (at most {plan.limit}: {plan.limit_why}) x "
            f"load {', '.join(map(str, plan.loads))}: {len(plan.ks) * len(plan.loads)} grid points, one server per K"
            if plan.limit is not None else
            f"tune {plan.method.value}: K {', '.join(map(str, plan.ks))} x load {', '.join(map(str, plan.loads))}: "
            f"{len(plan.ks) * len(plan.loads)} grid points, one server per K")  # fmt: skip


def read_grid(grid_run: Path, cfg: TuneConfig, limits, profile: dict | None) -> tr.TuneReading:
    from dflashbench.run.store import load_run

    run = load_run(grid_run)
    cells = tr.cells_of(run.points, run.requests).get(cfg.method.value, [])
    if not cells:
        raise UserError(f"{grid_run} holds no {cfg.method.value}-kN point that finished: nothing to fit")
    acc = sp.profile_acceptance(profile) if profile is not None else None
    return tr.tune_reading(cells, run.requests, objective=cfg.objective, tpot_limits=limits, acc=acc)


def check_gains(check_run: Path) -> list[tr.Gain]:
    from dflashbench.run.store import load_run

    run = load_run(check_run)
    return tr.gains(run.points, run.requests)


def tuned_spec(cfg: TuneConfig, plan: TunePlan, schedule: DraftSchedule, backend: str):
    """The tuned arm's server spec on ``backend``, as the check's suite plans it (nothing is launched)."""
    suite = plan.check(schedule).model_copy(update={"backend": backend})
    resolved, pair = pairing.resolve(suite, methods_given=True)
    return pairing.server_spec(resolved, Method.parse(f"{cfg.method.value}-{TUNED}"), pair, port=8000)


def check_refused(cfg: TuneConfig, plan: TunePlan, schedule: DraftSchedule) -> str | None:
    """Why the grid's backend cannot run the schedule (SGLang takes none; a TensorRT-LLM schedule whose K rises), or
    ``None``: then the check measures it."""
    from dflashbench.backends import get_backend

    try:
        get_backend(plan.grid.backend).launch_plan(tuned_spec(cfg, plan, schedule, plan.grid.backend))
    except UserError as exc:
        return str(exc)
    return None


def engine_forms(cfg: TuneConfig, plan: TunePlan, schedule: DraftSchedule) -> dict:
    """The schedule in each engine's own form, or the reason an engine takes none (its source cited in the
    backend's module): vLLM's ``--speculative-config``, TensorRT-LLM's ``speculative_config``, SGLang's fixed K per
    load range, the reference server's flags."""
    from dflashbench.backends import reference, sglang, trtllm, vllm

    spec = tuned_spec(cfg, plan, schedule, plan.grid.backend)
    forms: dict = {"reference": reference.draft_length_argv(spec)}
    try:
        forms["vllm"] = {"--speculative-config": vllm.speculative_config(spec)}
    except UserError as exc:
        forms["vllm"] = {"refused": str(exc)}
    try:
        forms["trtllm"] = {"speculative_config": trtllm.llm_api_options(dataclasses.replace(spec, engine_config={}))
                           .get("speculative_config")}  # fmt: skip
    except UserError as exc:
        forms["trtllm"] = {"refused": str(exc)}
    forms["sglang"] = {"fixed K per load range": [{"concurrency": [lo, hi], "argv": argv}
                                                  for lo, hi, argv in sglang.schedule_ranges(spec)]}  # fmt: skip
    return forms


def write_schedule(folder: Path, cfg: TuneConfig, plan: TunePlan, schedule: DraftSchedule) -> Path:
    data = {"format": SCHEDULE_FORMAT, "version": 1, "method": cfg.method.value, "objective": cfg.objective,
            "slo": cfg.slo, "backend": plan.grid.backend, "model": plan.grid.model,
            "num_speculative_tokens_per_batch_size": schedule.to_list(), "describe": schedule.describe(),
            "engines": engine_forms(cfg, plan, schedule)}  # fmt: skip
    path = folder / "schedule.json"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def grid_profile(cfg: TuneConfig, plan: TunePlan, reading: tr.TuneReading, grid_run: Path) -> dict:
    """The grid's acceptance as specdec_bench's profile (exact over K on the reference decoder, which verifies the first
    K of one proposal; measured per K on an engine)."""
    from dflashbench.measure.request_index import index_of
    from dflashbench.run.store import load_run

    grid, run = plan.grid, load_run(grid_run)
    index = index_of(run.requests)
    top = max(reading.measured_ks)
    results = [r for c in reading.cells if c.k == top for r in index.of(c.run_id, c.point_id)]
    drafts = run.points["draft"].dropna() if "draft" in run.points else []
    return sp.build_profile(reading.acceptance, reading.cells, method=cfg.method.value,
                            draft=str(drafts.iloc[0]) if len(drafts) else None, target=grid.model,
                            block_size=plan.limit + 1 if plan.limit is not None else None,
                            prefix_exact=grid.backend == "reference",
                            per_request_tau=sp.tau_conventions(results).per_request,
                            conditions={"engine": grid.backend, "concurrency": list(plan.loads),
                                        "dataset": ",".join(w.label for w in grid.workloads),
                                        "draft_lengths": list(plan.ks), "tool": "dflashbench tune"})  # fmt: skip


def write_tune_json(folder: Path, cfg: TuneConfig, out: TuneOutcome) -> Path:
    r = out.reading
    assert r is not None
    summary = None if not r.held else dict(zip(("median_abs_error", "worst"), _errors(r), strict=True))
    data = {
        "method": cfg.method.value, "objective": cfg.objective, "slo": cfg.slo, "ks": list(out.plan.ks),
        "loads": list(out.plan.loads), "grid": str(out.grid_run), "check": str(out.check_run) if out.check_run else None,
        "schedule": r.schedule.to_list() if r.schedule else None,
        "acceptance": None if r.acceptance is None else {"marginal": list(r.acceptance.marginal),
                                                         "se": list(r.acceptance.se),
                                                         "tau_by_k": {str(k): v for k, v in r.acceptance.per_k.items()}},
        "step_cost": None if r.cost is None else {"features": list(r.cost.features), "coef_s": list(r.cost.coef),
                                                  "rel_rmse": r.cost.rel_rmse, "describe": r.cost.describe()},
        "predictions": [dataclasses.asdict(p) for p in r.predictions],
        "choices": [dataclasses.asdict(c) for c in r.choices],
        "hold_out": {"cells": [dict(dataclasses.asdict(h), error=h.error) for h in r.held], "summary": summary},
        "recommended_vs_best_measured": [dict(dataclasses.asdict(b), within=b.within) for b in r.best],
        "gains": [dict(dataclasses.asdict(g), slower=g.slower) for g in out.gains],
    }  # fmt: skip
    path = folder / "tune.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def _errors(r: tr.TuneReading):
    from dflashbench.measure.tune_fit import error_summary

    median, worst = error_summary(r.held)
    return median, {"k": worst.k, "concurrency": worst.concurrency, "error": worst.error}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def _ci(ci) -> str:
    return "" if not ci else f" [{ci[0]:.3g}, {ci[1]:.3g}]"


def summary_lines(out: TuneOutcome) -> list[str]:
    """What ``tune`` says at the end: the K per load, how the prediction held, the check's gains, the files."""
    r = out.reading
    if r is None:
        return []
    lines = []
    if r.acceptance is not None and r.cost is not None:
        lines.append(f"fits: acceptance per position {', '.join(f'{a:.2f}' for a in r.acceptance.marginal[:8])}"
                     f"{' …' if r.acceptance.positions > 8 else ''} (tau at K {', '.join(f'{k}: {r.acceptance.tau(k):.2f}' for k in r.measured_ks)}); "
                     f"step cost {r.cost.describe()} (relative rms {r.cost.rel_rmse:.1%})")  # fmt: skip
    measured = set(r.measured_loads)
    unit = {"per-user": "tok/s per user", "throughput": "tok/s", "goodput": "tok/s within the SLO"}[r.objective]
    shown = [c for c in r.choices if c.concurrency in measured or c.concurrency == max(measured)]
    lines.append(f"recommended K by load ({r.objective}): " + "; ".join(
        f"c={c.concurrency}: K {c.k} ({c.value:.4g}{_ci(c.ci)} {unit}{', ' + c.note if c.note else ''})" for c in shown))
    lines.append(f"schedule: {r.schedule.describe()}  ({r.schedule.to_json()})" if r.schedule else "schedule: none")
    if r.held:
        from dflashbench.measure.tune_fit import error_summary

        median, worst = error_summary(r.held)
        lines.append(f"hold-out (each measured (K, load) predicted by fits that left it out, {len(r.held)} points): "
                     f"median error {median:.1%}, worst {_pct(worst.error)} at K {worst.k}, c={worst.concurrency}")  # fmt: skip
    for b in r.best:
        if not b.recommended_measured:
            lines.append(f"c={b.concurrency}: recommended K {b.recommended} is between the grid's K (not measured "
                         f"there); the best measured is K {b.best}: the check below measures the schedule")  # fmt: skip
            continue
        verdict = "the best measured" if b.recommended == b.best else \
            ("within the interval of the best measured" if b.within else "slower than the best measured")  # fmt: skip
        ratio = "" if b.ratio is None or b.recommended == b.best else f": ratio {b.ratio:.3f}{_ci(b.ci)} to K {b.best}"
        lines.append(f"c={b.concurrency}: recommended K {b.recommended} is {verdict}{ratio}")
    for g in out.gains:
        lines.append(f"check c={g.concurrency}: {g.tuned} over {g.fixed}: per user {_pct(None if g.per_user is None else g.per_user - 1)}"
                     f"{_ci(g.per_user_ci)}, throughput {_pct(None if g.throughput is None else g.throughput - 1)}{_ci(g.throughput_ci)}"
                     f"{'  SLOWER beyond its interval' if g.slower else ''}")  # fmt: skip
    lines += [f"{name}: {path}" for name, path in out.files.items()]
    return lines
