"""The noise model: the terms every interval and every gate of dflashbench is built from, in one place
(docs/metrics.md, "The noise rule"; docs/compare.md, "The run-to-run term").

A reading (a speedup, a point's speed figure, the move of either between two runs) carries:

1. **the requests' own noise**: a bootstrap over its requests (:mod:`dflashbench.measure.noise`). Paired by prompt
   inside a run for a speedup (the report's question: would DFlash be faster on traffic like this? the prompt mix is
   part of the answer), and paired **across runs** for a move between two runs that sent the same requests
   (:mod:`dflashbench.measure.cross_pairs`: the prompt mix cancels, each request's timing jitter is left);
2. **the machine's drift**: what the speed probe read between the two moments (:mod:`dflashbench.measure.drift`);
3. **the run-to-run term** (:class:`RunToRun`): what moves a reading from one launch of the same setting to the
   next beyond 1 and 2 (where the servers' threads landed, the memory layout, a whole run faster or slower). No
   reading inside one run sees it, so it is measured across runs: by ``dflashbench calibrate`` on the user's own
   machine (k unchanged launches: :func:`between_run_term`, :func:`run_level_terms`), from a CI's own accepted runs
   by ``history`` (:func:`history_terms`), or, where neither was given, the project's default, measured on the
   project's machine (``dflashbench/data/launch_noise.toml``) and said to be so.

The kinds of reading a profile holds a term for (per backend): :data:`SPEEDUP` (two methods' points of one run,
measured together), :data:`ABSOLUTE` (one point's speed figure, a run against another), and its two parts,
:data:`RUN_LEVEL` (the whole run faster or slower in every method alike: a common factor) and :data:`POINT` (what
is left to each point). A run-level shift between two runs is named, not pooled (:func:`run_level_shift`).

Pure functions, but for the profile file's reader and writer (:func:`read_profile`, :func:`write_profile`).
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.measure.noise import satterthwaite_df

SPEEDUP, ABSOLUTE, RUN_LEVEL, POINT = "speedup", "absolute", "run_level", "point"
KINDS = (SPEEDUP, ABSOLUTE, RUN_LEVEL, POINT)
KIND_TEXT = {SPEEDUP: "a speedup measured together", ABSOLUTE: "a point's speed figure",
             RUN_LEVEL: "a whole run's common shift", POINT: "a point beyond its run's common shift"}  # fmt: skip
PROFILE_SCHEMA = "dflashbench.noise-profile"
PROFILE_VERSION = 1
MEASURED, HISTORY, DEFAULT = "measured here", "from history", "the project's default"
Z_95 = 1.959964


@dataclass(frozen=True)
class Term:
    """One kind of reading's run-to-run spread per run (log, 1 sd) beyond its requests' jitter and the probe's drift,
    ``df`` degrees of freedom, from ``runs`` runs (``None``: not said). ``between``: the readings' whole spread
    between runs before the jitter and drift were taken out (what a reader can check against the runs)."""

    log_sd: float
    df: int | None = None
    runs: int | None = None
    readings: int | None = None
    between: float | None = None

    def as_dict(self) -> dict:
        return {"log_sd": round(self.log_sd, 6), "df": self.df, "runs": self.runs, "readings": self.readings,
                "between_log_sd": None if self.between is None else round(self.between, 6)}  # fmt: skip


@dataclass(frozen=True)
class RunToRun:
    """The run-to-run terms of one backend, and where they come from: ``source`` (:data:`MEASURED`, :data:`HISTORY`
    or :data:`DEFAULT`) and ``how`` (the command, the runs, the date, the machine)."""

    backend: str
    terms: Mapping[str, Term]
    source: str
    how: str

    def sd(self, kind: str) -> float | None:
        term = self.terms.get(kind)
        return term.log_sd if term is not None else None

    def df(self, kind: str) -> int | None:
        term = self.terms.get(kind)
        return term.df if term is not None else None

    @property
    def text(self) -> str:
        parts = []
        for kind in KINDS:
            t = self.terms.get(kind)
            if t is not None:
                df = f", {t.df} df" if t.df is not None else ""
                parts.append(f"{kind} ±{math.expm1(t.log_sd):.1%}{df}")
        return f"run-to-run term, {self.source} ({self.how}): " + ("; ".join(parts) or "none") + " (log, 1 sd per run)"


# -- the calibration's maths (k unchanged launches of one setting) ---------------------------------------------------
def between_run_term(values: Mapping[object, Sequence[float]], jitter_var: Mapping[object, float] | None = None,
                     drift_var: Mapping[object, float] | None = None, free: int | None = None
                     ) -> Term | None:  # fmt: skip
    """The run-to-run term of a kind of reading from k unchanged runs: ``values`` maps each reading (a speedup at a
    load, a point's figure) to its log value in each run; ``jitter_var`` to one run's variance from its requests'
    timing jitter (half the variance of a move between two runs paired across them: the prompt mix cancels);
    ``drift_var`` to the mean over the runs of the probe's drift variance the reading carries. Each reading's sample
    variance over the runs (k - 1 degrees of freedom) holds the term, the jitter and the drift; pooled over the
    readings, less the mean jitter and drift: ``sd^2 = sum (k-1)(s^2 - J - D) / sum (k-1)``, never below 0.
    ``free``: how many of the readings are free of each other, where fewer than all (three methods' speedups at one
    load are two: the third is the quotient of the other two); the degrees of freedom count that many readings'
    worth. ``None`` without a reading measured in two runs."""
    ss_total = ss_net = 0.0
    df = readings = 0
    runs = 0
    for key, logs in values.items():
        xs = [float(v) for v in logs if v is not None and math.isfinite(v)]
        if len(xs) < 2:
            continue
        mean = math.fsum(xs) / len(xs)
        s2 = math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
        extra = (jitter_var or {}).get(key, 0.0) + (drift_var or {}).get(key, 0.0)
        ss_total += (len(xs) - 1) * s2
        ss_net += (len(xs) - 1) * (s2 - extra)
        df += len(xs) - 1
        readings += 1
        runs = max(runs, len(xs))
    if df == 0:
        return None
    free_df = df if free is None or free >= readings else max(1, df * max(free, 1) // readings)
    return Term(math.sqrt(max(0.0, ss_net / df)), free_df, runs, readings, math.sqrt(ss_total / df))


def run_level_terms(table: Mapping[object, Sequence[float]], jitter_var: Mapping[object, float] | None = None,
                    drift_var: Mapping[object, float] | None = None) -> tuple[Term, Term] | None:  # fmt: skip
    """A run's common shift and what is left to each point, from k unchanged runs: ``table`` maps each point's speed
    figure to its log value in runs 0..k-1 (the same runs, in one order, for every point). Two-way, runs by points:
    ``y[i, p] = m[p] + c[i] + e[i, p]``. The runs' effects ``c`` (each run's mean deviation over its points) have a
    variance over the k runs of ``sd_c^2 + sd_e^2 / P``; the residuals ``e`` give ``sd_e^2`` on (k-1)(P-1) degrees of
    freedom. So the run-level term ``sd_c^2 = s_c^2 - s_e^2 / P`` (k - 1 df), and the point term ``s_e^2`` less the
    mean jitter and drift. ``None`` with fewer than 2 runs or 2 points measured in every run."""
    rows = {k: [float(v) for v in vs] for k, vs in table.items()
            if vs and all(v is not None and math.isfinite(v) for v in vs)}  # fmt: skip
    if not rows:
        return None
    k = min(len(v) for v in rows.values())
    rows = {key: v[:k] for key, v in rows.items()}
    p = len(rows)
    if k < 2 or p < 2:
        return None
    point_mean = {key: math.fsum(v) / k for key, v in rows.items()}
    effect = [math.fsum(rows[key][i] - point_mean[key] for key in rows) / p for i in range(k)]
    s2_c = math.fsum(c * c for c in effect) / (k - 1)  # the effects sum to zero over the runs
    ss_e = math.fsum((rows[key][i] - point_mean[key] - effect[i]) ** 2 for key in rows for i in range(k))
    df_e = (k - 1) * (p - 1)
    s2_e = ss_e / df_e
    extra = math.fsum((jitter_var or {}).get(key, 0.0) + (drift_var or {}).get(key, 0.0) for key in rows) / p
    common = Term(math.sqrt(max(0.0, s2_c - s2_e / p)), k - 1, k, p, math.sqrt(s2_c))
    point = Term(math.sqrt(max(0.0, s2_e - extra)), df_e, k, p, math.sqrt(s2_e))
    return common, point


def absolute_term(common: Term, point: Term) -> Term:
    """One point's speed figure's whole run-to-run term: the run's common shift and the point's own, added; its
    degrees of freedom those of the sum (Welch-Satterthwaite, rounded down), so a common shift read on k - 1 df that
    is small beside the point's own term, read on (k - 1)(P - 1), does not make the whole as uncertain as itself."""
    df = satterthwaite_df([(common.log_sd, common.df), (point.log_sd, point.df)])
    whole_df = int(df + 1e-9) if df is not None else min(x for x in (common.df, point.df) if x is not None)
    return Term(math.hypot(common.log_sd, point.log_sd), whole_df, common.runs, point.readings)


