"""What ``dflashbench history`` finds on the runs of ``tools/history_runs.py`` (issue #57's "Must show").

Usage (from the repository root):

    python tools/history_eval.py detect OUT [--md FILE]          # the slowed and the unchanged history
    python tools/history_eval.py false-alarms OUT [--trials 200] [--md FILE]
    python tools/history_eval.py drift OUT [--per-run 0.02] [--md FILE]
    python tools/history_eval.py timing OUT WORK [--copies 300] [--md FILE]
    python tools/history_eval.py summaries OUT runs.json [--kept-in DIR]  # run summaries; the slowed history's page

``detect`` reads the slowed history (OUT/u01..u<slow-from - 1> then OUT/s<slow-from>..) and the unchanged one
(OUT/u*) with the default method (penalty 2 ln n, alpha 0.001, recent 3), and prints each history's series
count, every change with its interval, size and p, the exit code, and DFlash's TPOT in the slowed runs over the
unchanged runs' (p50 at each load, median over runs; as measured, and over AR's own ratio).

``false-alarms`` resamples the measured unchanged runs: each trial is the unchanged runs in a random order (a
permutation: no run twice, so no two runs are identical), read as one history; a change or a trend in any series
is a false alarm. It prints the rate per series and per history.

``drift`` takes the slowed history's runs (whose AR and EAGLE-3 the slowdown did not touch) and multiplies
EAGLE-3's per-user rate and throughput of run ``i`` by ``(1 - per_run) ** i``, and its speedup over AR the same
(DFlash's series left out): a slow drift laid on measured noise. It prints what each drifted series shows.

``timing`` copies the runs under OUT ``--copies`` times into WORK (each copy's folder, run id and start time
rewritten, so 300 distinct runs), then times ``history`` reading them: with no index (the first reading, which
writes it), with the index, and with ``--no-index``; each the median of 3 (the second and third "cold" readings
delete the index first). This machine is shared: the times are wall-clock with other work running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from dflashbench.gate import history as hist
from dflashbench.gate.history_output import change_words, trend_words
from dflashbench.gate.history_read import INDEX_NAME, Reading, read_runs


def _folders(out: Path, prefix: str) -> list[Path]:
    return sorted(p for p in out.glob(f"{prefix}[0-9][0-9]") if p.is_dir() and any(p.glob("*/points.jsonl")))


def histories(out: Path) -> tuple[list[Path], list[Path]]:
    """(slowed history, unchanged history): folders in run order; the unchanged history as long as the slowed one
    (u01..u<last slowed>), the unchanged runs past it (``history_runs.py --more-unchanged``) left to the
    false-alarm resampling's pool."""
    slowed = _folders(out, "s")
    first = min(int(p.name[1:]) for p in slowed) if slowed else 10**9
    last = max(int(p.name[1:]) for p in slowed) if slowed else 10**9
    unchanged = _folders(out, "u")
    return [p for p in unchanged if int(p.name[1:]) < first] + slowed, [p for p in unchanged if int(p.name[1:]) <= last]


def _tpot(run_dir: Path, method: str) -> dict[int, float]:
    from dflashbench.run.store import load_run

    run = load_run(next(run_dir.glob("*/")), with_requests=False)
    return {int(r.concurrency): float(r.tpot_s_p50) for r in run.points.itertuples()
            if r.method == method and r.category == "all" and r.tpot_s_p50}  # fmt: skip


def tpot_ratio(slowed: list[Path], unchanged: list[Path]) -> str:
    """DFlash's TPOT p50 in the slowed runs over the unchanged runs' (median over runs, per load)."""
    parts = []
    s_runs = [p for p in slowed if p.name.startswith("s")]
    u_runs = [p for p in unchanged if int(p.name[1:]) < int(s_runs[0].name[1:])] if s_runs else []
    for c in sorted(_tpot(s_runs[0], "dflash")) if s_runs else []:
        d = [statistics.median(_tpot(p, m)[c] for p in runs) for runs in (s_runs, u_runs) for m in ("dflash", "ar")]
        parts.append(f"c={c}: x{d[0] / d[2]:.3f} (x{(d[0] / d[1]) / (d[2] / d[3]):.3f} over AR's)")
    return "; ".join(parts)


