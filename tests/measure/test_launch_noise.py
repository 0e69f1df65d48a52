"""The launch noise of the noise rule (dflashbench.measure.launch_noise): one server launch's own speed, which
neither the CPU probe nor a bootstrap over a point's requests sees. A run of one launch per method carries its
backend's measured launch noise into ``compare``; a run with repeats (each round a new launch) measures it."""

from __future__ import annotations

import math

import pytest

from dflashbench.measure import launch_noise


def test_the_pooled_spread_takes_each_servers_own_level_out():
    # AR around 3 ms and DFlash around 0.6 ms: their levels differ fivefold, their launches each by ~10 %
    spread = launch_noise.per_launch_log_sd({"ar": [3.0, 3.3, 2.7], "dflash": [0.6, 0.66, 0.54], "one": [1.0]})
    logs = [math.log(x) for x in (3.0, 3.3, 2.7)]
    mean = sum(logs) / 3
    expected = math.sqrt(2 * sum((x - mean) ** 2 for x in logs) / 4)  # both groups alike; "one" adds nothing
    assert spread == pytest.approx(expected)
    with pytest.raises(ValueError, match="two launches"):
        launch_noise.per_launch_log_sd({"ar": [3.0]})


def test_a_run_carries_the_launch_noise_only_where_it_did_not_measure_it():
    reference = launch_noise.for_run("reference", 1)
    assert reference is not None and 0 < reference.log_sd < 0.5 and "tools/launch_noise.py" in reference.text
    assert launch_noise.for_run("reference", 3) is None  # each round relaunches: the repeats' interval holds it
    assert launch_noise.for_run("reference", 1, launched=False) is None  # an --endpoint: dflashbench launched none
    assert launch_noise.for_run("sglang", 1) is None  # not measured for that backend: compare adds nothing


def test_a_speedup_measured_together_carries_no_drift_and_the_together_launch_term():
    """Issue #55: a speedup whose two points shared one probe reading (side by side, in turn) carries no drift
    between them and, per launch, the reference backend's measured ``together_log_sd`` instead of ``log_sd``."""
    import math

    import pandas as pd

    from dflashbench.gate.compare_noise import RunNoise, speedup_drift
    from dflashbench.gate.speedups import Speedup
    from dflashbench.measure import drift
    from dflashbench.types import ProbeReading

    noise_ = launch_noise.for_run("reference", 1)
    assert noise_.together_log_sd is not None and noise_.together_log_sd < noise_.log_sd

    def run(together: bool) -> RunNoise:
        ats = ([drift.before_tag(["a", "b"]), drift.before_tag(["c", "d"])] if together else
               ["before a", "before b", "before c", "before d"])  # fmt: skip
        rs = [ProbeReading(kind="cpu", at=at, t_ns=i * 10**9, seconds=0.05 * (1 + 0.1 * (i % 2)),
                           trials_s=(0.05,) * 5) for i, at in enumerate(["start", *ats, "end"])]  # fmt: skip
        return RunNoise(rs, noise_)

    sp = Speedup(key=("reference", "dflash/ar", "w", "all", 1), value=2.0, method=pd.Series({"point_id": "b"}),
                 over=pd.Series({"point_id": "a"}))  # fmt: skip
    paired, apart = speedup_drift(run(True), run(True), sp, sp, 0.0), speedup_drift(run(False), run(False), sp, sp, 0.0)
    assert paired == pytest.approx(math.hypot(*[noise_.together_log_sd * math.sqrt(2)] * 2))
    assert apart > paired