def beyond_rounds(term: RunToRun | None, round_sd: float) -> float:
    """A run's shift beyond its rounds' own spread (log, 1 sd): a launch moves all of a run's rounds alike, which no
    spread between them shows. The measured speedup term less one round's sd (one calibration launch is one round);
    0 with no term or the project's default, which was measured on single runs of another machine."""
    sd = term.sd(SPEEDUP) if term is not None and term.source != DEFAULT else None
    return math.sqrt(max(0.0, sd**2 - round_sd**2)) if sd else 0.0


# -- the same term from a CI's history ----------------------------------------------------------------------------
def history_terms(series: Sequence[tuple[str, Sequence[float], Sequence[int]]]) -> dict[str, Term]:
    """The run-to-run term of each kind from a history's series: ``series`` holds (kind, the series' log values in
    run order, the positions where a change of level was found). Successive runs' differences that cross no change
    each hold two runs' spread: ``sd^2 = mean(d^2) / 2`` (von Neumann's mean square successive difference, which a
    step between segments does not inflate), pooled over the series of a kind, one degree of freedom a difference.
    The runs' own jitter is in it: an upper bound on the calibration's term, whose jitter is taken out."""
    ss: dict[str, float] = {}
    df: dict[str, int] = {}
    runs: dict[str, int] = {}
    count: dict[str, int] = {}
    for kind, logs, changes in series:
        cut = set(changes)
        diffs = [logs[i] - logs[i - 1] for i in range(1, len(logs)) if i not in cut
                 and math.isfinite(logs[i]) and math.isfinite(logs[i - 1])]  # fmt: skip
        if not diffs:
            continue
        ss[kind] = ss.get(kind, 0.0) + math.fsum(d * d for d in diffs) / 2
        df[kind] = df.get(kind, 0) + len(diffs)
        runs[kind] = max(runs.get(kind, 0), len(logs))
        count[kind] = count.get(kind, 0) + 1
    return {kind: Term(math.sqrt(ss[kind] / df[kind]), df[kind], runs[kind], count[kind], math.sqrt(ss[kind] / df[kind]))
            for kind in ss}  # fmt: skip


