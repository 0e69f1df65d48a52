"""What weakens a run, said before its verdict: trust flags read from the run directory alone.

A flag is one short sentence a reader needs before believing the answer: the run did not complete, planned
points are missing or the points file was cut short, points failed or were degraded, the run was resumed, the
code had uncommitted changes, the lossless check rests on token counts (no stored text), or some points' per-token
latency was not observable. ``report``, ``compare`` and the end of ``sweep`` print them before the verdict, the
HTML and Markdown reports show them above it, and ``report --strict`` exits 1 when any is raised (for CI).
"""

from __future__ import annotations

from collections.abc import Sequence

from dflashbench.run.store import POINTS, Run, requests_problem


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def trust_flags(run: Run) -> list[str]:
    """The run's trust flags, most serious first; ``[]`` for a run that can be taken as measured."""
    m, points = run.manifest, run.repeat_points if run.repeat_points is not None else run.points
    flags: list[str] = []
    status = m.get("status")
    if status is not None and status != "complete":  # None: a manifest that does not say (hand-made)
        reason = f" ({m['status_reason']})" if m.get("status_reason") else ""
        flags.append(f"not complete: the manifest says {status!r}{reason}")
    planned = set(m.get("grid") or [])
    measured = set(points["point_id"].str.split("/").str[0]) if not points.empty else set()
    missing = planned - measured
    if missing:
        flags.append(f"{len(missing)} of {len(planned)} planned points are not in {POINTS} "
                     f"(e.g. {sorted(missing)[0]}): the readings rest on part of the grid")  # fmt: skip
    raw = run.run_dir / POINTS
    if raw.is_file() and raw.stat().st_size and not raw.read_bytes().endswith(b"\n"):
        flags.append(f"{POINTS} ends in a line cut short (a crash mid-write): that point is not read")
    if (lost := requests_problem(run)) is not None:
        flags.append(lost)
    if not points.empty and "status" in points.columns:
        alls = points[points["category"] == "all"] if "category" in points.columns else points
        bad = alls[alls["status"].astype(str) != "ok"]
        for kind in ("failed", "degraded"):
            n = int((bad["status"] == kind).sum())
            if n:
                flags.append(f"{_plural(n, 'point')} {kind} (dflashbench sweep --resume redoes failed ones)")
    resumes = m.get("resumes") or []
    if resumes:
        flags.append(f"resumed {_plural(len(resumes), 'time')}: its points were measured in separate sittings")
    if m.get("git_dirty"):
        flags.append(f"made from a tree with uncommitted changes (git {str(m.get('git_sha') or '')[:12]}+dirty): "
                     "the code it measured is not in any commit")  # fmt: skip
    stored = (m.get("outputs") or {}).get("store_text")
    if stored is None and not run.requests.empty:  # a run from before the manifest said: look at the requests
        kept = [c for c in ("output_text", "output_sha256") if c in run.requests.columns]
        stored = bool(kept) and bool(run.requests[kept].notna().any().any())
    if stored is False:
        flags.append("no output text stored (--no-store-text): lossless is judged by token counts, not proof")
    if "latency_not_measured_reason" in points.columns:
        blind = points[points["latency_not_measured_reason"].notna()]
        if "category" in blind.columns:
            blind = blind[blind["category"] == "all"]
        if not blind.empty:
            flags.append(f"per-token latency not observable at {_plural(len(blind), 'point')}: TPOT, ITL and "
                         "per-user rate not measured there")  # fmt: skip
    return flags


def flag_lines(runs: Sequence[Run]) -> list[str]:
    """Every run's flags as console lines (``trust: ...``), the run named where there are several."""
    several = len(runs) > 1
    return [f"trust: {run.run_dir.name}: {f}" if several else f"trust: {f}" for run in runs for f in trust_flags(run)]
