"""The regression gate: compare two runs point by point against thresholds.

Points are aligned by (backend, method, workload, category, load): the load is the concurrency, or for an
open-loop point (``sweep --request-rate``) its arrival rate ("20/s", with its cap "20/s ≤8"). A threshold is
``METRIC=AMOUNT`` with ``AMOUNT`` either relative (``5%``) or absolute (``0.2``, in the metric's own unit):
``--max-drop throughput=5%`` fails when NEW's throughput is more than 5 % below BASE's, ``--max-rise
ttft_s_p99=10%`` when NEW's p99 TTFT is more than 10 % above. With no threshold named the default gates
apply (:data:`DEFAULT_GATES`, printed in the output); a threshold the user names replaces the default for its
metric, and ``--no-default-gates`` turns the defaults off. A gate CI can trust fails on what it cannot judge:
a point that finished in BASE but failed in NEW, or is missing from NEW (a method left out, a truncated
``points.jsonl``), is a regression too. Exit codes: 0 no regression, 1 regression, 2 unusable input
(unreadable run, bad threshold, runs of different suites with no point in common).

Where both runs carry repeat intervals (``<metric>_ci_lo`` / ``<metric>_ci_hi``, from ``--repeats``), a move
whose intervals overlap is noise, not a regression (:func:`within_noise`).

Task accuracy (``accuracy``, a share between 0 and 1, for workloads with reference answers) gates like any
metric: ``--max-drop accuracy=0.02`` allows 2 percentage points, ``--max-drop accuracy=5%`` 5 % of BASE's
accuracy. Beside the gate, every point whose accuracy fell beyond noise (a two-proportion z-test on correct /
graded, two-sided, 95 %) is named in a warning, gated or not.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from dflashbench.errors import UserError
from dflashbench.measure import noise
from dflashbench.types import PointSummary

KEY: tuple[str, ...] = ("backend", "method", "workload", "category", "concurrency")
# Short names people type; any numeric PointSummary field is accepted by its own name too.
ALIASES = {
    "throughput": "throughput_tok_per_s",
    "throughput_per_gpu": "throughput_tok_per_s_per_gpu",
    "interactivity": "per_user_tok_per_s_mean",
    "per_user": "per_user_tok_per_s_mean",
    "ttft": "ttft_s_p50",
    "tpot": "tpot_s_p50",
    "itl": "itl_s_p50",
    "e2e": "e2e_s_p50",
    "energy": "energy_j_per_tok",
    "acc": "accuracy",
}
_NUMERIC = {f.name for f in dataclasses.fields(PointSummary) if str(f.type) in ("float | None", "int")} - {
    "schema_version", "concurrency", "num_gpus",
}  # fmt: skip
# Shown when no threshold names a metric: what a reader wants to see moved.
DEFAULT_SHOWN = ("throughput_tok_per_s", "per_user_tok_per_s_mean", "tau", "ttft_s_p99", "tpot_s_p50")
_THRESHOLD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([0-9]*\.?[0-9]+)\s*(%?)\s*$")

OK, REGRESSION, SHOWN, NA, NOISE, TOO_FEW = "ok", "REGRESSION", "", "n/a", "noise", "not gated"
# The gates a CI run gets without naming any: 5 % of throughput, 0.2 of tau (absolute), p99 TTFT up 20 %.
DEFAULT_GATES: tuple[tuple[str, str], ...] = (("throughput=5%", "drop"), ("tau=0.2", "drop"),
                                              ("ttft_s_p99=20%", "rise"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Threshold:
    """How far ``metric`` may move the wrong way: ``direction`` "drop" (higher is better) or "rise"."""

    metric: str
    direction: str
    amount: float
    relative: bool
    text: str
    default: bool = False

    def describe(self) -> str:
        amount = f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"
        return f"max {self.direction} {amount}" + (" (default)" if self.default else "")


def default_gates() -> list[Threshold]:
    return [dataclasses.replace(parse_threshold(text, direction), default=True) for text, direction in DEFAULT_GATES]


def effective_thresholds(given: Sequence[Threshold], use_defaults: bool = True) -> list[Threshold]:
    """The user's thresholds, plus each default gate whose metric the user did not name."""
    named = {t.metric for t in given}
    defaults = [t for t in default_gates() if t.metric not in named] if use_defaults else []
    return [*given, *defaults]


