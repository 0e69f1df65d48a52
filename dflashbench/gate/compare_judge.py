"""``compare``'s judgement, gate by gate: each gated figure's move past its threshold, its test against the
noise the rule measures (:mod:`dflashbench.gate.compare_noise`), Holm's correction over every test, the smallest
move each test could have seen, and what the machine's own change explains.

The order of the work: the point rows (every shown metric of every common point), then the speedup rows
(:mod:`dflashbench.gate.speedups`); the tests of both in one Holm family; then each tested row's detectable
move at Holm's first step (``alpha / m``: the move that fails whatever the other tests say); last, where the
probes say the machine ran slower in NEW, a failing absolute speed figure becomes "cannot judge" (or, with
``--correct-for-probe``, NEW's speed figures were divided by the machine's change before any of this).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import pandas as pd

from dflashbench.gate import compare_mixed as cm
from dflashbench.gate import compare_noise as cn
from dflashbench.gate import thresholds as cmp
from dflashbench.gate.speedups import SPEEDUP, repeated, repeats_interval, speedups
from dflashbench.measure import drift, noise

# Per-request time figures: a slower machine makes them larger (the rest of the speed figures smaller).
_TIMES = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "icl_s")


def _to_unit(t: cmp.Threshold, base: float | None, log_move: float | None) -> float | None:
    """A detectable log move (NEW / BASE) as the threshold's unit, never below the threshold itself."""
    if log_move is None or base is None:
        return None
    share = -math.expm1(log_move) if t.direction == "drop" else math.expm1(log_move)
    if not math.isfinite(share):
        return math.inf
    amount = share if t.relative else share * abs(base)
    return max(t.amount, amount)