def describe(title: str, h: hist.History) -> list[str]:
    lines = [f"## {title}", "", f"{len(h.runs)} runs, {len(h.series)} series, exit {h.exit_code}", ""]
    for s, f in h.findings:
        lines.append(f"- [{f.kind}] {change_words(s, f)}")
    lines += [f"- [trend{', the machine' + chr(39) + 's' if s.trend_machine else ''}] {trend_words(s)}"
              + (f"; {s.trend_machine}" if s.trend_machine else "") for s in h.trends]
    wild = [f"{s.label}: run {i + 1}" for s in h.series if s.fit is not None for i in s.fit.wild]
    if wild:
        lines.append(f"- wild runs (one night off both its neighbours, weighed down): {'; '.join(wild)}")
    if not h.findings and not h.trends:
        lines.append("- no change point and no trend in any series")
    noisy = [s for s in h.series if s.noisy]
    lines += ["", f"series too noisy or too short to judge their newest {h.recent} runs: {len(noisy)}"]
    lines += [f"  - {s.label}: {s.noisy}" for s in noisy]
    return lines + [""]


def detect(out: Path) -> list[str]:
    slowed, unchanged = histories(out)
    lines = [f"# history on {out}", "", f"slowed history: {' '.join(p.name for p in slowed)}",
             f"unchanged history: {' '.join(p.name for p in unchanged)}",
             f"DFlash TPOT p50, slowed over unchanged: {tpot_ratio(slowed, unchanged)}", ""]  # fmt: skip
    lines += describe("slowed history (DFlash slowed from run 8)", hist.build(read_runs(slowed)))
    lines += describe("unchanged history", hist.build(read_runs(unchanged)))
    return lines


def false_alarms(out: Path, trials: int, length: int = 14, pool: str = "unchanged") -> list[str]:
    """Each trial: one history of ``length`` unchanged runs in a random order, read as ``history`` reads it (one
    family per setting); a change or a trend in any series is a false alarm. ``pool``: ``unchanged`` draws every
    series from the unchanged runs (u*); ``mixed`` (the first helper's protocol) draws the series of AR or EAGLE-3
    alone from all the runs, slowed or not (the slowdown touched neither), and those with DFlash from the unchanged
    ones, as two readings."""
    slowed, _ = histories(out)
    every = read_runs(sorted(set(slowed) | set(_folders(out, "u"))))
    plain = [r for r in every.runs if Path(r.path).parent.name.startswith("u")]
    pools = ((plain, None),) if pool == "unchanged" else ((every.runs, False), (plain, True))
    rng = np.random.default_rng(57)
    per_series: dict[str, int] = {}
    histories_alarmed, histories_unexplained, series_unexplained, n_series = 0, 0, 0, 0
    for t in range(trials):
        alarmed: set[str] = set()
        explained: set[str] = set()  # of those, every finding one the speed probes explain
        for runs, with_dflash in pools:
            pick = rng.permutation(len(runs))[:length]
            h = hist.build(Reading(runs=[runs[i] for i in pick]), order="given", n_perms=2000)
            mine = [s for s in h.series if with_dflash is None or ("dflash" in s.subject) == with_dflash]
            n_series = n_series if t else n_series + len(mine)
            alarmed |= {s.label for s in mine if s.findings or (s.fit is not None and s.fit.trend)}
            explained |= {s.label for s in mine if (s.findings or (s.fit is not None and s.fit.trend))
                          and all(f.kind == hist.MACHINE for f in s.findings)
                          and (s.fit is None or s.fit.trend is None or s.trend_machine)}  # fmt: skip
        histories_alarmed += bool(alarmed)
        histories_unexplained += bool(alarmed - explained)
        series_unexplained += len(alarmed - explained)
        for label in alarmed:
            per_series[label] = per_series.get(label, 0) + 1
        print(f"trial {t + 1}: {sorted(alarmed) or 'none'}", file=sys.stderr, flush=True)
    total = sum(per_series.values())
    drawn = (f"every series: {min(length, len(plain))} of the {len(plain)} unchanged runs, one reading" if pool ==
             "unchanged" else f"AR and EAGLE-3 series: {min(length, len(every.runs))} of the {len(every.runs)} runs "
             f"(none changed them); series with DFlash: {min(length, len(plain))} of the {len(plain)} unchanged runs")
    lines = [f"# false alarms: {trials} histories of unchanged runs in random orders ({out})", "", f"{drawn}.", "",
             f"- per history (any change or trend in any of its {n_series} series): {histories_alarmed} of {trials} "
             f"= {histories_alarmed / trials:.1%}",
             f"- per series: {total} of {trials * n_series} = {total / (trials * n_series):.2%}",
             f"- leaving out the findings the speed probes explain (the machine's: exit 3, never a regression): per "
             f"history {histories_unexplained} of {trials} = {histories_unexplained / trials:.1%}, per series "
             f"{series_unexplained} of {trials * n_series} = {series_unexplained / (trials * n_series):.2%}", ""]  # fmt: skip
    lines += [f"  - {label}: {k}" for label, k in sorted(per_series.items(), key=lambda kv: -kv[1])]
    return lines + ["", "(each trial's p-values from 2,000 random orders of its runs instead of the default's 10,000: "
                    "the same test at a coarser resolution)", ""]  # fmt: skip


