"""The run directory: written incrementally by the sweep, read back (with pandas) by reports and ``compare``.

Layout of ``results/<run-id>/``::

    manifest.json          full resolved config, versions, GPU info, host, start/end time (secrets redacted)
    requests.jsonl         one RequestResult per finished request, appended and flushed as it finishes
    points.jsonl           one PointSummary per finished sweep point (and category), appended and flushed
    telemetry.jsonl        NVML samples, when a GPU is present
    ties.jsonl             the lossless check's probe: the target's margin where a method's output first left AR's
    server-<b>-<m>.log     the engine's own log when dflashbench launched it
    .sweep.lock            the OS file lock one sweep holds while it writes here (:mod:`dflashbench.run.runlock`)

A crash loses at most the point in flight: every line is flushed as soon as it is written, a line cut short
by a crash (no trailing newline, or unparsable as the last line) is ignored on read and cut off when the run
is reopened for ``--resume``. A point is finished only when all of its rows are whole (:func:`missing_rows`): a
point whose last category row was cut is measured again. Every record passes :func:`dflashbench.redact.redact_secrets` on its way to
disk. A write that fails (disk full) raises :class:`StoreWriteError` naming the file and the errno.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import secrets
import signal
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pandas as pd

from dflashbench.errors import Interrupted, UserError
from dflashbench.paths import portable, portable_tree
from dflashbench.redact import REDACTED, redact_secrets  # noqa: F401 - REDACTED re-exported for readers
from dflashbench.run import runlock
from dflashbench.run.manifest import MANIFEST_SCHEMA, Manifest, parse_manifest
from dflashbench.types import SCHEMA_VERSION, PointSummary, ProbeReading, RequestResult, row_problem

MANIFEST = "manifest.json"
REQUESTS = "requests.jsonl"
POINTS = "points.jsonl"
TELEMETRY = "telemetry.jsonl"
PROBES = "probes.jsonl"  # the speed probe's readings (dflashbench.run.probe)
TIES = "ties.jsonl"  # the lossless check's probe at each divergence from AR (dflashbench.run.tie_probe)
_JSONL_FILES = (REQUESTS, POINTS, TELEMETRY, PROBES, TIES)

def _jsonable(obj: Any) -> Any:
    """json.dumps ``default``: dataclasses, paths, enums, sets, numpy scalars."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    if hasattr(obj, "item"):  # numpy scalar
        return obj.item()
    if hasattr(obj, "value"):  # Enum
        return obj.value
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=_jsonable, ensure_ascii=False, allow_nan=False)


class StoreWriteError(UserError):
    """A run file could not be written (disk full, quota, read-only filesystem...): the sweep stops, since
    every later result would be lost too; what is on disk stays resumable."""


def write_error(path: Path, exc: OSError) -> StoreWriteError:
    """One line naming the file and the error: ``cannot write X: No space left on device (ENOSPC, errno 28)``."""
    code = errno.errorcode.get(exc.errno or 0)
    what = f"{exc.strerror or exc} ({code}, errno {exc.errno})" if code else str(exc)
    return StoreWriteError(f"cannot write {path}: {what}")