class Judge:
    """One comparison's judgement; :meth:`judge` fills ``comparison``'s rows, tests, drift lines and machine."""

    def __init__(self, comparison: cmp.Comparison, b_ok: dict, n_ok: dict, common: Sequence[tuple],
                 requests: tuple[pd.DataFrame, pd.DataFrame] | None, probes: tuple[Sequence, Sequence],
                 all_categories: bool, correct_for_probe: bool, launches: tuple = (None, None)) -> None:  # fmt: skip
        self.c, self.b_ok, self.n_ok, self.common = comparison, b_ok, n_ok, list(common)
        self.requests, self.all_categories = requests, all_categories
        self.noise = (cn.RunNoise(probes[0], launches[0]), cn.RunNoise(probes[1], launches[1]))
        kind = self.noise[1].kind
        self.machine = drift.machine_change(probes[0], probes[1], kind) if all(n.measured for n in self.noise) else None
        self.asked_correction = correct_for_probe
        self.correct = correct_for_probe and self.machine is not None
        self.by_metric: dict[str, list[cmp.Threshold]] = {}
        for t in comparison.thresholds:
            self.by_metric.setdefault(t.metric, []).append(t)
        self.tested: list[tuple[int, cn.NoiseTest]] = []
        # one run swept with --repeats, the other once: the single run is tested as one more round (compare_mixed)
        self.mixed = cm.repeated_side(b_ok, n_ok)
        self.too_few: list[str] = []  # figures whose rounds were too few to test the single run against

    # -- the pieces ---------------------------------------------------------------------------------------------
    def _gated(self, key: tuple) -> bool:
        return self.all_categories or str(key[3]) == "all"

    def _new_value(self, metric: str, value: float | None) -> float | None:
        """NEW's figure as judged: divided by the machine's change (``--correct-for-probe``) where it moves with
        the machine; as measured otherwise."""
        if value is None or not self.correct or not cn.moves_with_machine(metric):
            return value
        ratio = self.machine.speed_ratio  # > 1: NEW's machine faster
        return value * ratio if metric.startswith(_TIMES) else value / ratio

    def _machine_sd(self) -> float:
        """The machine change's own uncertainty (log, 1 sd), from its 95 % interval."""
        m = self.machine
        return (math.log(m.hi) - math.log(m.lo)) / (2 * noise.Z_95) if m is not None and m.lo > 0 else 0.0

    def absolute_drift(self, metric: str) -> float:
        """The drift of one point's speed figure between the two runs (log, 1 sd): from the probes, each run's
        deviation of a moment from its typical speed plus the uncertainty of the machine's change between the
        runs, and each run's launch noise where it did not measure it; the fallback (the points' own moves, each
        method's shift taken out, launches included) where a run has no probe."""
        b, n = self.noise
        if b.measured and n.measured:
            return math.hypot(b.level_sd, n.level_sd, self._machine_sd(), b.launch_sd, n.launch_sd)
        moves = cn.log_moves([(str(k[1]), cmp.value_of(self.b_ok[k], metric), self._new_value(metric, cmp.value_of(
            self.n_ok[k], metric))) for k in self.common if self._gated(k)])  # fmt: skip
        return cn.fallback_drift(moves)

    def _add(self, row: cmp.Row, test: cn.NoiseTest | None) -> None:
        verdict, limit = row.verdict, row.limit
        if test is not None and test.p is None:
            verdict, limit = cmp.TOO_FEW, test.not_gated
        elif test is not None:
            self.tested.append((len(self.c.rows), test))
        self.c.rows.append(dataclasses.replace(row, verdict=verdict, limit=limit))

    # -- the rows -----------------------------------------------------------------------------------------------
    def point_rows(self) -> None:
        shown = [m for m in self.by_metric if m != SPEEDUP]
        shown += [m for m in cmp.DEFAULT_SHOWN if m not in self.by_metric]
        if "accuracy" not in self.by_metric and any(cmp.value_of(self.b_ok[k], "num_graded") for k in self.common):
            shown.append("accuracy")
        drift_sd = {m: self.absolute_drift(m) for m in shown if m in self.by_metric and cn.moves_with_machine(m)}
        spreads = self._round_spreads(shown)
        for key in sorted(self.common, key=cmp.key_order):
            b_row, n_row = self.b_ok[key], self.n_ok[key]
            repeated = (cmp.value_of(b_row, "n_repeats") or 1) > 1 or (cmp.value_of(n_row, "n_repeats") or 1) > 1
            for metric in shown:
                b, n = cmp.value_of(b_row, metric), self._new_value(metric, cmp.value_of(n_row, metric))
                gates = self.by_metric.get(metric, ()) if self._gated(key) else ()
                row = cmp.Row(key, metric, b, n, cmp.verdict_of(gates, b, n), "; ".join(t.describe() for t in gates),
                              threshold=gates[0] if gates else None)  # fmt: skip
                test = None
                if row.verdict == cmp.REGRESSION and cmp.within_noise(b_row, n_row, metric):
                    row = dataclasses.replace(row, verdict=cmp.NOISE)
                elif gates and b is not None and n is not None and self.mixed is not None:
                    row, test = self._as_a_round(row, gates[0].direction, (b_row, n_row), spreads.get(metric))
                elif gates and b is not None and n is not None and self.requests is not None and not repeated:
                    test = cn.test_move(metric, gates[0].direction, b, n, cn.point_requests(self.requests[0], b_row),
                                        cn.point_requests(self.requests[1], n_row), drift_sd.get(metric, 0.0))  # fmt: skip
                self._add(row, test)

    def _round_spreads(self, metrics: Sequence[str]) -> dict:
        """Each gated figure's round-to-round spread in the run that has rounds (a mixed comparison only)."""
        if self.mixed is None:
            return {}
        side = (self.b_ok, self.n_ok)[self.mixed]
        rows = [side[k] for k in self.common if self._gated(k)]
        return {m: cm.figure_noise(rows, m) for m in metrics if m in self.by_metric}

    def _as_a_round(self, row: cmp.Row, direction: str, rows: tuple, spread) -> tuple[cmp.Row, cn.NoiseTest | None]:
        """A point's move in a mixed comparison: the single run tested as one more round (:mod:`compare_mixed`);
        "cannot judge" past its gate where the rounds are too few to test against."""
        if not cm.enough(spread):
            if row.verdict == cmp.REGRESSION:
                self.too_few.append(row.metric)
                row = dataclasses.replace(row, verdict=cmp.CANNOT_JUDGE)
            return row, None
        spread = cm.own_noise(rows[self.mixed], row.metric, spread)
        return row, cm.test_as_a_round(direction, row.base, row.new, (cm.rounds(rows[0]), cm.rounds(rows[1])), spread)

    def speedup_rows(self) -> None:
        gates = self.by_metric.get(SPEEDUP)
        if not gates:
            return
        b_sp, n_sp = speedups(self.b_ok), speedups(self.n_ok)
        keys = sorted((k for k in b_sp if k in n_sp and self._gated(k)), key=cmp.key_order)
        fallback = cn.fallback_drift(cn.log_moves([(str(k[1]), b_sp[k].value, n_sp[k].value) for k in keys]))
        rounds, pooled = self._round_logs(keys, b_sp, n_sp)
        self.c.rounds_tested = bool(rounds) and self.mixed is None
        for key in keys:
            b, n = b_sp[key].value, n_sp[key].value
            row = cmp.Row(key, SPEEDUP, b, n, cmp.verdict_of(gates, b, n), "; ".join(t.describe() for t in gates),
                          threshold=gates[0])  # fmt: skip
            test = None
            if key in rounds and pooled is not None:  # both runs' rounds, paired within each: their own test
                test = cn.test_speedup_rounds(gates[0].direction, *rounds[key], pooled.at_least(rounds[key]))
            elif self.mixed is not None:  # one run without rounds, and too few rounds in the other to test it
                if row.verdict == cmp.REGRESSION:
                    self.too_few.append(SPEEDUP)
                    row = dataclasses.replace(row, verdict=cmp.CANNOT_JUDGE)
            elif repeated(b_sp[key]) or repeated(n_sp[key]):  # the repeats' intervals judge, as for a point
                # a point without a repeat interval (a round whose per-token timing was not observable) leaves
                # the speedup the probe's drift between its two points alone
                found = [noise.decision_interval(sp.value, repeats_interval(sp) or (sp.value, sp.value), run.between(
                    str(sp.method.get("point_id")), str(sp.over.get("point_id"))))
                    for sp, run in ((b_sp[key], self.noise[0]), (n_sp[key], self.noise[1]))]  # fmt: skip
                if row.verdict == cmp.REGRESSION and None not in found and found[0][0] <= found[1][1] \
                        and found[1][0] <= found[0][1]:  # fmt: skip
                    row = dataclasses.replace(row, verdict=cmp.NOISE)
            elif b is not None and n is not None and self.requests is not None:
                sd = cn.speedup_drift(*self.noise, b_sp[key], n_sp[key], fallback)
                test = cn.test_speedup(gates[0].direction, b_sp[key], n_sp[key], self.requests, sd)
            self._add(row, test)

    def _round_logs(self, keys: Sequence[tuple], b_sp: dict, n_sp: dict
                    ) -> tuple[dict[tuple, tuple[list[float], list[float]]], noise.RoundsNoise | None]:  # fmt: skip
        """Each speedup's per-round logs in BASE and NEW where both runs measured it in two or more rounds, and
        the rounds' noise pooled over all of them (``None`` below :data:`noise.MIN_ROUNDS_DF` degrees of
        freedom: those speedups keep the repeats' intervals)."""
        if self.requests is None:
            return {}, None
        found = {}
        for key in keys:
            sides = [[math.log(v) for v in cn.round_speedups(sp[key], reqs).values()]
                     for sp, reqs in ((b_sp, self.requests[0]), (n_sp, self.requests[1]))]  # fmt: skip
            if self.mixed is not None:  # the run measured once is one round: its speedup as measured
                single = (b_sp, n_sp)[1 - self.mixed][key].value
                sides[1 - self.mixed] = [math.log(single)] if single and single > 0 else []
                if len(sides[self.mixed]) >= 2 and sides[1 - self.mixed]:
                    found[key] = (sides[0], sides[1])
            elif min(map(len, sides)) >= 2:
                found[key] = (sides[0], sides[1])
        pooled = noise.RoundsNoise.pooled([side for pair in found.values() for side in pair])
        if pooled is None or pooled.df < noise.MIN_ROUNDS_DF:
            return {}, None
        return found, pooled

    # -- the family ---------------------------------------------------------------------------------------------
    def correct_and_size(self) -> None:
        """Holm over every test; each tested row's detectable move at Holm's first step (alpha / m)."""
        m = len(self.tested)
        self.c.tests = m
        rejects = noise.holm([t.p for _, t in self.tested])
        for (i, test), beyond in zip(self.tested, rejects, strict=True):
            row = self.c.rows[i]
            detectable = _to_unit(row.threshold, row.base, test.detectable(noise.ALPHA / m)) if row.threshold else None
            verdict = cmp.NOISE if row.verdict == cmp.REGRESSION and not beyond else row.verdict
            self.c.rows[i] = dataclasses.replace(row, verdict=verdict, detectable=detectable)

    def machine_explains(self) -> None:
        """Where NEW's machine ran slower beyond the probes' noise (and no correction was asked), a failing
        absolute speed figure is "cannot judge": the machine's change alone could have moved it."""
        m = self.machine
        if m is None or not m.changed or self.correct or m.speed_ratio >= 1:
            return
        for i, row in enumerate(self.c.rows):
            if row.verdict == cmp.REGRESSION and not row.is_speedup and cn.moves_with_machine(row.metric):
                self.c.rows[i] = dataclasses.replace(row, verdict=cmp.CANNOT_JUDGE)

    def drift_lines(self) -> list[str]:
        lines = [f"drift, {side}: {n.text}" for side, n in zip(("BASE", "NEW"), self.noise, strict=True)]
        if not all(n.measured for n in self.noise):
            lines.append("drift between the runs, where a run has no probe: the spread of the gated points' moves "
                         "after each method's own shift is taken out (docs/metrics.md, the noise rule)")  # fmt: skip
        return lines

    def judge(self) -> None:
        self.point_rows()
        self.speedup_rows()
        if self.tested:
            self.correct_and_size()
        self.machine_explains()
        self.c.machine, self.c.corrected, self.c.drift = self.machine, self.correct, self.drift_lines()
        if self.mixed is not None:
            side = (self.b_ok, self.n_ok)[self.mixed]
            self.c.warnings.append(cm.rule_line(self.mixed, max(cm.rounds(r) for r in side.values()),
                                                list(dict.fromkeys(self.too_few))))  # fmt: skip
        if self.asked_correction and not self.correct:
            self.c.warnings.append("--correct-for-probe: nothing corrected, BASE or NEW has no speed probe "
                                   "(probes.jsonl) to read the machine's change from")  # fmt: skip
