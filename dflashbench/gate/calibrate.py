"""A noise profile from runs: ``dflashbench calibrate``'s k unchanged launches of one setting, or a CI's history of
accepted runs, read into the run-to-run terms ``compare --noise-profile`` judges with (issue #62; the maths in
:mod:`dflashbench.measure.noise_model`).

From k unchanged runs of one backend and setting, each reading is read in every run on the requests all k runs sent
(paired across runs, :mod:`dflashbench.measure.cross_pairs`: the prompt mix is the same in every run, so it is no
part of the spread), and its spread over the runs split into the requests' timing jitter (half the variance of a
move between two runs, resampled over those requests), the probe's drift and what is left: the run-to-run term.

- a **speedup** (each gated pair at each load, :mod:`dflashbench.gate.speedups`): its two points measured together
  carry no drift between them; a term of its own (:func:`~dflashbench.measure.noise_model.between_run_term`);
- each point's **pooled per-user rate**, split into the run's common shift (every method of a run alike) and the
  point's own (:func:`~dflashbench.measure.noise_model.run_level_terms`); their sum is the absolute figure's term.

Runs whose requests carry no prompt digest (made before it) are read on their own requests (each run's own
bootstrap as the jitter, which holds the prompt mix: the term comes out smaller), and the profile says so.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dflashbench.errors import UserError
from dflashbench.gate import thresholds as cmp
from dflashbench.gate.compare_noise import RunNoise, per_user_terms, point_requests
from dflashbench.gate.speedups import speedup_label, speedups
from dflashbench.measure import cross_pairs, noise, noise_model, request_terms

PER_USER = "per_user_tok_per_s_pooled"
MIN_RUNS = 2


class Calibration:
    """The readings of k runs of one backend, and the run-to-run terms read from them (:meth:`terms`)."""

    def __init__(self, runs: Sequence, backend: str) -> None:
        self.runs, self.backend = list(runs), backend
        self.points = [{k: r for k, r in cmp._index(run.points, str(run.meta.run_id)).items()
                        if str(r.get("status") or "ok") == "ok" and str(k[3]) == "all"} for run in self.runs]  # fmt: skip
        self.noise = [RunNoise(run.probes) for run in self.runs]
        self.paired = all(cross_pairs.digested(point_requests(run.requests, row)) for run, pts in
                          zip(self.runs, self.points, strict=True) for row in pts.values())  # fmt: skip
        self.lines: list[str] = []

    # -- one reading in every run ------------------------------------------------------------------------------
    def _sides(self, rows: Sequence) -> list[dict]:
        """Each run's per-user terms of one point (``rows``: that point's row in each run), keyed for pairing across
        runs (by request id inside a run where the runs carry no digest)."""
        if not self.paired:
            return [per_user_terms(point_requests(run.requests, row)) for run, row in zip(self.runs, rows, strict=True)]
        return [cross_pairs.keyed(point_requests(run.requests, row), request_terms.per_user)
                for run, row in zip(self.runs, rows, strict=True)]  # fmt: skip

    def _reading(self, sides: Sequence[tuple[dict, dict | None]]) -> tuple[list[float], float] | None:
        """Each run's log value of a reading (``sides``: per run, the method's terms and, for a speedup, the
        baseline's) over the requests every run sent, and one run's jitter variance (half the mean variance of a
        move between two runs, resampled over those requests)."""
        maps = [s for pair in sides for s in pair if s is not None]
        keys = cross_pairs.common_keys(maps)
        if len(keys) < 2 or len(keys) < noise.MIN_PAIRED_SHARE * max(len(m) for m in maps):
            return None
        logs = []
        for method, over in sides:
            value = cross_pairs.log_ratio_of_sums(method, keys)
            if value is None:
                return None
            logs.append(value - (cross_pairs.log_ratio_of_sums(over, keys) or 0.0) if over is not None else value)
        variances = []
        for i, j in itertools.combinations(range(len(sides)), 2):
            parts = [(1.0, sides[j][0]), (-1.0, sides[i][0])]
            if sides[i][1] is not None:
                parts += [(-1.0, sides[j][1]), (1.0, sides[i][1])]
            _, null, _ = cross_pairs.paired_null(parts, seed=i * 97 + j)
            if len(null):
                variances.append(float(np.var(null)))
        return logs, (statistics.fmean(variances) / 2 if variances else 0.0)

    def _own(self, sides: Sequence[tuple[dict, dict | None]]) -> tuple[list[float], float] | None:
        """A run without digests: each run's own value and its own bootstrap (the prompt mix included)."""
        logs, variances = [], []
        for i, (method, over) in enumerate(sides):
            if over is None:  # one point's figure: its requests resampled
                arr = np.asarray(list(method.values()), dtype=float)
                if len(arr) < 2 or arr[:, 0].sum() <= 0 or arr[:, 1].sum() <= 0:
                    return None
                value = float(arr[:, 0].sum() / arr[:, 1].sum())
                idx = np.random.default_rng(i).integers(0, len(arr), size=(noise.N_RESAMPLES, len(arr)))
                null = np.log(arr[idx, 0].sum(1) / arr[idx, 1].sum(1))
            else:  # a speedup: paired by prompt inside the run
                value, null = noise.ratio_of_sums(over, method), noise.ratio_null(over, method)
            if not value:
                return None
            logs.append(math.log(value))
            variances.append(float(np.var(null)) if len(null) else 0.0)
        return logs, statistics.fmean(variances)

    def _read(self, sides):
        return self._reading(sides) if self.paired else self._own(sides)

    # -- the terms ---------------------------------------------------------------------------------------------
    def speedup_term(self) -> noise_model.Term | None:
        per_run = [speedups(pts) for pts in self.points]
        keys = sorted(set.intersection(*(set(s) for s in per_run)), key=cmp.key_order) if per_run else []
        values, jitter, drift = {}, {}, {}
        for key in keys:
            sps = [s[key] for s in per_run]
            if any(sp.value is None for sp in sps):
                continue
            method = self._sides([sp.method for sp in sps])
            over = self._sides([sp.over for sp in sps])
            found = self._read(list(zip(method, over, strict=True)))
            if found is None:
                continue
            values[key], jitter[key] = found
            d = [n.between(str(sp.method.get("point_id")), str(sp.over.get("point_id"))) for n, sp in
                 zip(self.noise, sps, strict=True)]  # fmt: skip
            drift[key] = statistics.fmean((x or 0.0) ** 2 for x in d)
            self.lines.append(f"{speedup_label(key)}: " + ", ".join(f"{math.exp(v):.3f}" for v in values[key])
                              + f"; between runs ±{_pct(statistics.stdev(values[key]))}, jitter "
                              f"±{_pct(math.sqrt(jitter[key]))}, drift ±{_pct(math.sqrt(drift[key]))}")  # fmt: skip
        return noise_model.between_run_term(values, jitter, drift, _free_speedups(values, per_run[0]))

    def point_terms(self) -> tuple[noise_model.Term, noise_model.Term] | None:
        keys = sorted(set.intersection(*(set(p) for p in self.points)), key=cmp.key_order) if self.points else []
        table, jitter, drift = {}, {}, {}
        levels = [(n.level_sd or 0.0) ** 2 for n in self.noise]
        for key in keys:
            found = self._read([(s, None) for s in self._sides([p[key] for p in self.points])])
            if found is None:
                continue
            table[key], jitter[key] = found
            drift[key] = statistics.fmean(levels)
        return noise_model.run_level_terms(table, jitter, drift)

    def profile(self, how: str) -> noise_model.RunToRun:
        terms = {}
        sp = self.speedup_term()
        if sp is not None:
            terms[noise_model.SPEEDUP] = sp
        parts = self.point_terms()
        if parts is not None:
            terms[noise_model.RUN_LEVEL], terms[noise_model.POINT] = parts
            terms[noise_model.ABSOLUTE] = noise_model.absolute_term(*parts)
        if not terms:
            raise UserError(f"calibrate: the {len(self.runs)} runs of backend {self.backend} share no finished point "
                            "with requests to read; calibrate unchanged runs of one setting")  # fmt: skip
        paired = "paired across runs" if self.paired else ("each run on its own requests (the runs carry no prompt "
                                                            "digest: the prompt mix is in the jitter, the term low)")
        return noise_model.RunToRun(self.backend, terms, noise_model.MEASURED, f"{how}; {paired}")


