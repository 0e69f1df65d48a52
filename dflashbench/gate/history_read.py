"""``history``'s reading: every run of the folders given, summed up once into what its series need, and an index
of those summaries kept in each folder so that the next reading takes the unchanged runs from it.

A run's summary (:class:`RunSummary`) holds its **setting** (the runs of one setting form one series: hardware,
GPU count, CPUs, suite and its version, backend, model), its **marks** (what may change inside a series and is
shown on it: the engine release, dflashbench's version and commit, the drafters, the commit and ref a CI job
recorded, the user's labels), the speed probe's level, and each **gated figure** of ``compare`` with the run's
own sd of it (log scale), read as the noise rule of docs/metrics.md reads a run's intervals:

- with repeat rounds (``sweep --repeats N``, N >= 2): the spread of the figure's per-round values (a speedup's
  per-round ratio, its two points measured in the same round), the sd of their mean; this holds the drift
  between rounds and each round's server launch. Read from ``points.jsonl`` alone;
- without: a bootstrap over the point's own requests (a speedup paired by prompt, as ``noise.ratio_ci`` does
  it), widened by the machine's drift the run's speed probe measured (between a speedup's two points; a point's
  moment against the run's typical speed for the absolute speed figures) and by the launch noise of the servers
  the run did not relaunch (:mod:`dflashbench.measure.launch_noise`). Tau carries no drift.

The index (:data:`INDEX_NAME`, JSON) maps each run folder's name to its files' sizes and modification times and
its summary; a run whose files changed, or one the index lacks, is read again and the index rewritten. Deleting
it loses nothing: it is rebuilt from the runs on the next reading.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dflashbench.errors import UserError
from dflashbench.gate import compare as cmp
from dflashbench.gate.speedups import SPEEDUP, speedups

INDEX_NAME = ".dflashbench-history-index.json"
INDEX_VERSION = 1  # bump when a summary's content or its computation changes: older indexes are rebuilt
_STAMPED = ("manifest.json", "points.jsonl", "requests.jsonl", "probes.jsonl")
N_BOOT = 400
_SEED = 0


def gated_figures() -> list[cmp.Threshold]:
    """``compare``'s default gates: the figures that get a series each (per method or pair, and load)."""
    return cmp.default_gates()


@dataclass
class RunSummary:
    """One run as ``history`` reads it (module docstring). ``figures``: series key -> ``[value, own sd (log) or
    None]``; a series key is ``figure|subject|workload|load`` (subject: a method, or a pair ``dflash/ar``)."""

    path: str
    run_id: str
    started_at: str
    status: str
    setting: dict
    marks: dict
    figures: dict[str, list]
    probe: list | None = None  # [log speed (1/s of the probe's work), sd of it over the run's readings]
    report: str | None = None
    labels: dict = field(default_factory=dict)

    @property
    def setting_key(self) -> str:
        return " · ".join(str(v) for v in self.setting.values())

    @property
    def commit(self) -> str | None:
        return self.marks.get("commit")


def series_key(figure: str, subject: str, workload: str, load: str) -> str:
    return f"{figure}|{subject}|{workload}|{load}"


# -- one run -------------------------------------------------------------------------------------------------------
def _field(manifest: dict, *path: str):
    value = manifest
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def setting_of(manifest: dict) -> dict:
    """What makes runs one series: the hardware, the suite and its version, the backend, the model."""
    gpu = _field(manifest, "gpu", "gpu") or "no NVIDIA GPU"
    count = _field(manifest, "gpu", "gpu_count")
    return {
        "backend": manifest.get("backend") or "?",
        "suite": f"{_field(manifest, 'suite', 'name') or '?'} v{_field(manifest, 'suite', 'version') or '?'}",
        "model": cmp.model_identity(manifest.get("model")),
        "hardware": f"{gpu} x{count}" if count else str(gpu),
        "cpus": f"{_field(manifest, 'host', 'cpu_count') or '?'} CPUs",
    }


