"""``dflashbench history``: many runs of one or more settings as series, one per gated figure of ``compare``, each
read for its changes of level (with their confidence) and its drift (:mod:`dflashbench.measure.changepoints`).

The series are ``compare``'s default gates (:func:`dflashbench.gate.history_read.gated_figures`): each speedup
per pair and load (DFlash vs AR, EAGLE-3 vs AR, DFlash vs EAGLE-3), and per method and load the pooled per-user
rate, the throughput, tau and p99 TTFT; category "all", as ``compare`` gates it. Runs of different settings
(hardware, CPUs, suite and version, backend, model) are separate series, never one line; inside a series a
change of engine release, dflashbench version or drafter is marked at the run where it happens.

A change is judged as ``compare`` judges a move (the same gates): a **regression** when it goes the wrong way
(a drop; for p99 TTFT a rise) by more than the gate's threshold (5 %, tau 0.2, TTFT 20 %); a smaller change is
listed and gates nothing. Where the runs' speed probes say the machine itself moved at the same run, by enough
to explain an absolute speed figure's change (throughput, per-user rate, TTFT), the change is "the machine's":
a speedup, measured within each run, is never excused.

Exit codes, as ``compare``'s: 0 when no regression's first run is among the newest ``recent`` runs of its series;
1 when one is; 2 when the input is unusable (no run read, a bad option); 3 when it cannot be judged: a recent
regression the machine's speed explains, a series too short to hold a change among its newest runs, or a series
so noisy that its newest runs could not have shown a step of twice its gate's threshold.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dflashbench.errors import UserError
from dflashbench.gate import compare as cmp
from dflashbench.gate.history_read import Reading, RunSummary, gated_figures, read_runs
from dflashbench.gate.speedups import SPEEDUP, load_at, speedup_label
from dflashbench.measure import changepoints as cp

RECENT = 3
EXIT_OK, EXIT_REGRESSION, EXIT_UNUSABLE, EXIT_CANNOT_JUDGE = 0, 1, 2, 3
REGRESSION, IMPROVEMENT, SMALL, MACHINE = "regression", "improvement", "within the gate", "the machine's"
_TIMES = ("ttft_s",)
MARKED = (("engine", "engine"), ("dflashbench", "dflashbench"), ("drafters", "drafter"))


@dataclass(frozen=True)
class Finding:
    """One change of one series, judged."""

    change: cp.Change
    kind: str  # REGRESSION, IMPROVEMENT, SMALL or MACHINE
    recent: bool  # its first run is among the newest ``recent`` runs of the series
    before: float  # the levels either side (the figure's own unit)
    after: float
    machine: str = ""  # what the probes say the machine did across the same runs


@dataclass
class Series:
    """One gated figure of one setting over its runs (in order), read."""

    setting: str
    figure: str
    subject: str  # a method, or a pair "dflash/ar"
    workload: str
    load: str
    gate: cmp.Threshold
    runs: list[RunSummary]
    values: list[float]
    own_sd: list[float | None]
    fit: cp.Fit | None = None
    findings: list[Finding] = field(default_factory=list)
    marks: list[tuple[int, str]] = field(default_factory=list)  # (run position, what changed there)
    noisy: str = ""  # why its newest runs cannot be judged, where they cannot
    trend_machine: str = ""  # where the probes' own drift over the same runs explains the series' trend
    trend_regression: str = ""  # where its trend takes it past its gate over the newest runs: a regression

    @property
    def label(self) -> str:
        from dflashbench.measure.analysis import method_label

        if self.figure == SPEEDUP:
            return speedup_label(("", self.subject, self.workload, "all", self.load))
        name = {"throughput_tok_per_s": "throughput", "per_user_tok_per_s_pooled": "per-user rate",
                "tau": "tau", "ttft_s_p99": "TTFT p99"}.get(self.figure, self.figure)  # fmt: skip
        return f"{method_label(self.subject)} {name} at {load_at(self.load)}"

    @property
    def unit(self) -> str:
        return {"throughput_tok_per_s": "tok/s", "per_user_tok_per_s_pooled": "tok/s/user", "ttft_s_p99": "s",
                "speedup": "x", "tau": ""}.get(self.figure, "")  # fmt: skip


@dataclass
class History:
    """Every series of the runs read, and what the reader must know beside them."""

    series: list[Series]
    runs: list[RunSummary]
    reading: Reading
    recent: int
    order: str
    notes: list[str] = field(default_factory=list)
    marked: set[str] = field(default_factory=set)  # run ids marked on the page (history --mark: a pull request's run)
    mark_label: str = "marked run"  # what a marked run is, in the plots' legend (history --mark-label)

    @property
    def findings(self) -> list[tuple[Series, Finding]]:
        return [(s, f) for s in self.series for f in s.findings]

    @property
    def regressions(self) -> list[tuple[Series, Finding]]:
        return [(s, f) for s, f in self.findings if f.kind == REGRESSION]

    @property
    def trends(self) -> list[Series]:
        return [s for s in self.series if s.fit is not None and s.fit.trend is not None]

    @property
    def trend_regressions(self) -> list[Series]:
        """Series whose trend takes them past their gate over the newest runs (:func:`judge_trend_gate`)."""
        return [s for s in self.series if s.trend_regression]

    def mark(self, wanted: Sequence[str | Path]) -> None:
        """Mark the runs ``wanted`` names (each a run's folder or its run id) on the page; one not read is a note,
        never an error (a pull request's partial run with nothing to read must not fail its job's history)."""
        for want in wanted:
            text = str(want)
            where = Path(text).resolve()
            hits = [r for r in self.runs if r.run_id == text or Path(r.path).resolve() == where]
            if hits:
                self.marked.update(r.run_id for r in hits)
            else:
                self.notes.append(f"--mark {text}: not among the runs read (no run with that folder or run id), so "
                                  "not marked")  # fmt: skip

    @property
    def exit_code(self) -> int:
        if any(f.recent for _, f in self.regressions) or self.trend_regressions:
            return EXIT_REGRESSION
        if any(f.recent and f.kind == MACHINE for _, f in self.findings) or any(s.noisy for s in self.series):
            return EXIT_CANNOT_JUDGE
        return EXIT_OK


# -- ordering -------------------------------------------------------------------------------------------------------
def commit_order(repo: Path, runs: Sequence[RunSummary]) -> list[RunSummary]:
    """``runs`` in the order of their commits in ``repo``'s history (oldest first; time order within a commit).
    A run's commit: the ``GITHUB_SHA`` its sweep recorded, else its ``--label commit=SHA``."""
    missing = [r.run_id for r in runs if not r.commit]
    if missing:
        raise UserError(f"--by commit: {len(missing)} run(s) record no commit ({', '.join(missing[:3])}"
                        f"{', ...' if len(missing) > 3 else ''}); sweep with GITHUB_SHA set (a GitHub Actions job sets "
                        "it) or with --label commit=<sha>, or order by time (--by time)")  # fmt: skip
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-list", "--topo-order", "--reverse", "HEAD"],
                             capture_output=True, text=True, timeout=60, check=True).stdout.split()  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise UserError(f"--repo {repo}: cannot read its history with git ({exc}); give a git checkout") from None
    position = {sha: i for i, sha in enumerate(out)}

    def where(run: RunSummary) -> int | None:
        sha = str(run.commit)
        if sha in position:
            return position[sha]
        found = [i for full, i in position.items() if len(sha) >= 7 and full.startswith(sha)]
        return found[0] if len(found) == 1 else None

    unknown = [r for r in runs if where(r) is None]
    if unknown:
        raise UserError(f"--by commit: the commit of {len(unknown)} run(s) is not in {repo}'s history "
                        f"({', '.join(f'{r.run_id}: {r.commit}' for r in unknown[:3])}); fetch it (git fetch) or "
                        "give the repository the runs were made from")  # fmt: skip
    return sorted(runs, key=lambda r: (where(r), r.started_at, r.run_id))