def _free_speedups(keys, speedups_of_a_run: dict) -> int:
    """How many of the speedups read are free of each other: at each load, of M methods' speedups M - 1 (a third
    speedup of three methods is the quotient of the other two, so its spread over the runs adds no degree of
    freedom; counting it had overstated a 6-launch calibration's 30 as 45)."""
    readings: dict[object, int] = {}
    methods: dict[object, set] = {}
    for key in keys:
        sp = speedups_of_a_run[key]
        load = (*key[:1], *key[2:])  # the speedup's setting and load, the method pair left out
        readings[load] = readings.get(load, 0) + 1
        methods.setdefault(load, set()).update({str(sp.method.get("method")), str(sp.over.get("method"))})
    return sum(min(n, len(methods[load]) - 1) for load, n in readings.items())


def _pct(log_sd: float) -> str:
    return f"{math.expm1(log_sd) * 100:.1f}%"


def machine_of(run_dirs: Sequence[Path]) -> dict:
    """Where the runs ran, from their manifests (host, CPUs, GPU), beside where the profile was written."""
    from dflashbench.run.store import load_run

    manifest = load_run(Path(run_dirs[0])).manifest if run_dirs else {}
    host, gpu = manifest.get("host") or {}, manifest.get("gpu") or {}
    return {**noise_model.machine(), "runs_host": host.get("hostname"), "runs_platform": host.get("platform"),
            "runs_cpu_count": host.get("cpu_count"), "gpu": gpu.get("gpu"), "gpu_count": gpu.get("gpu_count")}  # fmt: skip