def within_noise(base_row, new_row, metric: str) -> bool:
    """True when both rows carry a repeat interval for ``metric`` (``<metric>_ci_lo`` / ``<metric>_ci_hi``, as
    ``--repeats`` writes them) and the two intervals overlap: the move is inside the noise. False whenever
    either side has no interval (a single measurement cannot tell noise from change)."""
    bounds = []
    for row in (base_row, new_row):
        lo, hi = _value(row, f"{metric}_ci_lo"), _value(row, f"{metric}_ci_hi")
        if lo is None or hi is None:
            return False
        bounds.append((min(lo, hi), max(lo, hi)))
    (b_lo, b_hi), (n_lo, n_hi) = bounds
    return b_lo <= n_hi and n_lo <= b_hi


def parse_threshold(text: str, direction: str) -> Threshold:
    """``"throughput=5%"`` -> relative 0.05 on throughput_tok_per_s; ``"tau=0.2"`` -> absolute 0.2."""
    m = _THRESHOLD.match(text)
    flag = f"--max-{direction}"
    if not m:
        raise UserError(f"bad {flag} {text!r}: expected METRIC=AMOUNT such as throughput=5% or tau=0.2")
    name, amount, pct = m.group(1), float(m.group(2)), m.group(3) == "%"
    metric = ALIASES.get(name, name)
    if metric not in _NUMERIC:
        known = ", ".join(sorted(ALIASES) + sorted(_NUMERIC))
        raise UserError(f"bad {flag} {text!r}: unknown metric {name!r}; known: {known}")
    return Threshold(metric, direction, amount / 100 if pct else amount, pct, text.strip())


@dataclass(frozen=True, slots=True)
class Row:
    key: tuple
    metric: str
    base: float | None
    new: float | None
    verdict: str
    limit: str = ""

    @property
    def change(self) -> float | None:
        if self.base is None or self.new is None or self.base == 0:
            return None
        return (self.new - self.base) / abs(self.base)