# -- a run-level shift between two runs: named, not pooled --------------------------------------------------------
@dataclass(frozen=True)
class RunShift:
    """NEW's run as a whole faster or slower than BASE's in every method: ``log_move`` the common factor (the median
    of the methods' moves), ``by_method`` each method's move, ``own`` the methods whose move lies beyond the others'
    by more than noise (a change of their own on top of the shift)."""

    log_move: float
    by_method: Mapping[str, float]
    own: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        share = math.expm1(self.log_move)
        each = ", ".join(f"{m} {math.expm1(v):+.0%}" for m, v in self.by_method.items())
        own = (f"; beyond it, a change of {', '.join(self.own)}'s own" if self.own else "")
        return (f"a run-level shift: every method {abs(share):.0%} {'faster' if share > 0 else 'slower'} in NEW "
                f"({each}){own}")  # fmt: skip


def run_level_shift(moves: Mapping[str, tuple[float, float]], z: float = Z_95) -> RunShift | None:
    """Whether every method moved the same way beyond its noise (``moves``: method -> (its mean log move NEW / BASE
    over its gated points, that mean's sd without the run-level term)): a shift of the run, named, with its size.
    A method whose move lies outside the range of the others' by more than ``z`` of its noise changed on its own
    (with three methods or more; with two the data cannot tell). ``None`` with fewer than two methods or where any
    method stayed within its noise or moved the other way (a one-method change is that method's, not the run's)."""
    kept = {m: (v, s) for m, (v, s) in moves.items() if v is not None and math.isfinite(v)}
    if len(kept) < 2:
        return None
    signs = {math.copysign(1.0, v) for v, _ in kept.values()}
    if len(signs) != 1 or any(abs(v) <= z * s for v, s in kept.values()):
        return None
    ordered = sorted(v for v, _ in kept.values())
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    own = []
    if n >= 3:
        for m, (v, s) in kept.items():
            others = [(ov, os_) for om, (ov, os_) in kept.items() if om != m]
            lo, hi = min(o[0] for o in others), max(o[0] for o in others)
            spread = math.hypot(s, max(o[1] for o in others))
            if v < lo - z * spread or v > hi + z * spread:
                own.append(m)
    return RunShift(median, {m: v for m, (v, _) in kept.items()}, tuple(own))


