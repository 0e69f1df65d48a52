"""What a report shows, built from loaded runs: tables of formatted cells, figures, run facts.

Everything here is plain data (strings and :class:`~dflashbench.report.figures.Figure`); the templates
only lay it out. Formatting numbers happens here so HTML and Markdown show the same digits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from dflashbench import analysis, metrics, quality, steady
from dflashbench.analysis import method_label
from dflashbench.errors import UserError
from dflashbench.report import figures, intervals
from dflashbench.store import Run
from dflashbench.types import RequestResult

MAX_ERROR_ROWS = 50


@dataclass
class Table:
    title: str
    caption: str
    columns: list[str]
    rows: list[list[str]]
    empty: str = "Nothing to show for these runs."


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    figures: list[figures.Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


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


# --- cell formatting --------------------------------------------------------------------------------


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and v != v) or v is pd.NA


def fmt_x(v) -> str:
    return "—" if _missing(v) else f"{float(v):.2f}×"


def fmt_num(v, digits: int = 1) -> str:
    if _missing(v):
        return "—"
    v = float(v)
    return f"{v:,.{digits}f}" if abs(v) >= 1 or v == 0 else f"{v:.3g}"


def fmt_ms(v) -> str:
    return "—" if _missing(v) else f"{float(v) * 1000:,.1f}"


def fmt_tau(v) -> str:
    return "—" if _missing(v) else f"{float(v):.2f}"


def fmt_text(v) -> str:
    return "—" if _missing(v) else str(v)


def _rows(df: pd.DataFrame, spec: Sequence[tuple[str, str, Callable]]) -> tuple[list[str], list[list[str]]]:
    return [h for h, _, _ in spec], [[f(r.get(c)) for _, c, f in spec] for _, r in df.iterrows()]


SETTING_SPEC = [("backend", "backend", fmt_text), ("model", "model", fmt_text),
                ("workload", "workload", fmt_text), ("category", "category", fmt_text)]  # fmt: skip
METHOD_SPEC = [("method", "method", lambda m: method_label(str(m)))]


# --- tables -----------------------------------------------------------------------------------------


QUALITY_SPEC = [("agreement with AR", "agreement_text", fmt_text), ("accuracy AR → method", "accuracy_text", fmt_text)]


def _quality_spec(df: pd.DataFrame) -> list[tuple[str, str, Callable]]:
    """The quality columns beside a speedup, where any row has them."""
    return [s for s in QUALITY_SPEC if s[1] in df.columns and df[s[1]].notna().any()]


def single_stream_table(df: pd.DataFrame) -> Table:
    cols, rows = _rows(df, [*SETTING_SPEC, *METHOD_SPEC, ("TPOT AR (ms)", "baseline_tpot_s", fmt_ms),
                            ("TPOT method (ms)", "method_tpot_s", fmt_ms), ("statistic", "statistic", fmt_text),
                            ("speedup", "speedup", fmt_x), *intervals.ci_spec(df), *_quality_spec(df)])  # fmt: skip
    return Table("Single-stream speedup", "TPOT(AR) / TPOT(method) at concurrency 1 — the DFlash paper's number.",
                 cols, rows, "No setting has both AR and a speculative method at concurrency 1.")  # fmt: skip


def matched_concurrency_table(df: pd.DataFrame) -> Table:
    cols, rows = _rows(df, [*SETTING_SPEC, *METHOD_SPEC, ("concurrency", "concurrency", fmt_text),
                            ("AR tok/s/user", "baseline_per_user_tok_per_s", fmt_num),
                            ("method tok/s/user", "method_per_user_tok_per_s", fmt_num),
                            ("speedup", "speedup", fmt_x), *intervals.ci_spec(df), *_quality_spec(df)])  # fmt: skip
    return Table("Speedup at matched concurrency",
                 "per-user tok/s(method) / per-user tok/s(AR) at the same concurrency — NVIDIA's SPEED-Bench tables.",
                 cols, rows, "No concurrency was measured for both AR and a speculative method.")  # fmt: skip


def matched_interactivity_table(df: pd.DataFrame, band: tuple[float, float] | None) -> Table:
    cols, rows = _rows(df, [*SETTING_SPEC, *METHOD_SPEC, ("tok/s/user", "per_user_tok_per_s", fmt_num),
                            ("AR tput/GPU", "baseline_throughput_per_gpu", fmt_num),
                            ("method tput/GPU", "method_throughput_per_gpu", fmt_num),
                            ("speedup", "speedup", fmt_x), *intervals.ci_spec(df), ("note", "note", fmt_text)])  # fmt: skip
    where = (f"at the edges and middle of the {band[0]:g}–{band[1]:g} tok/s/user band" if band
             else "at each point of the method's own frontier")  # fmt: skip
    return Table("Speedup at matched interactivity",
                 "throughput/GPU(method) / throughput/GPU(AR) at the same tokens/s per user, read off each "
                 "Pareto frontier by log–log interpolation, " + where + ". Outside a frontier's measured "
                 "range: not reached, never extrapolated — NVIDIA's \"15×\" figure.",
                 cols, rows, "No setting has both AR and a speculative method with measured throughput.")  # fmt: skip


def tau_table(df: pd.DataFrame) -> Table:
    def per_pos(rates) -> str:
        return (
            "—" if not isinstance(rates, tuple | list) or not rates else " ".join(f"{r:.2f}" for r in rates)
        )

    cols, rows = _rows(df, [*SETTING_SPEC, *METHOD_SPEC, ("τ", "tau", fmt_tau), ("τ min", "tau_min", fmt_tau),
                            ("τ max", "tau_max", fmt_tau), ("points", "num_points", fmt_text),
                            ("acceptance per draft position", "accepted_per_pos_rate", per_pos)])  # fmt: skip
    return Table("Acceptance length τ per category",
                 "τ = mean tokens committed per target verification step, bonus token included (AR: τ = 1), "
                 "pooled over the concurrency points as tokens / steps.",
                 cols, rows, "No speculative point reported τ.")  # fmt: skip


def published_tables(df: pd.DataFrame, problem: str | None = None) -> list[Table]:
    """Figures with a matching measurement (or a reason there is none, e.g. not reached), then the ones
    these runs did not measure at all, shorter."""
    if not df.empty:  # "> 15.00": the figure is a bound read off a plot, not an exact value
        df = df.assign(published_shown=[_join(b if isinstance(b, str) else None, fmt_tau(v))
                                        for b, v in zip(df["bound"], df["published"], strict=True)])  # fmt: skip
    matched = df[df["measured_in"].notna()] if not df.empty else df
    unmatched = df[df["measured_in"].isna()] if not df.empty else df
    figure = [("task", "task", fmt_text), *METHOD_SPEC, ("baseline", "baseline", lambda m: method_label(str(m))),
              ("metric", "metric", fmt_text), ("published", "published_shown", fmt_text)]  # fmt: skip
    cols, rows = _rows(matched, [("source", "source", fmt_text), ("published model", "model", fmt_text),
                                 ("engine", "engine", fmt_text), ("hardware", "hardware", fmt_text), *figure,
                                 ("measured", "measured", fmt_tau), ("measured / published", "ratio", fmt_tau),
                                 ("measured in", "measured_in", fmt_text), ("note", "note", fmt_text)])  # fmt: skip
    empty = problem or ("These runs' suites name no published figures." if df.empty
                        else "No published figure matches a workload, category and method measured here.")  # fmt: skip
    out = [Table("Measured beside published",
                 "The published figures these runs' suites reproduce, each beside the matching measurement. "
                 "The published model, engine and hardware are shown as published: compare like with like.",
                 cols, rows, empty)]  # fmt: skip
    if not unmatched.empty:
        cols, rows = _rows(unmatched, [("source", "source", fmt_text), *figure, ("note", "note", fmt_text)])
        out.append(Table("Published figures not measured here",
                         "Figures of the same sources whose task, method or baseline these runs did not measure.",
                         cols, rows))  # fmt: skip
    return out


def agreement_table(df: pd.DataFrame, sampled: Sequence[str]) -> Table:
    def div(median, low) -> str:
        return "—" if _missing(low) else f"{fmt_num(median)} (min {int(low)})"

    df = df.assign(share=[_share(k, n) for k, n in zip(df["exact"], df["compared"], strict=True)],
                   chars=[div(m, lo) for m, lo in zip(df["div_chars_median"], df["div_chars_min"], strict=True)],
                   tokens=[div(m, lo) for m, lo in zip(df["div_tokens_median"], df["div_tokens_min"], strict=True)],
                   past=[None if not n else n for n in df["div_unknown"]])  # fmt: skip
    cols, rows = _rows(df, [*SETTING_SPEC, *METHOD_SPEC, ("concurrency", "concurrency", fmt_text),
                            ("compared with", "reference", fmt_text), ("identical", "share", fmt_text),
                            ("first divergence, chars: median", "chars", fmt_text),
                            ("tokens: median", "tokens", fmt_text), ("past the stored text", "past", fmt_text),
                            ("AR-vs-AR floor", "floor", fmt_pct), ("note", "note", fmt_text)])  # fmt: skip
    caption = ("Greedy runs: the share of requests whose output is identical to AR's at the same concurrency (full "
               "text, compared by hash), and where the others first differ, in characters and (where the server "
               "streamed token ids) tokens. AR rows compare AR at each concurrency with AR at its lowest: engines "
               "are not bitwise batch-invariant, and that is the noise floor a lossless method should reach.")
    if sampled:
        caption += (f" Sampled runs ({', '.join(sampled)}) are left out: at temperature > 0 exact agreement means "
                    "nothing, so they are judged by accuracy only.")
    return Table("Agreement with AR", caption, cols, rows,
                 "No greedy run with stored outputs has AR and another method (or AR at two concurrencies).")


def accuracy_table(df: pd.DataFrame) -> Table:
    df = df.assign(share=[_share(k, n) for k, n in zip(df["num_correct"], df["num_graded"], strict=True)],
                   conc=["all (pooled)" if _missing(c) else str(int(c)) for c in df["concurrency"]],
                   mode=["sampled" if s else "greedy" for s in df["sampled"]],
                   verdict=["BELOW AR beyond noise" if d else None for d in df["significant_drop"]])  # fmt: skip
    cols, rows = _rows(df, [*SETTING_SPEC, *METHOD_SPEC, ("concurrency", "conc", fmt_text),
                            ("accuracy", "share", fmt_text), ("AR", "ar_accuracy", fmt_pct),
                            ("Δ (points)", "delta", lambda v: "—" if _missing(v) else f"{100 * float(v):+.1f}"),
                            ("p (two-proportion)", "p_value", lambda v: "—" if _missing(v) else f"{float(v):.3g}"),
                            ("decoding", "mode", fmt_text), ("verdict", "verdict", fmt_text)])  # fmt: skip
    return Table("Task accuracy",
                 "Correct / graded per point, for workloads with reference answers (GSM8K: the final number; "
                 "MATH-500 and AIME: the boxed answer, normalised as the common harnesses do; rules in "
                 "dflashbench.grading). HumanEval and MBPP are not graded (that would mean running model code): "
                 "judge them by agreement. A method is flagged when its accuracy lies below AR's beyond noise "
                 "(two-proportion z-test, two-sided, 95%).",
                 cols, rows, "No workload of these runs has reference answers.")  # fmt: skip


def _share(k, n) -> str:
    if _missing(n) or not n:
        return "—"
    return f"{100 * float(k) / float(n):.1f}% ({int(k)}/{int(n)})"


def fmt_pct(v) -> str:
    return "—" if _missing(v) else f"{100 * float(v):.1f}%"


def with_quality(df: pd.DataFrame, agree: pd.DataFrame, acc: pd.DataFrame, concurrency: int | None = None
                 ) -> pd.DataFrame:  # fmt: skip
    """A speedup table with ``agreement_text`` and ``accuracy_text`` beside each row (its setting, method and
    concurrency; ``concurrency`` fixes it for the single-stream table)."""
    key = lambda r, c: (r["backend"], r["model"], r["workload"], r["category"], r["method"], int(c))  # noqa: E731
    agreed = {key(r, r["concurrency"]): _share(r["exact"], r["compared"])
              for r in agree.to_dict("records") if r["compared"]}  # fmt: skip
    accurate = {key(r, r["concurrency"]): r for r in acc.to_dict("records") if not _missing(r["concurrency"])}
    if df.empty:
        return df.assign(agreement_text=None, accuracy_text=None)
    texts, accs = [], []
    for r in df.to_dict("records"):
        k = key(r, concurrency if concurrency is not None else r["concurrency"])
        texts.append(agreed.get(k))
        a = accurate.get(k)
        accs.append(None if a is None else f"{fmt_pct(a['ar_accuracy'])} → {fmt_pct(a['accuracy'])}"
                    + (" ⚠" if a["significant_drop"] else ""))  # fmt: skip
    return df.assign(agreement_text=texts, accuracy_text=accs)


def points_table(df: pd.DataFrame) -> Table:
    cols, rows = _rows(df, [("run", "run_id", fmt_text), *SETTING_SPEC, *METHOD_SPEC,
                            ("conc.", "concurrency", fmt_text), ("requests", "num_requests", fmt_text),
                            ("errors", "num_errors", fmt_text), ("tput tok/s", "throughput_tok_per_s", fmt_num),
                            ("tput/GPU", "throughput_tok_per_s_per_gpu", fmt_num),
                            ("tok/s/user mean", "per_user_tok_per_s_mean", fmt_num),
                            ("tok/s/user p10", "per_user_tok_per_s_p10", fmt_num),
                            ("TTFT p50 ms", "ttft_s_p50", fmt_ms), ("TTFT p99 ms", "ttft_s_p99", fmt_ms),
                            ("TPOT p50 ms", "tpot_s_p50", fmt_ms), ("TPOT p99 ms", "tpot_s_p99", fmt_ms),
                            ("ITL p99 ms", "itl_s_p99", fmt_ms), ("τ", "tau", fmt_tau),
                            ("J/tok", "energy_j_per_tok", fmt_num), ("status", "status", fmt_text)])  # fmt: skip
    return Table("All points", "Every sweep point as measured (one row per backend × method × workload × "
                 "category × concurrency).", cols, rows, "These runs have no points.")  # fmt: skip


def failures_tables(points: pd.DataFrame, requests: pd.DataFrame) -> list[Table]:
    failed = points[points["status"].fillna("ok") != "ok"] if "status" in points.columns else points.iloc[0:0]
    cols, rows = _rows(failed, [("run", "run_id", fmt_text), *SETTING_SPEC, *METHOD_SPEC,
                                ("conc.", "concurrency", fmt_text), ("reason", "failure_reason", fmt_text)])  # fmt: skip
    out = [Table("Failed points", "Points that did not finish, with the reason recorded by the sweep.", cols, rows,
                 "No point failed.")]  # fmt: skip
    bad = requests[requests["ok"] == False] if "ok" in requests.columns else requests.iloc[0:0]  # noqa: E712
    cols, rows = _rows(bad.head(MAX_ERROR_ROWS), [("run", "run_id", fmt_text), ("point", "point_id", fmt_text),
                                                  ("request", "request_id", fmt_text),
                                                  ("category", "category", fmt_text), ("error", "error", fmt_text)])  # fmt: skip
    more = f" (first {MAX_ERROR_ROWS} of {len(bad)})" if len(bad) > MAX_ERROR_ROWS else ""
    out.append(Table("Failed requests" + more, "Requests that ended in an error, with the error as recorded.",
                     cols, rows, "No request failed."))  # fmt: skip
    return out


# --- runs -------------------------------------------------------------------------------------------


def _join(*parts: object, sep: str = " ") -> str:
    return sep.join(str(p) for p in parts if p not in (None, "", [], {}))


def run_facts(m: dict) -> list[tuple[str, str]]:
    """The manifest's headline facts (as :mod:`dflashbench.sweep` writes them), in reading order; what a
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
                        f"— {suite['description']}" if suite.get("description") else None)),
        ("status", m.get("status")),
        ("backend", _join(m.get("backend"), f"at {m['endpoint']}" if m.get("endpoint") else None)),
        ("model", m.get("model")),
        ("drafts", _join(*(f"{k}: {v}" for k, v in (m.get("drafts") or {}).items()), sep=", ")),
        ("GPUs", _join(gpus, f"(driver {gpu['driver']})" if gpu.get("driver") else None,
                       f"({gpu['reason']})" if gpu.get("reason") else None)),
        ("started", m.get("started_at")),
        ("finished", m.get("finished_at")),
        ("dflashbench", _join(m.get("dflashbench_version"), f"git {m['git_sha'][:12]}" if m.get("git_sha") else None,
                              "(uncommitted changes)" if m.get("git_dirty") else None)),
        ("host", _join(host.get("hostname"), host.get("platform"), sep=", ") if isinstance(host, dict) else host),
        ("versions", _join(*(f"{k} {v}" for k, v in versions.items() if v), sep=", ")
         if isinstance(versions, dict) else versions),
    ]  # fmt: skip
    return [(label, str(value)) for label, value in facts if value not in (None, "")]