def drift(out: Path, per_run: float) -> list[str]:
    """EAGLE-3 made ``per_run`` slower each run, laid on the measured runs of the slowed history (whose EAGLE-3 and
    AR the slowdown did not touch): its per-user rate and throughput of run i times (1 - d)^i, its speedup over
    AR the same; DFlash's series are left out (DFlash changed at run 8 in these runs)."""
    import copy

    slowed, _ = histories(out)
    runs = sorted(read_runs(slowed).runs, key=lambda r: (r.started_at, r.run_id))
    drifted = []
    for i, run in enumerate(runs):
        run = copy.deepcopy(run)
        f = (1 - per_run) ** i
        for key, (value, sd) in list(run.figures.items()):
            figure, subject = key.split("|")[:2]
            if "dflash" in subject:
                del run.figures[key]
            elif (figure in ("per_user_tok_per_s_pooled", "throughput_tok_per_s") and subject == "eagle3") or \
                    (figure == "speedup" and subject == "eagle3/ar"):  # fmt: skip
                run.figures[key] = [value * f, sd]
        drifted.append(run)
    h = hist.build(Reading(runs=drifted), order="given")
    touched = [s for s in h.series if s.subject in ("eagle3", "eagle3/ar") and s.figure not in ("tau", "ttft_s_p99")]
    lines = [f"# a drift of {per_run:.0%} per run laid on the {len(runs)} measured runs of the slowed history", "",
             "EAGLE-3's per-user rate and throughput of run i times (1 - d)^i, its speedup over AR the same:", ""]  # fmt: skip
    for s in touched:
        found = [change_words(s, f) + f" [{f.kind}]" for f in s.findings]
        trend = [trend_words(s) + (f"; {s.trend_machine}" if s.trend_machine else "")] if s.fit.trend else []
        lines.append(f"- {s.label}: " + ("; ".join(trend + found) if trend or found else "NOT REPORTED"))
    reported = sum(bool(s.findings or s.fit.trend) for s in touched)
    others = [s.label for s in h.series if s not in touched and (s.findings or (s.fit is not None and s.fit.trend))]
    lines += ["", f"reported: {reported} of {len(touched)} drifted series; other series with a finding: "
              f"{others or 'none'}", f"exit {h.exit_code}", ""]  # fmt: skip
    return lines


