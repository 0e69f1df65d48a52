"""A method's series in ``compare`` and ``history`` is keyed on its draft length too: a run that gave DFlash its own K
or schedule is not the same method as one that ran the drafter's default, so neither is gated against the other.

An arm already says it in its name (``dflash-k3``, ``dflash-tuned``: measured beside the method). A plain method to
which the run's suite gave a K (``num_speculative_tokens``) or a schedule (``schedules``) is keyed as that K's arm
(``dflash-k3``) or as its schedule (``dflash-schedule-<first 8 hex of the schedule's SHA-256>``); a method run at
the drafter's own length keeps its name."""

from __future__ import annotations

import hashlib
import json

import pandas as pd


def draft_identity(manifest: dict, method: str) -> str:
    """``method`` as compare and history key it (module docstring)."""
    suite = (manifest or {}).get("suite_config") or {}
    schedules = suite.get("schedules") or {}
    if method in schedules:
        digest = hashlib.sha256(json.dumps(schedules[method], separators=(",", ":")).encode()).hexdigest()[:8]
        return f"{method}-schedule-{digest}"
    k = (suite.get("num_speculative_tokens") or {}).get(method)
    return f"{method}-k{k}" if isinstance(k, int) and "-" not in method else method


def keyed_by_draft_length(points: pd.DataFrame, manifest: dict) -> pd.DataFrame:
    """``points`` with each method named by its draft-length identity (:func:`draft_identity`)."""
    if points is None or points.empty or "method" not in points.columns:
        return points
    return points.assign(method=[draft_identity(manifest, str(m)) for m in points["method"]])