# -- the report's interval: the requests, the drift and the run-to-run term ----------------------------------------
@dataclass(frozen=True)
class Combined:
    """A ratio's decision interval as the report reads it, with each term that widened it (log, 1 sd): ``requests``
    (half the log width of the requests' 95 % interval over 1.96), ``drift`` (the machine's, between the two points)
    and ``launch`` (the run-to-run term of a speedup: its two servers' launches), and ``without_launch``, the
    interval before the launch term (where it decides and the whole one does not: "not decided at this noise")."""

    interval: tuple[float, float]
    requests: float
    drift: float
    launch: float
    without_launch: tuple[float, float]
    terms: Mapping[str, float] = field(default_factory=dict)


def combined_interval(value: float | None, request_ci: tuple[float, float] | None, drift_sd: float | None,
                      launch_sd: float | None) -> Combined | None:  # fmt: skip
    """The requests' 95 % interval of ``value`` widened on the log scale by the drift between its two points and by
    the run-to-run term (each side's log half-width ``h`` becomes ``sqrt(h^2 + (1.96 drift)^2 + (1.96 launch)^2)``:
    independent noises). ``None`` where the requests give no interval."""
    if value is None or request_ci is None or not value > 0:
        return None
    lo, hi = request_ci
    if not (lo > 0 and hi > 0):
        return None
    h_lo, h_hi = max(0.0, math.log(value / lo)), max(0.0, math.log(hi / value))
    d, launch = drift_sd or 0.0, launch_sd or 0.0

    def widen(*sds: float) -> tuple[float, float]:
        extra = Z_95 * math.hypot(*sds) if sds else 0.0
        return value * math.exp(-math.hypot(h_lo, extra)), value * math.exp(math.hypot(h_hi, extra))

    return Combined(widen(d, launch), (h_lo + h_hi) / 2 / Z_95, d, launch, widen(d),
                    {"requests": (h_lo + h_hi) / 2 / Z_95, "drift": d, "launch": launch})  # fmt: skip


# -- the project's default, and the profile file -------------------------------------------------------------------
DEFAULTS_FILE = "launch_noise.toml"


def project_default(backend: str | None) -> RunToRun | None:
    """The run-to-run terms the project measured for ``backend`` on its own machine (``data/launch_noise.toml``):
    :data:`ABSOLUTE` from ``log_sd`` (one launch against another), :data:`SPEEDUP` from ``run_speedup_log_sd``;
    ``None`` for a backend never measured."""
    text = resources.files("dflashbench").joinpath("data", DEFAULTS_FILE).read_text(encoding="utf-8")
    row = tomllib.loads(text).get(str(backend or ""))
    if not row:
        return None
    terms = {ABSOLUTE: Term(float(row["log_sd"]), row.get("log_sd_df"))}
    if "run_speedup_log_sd" in row:
        terms[SPEEDUP] = Term(float(row["run_speedup_log_sd"]), row.get("run_speedup_df"))
    how = f"absolute: {row.get('measured')}"
    if "run_speedup_measured" in row:
        how = f"speedup: {row['run_speedup_measured']}; {how}"
    return RunToRun(str(backend), terms, DEFAULT, how)


