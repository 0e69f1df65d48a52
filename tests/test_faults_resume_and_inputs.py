"""What was still lost or slipped through (issue #39), each with real processes over loopback.

- A point whose last category row a crash or a full disk cut is not done: ``--resume`` measures it again and says
  so, and ``compare`` against the baseline finds every point. A report that a full disk stops leaves no
  temporary file.
- No error message shows a URL's userinfo, whatever the URL's shape (a password with an unencoded ``/``).

The sweeps run the CLI with the stand-in backend registered (``tests/standin_cli.py`` where they must be processes
of their own).
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_reliability import (  # noqa: F401 - standin_backend is an autouse fixture
    CLI,
    SOURCE_ROOT,
    env_for_children,
    only_run_dir,
    standin_backend,
    sweep,
)
from typer.testing import CliRunner

from dflashbench.cli import app

EXAMPLE_RUN = SOURCE_ROOT / "results" / "examples" / "demo-20261123-120110-e69c"


def write_synthetic_suite(tmp_path: Path, num_prompts: int, name: str = "torn") -> Path:
    """The stand-in on the synthetic workload, whose prompts go round-robin over math, code and writing: a point
    has one row per category, beside its "all" row (two prompts leave writing without a request, and a row)."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
name = "{name}"
backend = "standin"
methods = ["ar"]
model = "standin-model"
concurrency = [1, 2]
num_prompts = {num_prompts}
requests_per_stream = 1
warmup_requests = 1
max_tokens = 12
timeout_s = 20

[[workloads]]
name = "synthetic"
""")
    return path


def rows_per_point(run_dir: Path) -> Counter:
    return Counter(json.loads(line)["point_id"] for line in (run_dir / "points.jsonl").read_text().splitlines())


# -- 1. a torn row ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_prompts", [6, 2], ids=["3-categories", "a-category-left-empty"])
def test_a_point_whose_last_row_was_cut_is_measured_again_on_resume(tmp_path, num_prompts):
    rows = 1 + (3 if num_prompts >= 3 else 2)  # "all" and one per category its requests had
    first = sweep("--suite", write_synthetic_suite(tmp_path, num_prompts), "-o", tmp_path / "out", "--no-report")
    assert first.exit_code == 0, first.output
    run_dir = only_run_dir(tmp_path / "out")
    assert set(rows_per_point(run_dir).values()) == {rows}
    baseline = tmp_path / "baseline"
    shutil.copytree(run_dir, baseline)

    whole = sweep("--resume", run_dir, "--no-report")  # a whole run, an empty category included, is done
    assert whole.exit_code == 0 and "2 point(s) done, 0 to run" in whole.output, whole.output

    points = run_dir / "points.jsonl"
    points.write_bytes(points.read_bytes()[:-300])  # head -c -300: the last category row of c=2 cut short
    torn = next(p for p, n in rows_per_point_tolerant(points).items() if n < rows)
    resumed = sweep("--resume", run_dir, "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert "note: points.jsonl ended in a line cut short" in resumed.output
    assert f"note: {torn} has {rows - 1} of its {rows} rows in points.jsonl (no row for " in resumed.output
    assert "1 point(s) done, 1 to run" in resumed.output
    assert set(rows_per_point(run_dir).values()) == {rows}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and list(manifest["resumes"][-1]["points_torn"]) == [torn]

    # every point and category of the baseline is found again (tau: the stand-in's timing is not what is judged)
    compare = CliRunner().invoke(app, ["compare", str(baseline), str(run_dir), "--no-default-gates",
                                       "--max-drop", "tau=0.2", "--all-categories"])  # fmt: skip
    assert compare.exit_code == 0, compare.output


def rows_per_point_tolerant(points: Path) -> Counter:
    """Rows per point of a points.jsonl whose last line may be cut short."""
    found: Counter = Counter()
    for line in points.read_text().splitlines():
        try:
            found[json.loads(line)["point_id"]] += 1
        except ValueError:
            continue
    return found


def test_a_report_that_a_full_disk_stops_leaves_no_temporary_file(tmp_path):
    """A file-size limit in the report's process is the same fault as a disk that fills while it is written."""
    limit = 20_000  # the report (with its figures, hundreds of kB) outgrows it

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = tmp_path / "reports" / "run.html"
    done = subprocess.run([sys.executable, str(CLI), "report", str(EXAMPLE_RUN), "-o", str(out)],
                          capture_output=True, text=True, env=env_for_children(), timeout=300,
                          preexec_fn=limit_file_size)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert list((tmp_path / "reports").iterdir()) == []  # neither the report nor .run.html.tmp
    assert f"error: cannot write {out}: File too large (EFBIG, errno 27)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# -- 4. a URL's userinfo, whatever its shape ----------------------------------------------------------------------------
@pytest.mark.parametrize("url", [
    "http://user:Pa55/w0rd@127.0.0.1:1", "http://user:Pa55?w0rd@127.0.0.1:1", "http://user:Pa55#w0rd@127.0.0.1:1",
    "http://Pa55/w0rd@127.0.0.1:1", "user:Pa55/w0rd@127.0.0.1:1", "http://user:Pa55@w0rd@127.0.0.1:1",
    "http://user:Pa55w0rd@[::1", "http://user:Pa55w0rd@127.0.0.1:99999", "http://user:Pa55w0rd@127.0.0.1:1",
])  # fmt: skip
def test_no_error_shows_a_urls_password_whatever_its_shape(tmp_path, url):
    """The sweep as a process: what it prints is what a user sees (stdout and stderr), with nothing written."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(CLI), "sweep", "--endpoint", url, "--method", "ar", "-o", str(out),
                           "--no-report"], capture_output=True, text=True, env=env_for_children(), timeout=120)  # fmt: skip
    printed = done.stdout + done.stderr
    assert done.returncode == 2, printed
    assert printed.startswith("error: ") and "***@" in printed, printed
    assert "Pa55" not in printed and "w0rd" not in printed, printed
    assert not out.exists()
