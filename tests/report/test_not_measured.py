"""Issue #65, item 3, on edited copies of the committed embedded default (results/examples/demo-*-b7da): a point
the verdict could not read (failed, degraded, empty or dropped) is named in the answer's own line, its method, load
and what happened, not only counted in the trust list."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dflashbench.report import write_report
from dflashbench.report.trust import failure_words

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "results" / "examples" / "demo-20261127-075225-b7da"
DFLASH_C4 = "reference:dflash:synthetic:c4"
CRASH = ("the server exited during the point (exit status -9); last lines of results/x/server-reference-dflash.log:\n"
         "Killed")


def _copy(tmp_path: Path) -> Path:
    new = tmp_path / DEFAULT.name
    shutil.copytree(DEFAULT, new)
    return new


def _edit(path: Path, edit) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(r) + "\n" for r in (edit(r) for r in rows) if r is not None))


def _answer(md: str) -> str:
    return md.split("### Verdict")[1].split("\n\n")[1].replace("\\", "")


def test_a_failed_point_is_named_in_the_answers_line(tmp_path):
    """At 812e339 the answer read "Serve DFlash at c=1–4 ..." from the points left and the trust list "1 point
    failed": which method, where and why were nowhere in the Markdown."""
    run = _copy(tmp_path)

    def crash(r: dict) -> dict:
        if r["point_id"] == DFLASH_C4:
            r.update(status="failed", failure_reason=CRASH)
        return r

    _edit(run / "points.jsonl", crash)
    md = write_report([run], tmp_path / "r.md").read_text()
    answer = _answer(md)
    assert answer.startswith("**Serve DFlash at c=1, 2 (") and "at c=4 (" in answer, answer
    assert answer.endswith(" Not measured: DFlash at c=4: failed (server crashed).**"), answer
    assert "1 point failed (dflashbench sweep --resume redoes them): DFlash c=4: failed (server crashed)" in md


def test_a_dropped_and_an_empty_point_are_named_too(tmp_path):
    run = _copy(tmp_path)
    _edit(run / "points.jsonl", lambda r: None if r["point_id"] == "reference:eagle3:synthetic:c2" else r)
    _edit(run / "requests.jsonl", lambda r: None if r["point_id"] == DFLASH_C4 else r)
    answer = _answer(write_report([run], tmp_path / "r.md").read_text())
    assert "Not measured: " in answer, answer
    missing = answer.split("Not measured: ")[1]
    assert "EAGLE-3 at c=2: dropped (planned, not in points.jsonl)" in missing, missing
    assert "DFlash at c=4: empty (requests.jsonl holds none of its 32)" in missing, missing


def test_failure_reasons_in_a_few_words():
    assert failure_words("failed", CRASH) == "failed (server crashed)"
    assert failure_words("failed", "server did not start: timed out after 1800 s") == "failed (server did not start)"
    assert failure_words("degraded", "5 of 32 requests failed (16% > max_error_rate 10%); first error: HTTP 500") \
        == "degraded (5 of 32 requests failed)"  # fmt: skip
    long = failure_words("failed", "ClientProcessError: " + "x" * 200)
    assert long.startswith("failed (ClientProcessError: x") and long.endswith("…)") and len(long) < 80