@dataclass
class Comparison:
    rows: list[Row]
    thresholds: list[Threshold]
    common: int
    only_in_base: list[tuple] = field(default_factory=list)
    only_in_new: list[tuple] = field(default_factory=list)
    failed_in_new: list[tuple[tuple, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tests: int = 0  # request-level noise tests corrected together (Holm)
    drift: dict[str, float] = field(default_factory=dict)  # metric -> the runs' drift (sd of log ratios) in its tests
    context: list[str] = field(default_factory=list)  # how the two runs differ: hardware, suite, engine, versions
    trust: list[str] = field(default_factory=list)  # what weakens either run (dflashbench.report.trust)
    strict: bool = False  # --strict: runs that differ in context are unusable input (exit 2)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == REGRESSION]

    @property
    def exit_code(self) -> int:
        if self.strict and self.context:
            return 2
        return 1 if self.regressions or self.failed_in_new or self.only_in_base else 0


def _value(row: pd.Series, metric: str) -> float | None:
    v = row.get(metric)
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _verdict(t: Threshold, base: float | None, new: float | None) -> str:
    if base is None or new is None or (t.relative and base == 0):
        return NA
    delta = new - base if t.direction == "rise" else base - new  # > 0: moved the wrong way
    allowed = t.amount * abs(base) if t.relative else t.amount
    return REGRESSION if delta > allowed * (1 + 1e-12) else OK


def _index(points: pd.DataFrame, side: str) -> dict[tuple, pd.Series]:
    from dflashbench.measure.analysis import load_label

    missing = [c for c in KEY if c not in points.columns]
    if missing:
        raise UserError(f"{side} points lack {', '.join(missing)}: not a dflashbench run")
    out = {}
    for _, row in points.iterrows():  # the last element: the load (concurrency, or an open loop's rate)
        out[(*(row[c] for c in KEY[:-1]), load_label(row["concurrency"], row.get("extra")))] = row
    return out  # a re-measured point replaces the earlier one


def _order(key: tuple) -> tuple:
    """Key order: setting, then concurrency points by concurrency, then rate points by rate."""
    load = str(key[-1])
    rate = load.endswith("/s") or "/s " in load
    number = float(re.match(r"[0-9.]+|inf", load).group()) if re.match(r"[0-9.]+|inf", load) else 0.0
    return (*(str(v) for v in key[:-1]), rate, number, load)


def compare_points(base: pd.DataFrame, new: pd.DataFrame, thresholds: Sequence[Threshold],
                   requests: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                   all_categories: bool = False) -> Comparison:  # fmt: skip
    """Align two runs' points and judge each threshold on each point both runs finished. ``thresholds`` are
    used as given (:func:`effective_thresholds` adds the default gates). With both runs' ``requests``, a move
    past a gate fails only when it is beyond noise (:mod:`dflashbench.gate.compare_noise`). Only category ``all``
    is gated unless ``all_categories``: the per-category points are its subsets, shown."""
    from dflashbench.gate.compare_noise import drift_of, point_requests, test_move

    b_all, n_all = _index(base, "BASE"), _index(new, "NEW")
    ok = lambda r: str(r.get("status") or "ok") == "ok"  # noqa: E731
    b_ok = {k: r for k, r in b_all.items() if ok(r)}
    n_ok = {k: r for k, r in n_all.items() if ok(r)}
    common = [k for k in b_ok if k in n_ok]
    failed = [(k, str(n_all[k].get("failure_reason") or "failed")) for k in b_ok if k in n_all and not ok(n_all[k])]
    if not common and not failed and (n_ok or not b_ok):
        raise UserError(
            "BASE and NEW have no finished point in common (aligned by backend, method, workload, category, "
            "concurrency or arrival rate); compare runs of the same suite"
        )
    comparison = Comparison(rows=[], thresholds=list(thresholds), common=len(common), failed_in_new=failed)
    comparison.only_in_base = [k for k in b_ok if k not in n_all]
    comparison.only_in_new = [k for k in n_ok if k not in b_all]
    by_metric: dict[str, list[Threshold]] = {}
    for t in thresholds:
        by_metric.setdefault(t.metric, []).append(t)
    shown = [*by_metric, *(m for m in DEFAULT_SHOWN if m not in by_metric)]
    if "accuracy" not in by_metric and any(_value(b_ok[k], "num_graded") for k in common):
        shown.append("accuracy")
    tested: list[tuple[int, float]] = []  # (row index, p) of every gated figure a request-level test judges
    gated_keys = [k for k in common if all_categories or str(k[3]) == "all"]
    drift = {m: drift_of(m, [(_value(b_ok[k], m), _value(n_ok[k], m)) for k in gated_keys]) for m in by_metric}
    comparison.drift = {m: d for m, d in drift.items() if d > 0}
    for key in sorted(common, key=_order):
        b_row, n_row = b_ok[key], n_ok[key]
        gated = all_categories or str(key[3]) == "all"
        repeated = (_value(b_row, "n_repeats") or 1) > 1 or (_value(n_row, "n_repeats") or 1) > 1
        for metric in shown:
            b, n = _value(b_row, metric), _value(n_row, metric)
            gates = by_metric.get(metric, ()) if gated else ()
            verdicts = [_verdict(t, b, n) for t in gates]
            verdict = REGRESSION if REGRESSION in verdicts else OK if OK in verdicts else NA if verdicts else SHOWN
            limit = "; ".join(t.describe() for t in gates)
            if verdict == REGRESSION and within_noise(b_row, n_row, metric):
                verdict = NOISE
            elif gates and b is not None and n is not None and requests is not None and not repeated:
                test = test_move(metric, gates[0].direction, b, n, point_requests(requests[0], b_row),
                                 point_requests(requests[1], n_row), drift.get(metric, 0.0))  # fmt: skip
                if test is not None and test.p is None:
                    verdict, limit = TOO_FEW, test.not_gated
                elif test is not None:
                    tested.append((len(comparison.rows), test.p))
            comparison.rows.append(Row(key, metric, b, n, verdict, limit))
    comparison.tests = len(tested)
    for (i, _), beyond in zip(tested, noise.holm([p for _, p in tested]), strict=True):
        if comparison.rows[i].verdict == REGRESSION and not beyond:
            comparison.rows[i] = dataclasses.replace(comparison.rows[i], verdict=NOISE)
    _add_warnings(comparison, b_ok, n_ok, common)
    return comparison


def model_identity(model: object) -> str:
    """A model as one name however it was given: the embedded pair by its folder name (``embedded/target``,
    whichever checkout or absolute path held it), a registry alias or HF id by the HF id, any other local
    folder by its last two path parts (a machine's own prefix is no part of a model's identity)."""
    from dflashbench.plan import models

    text = str(model or "")
    parts = [p for p in text.replace("\\", "/").split("/") if p not in ("", ".")]
    if len(parts) >= 2 and parts[-2] == "embedded":
        return "/".join(parts[-2:])
    entry = models.lookup(text)
    if entry is not None:
        return entry.hf_id
    if text.startswith(("/", ".", "~")) and len(parts) >= 2:
        return "/".join(parts[-2:])
    return text


def _add_warnings(comparison: Comparison, b_ok: dict[tuple, pd.Series], n_ok: dict[tuple, pd.Series],
                  common: Sequence[tuple]) -> None:  # fmt: skip
    """What the reader must know beside the table: other models, accuracy drops, noise, missing points."""
    thresholds = comparison.thresholds
    models = ({model_identity(r.get("model")) for r in b_ok.values()},
              {model_identity(r.get("model")) for r in n_ok.values()})  # fmt: skip
    if n_ok and models[0] != models[1]:
        comparison.warnings.append(f"the runs measured different models: BASE {sorted(models[0])}, NEW {sorted(models[1])}")
    comparison.warnings += _accuracy_warnings(common, b_ok, n_ok)
    if not thresholds:
        comparison.warnings.append("--no-default-gates and no --max-drop / --max-rise: no metric is gated, only "
                                   "missing and failed points")  # fmt: skip
    if any(r.verdict == NOISE for r in comparison.rows):
        n = sum(r.verdict == NOISE for r in comparison.rows)
        comparison.warnings.append(f"{n} move(s) past a gate are within noise (the repeats' 95% intervals, or the "
                                   "test on the requests after Holm's correction): not regressions")  # fmt: skip
    if comparison.only_in_base:
        methods = sorted({k[1] for k in comparison.only_in_base} - {k[1] for k in n_ok})
        gone = f" (method(s) {', '.join(methods)} entirely)" if methods else ""
        comparison.warnings.insert(0, f"{len(comparison.only_in_base)} of {len(b_ok)} point(s) of BASE are missing "
                                   f"from NEW{gone}: a missing or truncated run is a regression")  # fmt: skip
    if comparison.only_in_new:
        comparison.warnings.append(f"{len(comparison.only_in_new)} point(s) of NEW have no counterpart in BASE")


def _accuracy_warnings(common: Sequence[tuple], base: dict[tuple, pd.Series], new: dict[tuple, pd.Series]) -> list[str]:
    """Points whose accuracy fell beyond noise from BASE to NEW (two-proportion test, 95 %)."""
    from dflashbench.measure.quality import significant_drop, two_proportion_test

    out = []
    for key in common:
        b, n = base[key], new[key]
        kb, nb, kn, nn = (int(_value(r, f) or 0) for r, f in ((b, "num_correct"), (b, "num_graded"),
                                                               (n, "num_correct"), (n, "num_graded")))  # fmt: skip
        if nb and nn and significant_drop(kn, nn, kb, nb):
            _, p = two_proportion_test(kn, nn, kb, nb)
            where = " / ".join(map(str, key))
            out.append(f"accuracy of {where} fell beyond noise: {kb}/{nb} ({kb / nb:.1%}) -> {kn}/{nn} ({kn / nn:.1%}), "
                       f"two-proportion test p = {p:.3g}")  # fmt: skip
    return out


def compare_runs(base_dir, new_dir, thresholds: Sequence[Threshold], all_categories: bool = False,
                 strict: bool = False) -> Comparison:  # fmt: skip
    from dflashbench.run.store import load_run

    base, new = (load_run(_a_run(d, side)) for d, side in ((base_dir, "BASE"), (new_dir, "NEW")))
    context = context_differences(base.manifest, new.manifest)
    try:
        comparison = compare_points(base.points, new.points, thresholds, requests=(base.requests, new.requests),
                                    all_categories=all_categories)  # fmt: skip
    except UserError as exc:
        if context and "no finished point in common" in str(exc):  # name the difference, not only its symptom
            raise UserError(f"BASE and NEW have no finished point in common: they differ in {'; '.join(context)}. "
                            "Points align by backend, method, workload, category and load, so runs of different "
                            "backends never share one: compare two runs of the same setting, or read them side by "
                            "side with dflashbench report BASE NEW") from None  # fmt: skip
        raise
    comparison.context, comparison.strict = context, strict
    from dflashbench.report.trust import trust_flags

    comparison.trust = [f"{side}: {f}" for side, run in (("BASE", base), ("NEW", new)) for f in trust_flags(run)]
    status = new.meta.status or ""
    if status and status != "complete" and comparison.only_in_base:
        comparison.warnings.insert(1, f"NEW's manifest says the run is {status!r}: it did not finish")
    return comparison


def _a_run(run_dir, side: str):
    """``run_dir`` if it is a run directory with points, else a clear error (exit 2)."""
    from pathlib import Path

    from dflashbench.run.store import POINTS

    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"{side} {path} is not a directory; give a run directory (results/<run-id>)")
    points = path / POINTS
    if not points.is_file():
        raise UserError(f"{side} {path} is not a run directory: it has no {POINTS}; give results/<run-id>")
    if not points.read_text(encoding="utf-8", errors="replace").strip():
        raise UserError(f"{side} {path}: {POINTS} is empty (the run measured no point): nothing to compare")
    return path


def _field(manifest: dict, *path: str):
    value = manifest
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


# What must match for two runs to be comparable: (label, path into manifest.json).
CONTEXT = (("hardware", ("gpu", "gpu")), ("GPU count", ("gpu", "gpu_count")), ("CPUs", ("host", "cpu_count")),
           ("suite", ("suite", "name")), ("suite version", ("suite", "version")), ("backend", ("backend",)),
           ("engine", ("engine", "build")), ("engine version", ("engine", "version")),
           ("dflashbench version", ("dflashbench_version",)))  # fmt: skip


def context_differences(base: dict, new: dict) -> list[str]:
    """How the two runs' setting differs (hardware, suite, backend, engine and dflashbench versions): each a
    reason the comparison may measure the change of setting, not of the code."""
    out = []
    for label, path in CONTEXT:
        b, n = _field(base, *path), _field(new, *path)
        if b != n and not (b is None and n is None):
            out.append(f"{label}: BASE {b if b is not None else '-'}, NEW {n if n is not None else '-'}")
    return out


# --- output -----------------------------------------------------------------------------------------


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"


def _fmt_change(row: Row) -> str:
    if row.base is None or row.new is None:
        return "—"
    rel = row.change
    return f"{row.new - row.base:+.4g}" + (f" ({rel * 100:+.1f}%)" if rel is not None else "")


_ORDER = {REGRESSION: 0, NOISE: 1, OK: 2, NA: 3, SHOWN: 4}


def _cells(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Regressions first (missing and failed points, then metric regressions), then the rest in key order."""
    header = ["backend", "method", "workload", "category", "conc. or rate", "metric", "BASE", "NEW", "change", "limit", "verdict"]
    rows = [[*map(str, k), "(point)", "ok", "missing", "not in NEW", "must be measured", REGRESSION]
            for k in comparison.only_in_base]  # fmt: skip
    rows += [[*map(str, k), "(point)", "ok", "failed", reason, "must finish", REGRESSION]
             for k, reason in comparison.failed_in_new]  # fmt: skip
    ordered = sorted(comparison.rows, key=lambda r: _ORDER.get(r.verdict, 5))  # stable: key order within
    rows += [[*map(str, r.key), r.metric, _fmt(r.base), _fmt(r.new), _fmt_change(r), r.limit, r.verdict]
             for r in ordered]  # fmt: skip
    return header, rows


def gates_line(comparison: Comparison) -> str:
    if not comparison.thresholds:
        return "gates: none (--no-default-gates); missing and failed points still fail"
    line = "gates: " + ", ".join(f"{t.metric} {t.describe()}" for t in comparison.thresholds)
    if comparison.tests:
        from dflashbench.gate.compare_noise import RULE

        line += f"\n{RULE} ({comparison.tests} tests); category 'all' gated, the per-category rows shown"
        for metric, sd in comparison.drift.items():
            line += f"\ndrift between the runs: {metric} ±{math.expm1(sd):.1%} (1 sd over the gated points' moves)"
    return line


def context_lines(comparison: Comparison) -> list[str]:
    """First in the output: how the runs' setting differs (exit 2 with --strict)."""
    flags = [f"trust: {t}" for t in comparison.trust]
    if not comparison.context:
        return flags
    head = "the runs differ in setting" + (" (--strict: exit 2)" if comparison.strict else "")
    return [f"warning: {head}: " + "; ".join(comparison.context), *flags]


def verdict_line(comparison: Comparison) -> str:
    n = len(comparison.regressions) + len(comparison.failed_in_new) + len(comparison.only_in_base)
    gated = ", ".join(f"{t.metric} {t.describe()}" for t in comparison.thresholds) or "nothing"
    head = f"{n} regression(s)" if n else "no regression"
    return f"{head} over {comparison.common} common point(s); gated: {gated}"


def format_text(comparison: Comparison) -> str:
    header, rows = _cells(comparison)
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    out = [verdict_line(comparison), "",  # the answer first; the table after (and the answer again, last)
           *context_lines(comparison), gates_line(comparison), "", line(header), line(["-" * w for w in widths]),
           *map(line, rows), ""]  # fmt: skip
    out += [f"warning: {w}" for w in comparison.warnings]
    out.append(verdict_line(comparison))
    return "\n".join(out)


def format_markdown(comparison: Comparison, report_link: str | None = None) -> str:
    """Opens with the verdict (and a link to the HTML report where one is named), then the gates, warnings
    and the table, regressions first."""
    from dflashbench.report.render import md_escape

    header, rows = _cells(comparison)
    mark = "❌" if comparison.exit_code else "✅"
    out = ["### dflashbench compare", "", f"**{mark} {md_escape(verdict_line(comparison))}**", ""]
    if report_link:
        out += [f"Full report: [{md_escape(report_link)}]({report_link.replace(' ', '%20').replace(')', '%29')})", ""]
    out += [f"> {md_escape(c)}" for c in context_lines(comparison)]
    out += [md_escape(gates_line(comparison)).replace("\n", "  \n"), ""]
    out += [f"> warning: {md_escape(w)}" for w in comparison.warnings]
    out += ["", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"
