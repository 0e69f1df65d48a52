"""The noise rule's core: drift from the speed probe's readings, the decision interval, the machine change
between runs (dflashbench.measure.drift, dflashbench.measure.noise), and the probe itself on this machine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dflashbench.measure import drift, noise
from dflashbench.run import probe
from dflashbench.types import ProbeReading


def readings(seconds, trial_spread=0.0, at=None, kind="cpu"):
    """Readings at 1 s intervals; each with 5 trials spread +-``trial_spread`` (relative) around its value."""
    out = []
    for i, s in enumerate(seconds):
        trials = tuple(s * (1 + trial_spread * f) for f in (-1.0, -0.5, 0.0, 0.5, 1.0))
        out.append(ProbeReading(kind=kind, at=(at[i] if at else f"before p{i}"), t_ns=i * 10**9, seconds=s,
                                trials_s=trials))  # fmt: skip
    return out


def test_a_steady_machine_has_no_drift():
    d = drift.run_drift(readings([0.1] * 10))
    assert d is not None and d.overall == 0.0 and d.between(1) == 0.0


def test_drift_grows_with_the_lag_on_a_slow_trend():
    # 2 % slower per reading: adjacent points drift 2 %, points 5 readings apart about 10 %
    d = drift.run_drift(readings([0.1 * 1.02**i for i in range(12)]))
    assert d.between(1) == pytest.approx(1.4826 * math.log(1.02), rel=1e-6)
    assert d.between(5) == pytest.approx(1.4826 * 5 * math.log(1.02), rel=1e-6)
    assert d.between(1) < d.between(5)


def test_the_probes_own_noise_is_taken_out_of_the_drift():
    rng = np.random.default_rng(1)
    jumpy = [0.1 * math.exp(rng.normal(0, 0.05)) for _ in range(40)]
    quiet_trials = drift.run_drift(readings(jumpy, trial_spread=0.0))
    noisy_trials = drift.run_drift(readings(jumpy, trial_spread=0.05))
    assert noisy_trials.probe_noise_log > 0
    assert noisy_trials.overall < quiet_trials.overall
    # jumps of sd 5 % per reading: two readings differ by sd 5 % x sqrt(2)
    assert quiet_trials.overall == pytest.approx(0.05 * math.sqrt(2), rel=0.3)


def test_drift_between_two_points_reads_their_own_readings():
    rs = readings([0.1 * 1.02**i for i in range(12)])
    assert drift.drift_between(rs, "p2", "p3") == pytest.approx(1.4826 * math.log(1.02), rel=1e-6)
    assert drift.drift_between(rs, "p0", "p6") == pytest.approx(1.4826 * 6 * math.log(1.02), rel=1e-6)
    # a point without a reading of its own gets the run's overall drift; no readings, no drift
    assert drift.drift_between(rs, "p0", "elsewhere") == drift.run_drift(rs).overall
    assert drift.drift_between([], "p0", "p1") is None


def test_a_point_measured_again_reads_its_newest_reading():
    rs = readings([0.1, 0.1, 0.1, 0.2], at=["before a", "before b", "before c", "before a"])
    assert drift.reading_index(rs, "a") == 3


def test_decision_interval_widens_the_requests_interval_by_the_drift():
    assert noise.decision_interval(1.10, (1.05, 1.15), None) == (1.05, 1.15)  # drift not measured: as it is
    lo, hi = noise.decision_interval(1.10, (1.05, 1.15), 0.05)
    assert lo < 1.05 and hi > 1.15
    assert math.log(1.10 / lo) == pytest.approx(math.hypot(math.log(1.10 / 1.05), 1.959964 * 0.05))
    # a 10 % win the requests call clear is not decided on a machine that drifts 5 % (1 sd) between points
    assert noise.decide((1.05, 1.15)) == noise.FASTER
    assert noise.decide((lo, hi)) == noise.UNCLEAR
    assert noise.decide(noise.decision_interval(0.7, (0.65, 0.75), 0.05)) == noise.SLOWER
    # no interval from the requests: nothing is decided, whatever the ratio
    assert noise.decision_interval(0.82, None, 0.01) is None
    assert noise.decide(None) == noise.NO_INTERVAL


def test_machine_change_between_runs():
    rng = np.random.default_rng(2)
    base = readings([0.1 * math.exp(rng.normal(0, 0.02)) for _ in range(12)])
    same = readings([0.1 * math.exp(rng.normal(0, 0.02)) for _ in range(12)])
    slow = readings([0.13 * math.exp(rng.normal(0, 0.02)) for _ in range(12)])
    assert not drift.machine_change(base, same).changed
    change = drift.machine_change(base, slow)
    assert change.changed and change.speed_ratio == pytest.approx(1 / 1.3, rel=0.05)
    assert "slower in NEW" in change.text
    assert drift.machine_change(base[:4], slow) is None  # too few readings to claim a change (a one-point sweep has 3)


def test_the_cpu_probe_times_its_fixed_work_here():
    r = probe.cpu_reading("start")
    assert r.kind == "cpu" and r.at == "start" and len(r.trials_s) == probe.TRIALS
    assert r.seconds == sorted(r.trials_s)[probe.TRIALS // 2] and r.seconds > 0
    assert ProbeReading.from_dict(r.to_dict()) == r


def test_speed_probe_hands_each_reading_to_its_sink():
    seen = []
    p = probe.SpeedProbe(seen.append)
    assert [r.at for r in p.read("before x")] == ["before x"] and len(seen) == 1


def test_the_drift_across_the_run_is_never_below_the_drift_between_adjacent_points():
    # a steady start, then readings alternating 20 % apart: most pairs of readings agree exactly, so the spread
    # pooled over every lag is 0, while adjacent points moved 20 %
    d = drift.run_drift(readings([0.1, 0.1, 0.1, 0.1, 0.1, 0.12, 0.1, 0.12, 0.1, 0.12]))
    assert d.between(1) > 0.2 and d.overall >= d.between(1)



def test_points_measured_together_share_one_reading_and_no_drift_between_them():
    """Issue #55: side by side or in turn, one reading is taken before a load's points, named after all of them; the
    drift between two of them is read at lag 0, none, while a point of the next load is a reading away."""
    at = ["start", drift.before_tag(["x:ar:w:c1", "x:dflash:w:c1"]), drift.before_tag(["x:ar:w:c2", "x:dflash:w:c2"]),
          "end"]  # fmt: skip
    rs = readings([0.050, 0.060, 0.045, 0.058], at=at)
    assert drift.reading_index(rs, "x:dflash:w:c1") == drift.reading_index(rs, "x:ar:w:c1") == 1
    assert drift.drift_between(rs, "x:ar:w:c1", "x:dflash:w:c1") == 0.0
    assert drift.drift_between(rs, "x:ar:w:c1", "x:dflash:w:c2") > 0.0
