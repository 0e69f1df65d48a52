"""``compare`` of a run swept with ``--repeats`` against one swept once: each gated move tested as one more round.

A run with repeat rounds says how far a figure moves from one round to the next (each round has its own server
launch, its own moment of the machine); a run measured once says nothing of that. Judging the single run's move
against its requests alone, or against intervals only one side has, called an unchanged setup's usual round-to-round
spread a regression (issue #58: DFlash -7.7 %, exit 1, where two single runs of it had moved 15.5 % as noise).

The rule here: the single run is one more round. A gated figure's log move is tested with a t-test against the
round-to-round spread the repeated run measured, pooled over every gated point of that figure (a speedup's over
every gated speedup, from its per-round ratios, :func:`dflashbench.gate.compare_noise.round_speedups`), and never
below the figure's own spread (:meth:`~dflashbench.measure.noise.RoundsNoise.at_least`): the standard error of a
difference between a mean of ``k`` rounds and one round, ``sd * sqrt(1/k + 1)``. Where the repeated run's rounds
give fewer than :data:`~dflashbench.measure.noise.MIN_ROUNDS_DF` degrees of freedom the spread is not known well
enough to test against, and a move past its gate is "cannot judge" (exit 3), said with the fix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from dflashbench.gate import thresholds as cmp
from dflashbench.gate.compare_noise import NoiseTest
from dflashbench.measure import noise


def rounds(row: pd.Series) -> int:
    """How many repeat rounds a point row holds (1 for a run measured once)."""
    return int(cmp.value_of(row, "n_repeats") or 1)


def repeated_side(base: Mapping[tuple, pd.Series], new: Mapping[tuple, pd.Series]) -> int | None:
    """0 when only BASE has repeat rounds, 1 when only NEW has, ``None`` otherwise (both or neither)."""
    has = [any(rounds(r) > 1 for r in side.values()) for side in (base, new)]
    return has.index(True) if has.count(True) == 1 else None


def figure_noise(rows: Sequence[pd.Series], metric: str) -> noise.RoundsNoise | None:
    """The round-to-round spread of ``metric`` (log, 1 sd of one round) pooled over ``rows``, the repeated run's
    gated points: each point's sample sd over its rounds (``<metric>_sd``) as a share of its mean (the log's sd to
    first order), weighted by its degrees of freedom; ``None`` without two rounds of a positive figure anywhere."""
    ss, df = 0.0, 0
    for row in rows:
        k, mean, sd = rounds(row), cmp.value_of(row, metric), cmp.value_of(row, f"{metric}_sd")
        if k >= 2 and mean and mean > 0 and sd is not None:
            ss += (k - 1) * (sd / mean) ** 2
            df += k - 1
    return noise.RoundsNoise(math.sqrt(ss / df), df) if df else None


def own_noise(row: pd.Series, metric: str, pooled: noise.RoundsNoise) -> noise.RoundsNoise:
    """``pooled``, or the point's own spread where it is wider (a noisier figure is tested at its own spread)."""
    own = figure_noise([row], metric)
    return noise.RoundsNoise(own.sd, pooled.df) if own is not None and own.sd > pooled.sd else pooled


def test_as_a_round(direction: str, base: float, new: float, n_rounds: tuple[int, int],
                    spread: noise.RoundsNoise) -> NoiseTest | None:  # fmt: skip
    """The test of a move from ``base`` to ``new`` (each the mean of its side's ``n_rounds``, one side 1) against
    the repeated run's round-to-round ``spread``: one-sided p of NEW being worse, and what it could have seen."""
    if not (base > 0 and new > 0):
        return None
    logs = ([math.log(base)] * n_rounds[0], [math.log(new)] * n_rounds[1])
    return NoiseTest(spread.p_worse(*logs, direction), worse=direction, rounds=spread, n_rounds=n_rounds)


def enough(spread: noise.RoundsNoise | None) -> bool:
    """Whether ``spread`` rests on enough rounds to test against (:data:`noise.MIN_ROUNDS_DF`)."""
    return spread is not None and spread.df >= noise.MIN_ROUNDS_DF


def rule_line(side: int, n_rounds: int, too_few: Sequence[str]) -> str:
    """The warning that says which rule judged a mixed comparison, and what it could not judge."""
    runs = ("BASE", "NEW")
    line = (f"{runs[side]} was swept with --repeats ({n_rounds} rounds) and {runs[1 - side]} once: each gated move is "
            f"tested as one more round against {runs[side]}'s round-to-round spread, pooled over its gated points "
            f"(docs/metrics.md, the noise rule); sweep {runs[1 - side]} with --repeats {n_rounds} for the sharper "
            "paired test")  # fmt: skip
    if too_few:
        line += (f". {', '.join(too_few)}: {runs[side]}'s rounds hold fewer than {noise.MIN_ROUNDS_DF} degrees of "
                 "freedom of spread to test against, so a move past the gate there is 'cannot judge' (exit 3)")  # fmt: skip
    return line
