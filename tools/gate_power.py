"""What the `compare` gate catches on this machine, end to end (issue #41): unchanged default sweeps against each
other, and against sweeps with DFlash alone slowed, and a sweep made on a busy machine.

Usage (from the repository root; sweeps run at the caller's priority, so run it at normal priority):

    python tools/gate_power.py sweeps OUT [--unchanged 4] [--slowed 3] [--delays 3,1.5] [--busy 1] [--repeats N]
                                          [--interleave point]
    python tools/gate_power.py compare OUT [--md FILE]
    python tools/gate_power.py all OUT            # both, with the defaults
    python tools/gate_power.py simulate OUT [--trials 20] [--slowdown 0.3] [--md FILE]

``sweeps`` runs default sweeps (``dflashbench sweep -o OUT/<name> --no-report``), in rounds so that the machine's
mood hits every kind alike: per round one unchanged sweep (``base-<i>``), then one per delay with the demo suite
plus ``[extra_args] dflash = ["--test-step-delay-ms", "<delay>"]`` (``slow<delay>-<i>``: the reference server
sleeps after every DFlash step, AR and EAGLE-3 untouched); last, ``--busy`` sweeps (``busy-<i>``) made while one
busy-loop process per CPU, pinned to it, runs at the same priority for the whole sweep. A sweep already in OUT
is kept (the step is resumable by running it again). The delay is a means, not the slowdown: on an idle core a
DFlash step of the embedded pair takes ~11 ms at c=1, so 3 ms is about +30 % TPOT and 1.5 ms +15 %; on a busy
machine steps are longer and the same delay weighs less (issue #41's runs needed 10 ms for +30 %). ``compare``
prints the TPOT ratio each pair measured.

``compare`` judges, in process, with the default gates:
- every ordered pair of unchanged sweeps (all should pass);
- every unchanged sweep against every slowed one (all should fail, on DFlash's speedup), with the measured TPOT
  ratio of DFlash (slowed / unchanged, median over concurrencies) and each DFlash speedup's minimum detectable
  drop beside its observed move;
- the same pairs with only the three gates of before this issue (throughput, tau, TTFT p99), under the same noise
  rule: the power the new gates add against the power Holm's larger family costs;
- each busy sweep against each unchanged one: the machine's change named from the probes, and the exit code;
and prints one Markdown summary (also to ``--md FILE``).

``simulate`` (no sweeps; OUT unused) writes pairs of interleaved runs in memory, on a machine whose speed drifts
as a random walk (slow drift) or jumps at every point (another tenant's jobs), with the probe reading that speed,
DFlash alone slowed by ``--slowdown`` in NEW, and judges them with the real ``compare`` code: the share caught
with the default gates against the old three gates (more gates, a larger Holm family), the false alarms on
unchanged pairs, and the median detectable drop of DFlash's throughput and of its speedup over AR.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "suites" / "demo.toml"
OLD_GATES = (("throughput=5%", "drop"), ("tau=0.2", "drop"), ("ttft_s_p99=20%", "rise"))


def _run_dir(folder: Path) -> Path | None:
    runs = sorted(p for p in folder.glob("*/") if (p / "points.jsonl").is_file()) if folder.is_dir() else []
    return runs[-1] if runs else None


def _complete(folder: Path) -> bool:
    import json

    run = _run_dir(folder)
    return run is not None and json.loads((run / "manifest.json").read_text()).get("status") == "complete"


def _slowed_suite(out: Path, delay_ms: str) -> Path:
    path = out / f"demo-dflash-delay-{delay_ms}ms.toml"
    path.write_text(DEMO.read_text() + f'\n[extra_args]\ndflash = ["--test-step-delay-ms", "{delay_ms}"]\n')
    return path


@contextlib.contextmanager
def _busy_machine() -> Iterator[None]:
    """One busy-loop process per CPU this process may use, each pinned to its CPU, for the block's life."""
    procs = []
    for cpu in sorted(os.sched_getaffinity(0)):
        procs.append(subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"]))
    try:
        yield
    finally:
        for p in procs:  # only the processes started here, by their own handle
            p.terminate()
            p.wait()


SWEEP_ARGS: list[str] = []  # --repeats N: passed to every sweep


def _sweep(out: Path, name: str, suite: Path | None = None) -> None:
    folder = out / name
    if _complete(folder):
        print(f"{name}: kept ({_run_dir(folder)})", flush=True)
        return
    argv = [sys.executable, "-m", "dflashbench", "sweep", "-o", str(folder), "--no-report"]
    argv += (["--suite", str(suite)] if suite else []) + SWEEP_ARGS
    print(f"{name}: {' '.join(argv[1:])}", flush=True)
    log = out / f"{name}.log"
    with log.open("w") as fh:
        rc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, check=False).returncode
    print(f"{name}: exit {rc}, log {log}", flush=True)


