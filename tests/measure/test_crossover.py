"""The crossover reading's aim (dflashbench.measure.crossover): where a next sweep should reach."""

from __future__ import annotations

from dflashbench.measure import crossover


def test_a_nearly_flat_ratio_aims_infinitely_far_without_overflow():
    # the ratio falls by a hair between the last two points: its line reaches 1 only at an absurd concurrency
    found = crossover.crossover([1, 2, 4], [1.5, 1.3, 1.3 - 1e-12])
    assert found is not None and found.kind == crossover.NONE and found.aim == float("inf")
    assert crossover.aim_concurrency(found.aim, 4) is None  # no sweep to aim at
