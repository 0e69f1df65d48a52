"""The verdict review of 2026-11-29 (docs/measurements/2026-11-29-verdict-review/README.md, issue #65): one test per
finding fixed, each on a committed run or an edited copy of one (the review's probes.py plants the same edits), each
failing before its fix and passing after."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dflashbench.report import load_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "results" / "examples"
OLD = EXAMPLES / "demo-20261123-120110-e69c"  # the reference backend, before the speed probe
VLLM = EXAMPLES / "demo-20261125-024540-6b40"  # vLLM's CPU build: no run-to-run term of its own
DEFAULT = EXAMPLES / "demo-20261127-075225-b7da"  # the embedded default, each load's points sent in turn
METHODS = EXAMPLES / "demo-20261127-053618-7ae2"  # four methods, on a machine shared with other work
GPU = EXAMPLES / "gpu-embedded-20261123-093322-08e0"  # resumed once: EAGLE-3 at c=4, 16 from a later sitting
TRACE = EXAMPLES / "trace-demo-20261125-182837-c938"


def _copy(tmp_path: Path, run: Path, name: str | None = None) -> Path:
    new = tmp_path / (name or run.name)
    shutil.copytree(run, new)
    return new


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _edit(path: Path, fn) -> None:
    out = [x for r in _rows(path) if (x := fn(r)) is not None]
    path.write_text("".join(json.dumps(r) + "\n" for r in out))


def _model(runs: list[Path], **kw):
    return load_model(runs, with_figures=False, **kw)


def _lines(runs: list[Path], **kw) -> str:
    return "\n".join(_model(runs, **kw).verdict.lines)


# -- p09a: failed requests under max_error_rate --------------------------------------------------------------------
def test_failed_requests_under_the_error_rate_are_said_in_the_answer(tmp_path):
    """Probe p09a: 3 of DFlash c=1's 32 requests time out (9 %, under max_error_rate, so the point stays ok). The
    ratio is read on the 29 that succeeded; the answer said nothing of the three."""
    run = _copy(tmp_path, DEFAULT)
    pid, left = "reference:dflash:synthetic:c1", [3]

    def fail(r):
        if r["point_id"] == pid and not r["warmup"] and left[0]:
            left[0] -= 1
            r.update(ok=False, error="timeout after 300 s", last_token_ns=None, output_tokens=0, output_text=None,
                     output_sha256=None, chunk_ns=[], chunk_tokens=[], output_token_ids=None)
        return r

    _edit(run / "requests.jsonl", fail)
    answer = _model([run]).verdict.settings[0].answer
    assert "Failed requests, left out of every ratio: DFlash at c=1: 3 of 32 failed (timeout after 300 s)." in answer
    assert "Failed requests" not in _model([DEFAULT]).verdict.settings[0].answer  # none failed: nothing said


# -- p10b and X11: the trace's schedule, read from the requests ------------------------------------------------
def test_a_trace_point_whose_requests_slipped_is_not_decided_however_its_row_was_stamped(tmp_path):
    """Probe p10b: DFlash's sends at 2× spread over 1.6× the time in requests.jsonl only (its point row keeps
    3.153/s). The verdict decided at 2× on the row's rate while its own lateness, from the requests, read 10 s."""
    run = _copy(tmp_path, TRACE)
    pid = "reference:dflash:workloads:tazure-codex2.0"
    first = min(r["sent_ns"] for r in _rows(run / "requests.jsonl") if r["point_id"] == pid and not r["warmup"])

    def late(r):
        if r["point_id"] == pid and not r["warmup"]:
            delta = int((r["sent_ns"] - first) * 0.6)
            for k in ("sent_ns", "first_token_ns", "last_token_ns"):
                r[k] += delta
            r["chunk_ns"] = [c + delta for c in r["chunk_ns"]]
        return r

    _edit(run / "requests.jsonl", late)
    said = _lines([run])
    assert "nothing at 2× (schedule not kept: DFlash sent 1.97/s of 3.15 asked (62%))" in said, said
    assert "1.97/s of 3.15 asked at 2× (more than 5% off: not decided)" in said


def test_the_trace_verdicts_worst_lateness_is_the_runs_worst_point():
    """X11: "4.2 ms at p99 (the worst point)" left out the random-token points, whose worst (AR at 2×) is 8.8 ms,
    as the report's own schedule table shows."""
    said = _lines([TRACE])
    assert "8.8 ms at p99 (the worst point)" in said, said


# -- p02 and p02b: labels swapped between two points --------------------------------------------------------------
def _swapped(tmp_path: Path, a: str, b: str) -> Path:
    run = _copy(tmp_path, DEFAULT)
    ids, meth = {a: b, b: a}, {a: b.split(":")[1], b: a.split(":")[1]}

    def points(r):
        if r["point_id"] in ids:
            old = r["point_id"]
            r.update(point_id=ids[old], method=meth[old],
                     draft=None if meth[old] == "ar" else f"dflashbench/embedded/{meth[old]}")
        return r

    _edit(run / "points.jsonl", points)
    _edit(run / "requests.jsonl", lambda r: {**r, "point_id": ids.get(r["point_id"], r["point_id"])})
    return run


def test_two_speculative_methods_swapped_at_one_load_are_caught_by_their_tau(tmp_path):
    """Probe p02b: EAGLE-3 and DFlash swapped at c=2. The verdict served "EAGLE-3 at c=2" on DFlash's point, though
    each method's τ is the same at every load of the run (DFlash 7.72, EAGLE-3 5.19)."""
    run = _swapped(tmp_path, "reference:eagle3:synthetic:c2", "reference:dflash:synthetic:c2")
    answer = _model([run]).verdict.settings[0].answer
    assert "EAGLE-3 at c=2" not in answer and "nothing at c=2 (implausible: " in answer, answer
    assert "EAGLE-3's τ 7.72, DFlash's at its other loads (its own 5.19): labels swapped?" in answer, answer


def test_a_speculative_point_with_ars_tau_is_named_and_not_read(tmp_path):
    """Probe p02: AR and DFlash swapped at c=2. The "DFlash" point with τ 1.00 was not named, and DFlash ÷ EAGLE-3
    at c=2 was decided on it ("clearly longer", 2.01×)."""
    run = _swapped(tmp_path, "reference:ar:synthetic:c2", "reference:dflash:synthetic:c2")
    model = _model([run])
    answer = model.verdict.settings[0].answer
    assert "DFlash's τ 1.00, AR's one token per step (its own 7.72 at its other loads): labels swapped?" in answer
    from dflashbench.measure import verdict

    every, _ = verdict.decide(model.readings, "all", model.verdict.settings[0].implausible)
    assert every[("dflash", "eagle3")].outcome(2) == "undecided"
