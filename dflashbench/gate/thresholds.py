"""The gate's vocabulary: thresholds (``METRIC=AMOUNT``), a compared row, a comparison and its exit code, the
verdict words, and how two runs' points are aligned. :mod:`.compare` aligns and reports, :mod:`.compare_judge`
judges; both read these, so neither imports the other's half (docs/layout.md: no import circle inside a package).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from dflashbench.errors import UserError
from dflashbench.gate.speedups import SPEEDUP
from dflashbench.measure.drift import MachineChange
from dflashbench.types import PointSummary

KEY: tuple[str, ...] = ("backend", "method", "workload", "category", "concurrency")
# Short names people type; any numeric PointSummary field is accepted by its own name too.
ALIASES = {
    "throughput": "throughput_tok_per_s",
    "throughput_per_gpu": "throughput_tok_per_s_per_gpu",
    "interactivity": "per_user_tok_per_s_mean",
    "per_user": "per_user_tok_per_s_mean",
    "per_user_pooled": "per_user_tok_per_s_pooled",
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
DEFAULT_SHOWN = ("throughput_tok_per_s", "per_user_tok_per_s_pooled", "tau", "ttft_s_p99", "tpot_s_p50")
_THRESHOLD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([0-9]*\.?[0-9]+)\s*(%?)\s*$")

OK, REGRESSION, SHOWN, NA, NOISE, TOO_FEW = "ok", "REGRESSION", "", "n/a", "noise", "not gated"
CANNOT_JUDGE = "cannot judge"  # a failing speed figure the machine's own change explains
EXIT_CANNOT_JUDGE = 3
# The gates a CI run gets without naming any: 5 % of throughput, of the pooled per-user rate and of every speedup
# (a method's per-user rate over another's at one load, in one run), 0.2 of tau (absolute), p99 TTFT up 20 %.
DEFAULT_GATES: tuple[tuple[str, str], ...] = (("throughput=5%", "drop"), ("per_user_tok_per_s_pooled=5%", "drop"),
                                              (f"{SPEEDUP}=5%", "drop"), ("tau=0.2", "drop"),
                                              ("ttft_s_p99=20%", "rise"))  # fmt: skip
# A gate whose test could not have seen a drop of this many times its threshold is a weak pass (a trust flag and
# exit 3; --accept-weak: exit 0): it could not see a regression twice the size it was set to guard.
WEAK_FACTOR = 2.0


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
        lo, hi = value_of(row, f"{metric}_ci_lo"), value_of(row, f"{metric}_ci_hi")
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
    if metric not in _NUMERIC and metric != SPEEDUP:
        known = ", ".join(sorted(ALIASES) + [SPEEDUP] + sorted(_NUMERIC))
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
    # the smallest move the wrong way that would have failed (past the threshold and beyond noise), in the
    # threshold's unit: a share for a relative threshold (0.12: a drop of 12 %), the metric's unit otherwise
    detectable: float | None = None
    threshold: Threshold | None = None  # the gate judged (None: shown only)

    @property
    def change(self) -> float | None:
        if self.base is None or self.new is None or self.base == 0:
            return None
        return (self.new - self.base) / abs(self.base)

    @property
    def is_speedup(self) -> bool:
        return self.metric == SPEEDUP

    @property
    def weak(self) -> bool:
        """A gate that could not have seen a move of :data:`WEAK_FACTOR` times its threshold."""
        t = self.threshold
        return t is not None and self.detectable is not None and self.detectable > WEAK_FACTOR * t.amount


@dataclass
class Comparison:
    rows: list[Row]
    thresholds: list[Threshold]
    common: int
    only_in_base: list[tuple] = field(default_factory=list)
    only_in_new: list[tuple] = field(default_factory=list)
    failed_in_new: list[tuple[tuple, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tests: int = 0  # request-level noise tests corrected together (the family; an exact figure's test is outside)
    family_level: float | None = None  # the family's first-step level: what one figure moving alone must reach
    drift: list[str] = field(default_factory=list)  # what each run's drift and each figure's drift rest on
    machine: MachineChange | None = None  # the machine's speed in NEW against BASE, from the probes
    corrected: bool = False  # --correct-for-probe: NEW's speed figures divided by the machine's change
    context: list[str] = field(default_factory=list)  # how the two runs differ: hardware, suite, engine, versions
    trust: list[str] = field(default_factory=list)  # what weakens either run (dflashbench.report.trust), or the gate
    strict: bool = False  # --strict: runs that differ in context are unusable input (exit 2)
    accept_weak: bool = False  # --accept-weak: a weak pass exits 0 (its trust line kept); by default it exits 3
    rounds_tested: bool = False  # the speedups were tested on both runs' paired repeat rounds
    pairing: str = ""  # what the tests were paired on: across runs (the same requests), or why not
    shift: object | None = None  # a run-level shift named (dflashbench.measure.noise_model.RunShift), or None
    terms: tuple = (None, None)  # each run's run-to-run term judged with (noise_model.RunToRun: BASE, NEW)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == REGRESSION]

    @property
    def cannot_judge(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == CANNOT_JUDGE]

    @property
    def weak(self) -> list[Row]:
        """Gated figures that passed but could not have seen a drop of twice their threshold."""
        return [r for r in self.rows if r.verdict in (OK, NOISE) and r.weak]

    @property
    def exit_code(self) -> int:
        if self.strict and self.context:
            return 2
        if self.regressions or self.failed_in_new or self.only_in_base:
            return 1
        if self.cannot_judge or (self.weak and not self.accept_weak):
            return EXIT_CANNOT_JUDGE
        return 0


def value_of(row: pd.Series, metric: str) -> float | None:
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


def key_order(key: tuple) -> tuple:
    """Key order: setting, then concurrency points by concurrency, then rate points by rate."""
    load = str(key[-1])
    rate = load.endswith("/s") or "/s " in load
    number = float(re.match(r"[0-9.]+|inf", load).group()) if re.match(r"[0-9.]+|inf", load) else 0.0
    return (*(str(v) for v in key[:-1]), rate, number, load)


def verdict_of(gates: Sequence[Threshold], b: float | None, n: float | None) -> str:
    """The worst verdict of ``gates`` on a move from ``b`` to ``n``; :data:`SHOWN` with no gate."""
    verdicts = [_verdict(t, b, n) for t in gates]
    return REGRESSION if REGRESSION in verdicts else OK if OK in verdicts else NA if verdicts else SHOWN
