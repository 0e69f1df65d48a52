"""The readings as data: every reading of a report (:func:`dflashbench.measure.readings.pair_readings`) as one
versioned JSON document, and back (docs/readings.md). The report's speedup tables and its verdict are made from the
same table, so what the document says is what the report says.

The document: ``{"schema": "dflashbench.readings", "version": 1, "runs": [...], "readings": [...]}``; each reading
holds where it was read (run, backend, model, workload, category, concurrency), what (``figure``, ``method`` over
``baseline``), its ``value`` and 95 % ``interval`` (``null`` where none), the decision (``decision``, ``verdict``,
``decided``, ``why`` not), what the interval covers (``covers``) and its ``terms`` (log, 1 sd: the requests', the
machine's drift, the run-to-run term and where that came from), and what it rests on (``rests_on``: the prompts both
methods ran, each side's, the repeat rounds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from dflashbench.errors import UserError
from dflashbench.measure import noise, readings

SCHEMA = "dflashbench.readings"
VERSION = 1
WHERE = ("run_id", "backend", "model", "workload", "category", "concurrency", "speed")
WHAT = ("figure", "method", "baseline")


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int(v) -> int | None:
    f = _num(v)
    return int(f) if f is not None else None


def _text(v) -> str | None:
    return None if v is None or (isinstance(v, float) and v != v) else str(v)


def reading_of(row: Mapping) -> dict:
    """One row of the readings table as the document holds it."""
    lo, hi = _num(row.get("lo")), _num(row.get("hi"))
    decision = _text(row.get("decision")) or noise.NO_INTERVAL
    return {
        **{k: (_int(row.get(k)) if k == "concurrency" else _num(row.get(k)) if k == "speed" else _text(row.get(k)))
           for k in WHERE},
        **{k: _text(row.get(k)) for k in WHAT},
        "value": _num(row.get("value")),
        "interval": [lo, hi] if lo is not None and hi is not None else None,
        "decision": decision,
        "verdict": _text(row.get("verdict")) or readings.UNDECIDED,
        "decided": decision in (noise.FASTER, noise.SLOWER),
        "why": _text(row.get("why")),
        "covers": _text(row.get("covers")),
        "terms": {"requests_sd": _num(row.get("requests_sd")), "drift_sd": _num(row.get("drift_sd")),
                  "run_to_run_sd": _num(row.get("launch_sd")), "run_to_run_source": _text(row.get("launch_source"))},
        "rests_on": {"prompts_both_ran": _int(row.get("common")), "method_prompts": _int(row.get("n_method")),
                     "baseline_prompts": _int(row.get("n_base")), "rounds": _int(row.get("rounds")) or 0},
    }  # fmt: skip


def document(table: pd.DataFrame, runs: Sequence[str] = ()) -> dict:
    """The readings document of a readings table (:data:`dflashbench.measure.readings.COLUMNS`)."""
    rows = [] if table is None or table.empty else table.to_dict("records")
    return {"schema": SCHEMA, "version": VERSION,
            "runs": list(runs) or list(dict.fromkeys(str(r["run_id"]) for r in rows)),
            "readings": [reading_of(r) for r in rows]}  # fmt: skip


def table_of(doc: Mapping) -> pd.DataFrame:
    """A readings document back as the readings table (the columns :func:`pair_readings` makes); a clear error for
    a document that is not one, or of a newer version than this dflashbench reads."""
    if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
        raise UserError(f"not a dflashbench readings document (no \"schema\": \"{SCHEMA}\")")
    if int(doc.get("version") or 0) > VERSION:
        raise UserError(f"readings document version {doc.get('version')} is newer than this dflashbench reads "
                        f"({VERSION}); upgrade dflashbench")  # fmt: skip
    rows = []
    for r in doc.get("readings") or ():
        iv = r.get("interval") or (None, None)
        terms, rests = r.get("terms") or {}, r.get("rests_on") or {}
        rows.append({**{k: r.get(k) for k in (*WHERE, *WHAT)}, "value": r.get("value"), "lo": iv[0], "hi": iv[1],
                     "decision": r.get("decision"), "verdict": r.get("verdict"), "covers": r.get("covers"),
                     "why": r.get("why"), "common": rests.get("prompts_both_ran"),
                     "n_method": rests.get("method_prompts"), "n_base": rests.get("baseline_prompts"),
                     "requests_sd": terms.get("requests_sd"), "drift_sd": terms.get("drift_sd"),
                     "launch_sd": terms.get("run_to_run_sd"), "launch_source": terms.get("run_to_run_source"),
                     "rounds": rests.get("rounds")})  # fmt: skip
    return pd.DataFrame(rows, columns=list(readings.COLUMNS))