def sweeps(out: Path, unchanged: int, slowed: int, delays: list[str], busy: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    suites = {d: _slowed_suite(out, d) for d in delays}
    for i in range(1, max(unchanged, slowed) + 1):
        if i <= unchanged:
            _sweep(out, f"base-{i}")
        for d in delays if i <= slowed else ():
            _sweep(out, f"slow{d}-{i}", suites[d])
    for i in range(1, busy + 1):
        if _complete(out / f"busy-{i}"):
            print(f"busy-{i}: kept", flush=True)
            continue
        with _busy_machine():
            _sweep(out, f"busy-{i}")


# -- compare ------------------------------------------------------------------------------------------------------
def _runs(out: Path, prefix: str) -> list[tuple[str, Path]]:
    """The complete runs of one kind, by name (an unfinished sweep would fail for its missing points)."""
    found = [(p.name, _run_dir(p)) for p in sorted(out.glob(f"{prefix}-*")) if p.is_dir() and _complete(p)]
    return [(n, r) for n, r in found if r is not None]


def _tpots(run: Path, method: str) -> dict[int, float]:
    from dflashbench.run.store import load_run

    return {int(r.concurrency): r.tpot_s_p50 for r in load_run(run).points.itertuples()
            if r.method == method and r.category == "all" and r.tpot_s_p50}  # fmt: skip


def _tpot_ratios(base: Path, new: Path) -> tuple[float | None, float | None]:
    """DFlash's TPOT p50 in NEW over BASE's, median over concurrencies: as measured, and relative to AR's in
    the same run (``(dflash / ar)_new / (dflash / ar)_base``: the machine's mood between the runs cancels)."""
    (bd, ba), (nd, na) = ((_tpots(r, "dflash"), _tpots(r, "ar")) for r in (base, new))
    raw = [nd[c] / bd[c] for c in bd if c in nd]
    rel = [(nd[c] / na[c]) / (bd[c] / ba[c]) for c in bd if c in nd and c in na and c in ba]
    return (statistics.median(raw) if raw else None, statistics.median(rel) if rel else None)


def _detectable(result, metric: str, method: str) -> list[float]:
    return [r.detectable for r in result.rows if r.metric == metric and r.key[1] == method and r.key[3] == "all"
            and r.detectable is not None]  # fmt: skip


def _judge(base: Path, new: Path, gates: list | None = None, accept_weak: bool = False):
    from dflashbench.gate import compare as cmp

    thresholds = gates if gates is not None else cmp.effective_thresholds([])
    return cmp.compare_runs(base, new, thresholds, accept_weak=accept_weak)


def _wall_s(run: Path) -> float | None:
    """A sweep's wall time, from its manifest's start and end."""
    import datetime
    import json

    m = json.loads((run / "manifest.json").read_text())
    try:
        start, end = (datetime.datetime.fromisoformat(str(m[k])) for k in ("started_at", "finished_at"))
    except (KeyError, ValueError):
        return None
    return (end - start).total_seconds()


def _old_gates():
    from dflashbench.gate import compare as cmp

    return [cmp.parse_threshold(t, d) for t, d in OLD_GATES]


def _speedup_cells(result, method: str = "dflash") -> str:
    """Each speedup of ``method`` over AR: observed move and the minimum detectable drop."""
    cells = []
    for row in result.rows:
        if row.metric == "speedup" and row.key[1] == f"{method}/ar" and row.detectable is not None:
            mark = "**" if row.verdict == "REGRESSION" else ""
            cells.append(f"{row.key[-1]}: {mark}{row.change * 100:+.0f}%{mark} (≥{row.detectable * 100:.0f}%)")
    return "; ".join(cells)


def compare(out: Path, md: Path | None) -> str:
    from dflashbench.run.store import load_run

    lines = [f"# gate power on this machine ({out})", ""]
    bases = _runs(out, "base")
    lines += ["## unchanged sweeps, every ordered pair", "", "| BASE | NEW | exit (--accept-weak) | exit (default: a "
              "weak pass is 3) | cannot judge | machine |", "|---|---|---|---|---|---|"]  # fmt: skip
    passed = weak = judged_not = 0
    for (bn, b), (nn, n) in itertools.permutations(bases, 2):
        r, strict = _judge(b, n, accept_weak=True), _judge(b, n)
        passed += r.exit_code == 0
        weak += strict.exit_code == 3 and not strict.cannot_judge
        judged_not += bool(r.cannot_judge)
        lines.append(f"| {bn} | {nn} | {r.exit_code} | {strict.exit_code} | {len(r.cannot_judge)} | "
                     f"{r.machine.text if r.machine else 'not measured'} |")  # fmt: skip
    n_pairs = len(bases) * (len(bases) - 1)
    lines += ["", f"**{passed} of {n_pairs} pass with --accept-weak** ({judged_not} cannot judge); by default "
              f"{weak} of {n_pairs} are weak passes (exit 3)", ""]  # fmt: skip

    delays = sorted({p.name.split("-")[0] for p in out.glob("slow*-*") if p.is_dir()})
    for kind in delays:
        slows = _runs(out, kind)
        lines += [f"## {kind}: unchanged vs DFlash slowed ({kind[4:]} ms after every DFlash step)", "",
                  "| BASE | NEW | DFlash TPOT ratio (vs AR's) | exit | exit, old gates | DFlash throughput "
                  "detectable, old gates → new | DFlash vs AR speedup: move (fails at) |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        caught = caught_old = 0
        ratios, rel_ratios = [], []
        for (bn, b), (sn, s) in itertools.product(bases, slows):
            r, old = _judge(b, s), _judge(b, s, _old_gates())
            raw, rel = _tpot_ratios(b, s)
            ratios += [raw] if raw else []
            rel_ratios += [rel] if rel else []
            caught += r.exit_code == 1
            caught_old += old.exit_code == 1
            d_old, d_new = (statistics.median(x) * 100 if (x := _detectable(res, "throughput_tok_per_s", "dflash"))
                            else math.nan for res in (old, r))  # fmt: skip
            lines.append(f"| {bn} | {sn} | {raw:.2f} ({rel:.2f}) | {r.exit_code} | {old.exit_code} | "
                         f"{d_old:.0f}% → {d_new:.0f}% | {_speedup_cells(r)} |")  # fmt: skip
        n = len(bases) * len(slows)
        if ratios:
            lines += ["", f"**caught {caught} of {n}** with the default gates; {caught_old} of {n} with the old three "
                      f"gates only. DFlash's TPOT ratio, slowed / unchanged: median {statistics.median(ratios):.2f} "
                      f"(range {min(ratios):.2f}–{max(ratios):.2f}); relative to AR's in the same run: median "
                      f"{statistics.median(rel_ratios):.2f} (range {min(rel_ratios):.2f}–{max(rel_ratios):.2f})", ""]  # fmt: skip

    busy = _runs(out, "busy")
    if busy:
        lines += ["## a busy machine against unchanged quiet sweeps", "", "| BASE | NEW | exit | machine |",
                  "|---|---|---|---|"]  # fmt: skip
        for (bn, b), (nn, n) in itertools.product(bases, busy):
            r = _judge(b, n)
            lines.append(f"| {bn} | {nn} | {r.exit_code} | {r.machine.text if r.machine else 'not measured'} |")
        lines.append("")
    lines += ["## how busy the machine was (the probe's summary per sweep), and each sweep's wall time", "",
              "| sweep | probe median ms | drift adjacent | drift across run | wall s | placement |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for name, run in [*bases, *(x for k in delays for x in _runs(out, k)), *busy]:
        m = load_run(run).manifest
        p = (m.get("probe") or {}).get("cpu") or {}
        if p:
            wall = _wall_s(run)
            mode = (m.get("placement") or {}).get("mode") or ("point" if m.get("interleaved") else "off")
            lines.append(f"| {name} | {p['median_s'] * 1e3:.1f} | ±{p['drift_adjacent_pct']}% | "
                         f"±{p['drift_overall_pct']}% | {wall:.0f} | {mode} |" if wall else
                         f"| {name} | {p['median_s'] * 1e3:.1f} | ±{p['drift_adjacent_pct']}% | "
                         f"±{p['drift_overall_pct']}% | — | {mode} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    if md is not None:
        md.write_text(text)
    return text


# -- simulate -----------------------------------------------------------------------------------------------------
SIM_TPOT_S = {"ar": 0.010, "dflash": 0.002, "eagle3": 0.0025}
SIM_LOADS = (1, 2, 4)


def _sim_run(rng, path, slow: float, requests: int = 24):
    """One interleaved run of three methods at c=1, 2, 4 on a machine whose log speed follows ``path`` (one value
    per point, in run order): every request decodes at the method's TPOT x e^(path) x a 5 % per-request spread
    (DFlash's x ``slow``), and the probe before each point reads e^(path) x a 1 % noise of its own."""
    import pandas as pd

    from dflashbench.measure import metrics
    from dflashbench.types import PointKey, ProbeReading, RequestResult

    points, reqs, probes = [], [], []
    k = 0
    for c in SIM_LOADS:
        for method, tpot in SIM_TPOT_S.items():
            pid = str(PointKey("reference", method, "synthetic", f"c{c}"))
            mine = []
            for i in range(requests):
                step = tpot * math.exp(path[k] + rng.normal(0, 0.05)) * (slow if method == "dflash" else 1.0)
                first = 10**9 + i * 10**7 + 5 * 10**7
                chunks = tuple(first + int(j * step * 1e9) for j in range(40))
                mine.append(RequestResult(run_id="sim", point_id=pid, request_id=f"r{i}", category="all",
                                          concurrency=c, ok=True, error=None, queued_ns=10**9 + i * 10**7,
                                          sent_ns=10**9 + i * 10**7, first_token_ns=first, last_token_ns=chunks[-1],
                                          output_tokens=40, output_tokens_source="server", chunk_ns=chunks,
                                          chunk_tokens=(1,) * 40))  # fmt: skip
            rate = metrics.per_user_tok_per_s_pooled(mine)
            points.append({"backend": "reference", "method": method, "model": "m", "workload": "synthetic",
                           "category": "all", "concurrency": c, "status": "ok", "point_id": pid,
                           "per_user_tok_per_s_pooled": rate, "throughput_tok_per_s": rate * c})  # fmt: skip
            reqs += [r.to_dict() for r in mine]
            seconds = 0.05 * math.exp(path[k] + rng.normal(0, 0.01))
            probes.append(ProbeReading(kind="cpu", at=f"before {pid}", t_ns=k * 10**9, seconds=seconds,
                                       trials_s=(seconds,) * 5))  # fmt: skip
            k += 1
    return pd.DataFrame(points), pd.DataFrame(reqs), probes


def _sim_path(rng, model: str, size: float, n: int) -> list[float]:
    """The machine's log speed at each of ``n`` points: ``walk`` a random walk (steps of sd ``size``: a slow
    drift, adjacent points alike), ``jumpy`` independent draws of sd ``size`` (another tenant's jobs coming and
    going within seconds, as on this project's shared 2-core machine)."""
    steps = rng.normal(0, size, n)
    return list(np.cumsum(steps)) if model == "walk" else list(steps)


def simulate(trials: int, slowdown: float, seed: int = 0) -> str:
    """Power of the default gates against the old three (throughput, tau, TTFT p99) for DFlash alone slowed by
    ``slowdown``, over simulated pairs of runs, and the false alarms on unchanged pairs, per machine model."""
    from dflashbench.gate import compare as cmp

    rng = np.random.default_rng(seed)
    lines = [f"## simulated: DFlash alone slowed {slowdown:.0%}, {trials} pairs of runs per machine", "",
             "| machine | gates (tests) | caught | false alarms on unchanged pairs | DFlash detectable: throughput, "
             "speedup over AR (median) |", "|---|---|---|---|---|"]  # fmt: skip
    n = len(SIM_LOADS) * len(SIM_TPOT_S)
    for model, size in (("walk", 0.03), ("walk", 0.08), ("jumpy", 0.05), ("jumpy", 0.3)):
        for name, gates in (("old three", _old_gates()), ("default", cmp.effective_thresholds([]))):
            caught = alarms = tests = 0
            detect: dict[str, list[float]] = {"throughput_tok_per_s": [], "speedup": []}
            for _ in range(trials):
                base = _sim_run(rng, _sim_path(rng, model, size, n), 1.0)
                for slow, counter in ((1 / (1 - slowdown), "caught"), (1.0, "alarms")):
                    new = _sim_run(rng, _sim_path(rng, model, size, n), slow)
                    r = cmp.compare_points(base[0], new[0], gates, requests=(base[1], new[1]), probes=(base[2], new[2]))
                    if counter == "caught":
                        caught += r.exit_code == 1
                        tests = r.tests
                        for metric, where in (("throughput_tok_per_s", "dflash"), ("speedup", "dflash/ar")):
                            detect[metric] += [x.detectable for x in r.rows if x.metric == metric and x.key[1] == where
                                               and x.detectable is not None]  # fmt: skip
                    else:
                        alarms += r.exit_code == 1
            med = {m: f"{statistics.median(v) * 100:.0f}%" if v else "—" for m, v in detect.items()}
            lines.append(f"| {model} ±{size:.0%} | {name} ({tests}) | {caught} of {trials} | {alarms} of {trials} | "
                         f"{med['throughput_tok_per_s']}, {med['speedup']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("sweeps", "compare", "all", "simulate"))
    ap.add_argument("out", type=Path)
    ap.add_argument("--unchanged", type=int, default=4)
    ap.add_argument("--slowed", type=int, default=3)
    ap.add_argument("--delays", default="3,1.5", help="ms after every DFlash step, one sweep kind each")
    ap.add_argument("--busy", type=int, default=1)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--repeats", type=int, default=1, help="sweeps: --repeats N for every sweep (each round relaunches "
                    "its servers: the repeats' interval then holds a launch's own speed)")
    ap.add_argument("--interleave", help="sweeps: --interleave HOW for every sweep (point: the order before issue #55)")
    ap.add_argument("--trials", type=int, default=20, help="simulate: pairs of runs per machine model")
    ap.add_argument("--slowdown", type=float, default=0.3, help="simulate: DFlash's per-user rate lost (0.3 = 30%%)")
    args = ap.parse_args()
    if args.repeats > 1:
        SWEEP_ARGS.extend(["--repeats", str(args.repeats)])
    if args.interleave:
        SWEEP_ARGS.extend(["--interleave", args.interleave])
    if args.step in ("sweeps", "all"):
        sweeps(args.out, args.unchanged, args.slowed, [d.strip() for d in args.delays.split(",") if d.strip()],
               args.busy)  # fmt: skip
    if args.step in ("compare", "all"):
        print(compare(args.out, args.md))
    if args.step == "simulate":
        text = simulate(args.trials, args.slowdown)
        print(text)
        if args.md is not None:
            args.md.write_text(text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
