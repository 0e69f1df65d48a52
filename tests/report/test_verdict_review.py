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