def _engine(manifest: dict) -> str:
    engine = manifest.get("engine")
    if isinstance(engine, dict) and engine.get("version"):
        return " ".join(str(engine.get(k)) for k in ("name", "version", "build") if engine.get(k))
    versions = manifest.get("versions") or {}
    backend = manifest.get("backend")
    name = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}.get(str(backend))
    if name and versions.get(name):
        return f"{name} {versions[name]}"
    if backend == "reference":  # dflashbench's own decoder: its engine is torch and transformers
        return " ".join(f"{k} {versions[k]}" for k in ("torch", "transformers") if versions.get(k)) or "reference"
    return str(backend or "?")


def marks_of(manifest: dict) -> dict:
    """What may change inside a series and is marked on it where it does."""
    ci = manifest.get("ci") if isinstance(manifest.get("ci"), dict) else {}
    labels = manifest.get("labels") if isinstance(manifest.get("labels"), dict) else {}
    sha = manifest.get("git_sha")
    drafts = manifest.get("drafts") if isinstance(manifest.get("drafts"), dict) else {}
    return {
        "engine": _engine(manifest),
        "dflashbench": f"{manifest.get('dflashbench_version') or '?'}" + (f" @{sha[:10]}" if sha else ""),
        "drafters": ", ".join(f"{m}: {cmp.model_identity(d)}" for m, d in sorted(drafts.items())) or "-",
        "commit": ci.get("sha") or labels.get("commit"),
        "ref": ci.get("ref") or labels.get("ref"),
    }


def _logs(values: Sequence[float | None]) -> list[float]:
    return [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]


class _RoundsPool:
    """One run's round-to-round spread of one kind of figure (every speedup; or one metric over the run's
    points), pooled as compare pools it (:class:`dflashbench.measure.noise.RoundsNoise`): a figure's sd is the
    pool's, or its own rounds' where wider (``at_least``), over the square root of its rounds. Three rounds alone
    give an sd of 2 degrees of freedom, which would let a run whose rounds happened to agree outweigh the rest."""

    def __init__(self):
        self.groups: dict[str, list[list[float]]] = {}

    def add(self, kind: str, values: Sequence[float | None]) -> list[float]:
        logs = _logs(values)
        if len(logs) >= 2:
            self.groups.setdefault(kind, []).append(logs)
        return logs

    def sd_of_mean(self, kind: str, logs: Sequence[float]) -> float | None:
        from dflashbench.measure.noise import RoundsNoise

        pooled = RoundsNoise.pooled(self.groups.get(kind, []))
        if pooled is None or len(logs) < 2:
            return None
        return pooled.at_least([list(logs)]).sd / math.sqrt(len(logs))


def _rounds(raw: pd.DataFrame | None) -> dict[tuple, dict[int, pd.Series]]:
    """(method, workload, load) -> round -> row: each finished round of each point, category all."""
    from dflashbench.measure.analysis import load_label
    from dflashbench.types import PointKey

    out: dict[tuple, dict[int, pd.Series]] = {}
    if raw is None or raw.empty or "repeat" not in raw.columns:
        return out
    for _, row in raw.iterrows():
        if str(row.get("category")) != "all" or str(row.get("status") or "ok") != "ok":
            continue
        round_ = PointKey.split_round(str(row.get("point_id") or ""))[1]
        if round_ is None:
            continue
        key = (str(row["method"]), str(row["workload"]), load_label(row["concurrency"], row.get("extra")))
        out.setdefault(key, {})[round_] = row
    return out


def _boot_log_sd(terms: Sequence[tuple[float, float]]) -> float | None:
    """sd of ``log(sum num / sum den)`` over a bootstrap of the requests' terms."""
    arr = np.asarray([t for t in terms if t is not None], dtype=float)
    if len(arr) < 2 or arr[:, 0].sum() <= 0 or arr[:, 1].sum() <= 0:
        return None
    idx = np.random.default_rng(_SEED).integers(0, len(arr), size=(N_BOOT, len(arr)))
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(arr[idx, 0].sum(1) / arr[idx, 1].sum(1))
    logs = logs[np.isfinite(logs)]
    return float(np.std(logs)) if len(logs) > N_BOOT // 2 else None


def _boot_quantile_sd(values: Sequence[float], q: float) -> float | None:
    arr = np.asarray([v for v in values if v is not None and v > 0], dtype=float)
    if len(arr) < 2:
        return None
    idx = np.random.default_rng(_SEED).integers(0, len(arr), size=(N_BOOT, len(arr)))
    return float(np.std(np.log(np.quantile(arr[idx], q, axis=1))))


