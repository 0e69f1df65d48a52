"""The machine's drift, read from the run's own speed-probe readings (:class:`dflashbench.types.ProbeReading`,
taken by :mod:`dflashbench.run.probe` at the start, before every point and at the end of a sweep).

Two questions, both answered from the readings alone (pure functions, no I/O):

- **Within a run**: how far can the machine's speed move between two moments of the run, here between the
  readings taken before two points? The *variogram* of the log readings answers it: at a lag of k readings, the
  differences ``log s[i + k] - log s[i]`` have a spread that grows with k when the machine drifts slowly, and is
  flat when it jumps about. Its robust size (1.4826 x the median absolute difference, around 0: a steady trend
  is drift too), less the probe's own noise (from the spread of each reading's trials), is the 1-sd drift of a
  figure between two points that far apart (:func:`drift_between`).
- **Between two runs**: did the machine change speed (:func:`machine_change`)? The ratio of the two runs'
  median readings, with a bootstrap interval over each run's readings; it changed when that interval excludes
  1.

Where it is used, and the rule that combines it with the requests' own noise: docs/metrics.md, "The noise rule",
and :func:`dflashbench.measure.noise.decision_interval`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dflashbench.types import ProbeReading

MAD_TO_SD = 1.4826  # robust sd of a normal sample from its median absolute deviation
MEDIAN_EFFICIENCY = 1.2533  # sd of a sample median ~ sqrt(pi / 2) x sd / sqrt(n)
MIN_DIFFS = 3  # differences at a lag before the lag's own spread is read (else every longer lag is pooled in)
# Readings a side needs before the machine's change between two runs is claimed: the median of 3 readings has 3
# possible values, and its bootstrap interval no width to speak of (a one-point sweep has 3: start, point, end)
MIN_MACHINE_READINGS = 5
N_RESAMPLES = 2000


def _logs(readings: Sequence[ProbeReading]) -> np.ndarray:
    return np.log(np.asarray([r.seconds for r in readings if r.seconds and r.seconds > 0], dtype=float))


def probe_noise_log(readings: Sequence[ProbeReading]) -> float:
    """The probe's own noise: the sd of one reading (the median of its trials) on the log scale, from the
    spread of its trials; the median over readings, so one disturbed reading does not set it."""
    spreads = []
    for r in readings:
        trials = np.log(np.asarray([t for t in r.trials_s if t > 0], dtype=float))
        if len(trials) >= 3:
            sd = MAD_TO_SD * float(np.median(np.abs(trials - np.median(trials))))
            spreads.append(MEDIAN_EFFICIENCY * sd / math.sqrt(len(trials)))
    return float(np.median(spreads)) if spreads else 0.0


@dataclass(frozen=True, slots=True)
class RunDrift:
    """What a run's probe readings say about its drift: ``sd_by_lag[k - 1]`` the 1-sd drift (log scale) between
    two readings k apart, the probe's own noise already taken out; ``overall`` the drift between any two
    readings (every lag pooled)."""

    kind: str
    readings: int
    probe_noise_log: float
    sd_by_lag: tuple[float, ...]
    overall: float

    def between(self, lag: int | None) -> float:
        """The drift between two readings ``lag`` apart (``None``: unknown, the run's overall drift; 0: two points
        after one reading, measured together, side by side or in turn, which the machine's moves reach alike)."""
        if lag == 0:
            return 0.0
        if lag is None or lag < 1 or lag > len(self.sd_by_lag):
            return self.overall
        return self.sd_by_lag[lag - 1]

    @property
    def text(self) -> str:
        """``"speed probe, 12 CPU readings: ±3.1% between adjacent points, ±5.0% across the run"``"""
        adjacent = self.between(1)
        return (f"speed probe, {self.readings} {self.kind.upper()} readings: ±{pct(adjacent)} between adjacent "
                f"points, ±{pct(self.overall)} across the run")  # fmt: skip


def pct(sd_log: float) -> str:
    """A 1-sd log spread as a percentage: ``0.031`` -> ``"3.1%"``."""
    return f"{(math.exp(sd_log) - 1) * 100:.1f}%"


def _robust_rms(d: np.ndarray) -> float:
    """The robust size of differences around 0 (a trend counts as drift, so no centring)."""
    return MAD_TO_SD * float(np.median(np.abs(d)))


def run_drift(readings: Sequence[ProbeReading], kind: str = "cpu") -> RunDrift | None:
    """The run's drift from its ``kind`` readings, in the order they were taken; ``None`` with fewer than 3."""
    chosen = sorted((r for r in readings if r.kind == kind), key=lambda r: r.t_ns)
    logs = _logs(chosen)
    if len(logs) < 3:
        return None
    noise = probe_noise_log(chosen)

    def less_noise(sd: float) -> float:  # each difference carries two readings' own noise
        return math.sqrt(max(0.0, sd * sd - 2 * noise * noise))

    all_diffs = np.concatenate([logs[k:] - logs[:-k] for k in range(1, len(logs))])
    overall = less_noise(_robust_rms(all_diffs))
    by_lag = []
    for k in range(1, len(logs)):
        diffs = logs[k:] - logs[:-k]
        if len(diffs) < MIN_DIFFS:  # too few at this lag: pool it with every longer lag
            diffs = np.concatenate([logs[j:] - logs[:-j] for j in range(k, len(logs))])
        by_lag.append(less_noise(_robust_rms(diffs)))
    # the variogram does not fall below its first lag (flat for jumps, rising for a trend): a pooled spread under
    # it is a few readings' chance (a sweep's readings read ±17 % apart at lag 1 and ±0 % pooled), not a machine
    overall = max(overall, by_lag[0])
    return RunDrift(kind=kind, readings=len(logs), probe_noise_log=noise, sd_by_lag=tuple(by_lag), overall=overall)


TOGETHER = " & "  # the points of one load measured together share one reading: "before <id> & <id> & <id>"


def before_tag(point_ids: Sequence[str]) -> str:
    """The tag of the reading taken before ``point_ids`` (several: a load's points measured together)."""
    return "before " + TOGETHER.join(point_ids)


def reading_index(readings: Sequence[ProbeReading], point_id: str, kind: str = "cpu") -> int | None:
    """The place, among ``kind`` readings in time order, of the reading taken just before ``point_id`` (the last
    such reading: a point measured again on ``--resume`` has a newer one); a reading before a load's points measured
    together (:func:`before_tag`) is each one's."""
    chosen = sorted((r for r in readings if r.kind == kind), key=lambda r: r.t_ns)
    tag = f"before {point_id}"

    def names(at: str) -> bool:
        return at == tag or (at.startswith("before ") and point_id in at[len("before "):].split(TOGETHER))

    return next((i for i in reversed(range(len(chosen))) if names(chosen[i].at)), None)


def drift_between(readings: Sequence[ProbeReading], point_a: str, point_b: str, kind: str = "cpu") -> float | None:
    """The 1-sd drift (log scale) of the machine between two points of one run, from the readings taken before
    each; the run's overall drift where either point has no reading of its own; ``None`` without readings."""
    drift = run_drift(readings, kind)
    if drift is None:
        return None
    a, b = reading_index(readings, point_a, kind), reading_index(readings, point_b, kind)
    return drift.between(None if a is None or b is None else abs(a - b))


@dataclass(frozen=True, slots=True)
class MachineChange:
    """The machine's speed in NEW against BASE from their probes: ``speed_ratio`` > 1 is faster, with a 95 %
    interval; ``changed`` when the interval excludes 1."""

    kind: str
    speed_ratio: float
    lo: float
    hi: float
    base_readings: int
    new_readings: int

    @property
    def changed(self) -> bool:
        return not (self.lo <= 1.0 <= self.hi)

    @property
    def text(self) -> str:
        move = "faster" if self.speed_ratio >= 1 else "slower"
        size = abs(self.speed_ratio - 1) * 100
        return (f"the {self.kind.upper()} probe ran {size:.1f}% {move} in NEW than in BASE (speed ratio "
                f"{self.speed_ratio:.3f} [{self.lo:.3f}–{self.hi:.3f}], {self.base_readings} and "
                f"{self.new_readings} readings)")  # fmt: skip


def machine_change(base: Sequence[ProbeReading], new: Sequence[ProbeReading], kind: str = "cpu",
                   seed: int = 0) -> MachineChange | None:  # fmt: skip
    """How the machine's speed moved from BASE to NEW: the ratio of the median readings (time base / time new),
    with a percentile-bootstrap interval, each run's readings drawn on their own; ``None`` with fewer than
    :data:`MIN_MACHINE_READINGS` readings on a side."""
    b, n = _logs([r for r in base if r.kind == kind]), _logs([r for r in new if r.kind == kind])
    if min(len(b), len(n)) < MIN_MACHINE_READINGS:
        return None
    rng = np.random.default_rng(seed)
    bb = np.median(b[rng.integers(0, len(b), size=(N_RESAMPLES, len(b)))], axis=1)
    nn = np.median(n[rng.integers(0, len(n), size=(N_RESAMPLES, len(n)))], axis=1)
    lo, hi = np.percentile(np.exp(bb - nn), [2.5, 97.5])
    return MachineChange(kind=kind, speed_ratio=float(math.exp(np.median(b) - np.median(n))), lo=float(lo),
                         hi=float(hi), base_readings=len(b), new_readings=len(n))  # fmt: skip


def summary(readings: Sequence[ProbeReading]) -> dict[str, dict]:
    """What the manifest keeps of a run's readings, by kind (``"cpu"``, ``"gpu"``): how many, the median time
    and the first and last, the probe's own noise and the run's drift (1 sd, %) between adjacent points and
    across the run; ``{}`` without readings. Enough to tell a slower machine at a glance; ``compare`` reads
    ``probes.jsonl`` itself."""
    out: dict[str, dict] = {}
    for kind in sorted({r.kind for r in readings}):
        chosen = sorted((r for r in readings if r.kind == kind), key=lambda r: r.t_ns)
        seconds = [r.seconds for r in chosen if r.seconds and r.seconds > 0]
        if not seconds:
            continue
        d = run_drift(chosen, kind)
        pct_of = lambda sd: round((math.exp(sd) - 1) * 100, 2)  # noqa: E731
        out[kind] = {"work": chosen[-1].work, "cpus": chosen[-1].cpus, "readings": len(seconds),
                     "median_s": float(np.median(seconds)), "first_s": seconds[0], "last_s": seconds[-1],
                     "probe_noise_pct": pct_of(probe_noise_log(chosen)),
                     "drift_adjacent_pct": pct_of(d.between(1)) if d else None,
                     "drift_overall_pct": pct_of(d.overall) if d else None}  # fmt: skip
    return out
