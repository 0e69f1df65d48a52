"""What a report shows, built from loaded runs: the verdict, sections of tables and figures, run facts.

Everything here is plain data (strings and :class:`~dflashbench.report.figures.Figure`); the templates
only lay it out. The tables themselves are in :mod:`.tables`, the verdict in :mod:`.answer`, the sections' lines in :mod:`.details`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from dflashbench.measure import (
    acceptance,
    analysis,
    decomposition,
    lossless,
    noise_model,
    observability,
    quality,
    readings,
    repeats,
    slices,
    steady,
    trace_readings,
    trend,
    verdict,
)
from dflashbench.paths import portable
from dflashbench.plan.published import measured_vs_published, published_for, with_hardware_notes
from dflashbench.report import answer, details, figures, load_shape, summary, tables, tune_section
from dflashbench.report import trace as trace_report
from dflashbench.report.tables import (
    Section,
    Table,
    _join,
    accuracy_table,
    agreement_table,
    decomposition_table,
    failures_tables,
    fold_constant_columns,
    matched_concurrency_table,
    matched_interactivity_table,
    matched_summary_table,
    points_table,
    published_tables,
    readings_table,
    single_stream_table,
    slices_table,
    slo_table,
    tau_table,
    with_quality,
)
from dflashbench.report.trust import trust_flags, unmeasured_points
from dflashbench.run.store import Run

__all__ = ["ReportModel", "RunInfo", "Section", "Table", "build"]


@dataclass
class RunInfo:
    run_id: str
    run_dir: str
    facts: list[tuple[str, str]]
    manifest_json: str
    num_points: int
    num_failed_points: int
    num_requests: int
    num_failed_requests: int


@dataclass
class ReportModel:
    title: str
    runs: list[RunInfo]
    sections: list[Section]
    band: tuple[float, float] | None
    headline: list[Table]
    warnings: list[str] = field(default_factory=list)  # quality warnings, shown first
    notes: list[str] = field(default_factory=list)  # what the quality figures leave out, and why
    verdict: answer.VerdictBlock | None = None  # the answer, first of all
    trust: list[str] = field(default_factory=list)  # what weakens the runs (dflashbench.report.trust), whole
    definitions: list[str] = field(default_factory=list)  # how the readings are read, said once
    readings: pd.DataFrame | None = None  # every reading (measure/readings.py): the verdict's, the tables', the JSON's
    decides: Table | None = None  # the readings the verdict decides on, under it (made from ``readings``)


def run_facts(m: dict) -> list[tuple[str, str]]:
    """The manifest's headline facts (as :mod:`dflashbench.run.sweep` writes them), in reading order; what a
    manifest lacks is left out. Everything else is in the full manifest shown beside them."""
    suite, gpu, host = m.get("suite") or {}, m.get("gpu") or {}, m.get("host") or {}
    if not isinstance(suite, dict):
        suite = {"name": suite}
    if not isinstance(gpu, dict):
        gpu = {"gpu": gpu}
    versions = m.get("versions") or {}
    gpus = f"{gpu.get('gpu_count')} × {gpu.get('gpu')}" if gpu.get("gpu_count") else gpu.get("gpu")
    facts = [
        ("suite", _join(suite.get("name"), f"v{suite['version']}" if suite.get("version") else None,
                        f"— {suite['description']}" if suite.get("description") else None, _overridden(m))),
        ("status", m.get("status")),
        ("backend", _join(m.get("backend"), f"at {m['endpoint']}" if m.get("endpoint") else None)),
        ("model", m.get("model")),
        ("drafts", _join(*(f"{k}: {v}" for k, v in (m.get("drafts") or {}).items()), sep=", ")),
        ("GPUs", _join(gpus, f"(driver {gpu['driver']})" if gpu.get("driver") else None,
                       f"({_reason(gpu['reason'], gpus)})" if gpu.get("reason") else None)),
        ("KV cache", summary.capacity_words(m)),
        ("started", m.get("started_at")),
        ("finished", m.get("finished_at")),
        ("dflashbench", _join(m.get("dflashbench_version"), f"git {m['git_sha'][:12]}" if m.get("git_sha") else None,
                              "(uncommitted changes)" if m.get("git_dirty") else None)),
        ("host", _join(host.get("hostname"), host.get("platform"), sep=", ") if isinstance(host, dict) else host),
        ("versions", _join(*(f"{k} {v}" for k, v in versions.items() if v), sep=", ")
         if isinstance(versions, dict) else versions),
    ]  # fmt: skip
    return [(label, str(value)) for label, value in facts if value not in (None, "")]


def _overridden(m: dict) -> str | None:
    """Where the run's backend was set on the command line and the suite's description names another engine (the
    demo suite's says "reference backend"), the description is of the suite, not of this run: said."""
    argv = [str(a) for a in m.get("argv") or []]
    ran = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--backend"), None)
    description = str((m.get("suite") or {}).get("description") or "") if isinstance(m.get("suite"), dict) else ""
    if ran and "backend" in description and ran not in description:
        return f"(the suite's own description; this run used --backend {ran})"
    return None


def _reason(reason: object, gpus: object) -> str:
    """Why no GPU was seen, without repeating what the GPU field already says ("no NVIDIA GPU: ...")."""
    return str(reason).removeprefix(f"{gpus}: ") if gpus else str(reason)


def run_info(run: Run) -> RunInfo:
    facts = run_facts(run.manifest)
    points, requests = run.points, run.requests
    if "warmup" in requests.columns:  # warm-up requests are sent, not measured: counted apart
        warmup = requests["warmup"].fillna(False).astype(bool)
        if warmup.any():
            facts.append(("warm-up requests", f"{int(warmup.sum())} (not counted, not measured)"))
        requests = requests[~warmup]
    if "category" in points.columns:  # a point's category rows are its share of the prompts, not points (review X3)
        points = points[points["category"].fillna("all") == "all"]
    failed_points = int((points["status"].fillna("ok") != "ok").sum()) if "status" in points.columns else 0
    failed_requests = int((requests["ok"] == False).sum()) if "ok" in requests.columns else 0  # noqa: E712
    return RunInfo(run_id=run.run_id, run_dir=portable(str(run.run_dir)), facts=facts,
                   manifest_json=json.dumps(run.manifest, indent=2, ensure_ascii=False, default=str),
                   num_points=len(points), num_failed_points=failed_points, num_requests=len(requests),
                   num_failed_requests=failed_requests)  # fmt: skip


# --- the whole report -------------------------------------------------------------------------------


def band_targets(band: tuple[float, float] | None) -> list[float] | None:
    return None if band is None else [band[0], (band[0] + band[1]) / 2, band[1]]


def build(
    runs: Sequence[Run], band: tuple[float, float] | None = None, with_figures: bool = True,
    slo_text: str | None = None, gpu_hour_cost: float | None = None, noise_profile: Mapping | None = None,
) -> ReportModel:
    from dflashbench.measure import slo

    asked = slo_text if slo_text is not None else suite_slo(runs)  # an SLO a user named reaches the verdict
    terms = slo.parse_slo(asked)
    runs = list({r.run_id: r for r in runs}.values())  # one run given twice is one run: each request counts once
    labels = analysis.distinct_settings(runs)
    every = pd.concat([analysis.relabel(r.points, labels) for r in runs], ignore_index=True) if runs else pd.DataFrame()
    raw = analysis.relabel(analysis.raw_points(runs), labels)
    every = repeats.with_repeat_goodput(every, raw)  # goodput: the mean over repeats too
    all_requests = pd.concat([r.requests for r in runs], ignore_index=True) if runs else pd.DataFrame()
    every = analysis.with_latency_rule(every, all_requests)  # an older run's rows follow today's definitions
    # The closed-loop points and their requests: what the speedups, frontiers, SLO reading, quality and verdict
    # read. Open-loop points (sweep --request-rate) get their own table.
    points, requests = analysis.closed_loop(every), analysis.closed_loop_requests(raw, all_requests)
    temperature, sampled = _temperatures(runs)
    agree = lossless.with_near_ties(quality.agreement_table(points, requests, temperature), points, requests,
                                    [t for r in runs for t in r.ties])  # fmt: skip
    acc = quality.accuracy_table(points, temperature, requests)
    usable = analysis.usable_points(every)
    # each run's speed probes and run-to-run term, for every reading alike
    probes, run_terms = {r.run_id: r.probes for r in runs}, noise_model.run_terms(runs, noise_profile)
    table = _readings(points, requests, every, all_requests, probes, run_terms,
                      sittings := {r.run_id: analysis.resumed_points(r.manifest) for r in runs})  # fmt: skip
    single, matched = (readings.with_readings(with_quality(analysis.single_stream_speedups(points), agree, acc, concurrency=1),
                                       table, readings.SINGLE),
                       readings.with_readings(with_quality(analysis.matched_concurrency_speedups(points), agree, acc), table,
                                       readings.PER_USER))  # fmt: skip
    serving = analysis.throughput_points(points)  # category shares of mixed runs left out
    unit = analysis.device_unit(usable)
    matched_rd = verdict.matched_readings(points)
    tau = acceptance.with_delivered(analysis.tau_by_category(every), every, all_requests)  # acceptance depends on
    # the prompts, not on how they arrive: open-loop points count too
    open_loop = analysis.open_loop_speedups(analysis.throughput_points(every))
    published_figures, published_problem = published_for(r.meta.suite_config for r in runs)
    published = with_hardware_notes(measured_vs_published(points, published_figures),
                                    summary.hardware_words([r.manifest for r in runs], every))  # fmt: skip
    greedy = requests[[temperature(str(r)) == 0 for r in requests["run_id"]]] if not requests.empty else requests
    percentiles, support = slo.point_percentiles(requests, terms), slo.point_support(requests, terms)
    within = slo.best_within(serving, percentiles, terms, support=support)
    usable_closed = analysis.usable_points(points)
    decomp = pd.concat([decomposition.decompose(points, requests, b, (m,)) for m, b in readings.pairs_of(
        usable_closed["method"] if not usable_closed.empty else [])] or [decomposition.decompose(points, requests)],
        ignore_index=True)  # fmt: skip
    flags, manifests = trust_flags_of(runs), {r.run_id: r.manifest for r in runs}
    slice_rows, slice_notes = slices.slice_rows(points, requests)
    verdict_block = answer.build_verdict(answer.VerdictInputs(
        points=usable_closed, readings=table, agree=agree, requests=greedy,
        measured_on=measured_on_lines(usable_closed, all_requests, manifests), greedy=not sampled,
        sittings=sittings,
        sizing=answer.sizing_words(usable_closed), unmeasured=[u for r in runs for u in unmeasured_points(r)],
        ties=(ties := [t for r in runs for t in r.ties]),
        by_design=(by_design := lossless.verifiers_not_lossless(manifests.values())),
        slo_terms=terms if (asked or "").strip() else (), gpu_hour_cost=gpu_hour_cost, slice_rows=slice_rows,
        slo_reach=slo.reach(serving, percentiles, terms, support), slowed=trend.slowed_at(usable_closed),
        all_requests=requests, probes=probes))  # fmt: skip
    verdict_block.trust, verdict_block.extra = verdict_trust(flags, verdict_block, len(runs) > 1), \
        trace_report.verdict_lines_of(every, all_requests, manifests, probes, run_terms, ties, by_design)  # fmt: skip
    all_points = analysis.with_tput_per_c(usable)
    missing_tau = [missing_tau_reason(setting, method, runs) for setting, method in acceptance.missing_category_tau(every)]
    lines = section_lines(usable_closed, manifests, decomp, within, terms, published, open_loop, gpu_hour_cost)
    speed_tables, slo_tables, open_tables, sections = _sections(
        single, matched, points, matched_rd, serving, within, terms, slo_text, open_loop, tau, missing_tau, agree, acc,
        sampled, published, published_problem, all_points, every, all_requests, band, runs, raw, unit, decomp,
        slice_table := slices_table(slice_rows, slice_notes), lines, run_terms)  # fmt: skip
    if with_figures:
        _draw(sections, runs, serving, analysis.request_latencies(points, requests), single, matched, tau, band, unit, decomp)
    sections = [s for s in tune_section.insert(sections, every, all_requests, with_figures)  # a method at several K
                if not setattr(s, "tables", [fold_constant_columns(t) for t in s.tables])
                and (s.figures or s.tables or s.lines)]  # fmt: skip
    title = "dflashbench report — " + ", ".join(r.run_id for r in runs)
    headline = [*speed_tables, *slo_tables, *open_tables, *trace_report.tables(sections), tau_table(tau, missing_tau),
                slice_table]
    if not acc.empty:
        headline.append(accuracy_table(acc))
    if not published.empty or published_problem:
        headline.extend(published_tables(published, published_problem)[:1])
    headline = [fold_constant_columns(t) for t in headline]
    warnings = quality.warnings(agree, acc) + steady.ramp_warnings(points) + load_shape.client_findings(usable)[0]
    notes = [f"{s}: sampled, so agreement with AR is not reported (exact agreement means nothing at temperature "
             "> 0); accuracy only." for s in sampled] + [n for n in [steady.reuse_note(requests)] if n] + \
        timing_notes(usable) + load_shape.point_notes(raw)  # fmt: skip
    return ReportModel(
        title=title, runs=[run_info(r) for r in runs], sections=sections, band=band, headline=headline,
        warnings=warnings, notes=notes, verdict=verdict_block, trust=[long for *_, long in flags],
        definitions=[summary.ANSWER_RULE, summary.INTERVAL_DEFINITION, summary.SINGLE_VS_MATCHED,
                     summary.PER_USER_DEFINITION], readings=table,
        decides=fold_constant_columns(readings_table(table, answer.fit(verdict_block))),  # within its 14 lines
    )


def _readings(points: pd.DataFrame, requests: pd.DataFrame, every: pd.DataFrame, all_requests: pd.DataFrame,
              probes: Mapping, run_terms: Mapping, sittings: Mapping) -> pd.DataFrame:  # fmt: skip
    """Every reading of the runs, one table: the closed loop's (on the prompts both ran, each category's too) and a
    trace replay's (``speed`` set), which the trace verdict decides on (review 2026-11-29, X12)."""
    table = readings.pair_readings(points, requests, probes, categories=True, terms=run_terms, sittings=sittings)
    traced = trace_readings.finished(every)
    if traced.empty:
        return table
    found = trace_readings.as_readings(trace_readings.pair_readings(traced, all_requests, probes, run_terms))
    return pd.concat([t for t in (table, found) if not t.empty], ignore_index=True) if not found.empty else table


def _temperatures(runs: Sequence[Run]):
    """Each run's sampling temperature as a function of its id, and the sampled runs in words."""
    temps = {r.run_id: r.meta.temperature for r in runs}
    return (lambda run_id: temps.get(run_id, 0.0)), [f"{rid} (temperature {t:g})" for rid, t in temps.items() if t > 0]


def suite_slo(runs: Sequence[Run]) -> str | None:
    """The SLO the runs' sweeps were given (``sweep --slo``, suite key ``slo``), which the report reads unless told
    otherwise; the first run's where several name one."""
    found = [s for r in runs if isinstance(s := (r.meta.suite_config or {}).get("slo"), str) and s.strip()]
    return found[0] if found else None


def trust_flags_of(runs: Sequence[Run]) -> list[tuple[str, str, str]]:
    """Every run's trust flags as (run id, short, whole): the short form in the verdict, the whole sentence below
    it."""
    several = len(runs) > 1
    return [(run.run_id, short_flag(f), f"{run.run_id}: {f}" if several else f) for run in runs
            for f in trust_flags(run)]  # fmt: skip


# Trust flags a verdict line already says: what the line says -> the flag's short form it makes redundant.
SAID_IN_VERDICT = {"GPU was busy": "the GPU idled at", "(no stored text)": "no output text stored"}


def verdict_trust(flags: Sequence[tuple[str, str, str]], block: answer.VerdictBlock, several: bool) -> list[str]:
    """The verdict's "Read with care" list: each flag short, less what a verdict line already says; with several
    runs, each run's flags after its id (a flag every run raises, once, for every run)."""
    lines = " ".join(t for s in block.settings for _, t in s.facts)
    said = tuple(flag for text, flag in SAID_IN_VERDICT.items() if text in lines)
    kept = [(run, short) for run, short, _ in flags if not short.startswith(said)]
    if not several:
        return [short for _, short in kept]
    runs = list(dict.fromkeys(run for run, _ in kept))
    every = [s for s in dict.fromkeys(s for _, s in kept) if all((r, s) in kept for r in runs)] if len(runs) > 1 else []
    own = [f"{r}: " + ", ".join(s for rr, s in kept if rr == r and s not in every) for r in runs]
    return ([f"every run: {', '.join(every)}"] if every else []) + [o for o in own if not o.endswith(": ")]


def short_flag(flag: str) -> str:
    """A trust flag's first clause: ``timing noise at 4 point(s)``."""
    cut = min((i for i in (flag.find(":"), flag.find(" (")) if i > 0), default=len(flag))
    return flag[:cut]


def measured_on_lines(points: pd.DataFrame, requests: pd.DataFrame, manifests: Mapping[str, dict]) -> dict:
    """Setting key -> its "measured on" line (:func:`answer.measured_on`)."""
    out = {}
    alls = points[points["category"] == "all"] if not points.empty else points
    for key, g in alls.groupby(["backend", "model", "workload"], sort=True) if not alls.empty else []:
        mine = [manifests[r] for r in dict.fromkeys(g["run_id"].astype(str)) if r in manifests]
        out[key] = answer.measured_on(mine, g, requests)
    return out


def section_lines(points: pd.DataFrame, manifests: Mapping[str, dict], decomp: pd.DataFrame, within: pd.DataFrame,
                  terms, published: pd.DataFrame, open_loop: pd.DataFrame, gpu_hour_cost: float | None) -> dict:  # fmt: skip
    """Section id -> its lines (:mod:`.details`): why, SLO, cost, published, open loop, points not measured."""
    drafts = {m: n for m, (n, _) in details.draft_lengths(list(manifests.values()), points).items()}
    alls = [dict(zip(("backend", "model", "workload"), k, strict=True)) for k in
            dict.fromkeys(points.loc[points["category"] == "all", ["backend", "model", "workload"]].itertuples(
                index=False, name=None))] if not points.empty else []  # fmt: skip
    return {"why": [*details.explain_lines(decomp, drafts), *details.draft_lines(list(manifests.values()), points)],
            "slo": details.slo_lines(within, terms), "telemetry": details.cost_lines(points, gpu_hour_cost),
            "published": [line for key in alls for line in details.published_lines(published, key)],
            "openloop": details.open_loop_lines(open_loop), "latency": details.timing_lines(points)}


def _sections(single, matched, points, readings_frame, serving, within, terms, slo_text, open_loop, tau, missing_tau,
              agree, acc, sampled, published, published_problem, all_points, every, all_requests, band, runs, raw, unit,
              decomp, slice_table, lines, run_terms=None) -> tuple[list[Table], list[Table], list[Table],
                                                                 list[Section]]:  # fmt: skip
    """The report's sections below the verdict (the readings the verdict does not say, each in its room), and the
    speed, SLO and open-loop tables the headline repeats."""
    interactivity_tables = [matched_summary_table(verdict.matched_summary_frame(readings_frame), unit)]
    if band is not None:
        interactivity_tables.append(matched_interactivity_table(tables.with_text(repeats.matched_interactivity_ci(
            analysis.matched_interactivity_speedups(serving, band_targets(band)), raw)), band, unit))  # fmt: skip
    speed_tables = [single_stream_table(single), matched_concurrency_table(analysis.with_energy(matched, points)),
                    *interactivity_tables]
    slo_tables = [slo_table(within, terms, unit, default=not (slo_text or "").strip())]
    open_tables = [load_shape.open_loop_table(open_loop, unit)] if not open_loop.empty else []
    sections = [
        Section("pareto", "Latency–throughput Pareto frontier",
                "Each curve joins a method's non-dominated points; c=N is the concurrency of the point. Both axes "
                "are logarithmic, so the straight segments are the log–log interpolation the matched-interactivity "
                "readings use."),
        Section("speedups", "Speedups over AR", "Per-user speedups (decode only) and matched interactivity; the "
                "verdict decides on request latency and throughput.", tables=speed_tables),
        Section("why", "Why it pays: acceptance over step cost", tables=[decomposition_table(decomp)],
                lines=lines["why"]),
        Section("slo", "Within a latency SLO", tables=slo_tables, lines=lines["slo"]),
        Section("openloop", "Open-loop points", tables=open_tables, lines=lines["openloop"]),
        *trace_report.sections(every, all_requests, unit, {r.run_id: r.probes for r in runs}, run_terms),  # --trace
        Section("acceptance", "Acceptance", tables=[tau_table(tau, missing_tau), slice_table]),
        Section("quality", "Output quality",
                "Is the speedup still lossless on this engine? Greedy speculative decoding should reproduce AR's "
                "output; task accuracy, on the prompts both methods ran, shows what a difference costs.",
                tables=[agreement_table(agree, sampled), accuracy_table(acc)]),
        Section("published", "Measured beside published", tables=published_tables(published, published_problem),
                lines=lines["published"]),
        Section("latency", "Latency", tables=[points_table(all_points, unit)], lines=lines["latency"]),
        Section("telemetry", "GPU telemetry, energy and cost", "Power and utilisation from NVML, when the run had a GPU.",
                lines=lines["telemetry"]),
        Section("errors", "Errors", tables=failures_tables(every, all_requests)),
    ]  # fmt: skip
    return speed_tables, slo_tables, open_tables, sections


VLLM_PER_REQUEST = ("vLLM reports acceptance per request from 0.29.0, with --per-request-spec-decode-metrics summary "
                    "(vllm/config/observability.py; absent from 0.28.0)")


def missing_tau_reason(setting: dict, method: str, runs: Sequence[Run]) -> str:
    """Why a method's per-category τ rows are missing: server-wide counters and no per-request acceptance."""
    engine = next((r.manifest.get("engine") or {} for r in runs if str(r.manifest.get("backend")) in
                   str(setting["backend"])), {})  # fmt: skip
    which = f"{engine.get('distribution')} {engine.get('version')}" if engine.get("distribution") else setting["backend"]
    hint = f" ({VLLM_PER_REQUEST})" if "vllm" in str(setting["backend"]) else ""
    return (f"No per-category τ for {analysis.method_label(method)} on {setting['backend']}: {which}'s counters are "
            f"server-wide and this run's requests carry no per-request acceptance{hint}, so a mixed run's τ cannot be "
            "split by category; sweep one category on its own to read its τ.")


def timing_notes(points: pd.DataFrame) -> list[str]:
    """One note where measured points left some requests out of their per-token latency (bursts); points where it
    was not measured at all are in the latency section (:func:`.details.timing_lines`)."""
    if points.empty or "timing_observed_share" not in points.columns:
        return []
    share = pd.to_numeric(points["timing_observed_share"], errors="coerce")
    reason = points["latency_not_measured_reason"] if "latency_not_measured_reason" in points.columns else None
    partial = points[(share < 1) & (reason.isna() if reason is not None else True) & (points["category"] == "all")]
    if partial.empty:
        return []
    from dflashbench.report.load_shape import point_where

    where = ", ".join(f"{point_where(p)} ({int(p['timing_observed_requests'])}/{int(p['timing_requests'])})"
                      for p in partial.to_dict("records"))  # a trace's or an open loop's by its rate, not c=0
    return [f"Requests whose output arrived mostly in bursts were left out of TPOT, ITL and per-user tok/s at {where} "
            f"(observed/with a decode; at least {observability.MIN_OBSERVED_SHARE:.0%} observed is needed to report "
            "them at all)."]  # fmt: skip


def _draw(sections: list[Section], runs: Sequence[Run], serving: pd.DataFrame, latencies: pd.DataFrame,
          single: pd.DataFrame, matched: pd.DataFrame, tau: pd.DataFrame, band, unit: str,
          decomp: pd.DataFrame) -> None:  # fmt: skip
    """Add the figures to their sections: a Pareto plot per workload (category "all", or each category measured
    on its own), speedup bars, acceptance, latency distributions, telemetry per run."""
    by_id = {s.id: s for s in sections}
    for workload in list(dict.fromkeys(serving["workload"])) if not serving.empty else []:
        mine = serving[serving["workload"] == workload]
        cats = ["all"] if "all" in set(mine["category"]) else list(dict.fromkeys(mine["category"]))
        for category in cats:
            _add(by_id["pareto"], figures.pareto_figure(serving, workload, category, band, unit=unit))
        _add(by_id["speedups"], figures.speedup_figure(single, matched, workload))
        _add(by_id["speedups"], figures.decomposition_figure(decomp, workload))
        _add(by_id["acceptance"], figures.tau_figure(tau, workload))
        _add(by_id["latency"], figures.latency_figure(latencies, workload))
    for run in runs:
        _add(by_id["telemetry"], figures.telemetry_figure(run.telemetry, run.run_id))


def _add(section: Section, figure: figures.Figure | None) -> None:
    if figure is not None:
        section.figures.append(figure)
