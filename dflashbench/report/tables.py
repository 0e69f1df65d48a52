"""The report's tables: formatted cells (so HTML and Markdown show the same digits), one function per table.

Each function takes an analysis frame and returns a :class:`Table` of strings; the answer columns come first
(category, method, speedup), the setting after them, and :func:`fold_constant_columns` moves a column that
holds one value on every row into the caption.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from dflashbench.measure import analysis
from dflashbench.measure.analysis import method_label
from dflashbench.report import figures, summary
from dflashbench.report.summary import short_model

MAX_ERROR_ROWS = 50
CI_COLUMN = "speedup_ci_text"  # a speedup's 95% interval as text: paired repeats, or the readings' decision interval
DECIDED = {"faster": "clearly faster", "slower": "clearly slower", "not distinguishable": "not distinguishable"}


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
    lines: list[str] = field(default_factory=list)  # the section's readings in words (dflashbench.report.details)


def _join(*parts: object, sep: str = " ") -> str:
    return sep.join(str(p) for p in parts if p not in (None, "", [], {}))


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


CATEGORY_SPEC = [("category", "category", fmt_text)]
METHOD_SPEC = [("method", "method", lambda m: method_label(str(m)))]
# Backend, model and workload come after the answer columns; where one value fills a whole table it moves
# into the caption (fold_constant_columns), so the answer stays in the first columns.
WHERE_SPEC = [("backend", "backend", fmt_text), ("model", "model", lambda m: fmt_text(None if _missing(m) else short_model(m))),
              ("workload", "workload", fmt_text)]  # fmt: skip
SETTING_SPEC = [*WHERE_SPEC, *CATEGORY_SPEC]
FOLDABLE = ("run", "backend", "model", "workload", "statistic", "baseline", "max in flight", "interval covers")


def fold_constant_columns(table: Table) -> Table:
    """Columns in FOLDABLE holding one value on every row move into the caption ("backend: reference")."""
    if len(table.rows) < 1:
        return table
    keep, folded = [], []
    for i, name in enumerate(table.columns):
        values = {row[i] for row in table.rows}
        if name in FOLDABLE and len(values) == 1:
            folded.append(f"{name}: {next(iter(values))}")
        else:
            keep.append(i)
    if not folded:
        return table
    table.columns = [table.columns[i] for i in keep]
    table.rows = [[row[i] for i in keep] for row in table.rows]
    table.caption = f"{table.caption} Every row: {'; '.join(folded)}."
    return table


# --- tables -----------------------------------------------------------------------------------------


QUALITY_SPEC = [("agreement with AR", "agreement_text", fmt_text), ("accuracy AR → method", "accuracy_text", fmt_text)]


def _quality_spec(df: pd.DataFrame) -> list[tuple[str, str, Callable]]:
    """The quality columns beside a speedup, where any row has them."""
    return [s for s in QUALITY_SPEC if s[1] in df.columns and df[s[1]].notna().any()]


def decision_spec(df: pd.DataFrame) -> list[tuple[str, str, Callable]]:
    """The decision interval, what it decided, what it covers (docs/metrics.md, "The noise rule") and the prompts
    it rests on (both methods ran them), where the table has them; a row without an interval says why."""
    if "decision" not in df.columns:
        return ci_spec(df)
    return [("95% decision interval", CI_COLUMN, fmt_text), ("decided", "decided_text", fmt_text),
            ("prompts both ran", "prompts", fmt_text), ("interval covers", "covers", fmt_text)]


def with_decision_text(df: pd.DataFrame) -> pd.DataFrame:
    """``decided_text``: the decision in words, or why there is no interval; the interval as text."""
    if df.empty or "decision" not in df.columns:
        return df
    texts = [None if _missing(d) else (f"no interval: {w}" if d == "no interval" else DECIDED.get(d, d))
             for d, w in zip(df["decision"], df.get("why", pd.Series(None, index=df.index)), strict=True)]  # fmt: skip
    ci = [None if _missing(lo) else f"[{lo:.2f}×, {hi:.2f}×]" for lo, hi in zip(df["decision_lo"], df["decision_hi"],
                                                                               strict=True)]  # fmt: skip
    return df.assign(decided_text=texts, **{CI_COLUMN: ci})


TIME_WORDS = {"better": "clearly shorter", "worse": "clearly longer", "same": "not distinguishable"}


def readings_table(table: pd.DataFrame, block=None) -> Table:
    """The readings the verdict decides on (``table``: :func:`dflashbench.measure.readings.pair_readings`, the rows
    report --format json writes): per setting, pair and load, the requests' time with its interval and decision,
    the first token's beside it, and the two points' own throughput; a load with an implausible point says so."""
    bad = {(i.setting, i.method, i.concurrency) for s in (block.settings if block else []) for i in s.implausible}
    alls = table[table["category"] == "all"] if not table.empty else table
    if not alls.empty:  # a trace replay's readings: one load per speed (closed-loop rows: none)
        alls = alls.assign(speed=pd.to_numeric(alls["speed"], errors="coerce").fillna(0.0)) if "speed" in alls \
            else alls.assign(speed=0.0)  # fmt: skip
    rows = []
    for key, g in alls.groupby(["backend", "model", "workload", "method", "baseline", "concurrency", "speed"],
                               sort=False):  # fmt: skip
        at = {r["figure"]: r for r in g.to_dict("records")}
        lat, ttft, tput = at.get("latency") or {}, at.get("ttft") or {}, at.get("throughput") or {}
        odd = [method_label(m) for m in key[3:5] if (key[:3], m, int(key[5])) in bad]
        decided = (f"implausible point ({', '.join(odd)}): not decided, out of the crossings" if odd else
                   f"no interval: {lat.get('why')}" if lat.get("decision") == "no interval" else
                   TIME_WORDS.get(lat.get("verdict"), "—") + (" (not decided at this noise)" if str(lat.get("why") or "")
                                                              .startswith("not decided at this noise") else ""))  # fmt: skip
        rows.append({"backend": key[0], "model": key[1], "workload": key[2],
                     "concurrency": f"{key[6]:g}× trace" if key[6] else int(key[5]),
                     "pair": f"{method_label(key[3])} ÷ {method_label(key[4])}", "latency": x_iv(lat),
                     "decided": decided, "ttft": x_iv(ttft), "throughput": fmt_x(tput.get("value")),
                     "prompts": f"{int(lat['common'])} of {int(max(lat['n_method'], lat['n_base']))}"
                     if lat and analysis.finite_number(lat.get("n_method")) is not None else None,
                     "covers": lat.get("covers")})  # fmt: skip
    df = pd.DataFrame(rows, columns=["backend", "model", "workload", "pair", "concurrency", "latency", "decided",
                                     "ttft", "throughput", "prompts", "covers"])  # fmt: skip
    cols, out = _rows(df, [("pair", "pair", fmt_text), ("conc.", "concurrency", fmt_text),
                           ("requests' time", "latency", fmt_text), ("decided", "decided", fmt_text),
                           ("first token", "ttft", fmt_text), ("throughput, the points' own", "throughput", fmt_text),
                           ("prompts both ran", "prompts", fmt_text), ("interval covers", "covers", fmt_text),
                           *WHERE_SPEC])  # fmt: skip
    return Table("The readings it decides on",
                 "Method ÷ the other method at each load, from the readings report --format json writes. Requests' "
                 "time: mean request time (sent to last token) on the prompts both ran, paired, with its 95% decision "
                 "interval: below 1, the method's requests take less time; the answer decides on it. First token: the "
                 "same for the time to the first token. Throughput: the two points' own (output tokens ÷ the measured "
                 "window), one figure each, no interval: beside the answer, not deciding.",
                 cols, out, "No setting has AR and another method measured at a common load.")  # fmt: skip


def x_iv(row: dict, name: str = "value", lo: str = "lo", hi: str = "hi") -> str | None:
    """``0.32× [0.26–0.39]``: a ratio of ``row`` and its interval (``<name>_lo``/``_hi`` where ``name`` is given)."""
    lo, hi = (f"{name}_{e}" if name != "value" else k for e, k in (("lo", lo), ("hi", hi)))
    if _missing(row.get(name)):
        return None
    return fmt_x(row[name]) + ("" if _missing(row.get(lo)) or _missing(row.get(hi)) else
                               f" [{float(row[lo]):.2f}–{float(row[hi]):.2f}]")  # fmt: skip


def single_stream_table(df: pd.DataFrame) -> Table:
    df = with_decision_text(df)
    cols, rows = _rows(df, [*CATEGORY_SPEC, *METHOD_SPEC, ("speedup", "speedup", fmt_x), *decision_spec(df),
                            *_quality_spec(df),
                            ("TPOT AR (ms)", "baseline_tpot_s", fmt_ms), ("TPOT method (ms)", "method_tpot_s", fmt_ms),
                            ("statistic", "statistic", fmt_text), *WHERE_SPEC])  # fmt: skip
    return Table("Single-stream speedup", "mean TPOT(AR) / mean TPOT(method) at c=1. " + summary.SEE_DEFINITIONS,
                 cols, rows, "No setting has both AR and a speculative method at concurrency 1.")  # fmt: skip


def _energy_spec(df: pd.DataFrame) -> list[tuple[str, str, Callable]]:
    """Energy per token and GPU-seconds per million output tokens of both sides, where NVML measured them."""
    cols = ("method_j_per_tok", "baseline_j_per_tok")
    if not all(c in df.columns for c in cols) or not df[list(cols)].notna().any().any():
        return []
    return [("J/tok method", "method_j_per_tok", fmt_num), ("J/tok AR", "baseline_j_per_tok", fmt_num),
            ("GPU·s per Mtok method", "method_gpu_s_per_mtok", fmt_num),
            ("GPU·s per Mtok AR", "baseline_gpu_s_per_mtok", fmt_num)]


def matched_concurrency_table(df: pd.DataFrame) -> Table:
    df = with_decision_text(df)
    cols, rows = _rows(df, [*CATEGORY_SPEC, *METHOD_SPEC, ("concurrency", "concurrency", fmt_text),
                            ("speedup", "speedup", fmt_x), *decision_spec(df),
                            ("AR tok/s/user", "baseline_per_user_tok_per_s", fmt_num),
                            ("method tok/s/user", "method_per_user_tok_per_s", fmt_num), *_energy_spec(df),
                            *_quality_spec(df), ("statistic", "statistic", fmt_text), *WHERE_SPEC])  # fmt: skip
    return Table("Speedup at matched concurrency",
                 "per-user tok/s(method) / per-user tok/s(AR) at the same concurrency, the statistic said (pooled, or "
                 "the mean of 1/TPOT where the points carry no pooled rate and no requests were stored) — the reading "
                 "of NVIDIA's SPEED-Bench tables. " + summary.SEE_DEFINITIONS
                 + (" J/tok: NVML's energy over the point ÷ its output tokens; GPU·s per Mtok: GPUs × 1,000,000 ÷ "
                    "throughput." if _energy_spec(df) else ""),
                 cols, rows, "No concurrency was measured for both AR and a speculative method.")  # fmt: skip


def matched_interactivity_table(df: pd.DataFrame, band: tuple[float, float] | None, unit: str = "GPU") -> Table:
    """The band reading: each method and AR read at the band's edges and middle (``df`` from
    :func:`analysis.matched_interactivity_speedups`)."""
    cols, rows = _rows(df, [*CATEGORY_SPEC, *METHOD_SPEC, ("tok/s/user", "per_user_tok_per_s", fmt_num),
                            ("speedup", "speedup", fmt_x), *ci_spec(df),
                            (f"AR tput/{unit}", "baseline_throughput_per_gpu", fmt_num),
                            (f"method tput/{unit}", "method_throughput_per_gpu", fmt_num), *WHERE_SPEC,
                            ("note", "note", fmt_text)])  # fmt: skip
    where = (f"at the edges and middle of the {band[0]:g}–{band[1]:g} tok/s/user band" if band
             else "at each point of the method's own frontier")  # fmt: skip
    return Table("Speedup at matched interactivity, in the band",
                 f"throughput/{unit}(method) / throughput/{unit}(AR) at the same tokens/s per user, read off each "
                 "Pareto frontier by log–log interpolation, " + where + ". Outside a frontier's measured "
                 "range: not reached, never extrapolated.",
                 cols, rows, "No setting has both AR and a speculative method with measured throughput.")  # fmt: skip


def matched_summary_table(df: pd.DataFrame, unit: str = "GPU") -> Table:
    """One row per method x category: the ratio's range where the curves overlap and where it crosses 1, else
    the bound (in a column of its own, never the speedup's) and the sweep that would close the gap (``df`` from
    :func:`dflashbench.measure.verdict.matched_summary_frame`)."""
    cols, rows = _rows(df, [*CATEGORY_SPEC, *METHOD_SPEC, ("speedup over the overlap", "speedup_text", fmt_text),
                            ("reading", "kind", fmt_text), ("where it crosses 1", "crosses", fmt_text),
                            ("bound, not a measurement", "bound_text", fmt_text), *WHERE_SPEC,
                            ("what it means", "note", fmt_text)])  # fmt: skip
    return Table("Speedup at matched interactivity",
                 f"throughput/{unit}(method) / throughput/{unit}(AR) at the same tokens/s per user — NVIDIA's "
                 "headline figure. Where both curves were measured, the ratio from its lowest to its highest over "
                 "the per-user rates both reach, read off each Pareto frontier by log–log interpolation (never "
                 "extrapolated), and where it crosses 1. Read off the curves, it carries no interval and decides "
                 "nothing. Where the curves do not overlap, two measured points still bound the ratio (≥ or ≤), the "
                 "note naming each (and its load): a bound, not a speedup, and the sweep that would give the ratio.",
                 cols, rows, "No setting has both AR and a speculative method with measured throughput.")  # fmt: skip


TAU_DEFINITION = (
    "τ = tokens committed per verification step, the bonus token included (AR: τ = 1): 1 + accepted / steps, each "
    "engine's acceptance length converted to it (vLLM: 1 + Δ accepted tokens / Δ drafts; SGLang: completion tokens "
    "/ verify calls; TensorRT-LLM: 1 + Σ accepted / Σ requests with drafts; the reference server counts steps and "
    "accepted tokens itself). It includes tokens a step accepted past a stop (end of sequence, max_tokens), which "
    "the user never receives; \"delivered per step\" = (output tokens − 1) ÷ steps is what each step gave the user "
    "(the first token comes from the prefill), where the requests report their steps."
)
PER_POSITION = (
    "Acceptance per draft position i = the share of verification steps that accepted draft token i; a token is "
    "accepted only if every token before it was, so the curve is cumulative (non-increasing): position 3 counts "
    "the steps that accepted at least 3 draft tokens."
)


def tau_table(df: pd.DataFrame, missing: Sequence[str] = ()) -> Table:
    def per_pos(rates) -> str:
        return (
            "—" if not isinstance(rates, tuple | list) or not rates else " ".join(f"{r:.2f}" for r in rates)
        )

    varies = not df.empty and bool(((df["tau_max"] - df["tau_min"]).abs() > 0.005).any())
    spread = [("τ min", "tau_min", fmt_tau), ("τ max", "tau_max", fmt_tau)] if varies else []
    delivered = ([("delivered per step", "tau_delivered", fmt_tau),
                  ("accepted past a stop", "past_stop_share", fmt_pct)]
                 if "tau_delivered" in df.columns and df["tau_delivered"].notna().any() else [])  # fmt: skip
    cols, rows = _rows(df, [*CATEGORY_SPEC, *METHOD_SPEC, ("τ", "tau", fmt_tau), *delivered, *spread,
                            ("points", "num_points", fmt_text), *WHERE_SPEC,
                            ("acceptance per draft position (cumulative)", "accepted_per_pos_rate", per_pos)])  # fmt: skip
    caption = (TAU_DEFINITION + " Pooled over the run's points (concurrency and arrival-rate points alike: "
               "acceptance depends on the prompts, not on how they arrive)"
               + ("." if varies else "; it was the same at every point, so no spread is shown.") + " " + PER_POSITION)
    caption += "".join(f" {m}" for m in missing)
    return Table("Acceptance length τ per category", caption, cols, rows, "No speculative point reported τ.")


def decomposition_table(df: pd.DataFrame) -> Table:
    """Speedup = τ ratio ÷ step-cost ratio per pair and concurrency, beside the measured speedup (``df`` from
    :func:`dflashbench.measure.decomposition.decompose`)."""
    if not df.empty:
        df = df.assign(vs=[method_label(str(b)) for b in df["baseline"]],
                       tau_ratio=[t / b if t == t and b == b and b else None for t, b in zip(df["tau"], df["tau_base"],
                                                                                               strict=True)],
                       left=[v.removeprefix("left out: ") if isinstance(v, str) else None for v in df["left_out"]])  # fmt: skip
    pct = lambda v: "—" if _missing(v) else f"{float(v) * 100:+.1f}%"  # noqa: E731
    cols, rows = _rows(df, [*METHOD_SPEC, ("vs", "vs", fmt_text), ("concurrency", "concurrency", fmt_text),
                            ("τ", "tau", fmt_tau), ("τ ratio", "tau_ratio", fmt_tau),
                            ("step ms", "step_s", fmt_ms), ("baseline step ms", "step_s_base", fmt_ms),
                            ("step-cost ratio", "cost_ratio", fmt_tau), ("expected τ ratio ÷ cost", "predicted", fmt_x),
                            ("measured", "measured", fmt_x), ("identity off by", "error", pct),
                            ("of which past a stop", "past_stop", pct), ("step time from", "step_source", fmt_text),
                            *WHERE_SPEC, ("left out of the check", "left", fmt_text)])  # fmt: skip
    return Table("Why it pays: acceptance over step cost",
                 "speedup = τ ratio ÷ step-cost ratio at the same concurrency, τ = tokens per verification step (AR: "
                 "1), the step time measured apart from τ: the engine's own (its inter-token histogram counts one per "
                 "step) or, where it has none, the client's gap between chunks (one chunk per step). Measured = the "
                 "matched-concurrency speedup (pooled per-user rate). The identity is off by what τ counts and the "
                 "user never receives (tokens accepted past a stop) and, with the engine's clock, by queueing, another "
                 "request's prefill between steps and the client reading late; points flagged as bursty are left out of the "
                 "check.",
                 cols, rows, "No pair with τ and step times on both sides.")  # fmt: skip


def slices_table(rows: list[dict], notes: Sequence[str]) -> Table:
    """τ by input length, by position in the output and by category, each with its interval (``rows`` from
    :func:`dflashbench.measure.slices.slice_rows`)."""
    df = pd.DataFrame(rows, columns=["backend", "model", "workload", "method", "kind", "slice", "requests", "tau", "lo",
                                     "hi", "statistic"])  # fmt: skip
    if not df.empty:
        df = df.assign(ci=[None if _missing(a) or _missing(b) else f"[{a:.2f}, {b:.2f}]" for a, b in
                           zip(df["lo"], df["hi"], strict=True)])  # fmt: skip
    cols, rows_ = _rows(df, [*METHOD_SPEC, ("slice", "kind", fmt_text), ("part", "slice", fmt_text),
                             ("τ", "tau", fmt_tau), ("95% interval", "ci", fmt_text), ("requests", "requests", fmt_text),
                             ("statistic", "statistic", fmt_text), *WHERE_SPEC])  # fmt: skip
    caption = ("τ over slices of each method's requests (each prompt once, at its lowest concurrency: τ follows the "
               "prompts, not the load), from the per-request acceptance the engine reported in its responses: input length (bins equal in log prompt tokens, read where the "
               "prompts span 4× or more), position in the output (tokens each step delivered over the first, middle "
               "and last third of outputs of 24+ tokens, where the engine streamed one chunk per step) and category. "
               "95% interval: a bootstrap over the slice's requests (τ does not move with the machine's speed).")
    caption += "".join(f" {n}." for n in notes)
    empty = ("No per-request acceptance in these runs: slicing τ needs points of its own per slice (a sweep per "
             "category or per prompt length) and the engine's counters." if notes else
             "No closed-loop point of a speculative method in these runs to slice.")  # fmt: skip
    return Table("Acceptance by slice", caption, cols, rows_, empty)


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
    cols, rows = _rows(matched, [("task", "task", fmt_text), *METHOD_SPEC, ("measured / published", "ratio", fmt_tau),
                                 ("measured", "measured", fmt_tau), ("published", "published_shown", fmt_text),
                                 ("metric", "metric", fmt_text), ("baseline", "baseline", lambda m: method_label(str(m))),
                                 ("note", "note", fmt_text), ("source", "source", fmt_text),
                                 ("published model", "model", fmt_text), ("engine", "engine", fmt_text),
                                 ("hardware", "hardware", fmt_text), ("measured in", "measured_in", fmt_text)])  # fmt: skip
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

    unmeasured = df.empty or not pd.to_numeric(df["compared"], errors="coerce").fillna(0).any()
    notes = sorted({str(n) for n in df["note"] if not _missing(n)}) if not df.empty and "note" in df.columns else []
    if not df.empty and unmeasured and len(notes) == 1:  # one reason for every row: said once, not row by row
        df = df.iloc[0:0]
    df = df.assign(share=[_share(k, n) for k, n in zip(df["exact"], df["compared"], strict=True)],
                   chars=[div(m, lo) for m, lo in zip(df["div_chars_median"], df["div_chars_min"], strict=True)],
                   tokens=[div(m, lo) for m, lo in zip(df["div_tokens_median"], df["div_tokens_min"], strict=True)],
                   past=[None if not n else n for n in df["div_unknown"]],
                   ties=[_near_ties(n, m) for n, m in zip(df.get("near_tie", [None] * len(df)),
                                                           df.get("near_tie_margin", [None] * len(df)), strict=True)])  # fmt: skip
    cols, rows = _rows(df, [*SETTING_SPEC, *METHOD_SPEC, ("concurrency", "concurrency", fmt_text),
                            ("compared with", "reference", fmt_text), ("identical", "share", fmt_text),
                            ("of the others, near-tie", "ties", fmt_text),
                            ("first divergence, chars: median", "chars", fmt_text),
                            ("tokens: median", "tokens", fmt_text), ("past the stored text", "past", fmt_text),
                            ("AR-vs-AR floor", "floor", fmt_pct), ("note", "note", fmt_text)])  # fmt: skip
    caption = ("Greedy runs: the share of requests whose output is identical to AR's at the same concurrency (full "
               "text, compared by hash), and where the others first differ, in characters and (where the server "
               "streamed token ids) tokens. AR rows compare AR at each concurrency with AR at its lowest: engines "
               "are not bitwise batch-invariant, and that is the noise floor a lossless method should reach. A "
               "near-tie: where the outputs first differ, the target's own top two (read on the AR server) are within "
               "0.125 nats, so a floating-point difference flips them (docs/metrics.md, \"Lossless\").")
    if sampled:
        caption += (f" Sampled runs ({', '.join(sampled)}) are left out: at temperature > 0 exact agreement means "
                    "nothing, so they are judged by accuracy only.")
    empty = (f"Not measured at any point: {notes[0]}." if unmeasured and len(notes) == 1 else
             "No greedy run with stored outputs has AR and another method (or AR at two concurrencies).")  # fmt: skip
    return Table("Agreement with AR", caption, cols, rows, empty)


def _near_ties(n, margin) -> str | None:
    if _missing(n):
        return None
    return f"{int(n)} (margin ≤ {float(margin):.2f} nats)" if n and not _missing(margin) else str(int(n))


def accuracy_table(df: pd.DataFrame) -> Table:
    df = df.assign(share=[_share(k, n) for k, n in zip(df["num_correct"], df["num_graded"], strict=True)],
                   conc=["all (pooled)" if _missing(c) else str(int(c)) for c in df["concurrency"]],
                   mode=["sampled" if s else "greedy" for s in df["sampled"]],
                   verdict=["BELOW AR beyond noise" if d else None for d in df["significant_drop"]])  # fmt: skip
    cols, rows = _rows(df, [*CATEGORY_SPEC, *METHOD_SPEC, ("concurrency", "conc", fmt_text),
                            ("accuracy", "share", fmt_text), ("AR", "ar_accuracy", fmt_pct), *WHERE_SPEC,
                            ("Δ (points)", "delta", lambda v: "—" if _missing(v) else f"{100 * float(v):+.1f}"),
                            ("p (two-proportion)", "p_value", lambda v: "—" if _missing(v) else f"{float(v):.3g}"),
                            ("decoding", "mode", fmt_text), ("verdict", "verdict", fmt_text)])  # fmt: skip
    return Table("Task accuracy",
                 "Correct / graded per point, for workloads with reference answers (GSM8K: the final number; "
                 "MATH-500 and AIME: the boxed answer, normalised as the common harnesses do; rules in "
                 "dflashbench.workloads.grading). HumanEval and MBPP are not graded (that would mean running model code): "
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


def points_table(df: pd.DataFrame, unit: str = "GPU") -> Table:
    share = analysis.category_share_mask(df)
    hide = lambda col: [None if s else v for v, s in zip(df[col], share, strict=True)]  # noqa: E731
    extras = df["extra"] if "extra" in df.columns else pd.Series([None] * len(df), index=df.index)
    opened = analysis.open_loop_mask(df)
    goodput = [analysis.goodput_of(e).get("goodput_req_per_s") for e in extras]
    slos = sorted({t for t in (analysis.slo_text(analysis.goodput_of(e).get("slo")) for e in extras) if t})
    df = df.assign(tput_shown=hide("throughput_tok_per_s"), tput_unit_shown=hide("throughput_tok_per_s_per_gpu"),
                   tput_per_c=[None if o else v for v, o in zip(hide("_tput_per_c"), opened, strict=True)]
                   if "_tput_per_c" in df.columns else None,
                   load=[analysis.load_label(c, e) for c, e in zip(df["concurrency"], extras, strict=True)],
                   goodput_shown=[None if s else g for g, s in zip(goodput, share, strict=True)],
                   sized=[_sized(e) for e in extras])  # fmt: skip
    good_spec = [("goodput req/s", "goodput_shown", fmt_num)] if any(g is not None for g in goodput) else []
    good_spec += [("sized", "sized", fmt_text)] if df["sized"].notna().any() else []
    df, timing_spec, server_spec = _timing_columns(df)
    nm = lambda fmt: lambda v: NOT_MEASURED if isinstance(v, str) else fmt(v)  # noqa: E731
    cols, rows = _rows(df, [*CATEGORY_SPEC, *METHOD_SPEC, ("conc. or rate", "load", fmt_text),
                            (f"tput/{unit}", "tput_unit_shown", fmt_num), *good_spec,
                            ("tok/s/user", f"{analysis.INTERACTIVITY}_shown", nm(fmt_num)),
                            ("tok/s/user mean", "per_user_tok_per_s_mean_shown", nm(fmt_num)),
                            ("tput ÷ c", "tput_per_c", fmt_num),
                            ("tok/s/user p10", "per_user_tok_per_s_p10_shown", nm(fmt_num)),
                            ("E2E p50 ms", "e2e_s_p50", fmt_ms),
                            ("TTFT p50 ms", "ttft_s_p50", fmt_ms), ("TTFT p99 ms", "ttft_s_p99", fmt_ms),
                            ("TPOT p50 ms", "tpot_s_p50_shown", nm(fmt_ms)), ("TPOT p99 ms", "tpot_s_p99_shown", nm(fmt_ms)),
                            *server_spec, *timing_spec,
                            ("ITL p99 ms", "itl_s_p99_shown", nm(fmt_ms)), ("τ", "tau", fmt_tau), ("tput tok/s", "tput_shown", fmt_num),
                            ("J/tok", "energy_j_per_tok", fmt_num), ("requests", "num_requests", fmt_text),
                            ("errors", "num_errors", fmt_text), ("run", "run_id", fmt_text), *WHERE_SPEC,
                            ("status", "status", fmt_text)])  # fmt: skip
    return Table("All points", "Every sweep point as measured (one row per backend × method × workload × "
                 "category × concurrency). E2E = request sent to last token, what a user waits for: the verdict "
                 "decides on its mean, paired by prompt between two methods (\"The readings it decides on\"), and "
                 "this is each point's own median. tok/s/user = tokens ÷ decode time pooled over the point's requests "
                 "(the matched-concurrency speedup and the Pareto curves read it); tok/s/user mean = mean of 1/TPOT "
                 "per request (NVIDIA's statistic); tput ÷ c = "
                 "throughput ÷ concurrency, vLLM plot_pareto's per-user figure. n/m: not measured, the requests' "
                 "per-token timing was not observable (their tokens arrived in bursts; the Latency section says where). A category "
                 "row of a mixed run shows no "
                 "throughput: its tokens over the whole run's window are a share, not a serving rate. \"20/s\": an "
                 "open-loop point at 20 requests/s (≤N: at most N in flight). sized: the widest 95% interval a "
                 "point sized by precision reached (its figures and its ratios to the load's earlier points), of the "
                 "precision asked, and why it stopped."
                 + (f" Goodput: requests meeting every target of {'; '.join(slos)} (seconds) per second." if slos else "")
                 + (" This run had no GPU: per-device figures are per one CPU device." if unit == "device" else ""),
                 cols, rows, "These runs have no points.")  # fmt: skip


def _sized(extra) -> str | None:
    """How a point sized by precision stopped: ``±8.4% of ±20% (precise)``, ``±25.1% of ±20% (prompts ran out)``."""
    p = extra.get("precision") if isinstance(extra, dict) else None
    if not isinstance(p, dict) or not p.get("half_width"):
        return None
    why = {"precise": "precise", "ceiling": "prompts ran out"}.get(p.get("reason"), str(p.get("reason")))
    return f"±{max(p['half_width'].values()):.1%} of ±{p.get('asked', 0):.0%} ({why})"


NOT_MEASURED = "n/m"
# per-token figures a point reports only where its requests' timing was observable (metrics.latency_fields)
_PER_TOKEN = ("per_user_tok_per_s_pooled", "per_user_tok_per_s_mean", "per_user_tok_per_s_p10", "tpot_s_p50",
              "tpot_s_p99", "itl_s_p99")  # fmt: skip


def _timing_columns(df: pd.DataFrame) -> tuple[pd.DataFrame, list, list]:
    """``df`` with ``<col>_shown`` per-token columns ("n/m" where not measured), and the specs of a "timed"
    column (observed / requests with a decode, where any point lost one) and of the server's own TPOT (where any
    point has it)."""
    reason = df["latency_not_measured_reason"] if "latency_not_measured_reason" in df.columns else \
        pd.Series(None, index=df.index, dtype=object)  # fmt: skip
    blind = reason.notna()
    shown = {f"{c}_shown": [NOT_MEASURED if b else v for v, b in zip(df[c] if c in df.columns else [None] * len(df),
                                                                        blind, strict=True)] for c in _PER_TOKEN}  # fmt: skip
    seen, asked = (df[c] if c in df.columns else pd.Series(None, index=df.index) for c in
                   ("timing_observed_requests", "timing_requests"))  # fmt: skip
    timed = [None if _missing(a) else f"{int(o)}/{int(a)}" for o, a in zip(seen, asked, strict=True)]
    server = [((e or {}).get("server_timing") or {}).get("tpot_s", {}).get("mean_s") if isinstance(e, dict) else None
              for e in (df["extra"] if "extra" in df.columns else [None] * len(df))]  # fmt: skip
    partial = any(t is not None and t.split("/")[0] != t.split("/")[1] for t in timed)
    timing_spec = [("timed", "timed", fmt_text)] if partial or blind.any() else []
    server_spec = [("TPOT server mean ms", "server_tpot", fmt_ms)] if any(v is not None for v in server) else []
    return df.assign(**shown, timed=timed, server_tpot=server), timing_spec, server_spec


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


def slo_table(df: pd.DataFrame, terms: Sequence, unit: str = "GPU", default: bool = False) -> Table:
    """Each method's best throughput within the SLO; where no point could be read at the percentiles asked, no rows
    but why (the first point's reason)."""
    bounds = ", ".join(t.label for t in terms)
    unread = not df.empty and df["best_throughput_per_gpu"].isna().all() and df["note"].astype(str).str.contains(
        "needs at least").all()  # fmt: skip
    empty = (f"No point was read at the percentiles asked: {df['note'].iloc[0].split(') ', 1)[-1]}. sweep --slo sizes "
             "the points for them." if unread else "No point has both latency percentiles and throughput.")  # fmt: skip
    df = df.iloc[0:0] if unread else df
    cols, rows = _rows(df, [*METHOD_SPEC, (f"best tput/{unit} within SLO", "best_throughput_per_gpu", fmt_num),
                            ("vs AR", "ratio", fmt_x), ("at conc.", "concurrency", fmt_text),
                            ("tok/s/user", "per_user_tok_per_s", fmt_num), ("measured there", "measured", fmt_text),
                            *WHERE_SPEC, ("note", "note", fmt_text)])  # fmt: skip
    return Table(f"Best throughput within the SLO: {bounds}",
                 f"For each method, the highest throughput/{unit} among its measured points (category all) whose "
                 "request latency percentiles all stay within the bounds (percentiles over each point's "
                 "successful requests), and its ratio to AR's. " + ("dflashbench's default SLO; choose yours "
                 "with report --slo, e.g. --slo tpot_p90=20ms,ttft_p99=2s." if default else "Set with --slo."),
                 cols, rows, empty)  # fmt: skip


def with_text(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its interval as text (:data:`CI_COLUMN`)."""
    if df.empty or "speedup_ci_lo" not in df.columns:
        return df
    texts = []
    for lo, hi in zip(df["speedup_ci_lo"], df["speedup_ci_hi"], strict=True):
        lo, hi = analysis.finite_number(lo), analysis.finite_number(hi)
        texts.append(None if lo is None or hi is None else f"[{lo:.2f}×, {hi:.2f}×]")
    return df.assign(**{CI_COLUMN: texts})


def ci_spec(df: pd.DataFrame) -> list[tuple[str, str, Callable]]:
    """The interval column of a speedup table, where any row has one."""
    if CI_COLUMN not in df.columns or not df[CI_COLUMN].notna().any():
        return []
    kinds = set(df["speedup_ci_kind"].dropna()) if "speedup_ci_kind" in df.columns else {"repeats"}
    label = "95% CI (" + ", ".join(sorted({"repeats": "paired repeats", "requests": "bootstrap over requests"}
                                          .get(k, k) for k in kinds or {"repeats"})) + ")"  # fmt: skip
    return [(label, CI_COLUMN, lambda v: "—" if v is None or v != v else str(v))]