class _SingleNoise:
    """A run without rounds: each figure's sd from its own requests and the probe's drift (module docstring)."""

    def __init__(self, run):
        from dflashbench.gate.compare_noise import RunNoise

        self.run = run
        self.noise = RunNoise(run.probes, cmp.run_launch_noise(run.manifest))

    def _reqs(self, row: pd.Series):
        from dflashbench.gate.compare_noise import point_requests

        return point_requests(self.run.requests, row)

    def point(self, metric: str, row: pd.Series) -> float | None:
        from dflashbench.gate.compare_noise import moves_with_machine
        from dflashbench.measure import metrics, request_terms

        reqs = self._reqs(row)
        if metric == "tau":
            return _boot_log_sd([request_terms.tau(r) for r in reqs])
        if metric == "throughput_tok_per_s":
            sd = _boot_log_sd([request_terms.throughput(r) for r in reqs])
        elif metric == "per_user_tok_per_s_pooled":
            sd = _boot_log_sd([request_terms.per_user(r) for r in reqs])
        elif metric == "ttft_s_p99":
            sd = _boot_quantile_sd([metrics.ttft_s(r) for r in reqs], 0.99)
        else:
            return None
        if sd is None:
            return None
        extra = (self.noise.level_sd or 0.0, self.noise.launch_sd) if moves_with_machine(metric) else ()
        return math.hypot(sd, *extra)

    def speedup(self, sp) -> float | None:
        from dflashbench.gate.compare_noise import per_user_terms
        from dflashbench.measure import noise

        ci = noise.ratio_ci(per_user_terms(self._reqs(sp.over)), per_user_terms(self._reqs(sp.method)))
        if ci is None or not (ci[0] > 0 and ci[1] > 0):
            return None
        drift = self.noise.between(str(sp.method.get("point_id")), str(sp.over.get("point_id"))) or 0.0
        return math.hypot(math.log(ci[1] / ci[0]) / (2 * noise.Z_95), drift, self.noise.launch_sd * math.sqrt(2))


def summarize(run_dir: Path) -> RunSummary:
    """Read one run directory into its summary (module docstring). :class:`UserError` where it is not a run."""
    from dflashbench.gate.draft_identity import keyed_by_draft_length
    from dflashbench.measure.analysis import INTERACTIVITY, load_label
    from dflashbench.measure.repeats import aggregate_repeats
    from dflashbench.run.store import load_run, read_manifest, read_probes, read_rows

    # category "all" alone is gated: its rows are read and collapsed over rounds as load_run does it, the other
    # categories' rows (three quarters of points.jsonl) are not
    manifest = read_manifest(run_dir)  # a folder that is no run: that error first
    status = manifest.get("status")
    if not (Path(run_dir) / "points.jsonl").is_file():  # a sweep makes it with the manifest: lost since
        raise UserError(f"a manifest (status {status!r}) but no points.jsonl: a run folder copied in part, or its "
                        "points file removed; nothing of it to read")  # fmt: skip
    raw = keyed_by_draft_length(pd.DataFrame([r for r in read_rows(run_dir) if r.get("category") == "all"]), manifest)
    if raw.empty:
        raise UserError(f"points.jsonl holds no point (status {status!r}): a sweep stopped before its first point "
                        f"leaves this, and dflashbench sweep --resume {run_dir} measures it")  # fmt: skip
    rounds = _rounds(raw)
    single, points, probes = None, aggregate_repeats(raw), read_probes(run_dir)
    if not any(len(r) >= 2 for r in rounds.values()):
        run = load_run(run_dir)
        single, points = _SingleNoise(run), keyed_by_draft_length(run.points, manifest)
    ok = {}
    for _, row in points.iterrows():
        if str(row.get("status") or "ok") == "ok" and str(row.get("category")) == "all":
            ok[(row["backend"], row["method"], row["workload"], "all",
                load_label(row["concurrency"], row.get("extra")))] = row  # fmt: skip
    pool, found = _RoundsPool(), []  # (series key, value, per-round logs or the single run's sd)
    for gate in gated_figures():
        if gate.metric == SPEEDUP:
            continue
        for key, row in ok.items():
            value = cmp.value_of(row, gate.metric)
            if value is None or value <= 0:
                continue
            per_round = [cmp.value_of(r, gate.metric) for r in rounds.get((key[1], key[2], key[4]), {}).values()]
            noise = pool.add(gate.metric, per_round) if single is None else single.point(gate.metric, row)
            found.append((gate.metric, series_key(gate.metric, str(key[1]), str(key[2]), str(key[4])), value, noise))
    for key, sp in speedups(ok).items():
        if sp.value is None or sp.value <= 0:
            continue
        method, over = str(key[1]).split("/", 1)
        if single is None:
            a, b = (rounds.get((m, str(key[2]), str(key[4])), {}) for m in (method, over))
            ratios = [va / vb for r in sorted(a) if r in b
                      and (va := cmp.value_of(a[r], INTERACTIVITY)) and (vb := cmp.value_of(b[r], INTERACTIVITY))]  # fmt: skip
            noise = pool.add(SPEEDUP, ratios)
        else:
            noise = single.speedup(sp)
        found.append((SPEEDUP, series_key(SPEEDUP, str(key[1]), str(key[2]), str(key[4])), sp.value, noise))
    figures = {key: [value, pool.sd_of_mean(kind, noise) if isinstance(noise, list) else noise]
               for kind, key, value, noise in found}
    return RunSummary(path=str(run_dir), run_id=str(manifest.get("run_id") or Path(run_dir).name),
                      started_at=str(manifest.get("started_at") or manifest.get("created_at") or ""),
                      status=str(manifest.get("status") or "?"), setting=setting_of(manifest),
                      marks=marks_of(manifest), figures=figures, probe=_probe_level(probes),
                      report=_report_of(Path(run_dir)),
                      labels=dict(manifest.get("labels") or {}))  # fmt: skip