def _raise_interrupted(signum, _frame) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While the block runs, SIGTERM unwinds as Ctrl-C does (:class:`~dflashbench.errors.Interrupted`, exit 143), so
    the ``except`` of :func:`write_text_atomic` removes its temporary file: by default SIGTERM ends the process at
    once, and ``report``, ``history -o`` and history's index left ``.NAME.tmp`` beside their file. Only where
    nothing else handles SIGTERM (a sweep's own handler, :func:`dflashbench.run.run_books.stop_on_signals`, stays)
    and in the main thread (the only one that may set a handler)."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync it, rename it over ``path``: the old version stays
    whole until the new one is complete. Whatever stops it (a full disk, Ctrl-C, SIGTERM) leaves no temporary file
    behind; an OSError raises :class:`StoreWriteError` naming ``path`` and the errno."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with _sigterm_unwinds():
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise write_error(path, exc) from None
        raise


def _write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON with :func:`write_text_atomic`."""
    try:
        text = json.dumps(obj, default=_jsonable, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
    except ValueError as exc:  # inf or nan: JSON has no such numbers; a bug upstream, but no half-written file
        raise ValueError(f"cannot write {path}: {exc}") from None
    write_text_atomic(path, text)


def _cut_partial_tail(path: Path) -> int:
    """Drop a last line that a crash cut short (no trailing newline, or not valid JSON); the bytes dropped."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    data = path.read_bytes()
    keep = len(data)
    if not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    else:
        start = data.rfind(b"\n", 0, len(data) - 1) + 1
        try:
            json.loads(data[start:])
        except ValueError:
            keep = start
    if keep != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
    return len(data) - keep


def new_run_id(prefix: str = "") -> str:
    """``[prefix-]YYYYmmdd-HHMMSS-xxxx``: sorts by start time, unique across machines."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tag = f"{prefix}-" if prefix else ""
    return f"{tag}{stamp}-{secrets.token_hex(2)}"


class RunStore:
    """Writer for one run directory. Every append is flushed at once; the manifest is rewritten atomically."""

    def __init__(self, run_dir: Path, run_id: str, lock: runlock.RunLock | None = None):
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self._handles: dict[str, IO[str]] = {}
        self._lock = lock  # held from creation or reopening until close(): one sweep per run directory
        self.cut_lines: dict[str, int] = {}  # file -> bytes of a cut-short last line that open() dropped
        self._writing = threading.Lock()  # side by side, several points write at once (dflashbench.run.side)

    # -- creation ---------------------------------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, manifest: dict, run_id: str | None = None) -> RunStore:
        """Make ``root/<run-id>/``, lock it, and write its complete manifest before anything else. An existing
        run directory is never reused. If the manifest cannot be written (disk full) nothing could ever resume
        the run: the directory is removed again and :class:`StoreWriteError` says why."""
        run_id = run_id or new_run_id()
        run_dir = Path(root) / run_id
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise UserError(f"run directory {run_dir} already exists; pass --resume {run_dir} to continue it") from None
        except OSError as exc:
            raise UserError(f"cannot create run directory {run_dir}: {exc.strerror or exc}") from None
        full = {"run_id": run_id, "schema_version": SCHEMA_VERSION, "manifest_schema": MANIFEST_SCHEMA, **manifest}
        full["run_id"] = run_id
        lock = runlock.acquire(run_dir, started_at=str(full.get("started_at") or ""))
        try:
            _write_json_atomic(run_dir / MANIFEST, redact_secrets(portable_manifest(full)))
        except BaseException as exc:  # no manifest, no run: remove the directory rather than leave a non-run
            lock.release()
            with contextlib.suppress(OSError):
                (run_dir / runlock.LOCK_FILE).unlink()
                run_dir.rmdir()
            if isinstance(exc, StoreWriteError):
                raise StoreWriteError(f"{exc}; nothing was run and {run_dir} was removed") from None
            raise
        store = cls(run_dir, run_id, lock)
        for name in (REQUESTS, POINTS):
            try:
                (run_dir / name).touch()
            except OSError as exc:
                store.close()
                raise write_error(run_dir / name, exc) from None
        return store

    @classmethod
    def open(cls, run_dir: Path) -> RunStore:
        """Reopen an existing run directory to append to it (``--resume``): lock it (another sweep holding it
        is an error naming that sweep), then cut lines a crash left half-written."""
        run_dir = Path(run_dir)
        manifest = load_manifest(run_dir)
        lock = runlock.acquire(run_dir, started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        try:
            cut = {name: _cut_partial_tail(run_dir / name) for name in _JSONL_FILES}
        except OSError as exc:
            lock.release()
            raise UserError(f"cannot repair the run files in {run_dir}: {exc.strerror or exc}") from None
        store = cls(run_dir, manifest.run_id or run_dir.name, lock)
        store.cut_lines = {name: n for name, n in cut.items() if n}
        return store

    # -- appends ----------------------------------------------------------------------------------------
    def _append(self, name: str, record: dict) -> None:
        line = _dumps(redact_secrets(record)) + "\n"
        with self._writing:
            self._write_line(name, line)

    def _write_line(self, name: str, line: str) -> None:
        try:
            fh = self._handles.get(name)
            if fh is None:
                fh = self._handles[name] = open(self.run_dir / name, "a", encoding="utf-8")
            fh.write(line)
            fh.flush()
        except OSError as exc:  # a line cut short here is cut off by --resume
            raise write_error(self.run_dir / name, exc) from None

    def append_request(self, r: RequestResult) -> None:
        self._append(REQUESTS, r.to_dict())

    def append_point(self, p: PointSummary) -> None:
        row = p.to_dict()
        for key in ("model", "draft"):  # no path of this machine (dflashbench.paths)
            if isinstance(row.get(key), str):
                row[key] = portable(row[key])
        self._append(POINTS, row)

    def append_telemetry(self, sample: dict) -> None:
        self._append(TELEMETRY, sample)

    def append_probe(self, reading: ProbeReading) -> None:
        self._append(PROBES, reading.to_dict())

    def append_tie(self, row: dict) -> None:
        self._append(TIES, row)

    def close(self) -> None:
        """Close the files and release the run directory's lock."""
        self._close_files()
        if self._lock is not None:
            self._lock.release()

    def _close_files(self) -> None:
        for fh in self._handles.values():
            # every append was flushed; only a write that already failed (and was reported) can fail again
            with contextlib.suppress(OSError):
                fh.close()
        self._handles.clear()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reading back what is there ---------------------------------------------------------------------
    @property
    def manifest(self) -> Manifest:
        """The manifest as it is on disk now, typed."""
        return load_manifest(self.run_dir)

    def points(self) -> list[PointSummary]:
        return [PointSummary.from_dict(d) for d in _read_jsonl(self.run_dir / POINTS)]

    def finished_point_ids(self) -> set[str]:
        """Ids of sweep points all of whose rows (every category, and "all") are on disk, whole, with status "ok"."""
        return self.point_states()[0]

    def point_states(self) -> tuple[set[str], dict[str, str]]:
        """The finished points' ids, and the points whose rows say ok but are not all there, each with what is
        missing (:func:`missing_rows`): a crash or a full disk cut their last row, and ``--resume`` measures them
        again rather than keep a point without one of its categories."""
        rows: dict[str, list[PointSummary]] = {}
        for p in self.points():
            rows.setdefault(p.point_id, []).append(p)
        categories = measured_categories(self.run_dir / REQUESTS)
        finished: set[str] = set()
        torn: dict[str, str] = {}
        for point_id, point_rows in rows.items():
            if any(p.status != "ok" for p in point_rows):
                continue
            missing = missing_rows(point_rows, categories.get(point_id))
            if missing:
                torn[point_id] = missing
            else:
                finished.add(point_id)
        return finished, torn

    def discard_points(self, point_ids: Iterable[str]) -> int:
        """Remove every row (points, requests, telemetry) of ``point_ids``, e.g. a failed point before it is
        run again on ``--resume``. Returns how many rows were removed. Each file is rewritten atomically."""
        drop = set(point_ids)
        if not drop:
            return 0
        self._close_files()
        removed = 0
        for name in _JSONL_FILES:
            path = self.run_dir / name
            if not path.exists():
                continue
            _cut_partial_tail(path)
            rows = list(_read_jsonl(path))
            keep = [r for r in rows if r.get("point_id") not in drop]
            removed += len(rows) - len(keep)
            if len(keep) != len(rows):
                write_text_atomic(path, "".join(_dumps(r) + "\n" for r in keep))
        return removed

    def update_manifest(self, **fields) -> None:
        """Merge ``fields`` into manifest.json (atomic rewrite: tmp file + rename; secrets redacted)."""
        with self._writing:
            manifest = read_manifest(self.run_dir)
            manifest.update(fields)
            _write_json_atomic(self.run_dir / MANIFEST, redact_secrets(portable_manifest(manifest)))

    def server_log_path(self, backend: str, method: str) -> Path:
        """``server-vllm-ar.log``; a replica's ``server-vllm-ar#2.log`` (``method``: the server's name)."""
        return self.run_dir / f"server-{backend}-{method}.log"


def measured_categories(requests_path: Path) -> dict[str, set[str]]:
    """For each point in ``requests.jsonl``, the categories of its measured (not warm-up) requests: the category
    rows the sweep wrote for it (:mod:`dflashbench.run.point` writes one per category when there are several)."""
    found: dict[str, set[str]] = {}
    for row in _read_jsonl(requests_path):
        if not row.get("warmup"):
            found.setdefault(str(row.get("point_id")), set()).add(str(row.get("category")))
    return found


def missing_rows(rows: Sequence[PointSummary], categories: set[str] | None) -> str | None:
    """What a point's rows lack, in words, or ``None`` when they are whole: exactly one ``all`` row, and one row
    per category when its measured requests had more than one (a small ``--num-prompts`` may leave a category
    without requests, and then without a row). ``categories`` ``None``: none of its requests is in
    requests.jsonl, so its rows cannot be told whole."""
    whole = [p for p in rows if p.category == "all"]
    if len(whole) != 1:
        return f"{len(whole)} 'all' rows in points.jsonl instead of one"
    if categories is None:
        return "none of its requests is in requests.jsonl" if whole[0].num_requests else None
    want = categories if len(categories) > 1 else set()
    lost = sorted(want - {p.category for p in rows})
    if not lost:
        return None
    return (f"{len(want) + 1 - len(lost)} of its {len(want) + 1} rows in points.jsonl (no row for "
            f"{', '.join(lost)}: a crash or a full disk cut it)")


READ_FROM_REQUESTS = ("the lossless check, the intervals from requests and the SLO reading of a report, and "
                      "compare's noise tests (a move past a gate then fails on its threshold alone)")  # fmt: skip


def requests_problem(run: Run) -> str | None:
    """What is wrong with ``run``'s requests.jsonl, against the measured requests its points count, in words that
    name the file and what cannot be computed from it (``None`` when it is whole): missing, a last line cut
    short, or fewer measured requests than the points count (a file cut at a line's end)."""
    path = run.run_dir / REQUESTS
    points = run.repeat_points if run.repeat_points is not None else run.points
    alls = points[points["category"] == "all"] if not points.empty else points
    counted = int(pd.to_numeric(alls["num_requests"], errors="coerce").fillna(0).sum()) if not alls.empty else 0
    if not path.exists():
        return f"{REQUESTS} is missing, so nothing read from each request can be computed: {READ_FROM_REQUESTS}" \
            if counted else None  # fmt: skip
    requests = run.requests
    measured = int((~requests["warmup"].fillna(False).astype(bool)).sum()) if "warmup" in requests.columns \
        else len(requests)  # fmt: skip
    size = path.stat().st_size
    cut = bool(size) and not path.read_bytes()[-1:] == b"\n"
    if measured >= counted and not cut:
        return None
    how = "ends in a line cut short and " if cut else ""
    return (f"{REQUESTS} {how}holds {measured} of the {counted} measured requests its points count"
            f"{_short_points(alls, requests)}, so what is read from each request rests on those: {READ_FROM_REQUESTS}")


def _short_points(alls: pd.DataFrame, requests: pd.DataFrame, named: int = 2) -> str:
    """``, dflash at c=2 12 of its 32``: the points whose stored requests fall short of their count, the shortest
    first, at most ``named`` (review 2026-11-29, probe p03b: the flag named none); no colon nor parenthesis, so the
    verdict's short flag (its first clause) keeps them."""
    if alls.empty or "point_id" not in alls.columns or "point_id" not in requests.columns:
        return ""
    kept = requests[~requests["warmup"].fillna(False).astype(bool)] if "warmup" in requests.columns else requests
    held = kept.groupby(kept["point_id"].astype(str)).size().to_dict() if not kept.empty else {}
    def where(r: dict) -> str:  # a closed-loop point by its load; a rate or trace point by its id's last part
        c = pd.to_numeric(r.get("concurrency"), errors="coerce")
        return f"{r.get('method')} at c={int(c)}" if c == c and c > 0 else \
            f"{r.get('method')} {str(r.get('point_id')).rsplit(':', 1)[-1]}"  # fmt: skip

    short = sorted(((int(held.get(str(r["point_id"]), 0)), int(n), where(r)) for r in alls.to_dict("records")
                    if (n := pd.to_numeric(r.get("num_requests"), errors="coerce")) == n and held.get(
                        str(r["point_id"]), 0) < n), key=lambda t: t[0] / max(t[1], 1))  # fmt: skip
    if not short:
        return ""
    said = ", ".join(f"{where} {k} of its {n}" for k, n, where in short[:named])
    return f", {said}{f' and {len(short) - named} more points' if len(short) > named else ''}"


def portable_manifest(manifest: dict) -> dict:
    """``manifest`` without this machine's paths (:mod:`dflashbench.paths`), ``suite_config`` kept as given:
    it is what ``--resume`` runs again."""
    return {k: (v if k == "suite_config" else portable_tree(v)) for k, v in manifest.items()}


# -- readers ---------------------------------------------------------------------------------------------
def read_manifest(run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    path = run_dir / MANIFEST
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a directory; expected a run directory such as results/<run-id>/")
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory (no {MANIFEST}); expected results/<run-id>/")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{path} does not hold a JSON object")
    return manifest


def load_manifest(run_dir: Path) -> Manifest:
    """``run_dir``'s manifest, typed (:class:`dflashbench.run.manifest.Manifest`); a :class:`UserError` naming the
    file and field when it does not fit."""
    return parse_manifest(read_manifest(run_dir), where=str(Path(run_dir) / MANIFEST))


# What a row of each file must be to be read (dflashbench.types.row_problem): its record, the fields it cannot lack.
ROW_SHAPES: dict[str, tuple[type, tuple[str, ...]]] = {
    POINTS: (PointSummary, ("backend", "method", "workload", "category", "concurrency")),
    REQUESTS: (RequestResult, ("point_id", "request_id", "ok")),
    PROBES: (ProbeReading, ("kind", "at", "t_ns", "seconds")),
}


def _read_jsonl(path: Path) -> Iterator[dict]:
    """Rows of a JSONL file. A last line cut short by a crash is skipped; a bad line elsewhere is an error, and so
    is a line of valid JSON that is not a row of the file's record (:data:`ROW_SHAPES`): a :class:`UserError`
    naming the file, the line and the field, never a traceback further on (``report`` and ``compare`` exit 2)."""
    if not path.exists():
        return
    shape = ROW_SHAPES.get(path.name)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    complete = lines[:-1]  # text after the last newline (normally "") is an unfinished line
    for lineno, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if lineno == len(complete):  # the last complete line may still be cut short (crash mid-write)
                return
            raise UserError(f"{path}:{lineno}: not valid JSON; the file is corrupt") from None
        if shape is not None and (problem := row_problem(shape[0], row, shape[1])) is not None:
            raise UserError(f"{path}:{lineno}: {problem}: not a row dflashbench writes there; fix or remove that "
                            "line")  # fmt: skip
        if isinstance(row, dict):
            yield row


@dataclass
class Run:
    """One run directory, loaded: the manifest and a DataFrame per JSONL file (empty frames keep columns)."""

    run_dir: Path
    manifest: dict
    points: pd.DataFrame
    requests: pd.DataFrame
    telemetry: pd.DataFrame
    # points.jsonl as written, one row per repeat (sweep --repeats); ``points`` holds one row per point with
    # the mean and 95% interval over its repeats (dflashbench.measure.repeats.aggregate_repeats)
    repeat_points: pd.DataFrame | None = None
    # the speed probe's readings in time order (probes.jsonl; empty for runs made before it existed)
    probes: list[ProbeReading] = dataclasses.field(default_factory=list)
    # the lossless check's probe rows (ties.jsonl; empty where nothing diverged or the run is older)
    ties: list[dict] = dataclasses.field(default_factory=list)

    def point_records(self) -> list[PointSummary]:
        """``points.jsonl`` as typed records, one per row as written (every repeat, every category)."""
        return [PointSummary.from_dict(d) for d in _read_jsonl(self.run_dir / POINTS)]

    def request_records(self, *, measured_only: bool = False) -> list[RequestResult]:
        """``requests.jsonl`` as typed records, read from the file (not from the frame, whose gaps are NaN);
        ``measured_only``: without the warm-up requests. Made on request, not kept: a long run's requests hold
        every chunk's timestamp."""
        records = [RequestResult.from_dict(d) for d in _read_jsonl(self.run_dir / REQUESTS)]
        return [r for r in records if not r.warmup] if measured_only else records

    @property
    def meta(self) -> Manifest:
        """``manifest`` typed."""
        return parse_manifest(self.manifest, where=str(self.run_dir / MANIFEST))

    @property
    def run_id(self) -> str:
        return self.meta.run_id or self.run_dir.name


def _frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=columns)
    for col in columns:  # files written by an older version may lack newer fields
        if col not in frame.columns:
            frame[col] = None
    return frame