# -- judging --------------------------------------------------------------------------------------------------------
def _machine_move(runs: Sequence[RunSummary], change: cp.Change) -> tuple[float, float] | None:
    """The machine's speed after the change over before it (log, and its sd), from the runs' speed probes."""
    sides = []
    for a, b in ((change.start, change.index), (change.index, change.stop)):
        levels = [r.probe for r in runs[a:b] if r.probe]
        if len(levels) < 2:
            return None
        logs = np.array([p[0] for p in levels])
        sides.append((float(logs.mean()), float(logs.std(ddof=1)) / math.sqrt(len(logs))))
    return sides[1][0] - sides[0][0], math.hypot(sides[0][1], sides[1][1])


def _past_gate(gate: cmp.Threshold, before: float, after: float) -> bool:
    wrong = before - after if gate.direction == "drop" else after - before
    allowed = gate.amount * abs(before) if gate.relative else gate.amount
    return wrong > allowed * (1 + 1e-12)


def judge(series: Series, recent: int) -> None:
    """Each change of ``series``: regression, improvement, a move within the gate, or the machine's."""
    fit = series.fit
    if fit is None:
        return
    n = len(series.values)
    for change in fit.changes:
        before, after = math.exp(fit.levels[change.index - 1]), math.exp(fit.levels[change.index])
        wrong_way = change.log_move < 0 if series.gate.direction == "drop" else change.log_move > 0
        kind = REGRESSION if wrong_way and _past_gate(series.gate, before, after) else \
            IMPROVEMENT if not wrong_way else SMALL  # fmt: skip
        machine = ""
        moves = _machine_move(series.runs, change) if _moves_with_machine(series.figure) else None
        if moves is not None:
            sign = -1.0 if series.figure.startswith(_TIMES) else 1.0
            expected, expected_sd = sign * moves[0], moves[1]
            beyond = abs(expected) > 1.959964 * expected_sd
            machine = f"the speed probe {_pct(moves[0])} across the same runs" if beyond else ""
            same_way = expected * change.log_move > 0
            residual = change.log_move - expected  # the move the machine's change leaves unexplained
            within_noise = abs(residual) <= 1.959964 * math.hypot(change.log_move_sd, expected_sd)
            if kind == REGRESSION and beyond and same_way and (
                    not _past_gate(series.gate, before, before * math.exp(residual)) or within_noise):  # fmt: skip
                kind = MACHINE
            elif kind != REGRESSION and beyond and same_way and (within_noise or residual * change.log_move <= 0 or (
                    series.gate.relative and abs(math.expm1(residual)) <= series.gate.amount)):  # fmt: skip
                # a rise the machine's own speedup explains is no more the code's than a fall: one no larger than
                # the probe's (a served figure moves less than the probe's pure compute) is the machine's
                kind = MACHINE
        series.findings.append(Finding(change, kind, change.index >= n - recent, before, after, machine))


