"""The run directory's ``cluster-jobs.jsonl``: every job or object a cluster launcher submits, written the moment it
is submitted (a line before the scheduler is asked, naming what it will be called; a line after, with the id it
got), flushed and synced. A sweep killed with SIGKILL runs no handler, so this file is what the next ``--resume``
reads to find and cancel what it left: by id, and by name for a submission the kill cut between the two lines.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

JOBS_FILE = "cluster-jobs.jsonl"


def append(run_dir: Path, **entry) -> None:
    """One line: ``{"at": ..., **entry}``, on disk before this returns."""
    path = Path(run_dir) / JOBS_FILE
    line = json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **entry}, sort_keys=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read(run_dir: Path) -> list[dict]:
    """Every line that parses (a last line cut short by a crash is skipped)."""
    path = Path(run_dir) / JOBS_FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def outstanding(run_dir: Path, kind: str) -> list[dict]:
    """The submissions of launcher ``kind`` not recorded as torn down: ``{"name", "id"?}`` each (``id`` missing
    where the kill came between asking the scheduler and hearing back)."""
    live: dict[str, dict] = {}
    for entry in read(run_dir):
        if entry.get("launcher") != kind or "name" not in entry:
            continue
        event = entry.get("event")
        if event == "submitting":
            live[entry["name"]] = {"name": entry["name"]}
        elif event == "submitted":
            live[entry["name"]] = {"name": entry["name"], "id": entry.get("id")}
        elif event == "torn down":
            live.pop(entry["name"], None)
    return list(live.values())
