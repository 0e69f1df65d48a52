"""Published figures: read from ``suites/published/*.toml`` (:func:`load_published`), and each set beside the
matching measurement with measured / published and a note where the model, engine or task set differs
(:func:`measured_vs_published`).

A published file's top-level keys are defaults for every ``[[rows]]`` entry; :func:`load_published` returns the
rows as a DataFrame with at least the columns of :data:`FIGURE_COLUMNS`. The comparison is pure functions over
the ``points`` DataFrame (closed-loop points, as :mod:`dflashbench.measure.analysis` reads them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from dflashbench.errors import UserError
from dflashbench.measure.analysis import (
    BASELINE,
    _table,
    finite_number,
    matched_concurrency_speedups,
    matched_interactivity_speedups,
    single_stream_speedups,
    tau_by_category,
    usable_points,
)
from dflashbench.plan.suites import PUBLISHED_DIR, read_toml, suite_dirs
from dflashbench.types import Method

FIGURE_COLUMNS = ("id", "source", "model", "engine", "hardware", "task", "method", "metric", "value")  # every row

# Published metric (suites/published/*.toml) -> how it is measured.
PUBLISHED_METRICS = (
    "speedup_single_stream", "speedup_matched_concurrency", "speedup_matched_interactivity", "tau",
)  # fmt: skip
TABLE_COLUMNS = (
    "source", "model", "engine", "hardware", "task", "method", "baseline", "metric", "bound", "published",
    "measured", "ratio", "measured_in", "note",
)  # fmt: skip


def normalize_name(text: object) -> str:
    """Case- and punctuation-free: "MATH-500" == "math500", "MT-Bench" == "mt_bench"."""
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def _workload_name(label: str) -> str:
    """A workload label's dataset name: "speed-bench/qualitative[coding]" -> "speedbench"."""
    return normalize_name(re.split(r"[/\[]", str(label), maxsplit=1)[0])


def _band(text: object) -> tuple[float, float] | None:
    m = re.fullmatch(r"\s*([0-9.]+)\s*-\s*([0-9.]+)\s*", str(text or ""))
    return (float(m.group(1)), float(m.group(2))) if m else None