def run_info(run: Run) -> RunInfo:
    facts = run_facts(run.manifest)
    points, requests = run.points, run.requests
    failed_points = int((points["status"].fillna("ok") != "ok").sum()) if "status" in points.columns else 0
    failed_requests = int((requests["ok"] == False).sum()) if "ok" in requests.columns else 0  # noqa: E712
    return RunInfo(run_id=run.run_id, run_dir=str(run.run_dir), facts=facts,
                   manifest_json=json.dumps(run.manifest, indent=2, ensure_ascii=False, default=str),
                   num_points=len(points), num_failed_points=failed_points, num_requests=len(requests),
                   num_failed_requests=failed_requests)  # fmt: skip


def request_latencies(points: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per measured, successful request: backend, method, workload, concurrency, ttft_s, tpot_s
    (the definitions of :mod:`dflashbench.metrics`), joined to its point by (run_id, point_id)."""
    columns = ["backend", "method", "workload", "concurrency", "category", "ttft_s", "tpot_s"]
    if requests.empty or points.empty or "point_id" not in points.columns:
        return pd.DataFrame(columns=columns)
    where = points.drop_duplicates(["run_id", "point_id"])[
        ["run_id", "point_id", "backend", "method", "workload"]
    ]
    rows = []
    for record in requests.to_dict("records"):
        r = RequestResult.from_dict(record)
        if not r.ok or r.warmup:
            continue
        rows.append({"run_id": r.run_id, "point_id": r.point_id, "concurrency": r.concurrency,
                     "category": r.category, "ttft_s": metrics.ttft_s(r), "tpot_s": metrics.tpot_s(r)})  # fmt: skip
    if not rows:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame(rows).merge(where, on=["run_id", "point_id"], how="inner")[columns]


# --- the whole report -------------------------------------------------------------------------------


def published_for(runs: Sequence[Run]) -> tuple[pd.DataFrame, str | None]:
    """The published figures named by the runs' suites (``suite_config.published`` ids), if any, and why not
    where they cannot be read (the report still renders)."""
    ids: list[str] = []
    for run in runs:
        found = (run.manifest.get("suite_config") or {}).get("published") or []
        for figure_id in [found] if isinstance(found, str) else found:
            if str(figure_id) not in ids:
                ids.append(str(figure_id))
    if not ids:
        return pd.DataFrame(), None
    try:
        from dflashbench.suites import load_published

        return load_published(ids), None
    except (ImportError, UserError) as exc:
        return pd.DataFrame(), f"The published figures {', '.join(ids)} could not be read: {exc}"


def band_targets(band: tuple[float, float] | None) -> list[float] | None:
    return None if band is None else [band[0], (band[0] + band[1]) / 2, band[1]]


def build(
    runs: Sequence[Run], band: tuple[float, float] | None = None, with_figures: bool = True
) -> ReportModel:
    points = pd.concat([r.points for r in runs], ignore_index=True) if runs else pd.DataFrame()
    requests = pd.concat([r.requests for r in runs], ignore_index=True) if runs else pd.DataFrame()
    temps = {r.run_id: quality.temperature_of(r.manifest) for r in runs}
    temperature = lambda run_id: temps.get(run_id, 0.0)  # noqa: E731
    agree = quality.agreement_table(points, requests, temperature)
    acc = quality.accuracy_table(points, temperature)
    sampled = [f"{rid} (temperature {t:g})" for rid, t in temps.items() if t > 0]
    warnings = quality.warnings(agree, acc) + steady.ramp_warnings(points)
    single = intervals.single_stream_ci(with_quality(analysis.single_stream_speedups(points), agree, acc, concurrency=1), runs)
    matched = intervals.matched_concurrency_ci(with_quality(analysis.matched_concurrency_speedups(points), agree, acc), runs)
    interactive = intervals.matched_interactivity_ci(analysis.matched_interactivity_speedups(points, band_targets(band)), runs)
    tau = analysis.tau_by_category(points)
    published_figures, published_problem = published_for(runs)
    published = analysis.measured_vs_published(points, published_figures)
    usable = analysis.usable_points(points)
    workloads = list(dict.fromkeys(usable["workload"])) if not usable.empty else []

    sections = [
        Section(
            "pareto",
            "Latency–throughput Pareto frontier",
            "Each curve joins a method's non-dominated points; c=N is the concurrency of the point.",
        ),
        Section(
            "speedups",
            "Speedups over AR",
            "The three speedups, each labelled; they answer different questions.",
            tables=[
                single_stream_table(single),
                matched_concurrency_table(matched),
                matched_interactivity_table(interactive, band),
            ],
        ),  # fmt: skip
        Section("acceptance", "Acceptance", tables=[tau_table(tau)]),
        Section("quality", "Output quality",
                "Is the speedup still lossless on this engine? Greedy speculative decoding should reproduce AR's "
                "output; task accuracy shows what a difference costs.",
                tables=[agreement_table(agree, sampled), accuracy_table(acc)]),  # fmt: skip
        Section(
            "published", "Measured beside published", tables=published_tables(published, published_problem)
        ),
        Section("latency", "Latency", tables=[points_table(points)]),
        Section("telemetry", "GPU telemetry", "Power and utilisation from NVML, when the run had a GPU."),
        Section("errors", "Errors", tables=failures_tables(points, requests)),
    ]
    if with_figures:
        by_id = {s.id: s for s in sections}
        latencies = request_latencies(points, requests)
        for workload in workloads:
            mine = usable[usable["workload"] == workload]
            cats = ["all"] if "all" in set(mine["category"]) else list(dict.fromkeys(mine["category"]))
            for category in cats:
                _add(by_id["pareto"], figures.pareto_figure(usable, workload, category, band))
            _add(by_id["speedups"], figures.speedup_figure(single, matched, workload))
            _add(by_id["acceptance"], figures.tau_figure(tau, workload))
            _add(by_id["latency"], figures.latency_figure(latencies, workload))
        for run in runs:
            _add(by_id["telemetry"], figures.telemetry_figure(run.telemetry, run.run_id))
        sections = [s for s in sections if s.figures or s.tables]
    else:
        sections = [s for s in sections if s.tables]
    title = "dflashbench report — " + ", ".join(r.run_id for r in runs)
    headline = [single_stream_table(single), matched_concurrency_table(matched),
                matched_interactivity_table(interactive, band), tau_table(tau)]  # fmt: skip
    if not acc.empty:
        headline.append(accuracy_table(acc))
    if not published.empty or published_problem:
        headline.extend(published_tables(published, published_problem)[:1])
    notes = [f"{s}: sampled, so agreement with AR is not reported (exact agreement means nothing at temperature "
             "> 0); accuracy only." for s in sampled]  # fmt: skip
    notes += [n for n in [steady.reuse_note(requests)] if n]
    return ReportModel(
        title=title, runs=[run_info(r) for r in runs], sections=sections, band=band, headline=headline,
        warnings=warnings, notes=notes,
    )


def _add(section: Section, figure: figures.Figure | None) -> None:
    if figure is not None:
        section.figures.append(figure)
