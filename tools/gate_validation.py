"""Issue #62's "Must show", end to end: the sharp gate (tests paired across runs, the run-to-run term measured here)
on unchanged, slowed and busy default sweeps, the report's intervals' coverage and width, the calibration, and the
same term from history. The term is fitted on the calibration's own launches and checked on the other sweeps.

Usage (from the repository root, on a quiet machine; docs/measurements/2026-11-29-sharp-gate/README.md):

    python tools/gate_validation.py sweeps OUT [--calibrate 4] [--unchanged 4] [--slowed 3] [--delay-ms 1.5]
                                               [--busy 4] [--coverage 8] [--repeats N] [--shifted 1]
                                               [--stretched 1] [--stretch 1.25]
                                               [--sweep-arg=--num-prompts --sweep-arg=2 ...]
    python tools/gate_validation.py judge OUT [--md FILE] [--profile FILE]

``sweeps`` makes, each with ``dflashbench sweep -o OUT/<name> --no-report`` (a sweep already complete is kept):

- ``calib``: ``dflashbench calibrate -k K -o OUT/calib`` (its launches fit the run-to-run term, ``OUT/calib/
  noise-profile.json``; they are never among the runs it is checked on), timed;
- ``base-<i>``: unchanged default sweeps; ``cover-<i>``: more of them, up to ``--coverage`` unchanged in all;
- ``slow-<i>``: DFlash alone slowed (the reference server's ``--test-step-delay-ms`` on DFlash's server only);
- ``busy-<i>``: unchanged sweeps with two ``python3 -c 'while 1: pass'`` processes beside them (``--busy-nice``:
  their niceness, 0 as the issue asks);
- ``shift-<i>`` (with ``--repeats``): a run-level shift as a neighbour makes one: one busy-loop process beside the
  whole sweep, in this run only (it slows the methods by different factors on 2 cores: not a uniform shift);
- ``stretch-<i>`` (with ``--repeats``): a run-level shift planted exactly: every method's reference server stretches
  each of its steps by ``--stretch`` (``--test-step-stretch``: every method slowed by the same factor), in this run.

``judge`` prints the tables the issue asks for, each compare made twice: **before** (each run's own requests, the
test of before issue #62: the runs' run-to-run term left out, so the tests cannot pair) and **after** (paired across
runs, with the calibration's profile):

1. unchanged ordered pairs: exit codes (a plain pass is 0; a weak pass 3);
2. unchanged against slowed: exit codes, which figures failed (DFlash speedups only; never EAGLE-3 vs AR), DFlash's
   TPOT ratio;
3. each speedup's "fails at" (median over the pairs), before and after;
4. busy ordered pairs: none exits 1, their "fails at";
5. with ``--repeats``: the shifted and stretched runs against the unchanged ones: the shift named, never exit 1;
6. the report's intervals over the unchanged sweeps: each reading's share of runs whose 95 % interval covers the
   other runs' median, and the median ratio of the gate's paired half-width (1.96 x its test's sd) to the observed
   spread of the same move between runs (1.96 x sqrt(2) x the reading's sd across runs);
7. the calibration (its profile, degrees of freedom, wall time), and ``history`` over the unchanged sweeps: the
   term it reads against the calibration's (goal: within x2).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "suites" / "demo.toml"
SWEEP_ARGS: list[str] = []
BUSY_NICE = [0]


def _run_dir(folder: Path) -> Path | None:
    runs = sorted(p for p in folder.glob("*/") if (p / "points.jsonl").is_file()) if folder.is_dir() else []
    return runs[-1] if runs else None


def _complete(folder: Path) -> bool:
    run = _run_dir(folder)
    return run is not None and json.loads((run / "manifest.json").read_text()).get("status") == "complete"


@contextlib.contextmanager
def _busy(n: int) -> Iterator[None]:
    """``n`` busy-loop processes (``python3 -c 'while 1: pass'``) for the block's life, at ``BUSY_NICE``."""
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"], preexec_fn=lambda: os.nice(BUSY_NICE[0]))
             for _ in range(n)]  # fmt: skip
    try:
        yield
    finally:
        for p in procs:  # only the processes started here, by their own handle
            p.terminate()
            p.wait()


