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