def read_rows(run_dir: Path | str, name: str = POINTS) -> list[dict]:
    """One JSONL file of a run as its rows (a last line cut short by a crash skipped), with no frame built: for a
    reader that wants a few rows of many runs (``history``)."""
    return list(_read_jsonl(Path(run_dir) / name))


def read_probes(run_dir: Path | str) -> list[ProbeReading]:
    """The run's speed-probe readings in time order (``[]`` for a run made before the probe existed)."""
    return sorted((ProbeReading.from_dict(r) for r in _read_jsonl(Path(run_dir) / PROBES)), key=lambda r: r.t_ns)


def load_run(run_dir: Path | str, *, with_requests: bool = True) -> Run:
    """Read a run directory. Raises :class:`UserError` if it is not one or cannot be read. ``with_requests``
    False leaves ``requests`` empty: a long run's requests.jsonl holds every chunk's timestamp and is most of
    the reading (``history`` reads a run with repeat rounds from its points alone)."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    point_cols = [f.name for f in dataclasses.fields(PointSummary)]
    request_cols = [f.name for f in dataclasses.fields(RequestResult)]
    from dflashbench.measure.repeats import aggregate_repeats

    raw_points = _frame(list(_read_jsonl(run_dir / POINTS)), point_cols)
    requests = _frame(list(_read_jsonl(run_dir / REQUESTS)) if with_requests else [], request_cols)
    telemetry = _frame(list(_read_jsonl(run_dir / TELEMETRY)), [])
    probes = read_probes(run_dir)
    return Run(run_dir=run_dir, manifest=manifest, points=aggregate_repeats(raw_points), requests=requests,
               telemetry=telemetry, repeat_points=raw_points, probes=probes, ties=list(_read_jsonl(run_dir / TIES)))


# -- a command's output file (a report, a history page) ---------------------------------------------------
# What a path holds, in words, for each kind that is not a regular file (os.lstat: a link is not followed).
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"))  # fmt: skip


def check_output(path: Path, what: str = "report", example: str = "reports/run.html") -> None:
    """Refuse to write a report over anything but a regular file: the report is written beside its path and renamed
    over it (:func:`dflashbench.run.store.write_text_atomic`), which would replace a device node (``/dev/null``, run
    as root), a named pipe or a symbolic link with an HTML file. A path that does not exist yet is fine. ``what``
    names the file in the error (``report`` and ``history`` check their files with this same rule)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise UserError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    if stat.S_ISREG(st.st_mode):
        return
    kind = next((word for test, word in _KINDS if test(st.st_mode)), "not a regular file")
    if stat.S_ISLNK(st.st_mode):
        kind += f" (to {os.readlink(path)})"
    raise UserError(f"cannot write the {what} to {path}: it is {kind}, and a {what} replaces what is at its path; "
                    f"give the path of a regular file or of a new one (e.g. -o {example})")  # fmt: skip


def suffix_format(out: Path, by_suffix: Mapping[str, str], refusal: str) -> str | None:
    """The format ``out``'s suffix names in ``by_suffix`` (``None`` where it has no suffix). A suffix not there is
    refused rather than one format written into a file named as another (HTML into ``x.pdf``): ``refusal`` says
    what the command writes, e.g. ``"reports are HTML (.html) or Markdown (.md)"``."""
    suffix = Path(out).suffix.lower().lstrip(".")
    if not suffix:
        return None
    if suffix not in by_suffix:
        raise UserError(f"cannot write {Path(out).name!r}: {refusal}; name the output file with one of those "
                        "suffixes")  # fmt: skip
    return by_suffix[suffix]


def write_checked(path: Path, text: str, what: str = "report", example: str = "reports/run.html") -> Path:
    """Write ``text`` to ``path`` as every output file of a command is written: its folder made, the path checked
    (:func:`check_output`) just before the write, the text written beside it and renamed over it (a full disk or a
    signal leaves no temporary file). ``report`` and ``history -o`` share it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    check_output(path, what, example)
    write_text_atomic(path, text)  # a full disk: a UserError naming the file and errno, and no .NAME.tmp left
    return path