def _sweep(out: Path, name: str, suite: Path | None = None, busy: int = 0) -> None:
    folder = out / name
    if _complete(folder):
        print(f"{name}: kept ({_run_dir(folder)})", flush=True)
        return
    argv = [sys.executable, "-m", "dflashbench", "sweep", "-o", str(folder), "--no-report"]
    argv += (["--suite", str(suite)] if suite else []) + SWEEP_ARGS
    print(f"{name}: {' '.join(argv[1:])}" + (f" (beside {busy} busy loop(s))" if busy else ""), flush=True)
    start = time.monotonic()
    with (out / f"{name}.log").open("w") as fh, _busy(busy) if busy else contextlib.nullcontext():
        rc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, check=False).returncode
    print(f"{name}: exit {rc} in {time.monotonic() - start:.0f} s", flush=True)


def sweeps(out: Path, calibrate: int, unchanged: int, slowed: int, delay_ms: str, busy: int, coverage: int,
           shifted: int, stretched: int = 0, stretch: str = "1.25") -> None:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    if calibrate:
        start = time.monotonic()
        argv = [sys.executable, "-m", "dflashbench", "calibrate", "-k", str(calibrate), "-o", str(out / "calib")]
        argv += [f"--sweep-arg={a}" for a in SWEEP_ARGS]
        print("calib: " + " ".join(argv[1:]), flush=True)
        rc = subprocess.run(argv, cwd=ROOT, check=False).returncode
        (out / "calib" / "wall_s.txt").write_text(f"{time.monotonic() - start:.0f}\n")
        print(f"calib: exit {rc}", flush=True)
    slow_suite = out / f"demo-dflash-delay-{delay_ms}ms.toml"
    slow_suite.write_text(DEMO.read_text() + f'\n[extra_args]\ndflash = ["--test-step-delay-ms", "{delay_ms}"]\n')
    for i in range(1, max(unchanged, slowed) + 1):  # in rounds: the machine's mood hits every kind alike
        if i <= unchanged:
            _sweep(out, f"base-{i}")
        if i <= slowed:
            _sweep(out, f"slow-{i}", slow_suite)
    for i in range(1, coverage - unchanged + 1):
        _sweep(out, f"cover-{i}")
    for i in range(1, busy + 1):
        _sweep(out, f"busy-{i}", busy=2)
    for i in range(1, shifted + 1):
        _sweep(out, f"shift-{i}", busy=1)
    if stretched:
        stretch_suite = out / f"demo-stretch-{stretch}.toml"
        every = "".join(f'{m} = ["--test-step-stretch", "{stretch}"]\n' for m in ("ar", "eagle3", "dflash"))
        stretch_suite.write_text(DEMO.read_text() + f"\n[extra_args]\n{every}")
        for i in range(1, stretched + 1):
            _sweep(out, f"stretch-{i}", stretch_suite)


# -- judge --------------------------------------------------------------------------------------------------------
def _runs(out: Path, prefix: str) -> list[tuple[str, Path]]:
    found = [(p.name, _run_dir(p)) for p in sorted(out.glob(f"{prefix}-*")) if p.is_dir() and _complete(p)]
    return [(n, r) for n, r in found if r is not None]


def _judge(base: Path, new: Path, profile, after: bool):
    """One compare, in process, with the default gates: ``after`` paired across runs with ``profile``'s terms;
    before, each run's own requests (no run-to-run term: the tests cannot pair, as before issue #62)."""
    from dflashbench.gate import compare as cmp
    from dflashbench.measure import noise_model
    from dflashbench.run.store import load_run

    b, n = load_run(base), load_run(new)
    terms = tuple(noise_model.resolve(r.manifest.get("backend"), profile) for r in (b, n)) if after else (None, None)
    result = cmp.compare_points(b.points, n.points, cmp.effective_thresholds([]), requests=(b.requests, n.requests),
                                probes=(b.probes, n.probes), run_terms=terms,
                                launches=(cmp.run_launch_noise(b.manifest), cmp.run_launch_noise(n.manifest)))  # fmt: skip
    return result