def _probe_slope(runs: Sequence[RunSummary], start: int, stop: int) -> tuple[float, float] | None:
    """The machine's speed drift per run over runs ``[start, stop)`` (log, and its sd), from the speed probes."""
    pts = [(i, r.probe[0]) for i, r in enumerate(runs[start:stop]) if r.probe]
    if len(pts) < 3:
        return None
    x, y = np.array([p[0] for p in pts], float), np.array([p[1] for p in pts])
    sxx = float(((x - x.mean()) ** 2).sum())
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    resid = y - y.mean() - slope * (x - x.mean())
    return slope, math.sqrt(float((resid**2).sum()) / (len(pts) - 2) / sxx)


def judge_trend(series: Series) -> None:
    """Where the series drifts and the machine's probes drift the same way over the same runs, by as much within
    noise, the trend is the machine's (an absolute speed figure only; a speedup's never is)."""
    fit = series.fit
    if fit is None or fit.trend is None or not _moves_with_machine(series.figure):
        return
    found = _probe_slope(series.runs, fit.trend.start, fit.trend.stop)
    if found is None:
        return
    sign = -1.0 if series.figure.startswith(_TIMES) else 1.0
    expected, expected_sd = sign * found[0], found[1]
    residual = fit.trend.slope - expected
    if abs(expected) > 1.959964 * expected_sd and expected * fit.trend.slope > 0 \
            and abs(residual) <= 1.959964 * math.hypot(fit.trend.slope_sd, expected_sd):  # fmt: skip
        series.trend_machine = (f"the speed probe drifts {math.expm1(found[0]) * 100:+.1f}% per run over the same "
                                "runs: the machine's speed explains it")  # fmt: skip


