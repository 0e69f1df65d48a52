"""``compare``'s judgement, gate by gate: each gated figure's move past its threshold, its test against the
noise the rule measures (:mod:`dflashbench.gate.compare_noise`), the tests corrected together, the smallest move
each test could have seen, and what the machine's own change explains.

The order of the work: the point rows (every shown metric of every common point), then the speedup rows
(:mod:`dflashbench.gate.speedups`); the tests of both in one family
(:func:`~dflashbench.gate.compare_noise.correct_family`: step-down min-p over joint draws of their nulls); then each
tested row's detectable move at the family's first step (the move that fails whatever the other tests say; Holm's
``alpha / m`` where the tests are independent); last, where the probes say the machine ran slower in NEW, a failing
absolute speed figure becomes "cannot judge" (or, with ``--correct-for-probe``, NEW's speed figures were divided by
the machine's change before any of this).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

import pandas as pd

from dflashbench.gate import compare_mixed as cm
from dflashbench.gate import compare_noise as cn
from dflashbench.gate import thresholds as cmp
from dflashbench.gate.speedups import SPEEDUP, repeated, repeats_interval, speedups
from dflashbench.measure import drift, noise, noise_model

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


def _round_requests(b_row, n_row) -> float:
    """The fewer requests a round of the two repeated points holds (each side's requests over its rounds)."""
    per_round = []
    for row in (b_row, n_row):
        total, rounds = cmp.value_of(row, "num_requests"), cmp.value_of(row, "n_repeats") or 1
        per_round.append(total / rounds if total is not None else 0.0)
    return min(per_round)


def _rounds_move_sd(b_row, n_row, metric: str) -> float | None:
    """The sd (log) of a repeated point's move NEW / BASE from each run's rounds: each side's sd over its rounds as a
    share of its mean, over the square root of its rounds."""
    parts = []
    for row in (b_row, n_row):
        k, mean, sd = cm.rounds(row), cmp.value_of(row, metric), cmp.value_of(row, f"{metric}_sd")
        if k < 2 or not mean or mean <= 0 or sd is None:
            return None
        parts.append(sd / mean / math.sqrt(k))
    return math.hypot(*parts)


class Judge:
    """One comparison's judgement; :meth:`judge` fills ``comparison``'s rows, tests, drift lines and machine."""

    def __init__(self, comparison: cmp.Comparison, b_ok: dict, n_ok: dict, common: Sequence[tuple],
                 requests: tuple[pd.DataFrame, pd.DataFrame] | None, probes: tuple[Sequence, Sequence],
                 all_categories: bool, correct_for_probe: bool, launches: tuple = (None, None),
                 run_terms: tuple = (None, None)) -> None:  # fmt: skip
        self.c, self.b_ok, self.n_ok, self.common = comparison, b_ok, n_ok, list(common)
        self.requests, self.all_categories = requests, all_categories
        self.noise = (cn.RunNoise(probes[0], launches[0]), cn.RunNoise(probes[1], launches[1]))
        # each run's run-to-run term (noise_model.RunToRun: measured here, from history, or the project's default)
        self.terms: tuple[noise_model.RunToRun | None, noise_model.RunToRun | None] = run_terms
        self.pair_off = self._why_not_paired()  # "" where the tests pair across runs
        self.paired_tests = 0
        self.unpaired: list[str] = []  # figures that fell back to each run's own requests (the runs' requests differ)
        self.moves: dict[str, list[tuple[float, float]]] = {}  # method -> (log move, its sd) of its per-user points
        self.shift: noise_model.RunShift | None = None
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
    def _why_not_paired(self) -> str:
        """Why the tests cannot pair across runs ("" where they can): no stored requests, a run whose requests carry
        no prompt digest (made before it), or no run-to-run term for a run's backend."""
        if self.requests is None:
            return "no stored requests"
        gated = [k for k in self.common if self._gated(k)]
        for side, (points, reqs) in zip(("BASE", "NEW"), ((self.b_ok, self.requests[0]), (self.n_ok, self.requests[1])),
                                        strict=True):  # fmt: skip
            if not cn.digested(reqs, [points[k] for k in gated]):
                return f"{side}'s requests carry no prompt digest (a run made before it)"
        for side, term in zip(("BASE", "NEW"), self.terms, strict=True):
            if term is None:
                backend = str(next(iter(self.common), ("?",))[0])
                return (f"no run-to-run term for {side}'s backend {backend} (dflashbench calibrate --backend {backend} "
                        "measures one; then --noise-profile FILE)")  # fmt: skip
        return ""

    def _term(self, side: int, kind: str) -> tuple[float, int | None]:
        """A run's run-to-run term of ``kind`` and its degrees of freedom; (0, None) where it has none."""
        term = self.terms[side]
        sd = term.sd(kind) if term is not None else None
        return (sd, term.df(kind)) if sd is not None else (0.0, None)  # type: ignore[union-attr]

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

    def paired_drift(self, metric: str, kind: str = noise_model.ABSOLUTE) -> tuple[float, float | None]:
        """What a point's figure carries beside its paired requests (log, 1 sd) and its degrees of freedom (``None``:
        known well, normal): the probes' drift as in :meth:`absolute_drift`, and each run's run-to-run term of
        ``kind`` in place of the launch noise (the term holds the launch); the fallback of the points' own moves
        where a run has no probe."""
        b, n = self.noise
        if not (b.measured and n.measured):
            return self.absolute_drift(metric), None
        return _with_df([(b.level_sd, None), (n.level_sd, None), (self._machine_sd(), None)],
                        [self._term(0, kind), self._term(1, kind)])

    def speedup_sd(self, b: cn.Speedup, n: cn.Speedup, fallback: float) -> tuple[float, float | None]:
        """What a speedup's move carries beside its paired requests (log, 1 sd), and its degrees of freedom: each
        run's drift between its two points (the probe; ``fallback`` without one) and each run's run-to-run term of a
        speedup. A run of the project's default whose two points were not measured together keeps the launch noise
        of its two servers (the default's speedup term was measured on points measured together)."""
        known, terms = [], []
        for i, (run, sp) in enumerate(zip(self.noise, (b, n), strict=True)):
            d = run.between(str(sp.method.get("point_id")), str(sp.over.get("point_id")))
            term = self.terms[i]
            apart = term is not None and term.source == noise_model.DEFAULT and d != 0.0
            known.append((d if d is not None else fallback / math.sqrt(2), None))
            if apart or term is None or term.sd(noise_model.SPEEDUP) is None:
                known.append((run.launch_sd * math.sqrt(2), None))
            else:
                terms.append((term.sd(noise_model.SPEEDUP), term.df(noise_model.SPEEDUP)))
        return _with_df(known, terms)

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
                if repeated and gates and (few := cn.tail_too_few(metric, _round_requests(b_row, n_row),
                                                                  "requests a round")) is not None:  # fmt: skip
                    test = few  # the rounds' interval of a quantile no round can support does not judge it
                elif row.verdict == cmp.REGRESSION and cmp.within_noise(b_row, n_row, metric):
                    row = dataclasses.replace(row, verdict=cmp.NOISE)
                elif gates and b is not None and n is not None and self.mixed is not None:
                    row, test = self._as_a_round(row, gates[0].direction, (b_row, n_row), spreads.get(metric))
                elif gates and b is not None and n is not None and self.requests is not None and not repeated:
                    reqs = (cn.point_requests(self.requests[0], b_row), cn.point_requests(self.requests[1], n_row))
                    test = self._paired_move(metric, gates[0].direction, key, reqs)
                    if test is None:
                        test = cn.test_move(metric, gates[0].direction, b, n, *reqs, drift_sd.get(metric, 0.0))
                    if test is not None and cn.moves_with_machine(metric):  # the point's figures: one drift
                        test = dataclasses.replace(test, drift_group=key)
                if repeated and metric == cn.RATIO_OF_SUMS[2] and str(key[3]) == "all" and b and n and b > 0 and n > 0:
                    sd = _rounds_move_sd(b_row, n_row, metric)
                    if sd is not None:  # each method's move over its rounds: the run-level shift's reading
                        self.moves.setdefault(str(key[1]), []).append((math.log(n / b), sd))
                self._add(row, test)

    def _paired_move(self, metric: str, direction: str, key: tuple, reqs: tuple) -> cn.NoiseTest | None:
        """A speed figure's test paired across runs, where both runs sent the same requests (else ``None``, and the
        figure is counted among those that fell back); its per-user move kept for the run-level shift."""
        if self.pair_off or metric not in cn.RATIO_OF_SUMS or self.correct:
            return None
        # a run's common move is named, not pooled (issue #62): where the profile splits the term, a point's own part
        # is tested, and a move of the whole run is the shift :meth:`name_shift` reads from every method at once
        split = self._has(noise_model.POINT) and self._has(noise_model.RUN_LEVEL)
        test = cn.test_move_paired(metric, direction, *reqs, *self.paired_drift(
            metric, noise_model.POINT if split else noise_model.ABSOLUTE))  # fmt: skip
        if test is None:
            self.unpaired.append(metric)
            return None
        self.paired_tests += 1
        if metric == cn.RATIO_OF_SUMS[2] and str(key[3]) == "all":  # the pooled per-user rate: the shift's reading
            # its noise without the run-level part of the term (that part is what a shift is)
            point, _ = self.paired_drift(metric, noise_model.POINT if self._has(noise_model.POINT) else noise_model.ABSOLUTE)
            self.moves.setdefault(str(key[1]), []).append((test.observed, math.hypot(float(test.null.std()), point)))
        return test

    def _has(self, kind: str) -> bool:
        return all(t is not None and t.sd(kind) is not None for t in self.terms)

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
                test = None
                if not self.pair_off:  # the same requests in both runs: the speedup's move on them
                    test = cn.test_speedup_paired(gates[0].direction, b_sp[key], n_sp[key], self.requests,
                                                  *self.speedup_sd(b_sp[key], n_sp[key], fallback))  # fmt: skip
                    if test is None:
                        self.unpaired.append(SPEEDUP)
                    else:
                        self.paired_tests += 1
                if test is None:
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
            same = self._round_pairs(b_sp[key], n_sp[key]) if repeated(b_sp[key]) and repeated(n_sp[key]) else None
            sides = [[math.log(v) for v in cn.round_speedups(sp[key], reqs, same).values()]
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
        return found, dataclasses.replace(pooled, between=self._between(pooled.sd))

    def _round_pairs(self, b: cn.Speedup, n: cn.Speedup) -> set | None:
        """The requests every round of both runs sent for this speedup (both points), where they pair (each round's
        speedup is then read on the same prompts); ``None`` (each round's own requests) where a round's requests carry
        no digest, or too few of them are common."""
        if self.requests is None or self.mixed is not None:
            return None
        sets = cn.round_keys(b, self.requests[0]) + cn.round_keys(n, self.requests[1])
        if not sets or not all(sets):
            self.unpaired.append("rounds")
            return None
        common = set.intersection(*sets)
        if len(common) < 2 or len(common) < cn.MIN_PAIRED_SHARE * max(map(len, sets)):
            self.unpaired.append("rounds")
            return None
        self.paired_tests += 1
        return common

    def _between(self, round_sd: float) -> float:
        """Each run's shift beyond its rounds' spread (log, 1 sd), for the rounds test: a measured run-to-run term
        of a speedup (a profile: calibrated here, or from history) less what one round already moves, since one
        launch of the calibration is one round; 0 with the project's default, which was measured on single runs on
        another machine (said on the verdict's drift lines)."""
        measured = [t for t in self.terms if t is not None and t.source != noise_model.DEFAULT
                    and t.sd(noise_model.SPEEDUP) is not None]  # fmt: skip
        if len(measured) < 2:
            return 0.0
        return max(noise_model.beyond_rounds(t, round_sd) for t in measured)

    # -- the family ---------------------------------------------------------------------------------------------
    def correct_and_size(self) -> None:
        """Every test corrected together (:func:`~dflashbench.gate.compare_noise.correct_family`); each tested
        row's detectable move at the family's first step."""
        rejects, level, self.c.tests = cn.correct_family([t for _, t in self.tested])
        self.c.family_level = level
        for (i, test), beyond in zip(self.tested, rejects, strict=True):
            row = self.c.rows[i]
            detectable = _to_unit(row.threshold, row.base, test.detectable(level)) if row.threshold else None
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
        # paired across runs, the run-to-run term (its own line) stands in for the launch noise: the probe's alone here
        lines = [f"drift, {side}: {n.text if self.pair_off else n.probe_text}"
                 for side, n in zip(("BASE", "NEW"), self.noise, strict=True)]  # fmt: skip
        if not all(n.measured for n in self.noise):
            lines.append("drift between the runs, where a run has no probe: the spread of the gated points' moves "
                         "after each method's own shift is taken out (docs/metrics.md, the noise rule)")  # fmt: skip
        return lines

    def name_shift(self) -> None:
        """A run-level shift, named (issue #62): where every method's per-user rate moved the same way beyond its
        noise, the probe flat, NEW's run as a whole ran faster or slower (:func:`noise_model.run_level_shift`). A
        failing figure it explains (a speed figure or a speedup of methods that moved with it) is "cannot judge",
        never a regression: methods respond to a run's shift by different factors, so it moves speedups too. A method
        that moved beyond the others (with three or more) changed on its own: its figures stay judged. Where the
        probes read a change of the machine (and NEW was not corrected for it), that change is taken out of every
        method's move first, its uncertainty added: a shift is named only beyond what the probe explains (a probe 1 %
        faster does not hide every method 28 % slower, seen on this machine)."""
        moves = {m: (statistics.fmean(v for v, _ in xs), math.sqrt(statistics.fmean(sd * sd for _, sd in xs)))
                 for m, xs in self.moves.items() if xs}  # fmt: skip
        if self._probe_moved():
            probe = math.log(self.machine.speed_ratio)  # type: ignore[union-attr]  # > 0: NEW's machine faster
            moves = {m: (v - probe, math.hypot(sd, self._machine_sd())) for m, (v, sd) in moves.items()}
        self.shift = noise_model.run_level_shift(moves)
        if self.shift is None:
            return
        for i, row in enumerate(self.c.rows):
            methods = str(row.key[1]).split("/")
            if row.verdict == cmp.REGRESSION and not any(m in self.shift.own for m in methods) and (
                    row.is_speedup or cn.moves_with_machine(row.metric)):  # fmt: skip
                self.c.rows[i] = dataclasses.replace(row, verdict=cmp.CANNOT_JUDGE)

    def _probe_moved(self) -> bool:
        """The probes read a change of the machine between the runs that NEW's figures were not corrected for."""
        return self.machine is not None and self.machine.changed and not self.correct

    def pairing_text(self) -> str:
        """What the tests were paired on, for the verdict line and the gates' lines."""
        if self.pair_off:
            return f"not paired across runs ({self.pair_off}): each run's own requests"
        if not self.paired_tests:
            return ("not paired across runs (the runs sent different requests: fewer than "
                    f"{cn.MIN_PAIRED_SHARE:.0%} of a figure's requests in both): each run's own requests"
                    if self.unpaired else "")  # fmt: skip
        text = (f"paired across runs: {self.paired_tests} test(s) on the requests both runs sent (the same prompt "
                "digest, occurrence and turn)")  # fmt: skip
        if self.unpaired:
            text += (f"; {len(self.unpaired)} on each run's own requests, where the runs sent different requests "
                     f"({', '.join(dict.fromkeys(self.unpaired))})")  # fmt: skip
        return text

    def term_lines(self) -> list[str]:
        """Which run-to-run term each run was judged with (measured here, from history, or the project's default)."""
        b, n = self.terms
        if b is None and n is None:
            return []
        if b is not None and n is not None and b.text == n.text:
            return [b.text]
        return [f"{side}: {t.text}" for side, t in (("BASE", b), ("NEW", n)) if t is not None]

    def judge(self) -> None:
        self.point_rows()
        self.speedup_rows()
        if self.tested:
            self.correct_and_size()
        self.name_shift()
        self.machine_explains()
        self.c.machine, self.c.corrected, self.c.drift = self.machine, self.correct, self.drift_lines()
        self.c.drift += self.term_lines()
        self.c.terms = self.terms
        self.c.pairing, self.c.shift = self.pairing_text(), self.shift
        if self.shift is not None:
            probe = (f"beyond the speed probe's own change ({self.machine.speed_ratio - 1:+.1%}, taken out)"  # type: ignore[union-attr]
                     if self._probe_moved() else "the speed probe flat")  # fmt: skip
            self.c.warnings.append(f"{self.shift.text}, {probe}: NEW's run as a whole, not one method. "
                                   "A failure it explains is 'cannot judge' (exit 3), never a regression; rerun both "
                                   "runs (a neighbour on the machine, another launch)")  # fmt: skip
        if self.mixed is not None:
            side = (self.b_ok, self.n_ok)[self.mixed]
            self.c.warnings.append(cm.rule_line(self.mixed, max(cm.rounds(r) for r in side.values()),
                                                list(dict.fromkeys(self.too_few))))  # fmt: skip
        if self.asked_correction and not self.correct:
            self.c.warnings.append("--correct-for-probe: nothing corrected, BASE or NEW has no speed probe "
                                   "(probes.jsonl) to read the machine's change from")  # fmt: skip


def _with_df(known: Sequence[tuple[float, None]], terms: Sequence[tuple[float, int | None]]) -> tuple[float, float | None]:
    """The 1-sd size of ``known`` parts (read from many probe readings) and the runs' run-to-run ``terms`` (sd, df)
    together, and its Welch-Satterthwaite degrees of freedom. Both runs judged with one profile carry one estimate
    twice, not two: they count as one part of twice its variance, with that estimate's df."""
    if len(terms) == 2 and terms[0] == terms[1]:
        terms = [(terms[0][0] * math.sqrt(2), terms[0][1])]
    parts = [*known, *terms]
    return math.hypot(*(sd for sd, _ in parts)), noise.satterthwaite_df(parts)