def _fails(result, pair: str) -> list[float]:
    return [r.detectable for r in result.rows if r.is_speedup and r.key[1] == pair and r.detectable is not None]


def _exits(results) -> str:
    codes = [r.exit_code for r in results]
    return ", ".join(f"{codes.count(c)} exit {c}" for c in sorted(set(codes))) or "none"


def _pct(values) -> str:
    return f"{statistics.median(values) * 100:.0f}% ({min(values) * 100:.0f}-{max(values) * 100:.0f}%)" if values \
        else "—"  # fmt: skip


def _tpot_ratio(base: Path, new: Path) -> float | None:
    from dflashbench.run.store import load_run

    def tpot(run, method):
        return {int(r.concurrency): r.tpot_s_p50 for r in load_run(run).points.itertuples()
                if r.method == method and r.category == "all" and r.tpot_s_p50}  # fmt: skip

    b, n = tpot(base, "dflash"), tpot(new, "dflash")
    found = [n[c] / b[c] for c in b if c in n]
    return statistics.median(found) if found else None


PAIRS = ("dflash/ar", "eagle3/ar", "dflash/eagle3")


def _pairs_table(lines: list[str], title: str, pairs, profile, expect: str) -> dict:
    """Every ordered pair, before and after: exit codes, failing figures, each speedup's fails-at."""
    lines += [f"## {title}", "", "| BASE | NEW | exit before | exit after | failed after | DFlash TPOT ratio |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    got = {"before": [], "after": []}
    for (bn, b), (nn, n) in pairs:
        before, after = _judge(b, n, profile, False), _judge(b, n, profile, True)
        got["before"].append(before)
        got["after"].append(after)
        failed = sorted({f"{r.metric} {r.key[1]} c={r.key[-1]}" for r in after.regressions})
        ratio = _tpot_ratio(b, n)
        lines.append(f"| {bn} | {nn} | {before.exit_code} | {after.exit_code} | {'; '.join(failed) or '—'} | "
                     f"{'—' if ratio is None else f'{ratio:.2f}'} |")  # fmt: skip
    lines += ["", f"{len(got['after'])} pairs ({expect}): before {_exits(got['before'])}; after "
              f"{_exits(got['after'])}", "", "fails at (median, range over the pairs):", "",
              "| speedup | before | after |", "|---|---|---|"]  # fmt: skip
    for pair in PAIRS:
        b = [x for r in got["before"] for x in _fails(r, pair)]
        a = [x for r in got["after"] for x in _fails(r, pair)]
        if a or b:
            lines.append(f"| {pair} | {_pct(b)} | {_pct(a)} |")
    lines.append("")
    return got


def _coverage(lines: list[str], runs: list[tuple[str, Path]], profile) -> None:
    """Each run's 95 % intervals against the other runs' median of the same reading, and the gate's paired
    half-width against the observed spread of the move between runs."""
    from dflashbench.measure import readings
    from dflashbench.measure.noise_model import run_terms
    from dflashbench.run.store import load_run

    loaded = [load_run(r) for _, r in runs]
    tables = []
    for run in loaded:
        t = readings.pair_readings(run.points, run.requests, {run.run_id: run.probes},
                                   terms=run_terms([run], profile))  # fmt: skip
        tables.append(t[t["category"] == "all"])
    keys = ("method", "baseline", "concurrency", "figure")
    values: dict[tuple, list] = {}
    for i, t in enumerate(tables):
        for r in t.to_dict("records"):
            values.setdefault(tuple(r[k] for k in keys), []).append((i, r))
    lines += ["## the report's intervals over the unchanged sweeps", "",
              "| figure | readings | their intervals covering the other runs' median | median run-to-run sd (log) |",
              "|---|---|---|---|"]  # fmt: skip
    for figure in (readings.PER_USER, readings.LATENCY, readings.THROUGHPUT):
        cover = total = 0
        sds = []
        for key, found in values.items():
            if key[3] != figure or len(found) < 3:
                continue
            logs = [math.log(r["value"]) for _, r in found if r["value"]]
            if len(logs) >= 2:
                sds.append(statistics.stdev(logs))
            for i, r in found:
                others = [o["value"] for j, o in found if j != i and o["value"]]
                if r["lo"] is None or r["lo"] != r["lo"] or not others:
                    continue
                total += 1
                cover += r["lo"] <= statistics.median(others) <= r["hi"]
        if total:
            lines.append(f"| {figure} | {total} | {cover / total:.0%} (goal ≥ 90%) | "
                         f"{statistics.median(sds):.3f} |")  # fmt: skip
    _width(lines, runs, profile, values)


def _width(lines: list[str], runs: list[tuple[str, Path]], profile, values: dict) -> None:
    """The gate's paired half-width of a speedup's move against the observed spread of that move between runs."""
    from dflashbench.measure import readings

    ratios = []
    for (_, b), (_, n) in itertools.combinations(runs, 2):
        result = _judge(b, n, profile, True)
        for i, test in _tests(result):
            row = result.rows[i]
            if not row.is_speedup or test.null is None:
                continue
            method, baseline = str(row.key[1]).split("/")
            found = values.get((method, baseline, int(row.key[-1]), readings.PER_USER), [])
            logs = [math.log(r["value"]) for _, r in found if r["value"]]
            if len(logs) < 3:
                continue
            spread = math.sqrt(2) * statistics.stdev(logs)  # the observed sd of a move between two of these runs
            if spread > 0:
                ratios.append(math.hypot(float(test.null.std()), test.drift_sd) / spread)
    lines += ["", f"the gate's paired half-width over the observed spread of the same move (speedups, every pair of "
              f"these runs): median {statistics.median(ratios):.2f} (goal ≤ 3)" if ratios else
              "the gate's paired half-width: no paired test (runs without prompt digests?)", ""]  # fmt: skip


def _tests(result):
    """The (row index, test) pairs of a comparison (kept on it by the judge)."""
    return getattr(result, "_tests", [])


def _calibration(lines: list[str], out: Path, profile_path: Path, unchanged: list[tuple[str, Path]]) -> None:
    from dflashbench.gate.calibrate import history_profiles
    from dflashbench.gate.history import history_of
    from dflashbench.measure import noise_model

    lines += ["## the calibration (fitted on OUT/calib's launches; checked on the sweeps above)", ""]
    if not profile_path.is_file():
        lines += ["no calibration profile (run `sweeps` with --calibrate K)", ""]
        return
    wall = (out / "calib" / "wall_s.txt").read_text().strip() if (out / "calib" / "wall_s.txt").is_file() else "?"
    for p in noise_model.read_profile(profile_path).values():
        lines.append(f"- {p.text}; wall time {wall} s")
    lines.append("")
    if len(unchanged) >= 4:
        history = history_of([r for _, r in unchanged], use_index=False)
        calib = noise_model.read_profile(profile_path)
        for p in history_profiles(history):
            mine = calib.get(p.backend)
            for kind in (noise_model.SPEEDUP, noise_model.ABSOLUTE):
                a, b = p.sd(kind), mine.sd(kind) if mine else None
                ratio = f"{a / b:.2f}x the calibration's" if a and b else "no calibration term to set it against"
                lines.append(f"- history over {len(unchanged)} unchanged sweeps, {kind}: ±{a or 0:.3f} (log), {ratio} "
                             "(goal: within x2; history's holds each run's jitter, the calibration's does not)")  # fmt: skip
        lines.append("")


def judge(out: Path, md: Path | None, profile_path: Path | None = None) -> str:
    from dflashbench.measure import noise_model

    _keep_tests()
    profile_path = profile_path or out / "calib" / "noise-profile.json"
    profile = noise_model.read_profile(profile_path) if profile_path.is_file() else None
    lines = [f"# the sharp gate on this machine ({out})", "",
             f"profile: {profile_path if profile else 'none: after = the project default'}", ""]  # fmt: skip
    bases, slows, busy = _runs(out, "base"), _runs(out, "slow"), _runs(out, "busy")
    unchanged = bases + _runs(out, "cover")
    _pairs_table(lines, "unchanged sweeps, every ordered pair", list(itertools.permutations(bases, 2)), profile,
                 "all should pass: exit 0")  # fmt: skip
    if slows:
        _pairs_table(lines, "unchanged BASE against DFlash-slowed NEW", list(itertools.product(bases, slows)), profile,
                     "all should fail (exit 1) on a DFlash speedup, never EAGLE-3 vs AR")  # fmt: skip
    if len(busy) >= 2:
        _pairs_table(lines, "busy sweeps, every ordered pair", list(itertools.permutations(busy, 2)), profile,
                     "none should exit 1")  # fmt: skip
    shifts = _runs(out, "shift")
    if shifts:
        got = _pairs_table(lines, "unchanged BASE against a run-level shift (one busy loop beside the whole sweep)",
                           list(itertools.product(bases, shifts)), profile, "named, never exit 1")  # fmt: skip
        named = sum(r.shift is not None for r in got["after"])
        lines += [f"the shift named in {named} of {len(got['after'])} pairs", ""]
    stretches = _runs(out, "stretch")
    if stretches:
        got = _pairs_table(lines, "unchanged BASE against a planted run-level shift (every server's steps stretched "
                           "alike)", list(itertools.product(bases, stretches)), profile, "named, never exit 1")  # fmt: skip
        named = sum(r.shift is not None for r in got["after"])
        lines += [f"the shift named in {named} of {len(got['after'])} pairs", ""]
    if len(unchanged) >= 3:
        _coverage(lines, unchanged, profile)
    _calibration(lines, out, profile_path, unchanged)
    text = "\n".join(lines) + "\n"
    if md is not None:
        md.write_text(text)
    return text


def _keep_tests() -> None:
    """Keep each comparison's tests on it (the coverage table reads their sd): wraps the judge's Holm step."""
    from dflashbench.gate import compare_judge

    original = compare_judge.Judge.correct_and_size
    if getattr(original, "_kept", False):
        return

    def kept(self):
        original(self)
        self.c._tests = list(self.tested)

    kept._kept = True
    compare_judge.Judge.correct_and_size = kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("sweeps", "judge", "all"))
    ap.add_argument("out", type=Path)
    ap.add_argument("--calibrate", type=int, default=4, help="launches of the calibration (0: none)")
    ap.add_argument("--unchanged", type=int, default=4)
    ap.add_argument("--slowed", type=int, default=3)
    ap.add_argument("--delay-ms", default="1.5", help="ms after every DFlash step (about +15 %% TPOT on an idle core)")
    ap.add_argument("--busy", type=int, default=4)
    ap.add_argument("--busy-nice", type=int, default=0, help="niceness of the busy loops (0: as the issue asks)")
    ap.add_argument("--coverage", type=int, default=8, help="unchanged sweeps in all, for the intervals' coverage")
    ap.add_argument("--repeats", type=int, default=1, help="--repeats N for every sweep")
    ap.add_argument("--shifted", type=int, default=0, help="sweeps with a run-level shift planted (one busy loop)")
    ap.add_argument("--stretched", type=int, default=0, help="sweeps with every server's steps stretched alike")
    ap.add_argument("--stretch", default="1.25", help="the stretch factor of --stretched sweeps")
    ap.add_argument("--sweep-arg", action="append", default=[], help="one more argument for every sweep")
    ap.add_argument("--md", type=Path)
    ap.add_argument("--profile", type=Path, help="judge: this noise profile (default OUT/calib/noise-profile.json)")
    args = ap.parse_args()
    SWEEP_ARGS.extend(args.sweep_arg + (["--repeats", str(args.repeats)] if args.repeats > 1 else []))
    BUSY_NICE[0] = args.busy_nice
    if args.step in ("sweeps", "all"):
        sweeps(args.out, args.calibrate, args.unchanged, args.slowed, args.delay_ms, args.busy, args.coverage,
               args.shifted, args.stretched, args.stretch)  # fmt: skip
    if args.step in ("judge", "all"):
        print(judge(args.out, args.md, args.profile))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