def calibrate_runs(run_dirs: Sequence[Path], how: str) -> tuple[list[noise_model.RunToRun], list[str]]:
    """The run-to-run terms of ``run_dirs`` (unchanged runs of one setting), one profile per backend, and the lines
    that show each reading across the runs."""
    from dflashbench.run.store import load_run

    runs = [load_run(Path(d)) for d in run_dirs]
    by_backend: dict[str, list] = {}
    for run in runs:
        by_backend.setdefault(str(run.manifest.get("backend") or "?"), []).append(run)
    profiles, lines = [], []
    for backend, members in by_backend.items():
        if len(members) < MIN_RUNS:
            raise UserError(f"calibrate: {len(members)} run(s) of backend {backend}; the run-to-run term needs "
                            f"{MIN_RUNS} unchanged runs at least (--launches {MIN_RUNS} or more)")  # fmt: skip
        suites = {(str((r.manifest.get("suite") or {}).get("name")), str((r.manifest.get("suite") or {}).get("version")))
                  for r in members}  # fmt: skip
        if len(suites) > 1:
            raise UserError(f"calibrate: the runs of backend {backend} ran different suites ({sorted(suites)}); "
                            "calibrate unchanged runs of one setting")  # fmt: skip
        cal = Calibration(members, backend)
        profile = cal.profile(f"{how}: {len(members)} launches of suite {next(iter(suites))[0]}")
        profiles.append(profile)
        lines += [f"{backend}: {line}" for line in cal.lines] + [profile.text]
    return profiles, lines


# -- the same term from a history --------------------------------------------------------------------------------
HISTORY_KINDS = {"speedup": noise_model.SPEEDUP, PER_USER: noise_model.ABSOLUTE,
                 "throughput_tok_per_s": noise_model.ABSOLUTE}  # fmt: skip


def history_profiles(history) -> list[noise_model.RunToRun]:
    """The run-to-run terms a history's series show (:func:`dflashbench.measure.noise_model.history_terms`), per
    backend: each series' successive runs within its segments (no change of level between them)."""
    by_backend: dict[str, list] = {}
    for series in history.series:
        kind = HISTORY_KINDS.get(series.figure)
        if kind is None or series.fit is None:
            continue
        backend = str(series.runs[0].setting.get("backend") or "?") if series.runs else "?"
        logs = [math.log(v) if v and v > 0 else math.nan for v in series.values]
        by_backend.setdefault(backend, []).append((kind, logs, [c.index for c in series.fit.changes]))
    out = []
    for backend, series in by_backend.items():
        terms = noise_model.history_terms(series)
        if terms:
            runs = max(t.runs or 0 for t in terms.values())
            out.append(noise_model.RunToRun(backend, terms, noise_model.HISTORY,
                                            f"dflashbench history: {runs} runs, successive runs within each series' "
                                            "segments (their jitter included: an upper bound)"))  # fmt: skip
    return out