def judge_trend_gate(series: Series, recent: int) -> None:
    """A trend that takes the figure past its gate over the newest ``recent`` runs (the fitted line's move across
    them, the wrong way, by more than compare's threshold) is a regression, as a step of that size would be; one
    the machine's own drift explains is not."""
    fit = series.fit
    if fit is None or fit.trend is None or series.trend_machine or recent < 1 or fit.n < 2:
        return
    k = min(recent, fit.n - 1)
    before, after = math.exp(fit.levels[-1 - k]), math.exp(fit.levels[-1])
    wrong_way = after < before if series.gate.direction == "drop" else after > before
    if wrong_way and _past_gate(series.gate, before, after):
        series.trend_regression = (f"over its newest {k} runs the trend moves it {math.expm1(math.log(after / before)) * 100:+.1f}% "
                                   f"({before:.4g} -> {after:.4g}), past its gate ({series.gate.describe()})")  # fmt: skip


def _moves_with_machine(figure: str) -> bool:
    from dflashbench.gate.compare_noise import moves_with_machine

    return moves_with_machine(figure)


def _pct(log_move: float) -> str:
    share = math.expm1(log_move)
    return f"ran {abs(share) * 100:.0f}% {'faster' if share > 0 else 'slower'}"


def _marks(runs: Sequence[RunSummary]) -> list[tuple[int, str]]:
    out = []
    for i in range(1, len(runs)):
        changed = [f"{label} {runs[i - 1].marks.get(key)} -> {runs[i].marks.get(key)}" for key, label in MARKED
                   if runs[i].marks.get(key) != runs[i - 1].marks.get(key)]  # fmt: skip
        if changed:
            out.append((i, "; ".join(changed)))
    return out


def _noisy(series: Series, recent: int) -> str:
    """Why the newest ``recent`` runs of ``series`` cannot be judged ("" where they can)."""
    fit = series.fit
    need = recent + cp.MIN_SEGMENT
    if len(series.values) < need:
        return f"{len(series.values)} run(s): a change among the newest {recent} needs {need} runs at least"
    if fit is None or fit.constant:
        return ""
    if recent < cp.MIN_SEGMENT:
        return ""
    if fit.changes or fit.trend is not None:
        return ""  # what it holds was found: nothing is left unjudged
    if recent < cp.RESCUE_SIDE and fit.floor_level is not None and fit.smallest_p(recent) > fit.floor_level:
        return (f"{fit.n} runs: a step in its newest {recent}, however large, reaches p = "
                f"{fit.smallest_p(recent):.2g} at best in random orders of its runs, above the level a change "
                f"must reach among the {fit.family} series read ({fit.floor_level:.2g}), and {recent} run(s) are too "
                f"few for the t-test ({cp.RESCUE_SIDE} a side); keep more runs")  # fmt: skip
    step = fit.detectable(recent)
    if step is None:
        return ""
    level = math.exp(fit.levels[-1])
    share = -math.expm1(-step) if series.gate.direction == "drop" else math.expm1(step)
    amount = share if series.gate.relative else share * level
    if amount > cmp.WEAK_FACTOR * series.gate.amount:
        shown = f"{amount * 100:.0f}%" if series.gate.relative else f"{amount:.3g}"
        return (f"its newest {recent} runs could show a step of {shown} at the least, more than "
                f"{cmp.WEAK_FACTOR:g}x its gate ({series.gate.describe()})")
    return ""