def _probe_level(readings) -> list | None:
    """The machine's speed over the run: the median log speed of its probe readings (the GPU probe where there
    is one), and the sd of that median (from the readings' spread)."""
    if not readings:
        return None
    kind = "gpu" if any(r.kind == "gpu" for r in readings) else "cpu"
    logs = np.array([-math.log(r.seconds) for r in readings if r.kind == kind and r.seconds and r.seconds > 0])
    if len(logs) < 2:
        return None
    spread = 1.4826 * float(np.median(np.abs(logs - np.median(logs))))
    return [float(np.median(logs)), 1.2533 * spread / math.sqrt(len(logs))]


def _report_of(run_dir: Path) -> str | None:
    """The run's HTML report where the sweep wrote one (``reports/<run-id>.html`` beside ``results/``)."""
    from dflashbench.paths import report_path

    found = report_path(run_dir)
    return str(found) if found.is_file() else None


# -- many runs: folders and their index ------------------------------------------------------------------------------
def _stamp(run_dir: Path) -> list:
    out = []
    for name in _STAMPED:
        try:
            st = (run_dir / name).stat()
            out.append([name, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([name, None, None])
    return out


_MARKS = ("points.jsonl", "manifest.json")  # either makes a folder a run: one without points is named, not dropped


def find_runs(path: Path) -> list[Path]:
    """``path`` itself where it is a run directory; else the run directories in it and one level further down
    (``results/<run-id>/``, or a folder per night holding its run). A run directory holds ``points.jsonl`` or a
    ``manifest.json`` (a sweep stopped before its first point: found here, so that the reading says it skipped it)."""
    if any((path / name).is_file() for name in _MARKS):
        return [path]
    if not path.is_dir():
        raise UserError(f"{path} is neither a run directory nor a folder of runs; give results/ or results/<run-id>/")
    found = {p.parent for name in _MARKS for pattern in (f"*/{name}", f"*/*/{name}") for p in path.glob(pattern)}
    return sorted(p for p in found if not any(q in p.parents for q in found))  # a run's own sub-folders are no runs


@dataclass
class Reading:
    """What the reading found: the runs' summaries, the runs it could not read (with why), and the index's hits."""

    runs: list[RunSummary] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    from_index: int = 0
    index_notes: list[str] = field(default_factory=list)
    folded: list[str] = field(default_factory=list)  # copies of a run (its run_id in another folder), counted once


def _load_index(folder: Path) -> dict:
    try:
        data = json.loads((folder / INDEX_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data.get("runs", {}) if isinstance(data, dict) and data.get("version") == INDEX_VERSION else {}


def _write_index(folder: Path, entries: dict) -> str | None:
    from dflashbench.run.store import write_text_atomic

    try:
        write_text_atomic(folder / INDEX_NAME, json.dumps({"version": INDEX_VERSION, "runs": entries}, indent=None))
    except (OSError, UserError) as exc:
        return f"index not written in {folder} ({exc}): the next reading reads every run again"
    return None


def read_runs(paths: Sequence[Path], use_index: bool = True) -> Reading:
    """Every run under ``paths`` (each a run directory or a folder of runs), each read once (a run named twice is
    one run); from each folder's index where the run is unchanged."""
    reading = Reading()
    groups: dict[Path, list[Path]] = {}
    for path in paths:
        path = Path(path)
        runs = find_runs(path)
        folder = path.parent if runs == [path] else path
        groups.setdefault(folder.resolve(), []).extend(runs)
    seen: set[Path] = set()
    for folder, runs in groups.items():
        index = _load_index(folder) if use_index else {}
        entries, changed = dict(index), False
        for run_dir in runs:
            if run_dir.resolve() in seen:
                continue
            seen.add(run_dir.resolve())
            name = str(run_dir.resolve().relative_to(folder))
            stamp = _stamp(run_dir)
            cached = index.get(name)
            if cached is not None and cached.get("stamp") == stamp:
                summary = RunSummary(**cached["summary"])
                summary.path = str(run_dir)
                reading.runs.append(summary)
                reading.from_index += 1
                continue
            try:
                summary = summarize(run_dir)
            except UserError as exc:
                reading.skipped.append(f"{run_dir}: {exc}")
                continue
            if summary.status == "running":  # a sweep still writing it (or killed: then finish it with --resume)
                reading.skipped.append(f"{run_dir}: its manifest says it is still running: a sweep is writing it, or "
                                       f"one was killed (dflashbench sweep --resume {run_dir} finishes it)")  # fmt: skip
                continue
            reading.runs.append(summary)
            entries[name] = {"stamp": stamp, "summary": asdict(summary)}
            changed = True
        if use_index and changed and (note := _write_index(folder, entries)) is not None:
            reading.index_notes.append(note)
    reading.runs, reading.folded = fold_copies(reading.runs)
    return reading


def fold_copies(runs: Sequence[RunSummary]) -> tuple[list[RunSummary], list[str]]:
    """Each run once: folders that hold one run (``cp -a`` of a run folder, a backup beside results/: one run_id,
    started at one moment, in one setting) are one run, not several points of its series; runs that only share a
    name (made by hand, or by a tool that names its runs) stay apart. The one kept: a complete one before one that is
    not, then the one with the most figures, then the one whose folder is named by its run_id (where the sweep wrote
    it), then the first by path. Returns the runs in their order, and a line per run folded naming the folders and
    whether they agree."""
    by_id: dict[tuple[str, str, str], list[RunSummary]] = {}
    for run in runs:
        by_id.setdefault((run.run_id, run.started_at, run.setting_key), []).append(run)
    kept_ids, notes = set(), []
    for (run_id, _, _), copies in by_id.items():
        if len(copies) == 1:
            kept_ids.add(id(copies[0]))
            continue
        best = min(copies, key=lambda r: (r.status != "complete", -len(r.figures), Path(r.path).name != run_id,
                                          str(r.path)))  # fmt: skip
        kept_ids.add(id(best))
        others = [r for r in copies if r is not best]
        agree = "the same figures"
        if any(r.figures != best.figures for r in others):
            most = max(len(r.figures) for r in others)
            why = ("the complete one" if any(r.status != "complete" for r in others) and best.status == "complete"
                   else f"the one with the most figures ({len(best.figures)} against {most})"
                   if len(best.figures) > most else
                   "the one in the folder named by its run_id, where the sweep wrote it"
                   if Path(best.path).name == run_id else "the first by path")  # fmt: skip
            agree = f"different figures (a copy taken before the run finished, or one resumed apart): kept {why}"
        notes.append(f"run {run_id} counted once: {len(copies)} folders hold it ({best.path} kept; folded "
                     f"{', '.join(str(r.path) for r in others)}), with {agree}")  # fmt: skip
    return [r for r in runs if id(r) in kept_ids], notes