def _copy_runs(out: Path, work: Path, copies: int) -> list[Path]:
    sources = [d for p in sorted(out.glob("[us][0-9][0-9]")) for d in p.glob("*/") if (d / "points.jsonl").is_file()
               and json.loads((d / "manifest.json").read_text()).get("status") == "complete"]  # fmt: skip
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    start = datetime(2026, 1, 1)
    made = []
    for i in range(copies):
        src = sources[i % len(sources)]
        run_id = f"copy-{i:04d}"
        dst = work / run_id
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".sweep.lock", "server-*.log"))
        manifest = json.loads((dst / "manifest.json").read_text())
        manifest["run_id"] = run_id
        manifest["started_at"] = (start + timedelta(days=i)).isoformat() + "+00:00"
        (dst / "manifest.json").write_text(json.dumps(manifest))
        for name in ("points.jsonl", "requests.jsonl"):
            rows = [json.loads(line) for line in (dst / name).read_text().splitlines() if line.strip()]
            for row in rows:
                row["run_id"] = run_id
            (dst / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        made.append(dst)
    return made


def _time(paths: list[Path], use_index: bool, drop_index: Path | None) -> float:
    """Seconds to read the runs under ``paths`` into their summaries (``history``'s reading, before any fit)."""
    if drop_index is not None and (drop_index / INDEX_NAME).exists():
        (drop_index / INDEX_NAME).unlink()
    t0 = time.perf_counter()
    reading = read_runs(paths, use_index=use_index)
    assert not reading.skipped, reading.skipped
    return time.perf_counter() - t0


def timing(out: Path, work: Path, copies: int) -> list[str]:
    made = _copy_runs(out, work, copies)
    size = sum(f.stat().st_size for d in made for f in d.iterdir()) / 2**20
    rows = [("no index yet (reads every run, writes the index)", [_time([work], True, work) for _ in range(3)]),
            ("with the index", [_time([work], True, None) for _ in range(3)]),
            ("--no-index (reads every run, writes nothing)", [_time([work], False, None) for _ in range(3)])]
    extra = work / f"copy-{copies:04d}"  # one run more: the index holds the others
    shutil.copytree(made[0], extra)
    manifest = json.loads((extra / "manifest.json").read_text())
    manifest.update(run_id=extra.name, started_at=(datetime(2026, 1, 1) + timedelta(days=copies)).isoformat() + "+00:00")
    (extra / "manifest.json").write_text(json.dumps(manifest))
    rows.append((f"one run added (the index holds the other {copies})", [_time([work], True, None)]))
    reading = read_runs([work])
    t0 = time.perf_counter()
    h = hist.build(reading)
    fit_s = time.perf_counter() - t0
    lines = [f"# reading {copies} run folders ({size:.0f} MiB: copies of the complete runs under {out}, ids and start "
             "times rewritten)", "", "| reading | median (s) | each (s) |", "|---|---|---|"]  # fmt: skip
    for label, times in rows:
        lines.append(f"| {label} | {statistics.median(times):.2f} | {', '.join(f'{t:.2f}' for t in times)} |")
    lines += ["", f"Then fitting and judging the {len(h.series)} series of {len(h.runs)} runs each (10,000 random "
              f"orders of its runs each): {fit_s:.0f} s. Wall-clock times on the shared machine.", ""]  # fmt: skip
    return lines


def summaries(out: Path, dest: Path, kept_in: Path | None = None) -> list[str]:
    """Every run's summary as ``history`` reads it (``dest``, JSON: what docs/measurements keeps of the runs), one
    file per run beside it (``runs/<folder>.json``: its summary and its manifest), and the slowed history's page
    (``history.html``) whose links point at those files, so that a committed page links to committed files.
    ``kept_in``: the runs' files are kept there already (another measurement of the same runs): the page links to
    them and nothing is written but the page."""
    from dataclasses import asdict

    from dflashbench.gate.history_output import write_html

    slowed, _ = histories(out)
    folders = sorted(set(slowed) | set(_folders(out, "u")))
    reading = read_runs(folders)
    by_dir = {Path(r.path).parent.name: r for r in reading.runs}
    kept = kept_in or dest.parent / "runs"
    kept.mkdir(parents=True, exist_ok=True)
    rows, href = [], {}
    for folder in folders:
        run = by_dir.get(folder.name)
        if run is None:
            continue
        tpot = {m: _tpot(folder, m).get(1) for m in ("ar", "dflash", "eagle3")}
        row = {"folder": folder.name, "tpot_s_p50_c1": tpot, **asdict(run), "path": f"{folder.name}/{run.run_id}"}
        rows.append(row)
        href[run.run_id] = Path(os.path.relpath(kept / f"{folder.name}.json", dest.parent)).as_posix()
        if kept_in is None:
            manifest = json.loads((Path(run.path) / "manifest.json").read_text())
            (kept / f"{folder.name}.json").write_text(json.dumps({"summary": row, "manifest": manifest}, indent=1))
    if kept_in is None:
        dest.write_text(json.dumps({"runs": rows, "skipped": reading.skipped}, indent=1))
    page = dest.with_name("history.html")
    write_html(hist.build(read_runs(slowed)), page, link=lambda r: href[r.run_id])
    return [f"{len(rows)} run summaries -> {dest} and {kept}/; the slowed history's page -> {page}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("detect", "false-alarms", "drift", "timing", "summaries"):
        p = sub.add_parser(name)
        p.add_argument("out", type=Path)
        p.add_argument("--md", type=Path)
        if name == "false-alarms":
            p.add_argument("--trials", type=int, default=200)
            p.add_argument("--pool", choices=("unchanged", "mixed"), default="unchanged")
        if name == "drift":
            p.add_argument("--per-run", type=float, default=0.02)
        if name in ("timing", "summaries"):
            p.add_argument("work", type=Path)
            p.add_argument("--copies", type=int, default=300)
            p.add_argument("--kept-in", type=Path, help="summaries: the runs' files are kept there already")
    args = ap.parse_args(argv)
    if args.cmd == "detect":
        lines = detect(args.out)
    elif args.cmd == "false-alarms":
        lines = false_alarms(args.out, args.trials, pool=args.pool)
    elif args.cmd == "drift":
        lines = drift(args.out, args.per_run)
    elif args.cmd == "summaries":
        lines = summaries(args.out, args.work, args.kept_in)
    else:
        lines = timing(args.out, args.work, args.copies)
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