def build(reading: Reading, recent: int = RECENT, order: str = "time", repo: Path | None = None,
          n_perms: int = cp.N_PERMS) -> History:  # fmt: skip
    """Every series of the runs read, each fitted and judged."""
    if not reading.runs:
        why = f": {reading.skipped[0]}" if reading.skipped else ""
        raise UserError(f"no run to read{why}; give run directories or folders holding them")
    if recent < 1:
        raise UserError(f"--recent {recent}: give 1 or more")
    if order == "commit":
        if repo is None:
            raise UserError("--by commit needs --repo PATH: the git checkout whose history orders the runs")
        runs = commit_order(repo, reading.runs)
    elif order == "time":
        runs = sorted(reading.runs, key=lambda r: (r.started_at, r.run_id))
    elif order == "given":  # the reading's own order (tools/history_eval.py reorders measured runs)
        runs = list(reading.runs)
    else:
        raise UserError(f"--by {order!r}: choose time or commit")
    gates = {g.metric: g for g in gated_figures()}
    history = History([], runs, reading, recent, order)
    settings: dict[str, list[RunSummary]] = {}
    for run in runs:
        settings.setdefault(run.setting_key, []).append(run)
    for setting, members in settings.items():
        keys = sorted(dict.fromkeys(k for r in members for k in r.figures), key=_key_order)
        family = []
        for key in keys:
            figure, subject, workload, load = key.split("|")
            held = [r for r in members if key in r.figures]
            family.append(Series(setting, figure, subject, workload, load, gates[figure], held,
                                 [float(r.figures[key][0]) for r in held], [r.figures[key][1] for r in held]))  # fmt: skip
        # one family per setting, its runs shuffled as a whole: a history with no change shows nothing at all in
        # 1 - FAMILY_ALPHA of its readings, however many series it has (changepoints.step_down)
        where = {id(r): i for i, r in enumerate(members)}
        fits = cp.detect_family([(s.values, s.own_sd) for s in family], n_perms=n_perms,
                                positions=[[where[id(r)] for r in s.runs] for s in family],
                                seeds=[_seed(setting, key) for key in keys], seed=_seed(setting, "family"))  # fmt: skip
        for series, fit in zip(family, fits, strict=True):
            series.fit = fit
            series.marks = _marks(series.runs)
            judge(series, recent)
            judge_trend(series)
            judge_trend_gate(series, recent)
            series.noisy = _noisy(series, recent)
            history.series.append(series)
    if len(settings) > 1:
        history.notes.append(f"{len(settings)} settings: each its own series (" + "; ".join(settings) + ")")
    from dflashbench.gate.calibrate import history_profiles  # the run-to-run term its series show (issue #62)

    history.notes += [p.text for p in history_profiles(history)]
    return history


def _seed(setting: str, key: str) -> int:
    """A fixed seed per series (its random orders, and so its p-values, are the same on every reading)."""
    import zlib

    return zlib.crc32(f"{setting}|{key}".encode())


_FIGURE_ORDER = {SPEEDUP: 0, "per_user_tok_per_s_pooled": 1, "throughput_tok_per_s": 2, "tau": 3, "ttft_s_p99": 4}
_SUBJECT_ORDER = {"dflash/ar": 0, "eagle3/ar": 1, "dflash/eagle3": 2, "dflash": 0, "eagle3": 1, "ar": 2}


def _key_order(key: str) -> tuple:
    figure, subject, workload, load = key.split("|")
    try:
        number = float(load)
    except ValueError:
        number = math.inf
    return (_FIGURE_ORDER.get(figure, 9), _SUBJECT_ORDER.get(subject, 9), subject, workload, number, load)


def history_of(paths: Sequence[Path], recent: int = RECENT, order: str = "time", repo: Path | None = None,
               use_index: bool = True) -> History:  # fmt: skip
    """Read the runs under ``paths`` and build their history."""
    reading = read_runs(paths, use_index=use_index)
    return build(reading, recent, order, repo)