def _text(value: object) -> str | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def measured_vs_published(points: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Each published figure beside the matching measurement, with measured / published.

    A figure matches measured points of its ``method`` against its ``baseline`` (default AR) where its
    ``task`` names the measured workload (category "all") or a measured category - compared without case or
    punctuation - and, when the figure names a ``workload``, the measured workload is that dataset. Among
    matches, those on the figure's own model are preferred. Per metric:

    - "speedup_single_stream": :func:`single_stream_speedups`;
    - "speedup_matched_concurrency": :func:`matched_concurrency_speedups` at the figure's ``concurrency``,
      or the lowest measured one where the figure states none;
    - "speedup_matched_interactivity": :func:`matched_interactivity_speedups` at the middle of the figure's
      ``interactivity_tok_per_s`` band ("not reached" stays unmeasured, never extrapolated);
    - "tau": :func:`tau_by_category`.

    A task "Average" is the mean over the other tasks of the same source, method, baseline and metric, shown
    only when every one of them was measured. A model or engine unlike the published one is named in the note.
    """
    if published is None or published.empty:
        return _table([], TABLE_COLUMNS)
    usable = usable_points(points)
    tables: dict[tuple, pd.DataFrame] = {}

    def table(metric: str, baseline: str, band: tuple[float, float] | None) -> pd.DataFrame:
        key = (metric, baseline, band)
        if key not in tables:
            if metric == "speedup_single_stream":
                tables[key] = single_stream_speedups(usable, baseline)
            elif metric == "speedup_matched_concurrency":
                tables[key] = matched_concurrency_speedups(usable, baseline)
            elif metric == "speedup_matched_interactivity":
                mid = [(band[0] + band[1]) / 2] if band else []
                tables[key] = matched_interactivity_speedups(usable, mid, baseline)
            else:
                tables[key] = tau_by_category(usable)
        return tables[key]

    rows, averages = [], []
    for fig in published.to_dict("records"):
        row = {k: _text(fig.get(k)) for k in ("source", "model", "engine", "hardware", "task", "method", "metric")}
        row.update(baseline=_text(fig.get("baseline")) or BASELINE, bound=_text(fig.get("bound")),
                   published=finite_number(fig.get("value")))  # fmt: skip
        if row["metric"] not in PUBLISHED_METRICS:
            rows.append(_with_ratio(row, None, None, "a metric dflashbench does not measure"))
        elif normalize_name(row["task"]) == "average":
            averages.append(row)
        else:
            band = _band(fig.get("interactivity_tok_per_s"))
            if row["metric"] == "speedup_matched_interactivity" and band is None:
                rows.append(_with_ratio(row, None, None, "the figure names no interactivity band"))
                continue
            candidates = _matching(table(row["metric"], row["baseline"], band), fig)
            measured, where, why, hit = _pick(candidates, row["metric"], finite_number(fig.get("concurrency")),
                                              row["model"])  # fmt: skip
            rows.append(_with_ratio(row, measured, where, why, _unlike(row, hit)))
    for row in averages:  # the published average is over all its tasks: a subset's mean is another number
        group = [r for r in rows if all(r[k] == row[k] for k in ("source", "method", "baseline", "metric"))]
        same = [r["measured"] for r in group if r["measured"] is not None]
        if group and len(same) == len(group):
            unlike = "; ".join(dict.fromkeys(r["note"] for r in group if r["note"])) or None
            rows.append(_with_ratio(row, sum(same) / len(same), f"mean of all {len(same)} tasks", None, unlike))
        else:
            rows.append(_with_ratio(row, None, None, f"not shown: {len(same)} of {len(group)} tasks measured, and "
                                    "the published average is over all of them"))  # fmt: skip
    return _table(rows, TABLE_COLUMNS)


def _unlike(row: dict, hit: pd.Series | None) -> str | None:
    """The ways a measurement differs from the published setting (model, engine), for the note."""
    if hit is None:
        return None
    out = []
    if row["model"] and not _same_model(hit["model"], row["model"]):
        out.append(f"different model: measured {str(hit['model']).rstrip('/').rsplit('/', 1)[-1]}, published {row['model']}")
    if row["engine"] and normalize_name(hit["backend"]) not in normalize_name(row["engine"]):
        out.append(f"different engine: measured {hit['backend']}, published {row['engine']}")
    return "; ".join(out) or None


def _matching(table: pd.DataFrame, fig: dict) -> pd.DataFrame:
    """Rows of a measured table for the figure's method, task and (if named) workload."""
    if table.empty:
        return table
    df = table[table["method"] == fig.get("method")]
    task = normalize_name(fig.get("task"))
    workloads = df["workload"].map(_workload_name)
    if _text(fig.get("workload")):
        return df[(workloads == normalize_name(fig["workload"])) & (df["category"].map(normalize_name) == task)]
    by_workload = df[(workloads == task) & (df["category"] == "all")]
    return by_workload if not by_workload.empty else df[df["category"].map(normalize_name) == task]


def _same_model(measured: object, published: str | None) -> bool:
    """"Qwen/Qwen3-8B" matches "qwen3-8b" and "/models/Qwen3-8B": the last path part, normalized."""
    last = lambda m: normalize_name(str(m).rstrip("/").rsplit("/", 1)[-1])  # noqa: E731
    return published is not None and last(measured) == last(published)


def _pick(candidates: pd.DataFrame, metric: str, concurrency: float | None, model: str | None):
    """(measured value, where it was measured, why there is none) from the matching rows."""
    if metric == "speedup_matched_concurrency" and not candidates.empty:
        wanted = int(concurrency) if concurrency is not None else int(candidates["concurrency"].min())
        candidates = candidates[candidates["concurrency"] == wanted]
    if candidates.empty:
        return None, None, None, None
    own_model = candidates[candidates["model"].map(lambda m: _same_model(m, model))]
    candidates = own_model if not own_model.empty else candidates
    value_col = "tau" if metric == "tau" else "speedup"
    valued = candidates[candidates[value_col].notna()]
    hit = (valued if not valued.empty else candidates).iloc[0]
    where = f"{hit['backend']} / {hit['model']} / {hit['workload']} / {hit['category']}"
    if metric == "speedup_matched_concurrency":
        where += f" / c={int(hit['concurrency'])}"
    elif metric == "speedup_matched_interactivity":
        where += f" / at {hit['per_user_tok_per_s']:g} tok/s/user"
    if valued.empty:
        return None, where, _text(hit.get("note")), hit
    return float(hit[value_col]), where, None, hit


def _with_ratio(row: dict, measured: float | None, where: str | None, why: str | None = None,
                unlike: str | None = None) -> dict:  # fmt: skip
    published = row["published"]
    ratio = measured / published if measured is not None and published else None
    note = "; ".join(n for n in ((why or "not measured in these runs") if measured is None else None, unlike) if n)
    note = note or None
    return {**row, "measured": measured, "ratio": ratio, "measured_in": where, "note": note}


# --- reading the published figures ---------------------------------------------------------------------------

def published_dirs() -> list[Path]:
    return [d / PUBLISHED_DIR for d in suite_dirs() if (d / PUBLISHED_DIR).is_dir()]


def _published_rows(path: Path) -> list[dict[str, Any]]:
    data = read_toml(path)
    rows = data.pop("rows", None)
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise UserError(f"{path}: key 'rows': expected one or more [[rows]] tables")
    out = []
    for i, row in enumerate(rows):
        merged = {"id": path.stem, **data, **row}
        missing = [c for c in FIGURE_COLUMNS if merged.get(c) in (None, "")]
        if missing:
            raise UserError(f"{path}: key 'rows[{i}]': missing {', '.join(missing)}")
        if not isinstance(merged["value"], int | float) or isinstance(merged["value"], bool):
            raise UserError(f"{path}: key 'rows[{i}].value': expected a number, got {merged['value']!r}")
        if merged["method"] not in {m.value for m in Method}:
            raise UserError(f"{path}: key 'rows[{i}].method': {merged['method']!r} is not a method")
        out.append(merged)
    return out


def published_ids() -> list[str]:
    return sorted({p.stem for d in published_dirs() for p in d.glob("*.toml")})


def load_published(ids: Iterable[str] | None = None) -> pd.DataFrame:
    """Published figures as rows: id, source, model, engine, hardware, task, method, metric, value, ...

    ``ids`` selects files of ``suites/published`` by stem (a suite's ``published`` list); ``None`` = all.
    Extra columns a file sets (``figure``, ``baseline``, ``concurrency``, ``draft``, ``note``, ...) are kept.
    """
    files: dict[str, Path] = {}
    for folder in published_dirs():
        for path in sorted(folder.glob("*.toml")):
            files.setdefault(path.stem, path)
    wanted = list(files) if ids is None else list(ids)
    unknown = [i for i in wanted if i not in files]
    if unknown:
        raise UserError(f"unknown published figures {unknown}; known: {', '.join(sorted(files))}")
    rows = [row for i in wanted for row in _published_rows(files[i])]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=list(FIGURE_COLUMNS))
    rest = [c for c in frame.columns if c not in FIGURE_COLUMNS]
    return frame[list(FIGURE_COLUMNS) + rest]