def machine() -> dict:
    """Where a profile was measured: the host's name, OS, processor and CPU count (GPUs: the runs' manifests)."""
    import os

    return {"host": platform.node(), "system": platform.platform(), "processor": platform.processor() or
            platform.machine(), "cpu_count": os.cpu_count()}  # fmt: skip


def write_profile(path: Path, profiles: Sequence[RunToRun], *, made_by: str, runs: Sequence[str] = (),
                  where: Mapping | None = None) -> None:  # fmt: skip
    """Write ``profiles`` (one per backend) as a noise profile file: JSON, :data:`PROFILE_SCHEMA` version
    :data:`PROFILE_VERSION`, with the date, the machine, the command and the runs it was read from."""
    doc = {"schema": PROFILE_SCHEMA, "version": PROFILE_VERSION,
           "made_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "made_by": made_by, "machine": dict(where or machine()), "runs": list(runs),
           "backends": {p.backend: {"source": p.source, "how": p.how,
                                    "terms": {k: t.as_dict() for k, t in p.terms.items()}} for p in profiles}}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def read_profile(path: Path) -> dict[str, RunToRun]:
    """A noise profile file (:func:`write_profile`) as backend -> :class:`RunToRun`; a clear error for a file that
    is not one."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"--noise-profile {path}: cannot read it ({exc.strerror or exc}); give the file "
                        "dflashbench calibrate (or history --noise-profile-out) wrote") from None  # fmt: skip
    except ValueError as exc:
        raise UserError(f"--noise-profile {path}: not JSON ({exc}); give the file dflashbench calibrate wrote") from None
    if not isinstance(doc, dict) or doc.get("schema") != PROFILE_SCHEMA:
        raise UserError(f"--noise-profile {path}: not a dflashbench noise profile (no \"schema\": "
                        f"\"{PROFILE_SCHEMA}\"); give the file dflashbench calibrate wrote")  # fmt: skip
    if int(doc.get("version") or 0) > PROFILE_VERSION:
        raise UserError(f"--noise-profile {path}: version {doc.get('version')} is newer than this dflashbench reads "
                        f"({PROFILE_VERSION}); upgrade dflashbench or calibrate again")  # fmt: skip
    made = str(doc.get("made_at") or "")[:10]
    host = (doc.get("machine") or {}).get("host") or "?"
    out = {}
    for backend, body in (doc.get("backends") or {}).items():
        try:
            terms = {k: Term(float(t["log_sd"]), t.get("df"), t.get("runs"), t.get("readings"), t.get("between_log_sd"))
                     for k, t in (body.get("terms") or {}).items() if k in KINDS}  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"--noise-profile {path}: backend {backend!r} has a malformed term ({exc}); calibrate "
                            "again") from None  # fmt: skip
        source = str(body.get("source") or MEASURED)
        how = f"{body.get('how') or doc.get('made_by') or ''}; {made}, host {host}; {path}"
        out[str(backend)] = RunToRun(str(backend), terms, source, how)
    return out


def resolve(backend: str | None, profile: Mapping[str, RunToRun] | None) -> RunToRun | None:
    """The run-to-run term a run of ``backend`` is judged with: the profile's (measured here, or from history) where
    it has the backend, else the project's default, else ``None`` (never measured: said by the caller)."""
    if profile and str(backend) in profile:
        return profile[str(backend)]
    return project_default(backend)


def run_terms(runs: Sequence, profile: Mapping | None = None) -> dict[str, RunToRun | None]:
    """Each run's run-to-run term (run id -> :class:`RunToRun` or ``None``): the profile's for its backend (``report
    --noise-profile``: measured here, or from history), else the project's default, measured on the project's
    machine; the readings' intervals add its speedup term and say which it was."""
    return {str(r.run_id): resolve(r.manifest.get("backend"), profile) for r in runs}