# --- a rate to plan with -----------------------------------------------------------------------------------


def published_user_rate(model: str) -> tuple[float, float, str] | None:
    """The per-user decode rate (tok/s per user, low and high) the published figures state for ``model`` - the
    interactivity band a figure was read at (``interactivity_tok_per_s``) - and where it was published, in
    words; ``None`` where no figure of that model states one. For the dry run's duration estimate: a rate
    someone measured, never one made up."""
    figures = load_published()
    if figures.empty or "interactivity_tok_per_s" not in figures.columns:
        return None
    bands = [(b, r) for r in figures.to_dict("records")
             if _same_model(model, r.get("model")) and (b := _band(r.get("interactivity_tok_per_s")))]  # fmt: skip
    if not bands:
        return None
    where = "; ".join(dict.fromkeys(f"{r['source']}, {r['hardware']} (suites/{PUBLISHED_DIR}/{r['id']}.toml)"
                                    for _, r in bands))  # fmt: skip
    return min(b[0] for b, _ in bands), max(b[1] for b, _ in bands), where


# -- beside a report's runs ------------------------------------------------------------------------------------
def published_for(suite_configs: Iterable[dict | None]) -> tuple[pd.DataFrame, str | None]:
    """The published figures named by runs' suites (``suite_config.published`` ids), if any, and why not where they
    cannot be read (the report still renders)."""
    ids: list[str] = []
    for config in suite_configs:
        found = (config or {}).get("published") or []
        for figure_id in [found] if isinstance(found, str) else found:
            if str(figure_id) not in ids:
                ids.append(str(figure_id))
    if not ids:
        return pd.DataFrame(), None
    try:
        return load_published(ids), None
    except (ImportError, UserError) as exc:
        return pd.DataFrame(), f"The published figures {', '.join(ids)} could not be read: {exc}"


def with_hardware_notes(published: pd.DataFrame, hardware: str) -> pd.DataFrame:
    """Add "different hardware" to the note of each matched figure whose published hardware (e.g. "B200") is
    not named in the hardware these runs measured on."""
    if published.empty:
        return published
    notes = []
    for r in published.to_dict("records"):
        note = r["note"]
        hw = r.get("hardware")
        stated = hw and normalize_name(hw) not in ("notstated", "unknown", "none", "")
        if r.get("measured_in") and stated and normalize_name(hw) not in normalize_name(hardware):
            note = "; ".join(n for n in (note, f"different hardware: measured on {hardware}, published on {hw}") if n)
        notes.append(note)
    return published.assign(note=notes)

