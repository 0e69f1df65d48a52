"""A folder named like the package in the directory a sweep is started from (an output folder ``-o dflashbench``,
the temp folder where the TensorRT-LLM backend writes its configs) is not imported in its place: the client's fork
server and the launched reference servers run without the current directory on their module path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_a_sweep_started_beside_a_folder_named_dflashbench_measures_its_points(tmp_path):
    (tmp_path / "dflashbench").mkdir()  # before the fix every point failed: "cannot import name '__version__'"
    script = Path(sys.executable).parent / "dflashbench"  # the console script, as a user runs it
    out = tmp_path / "dflashbench" / "runs"
    done = subprocess.run([str(script), "sweep", "--num-prompts", "2", "--concurrency", "1", "--method", "ar,dflash",
                           "-o", str(out), "--no-report"], cwd=tmp_path, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (points,) = out.glob("*/points.jsonl")
    rows = [json.loads(line) for line in points.read_text().splitlines() if line.strip()]
    assert {r["method"] for r in rows if r["category"] == "all"} == {"ar", "dflash"}
    assert all(r["status"] == "ok" and r["num_requests"] > 0 for r in rows), rows


def test_calibrate_started_beside_a_folder_named_dflashbench_runs_its_launches(tmp_path):
    (tmp_path / "dflashbench").mkdir()  # before: "calibrate: launch 1 exited 1 ... cannot import name '__version__'"
    script = Path(sys.executable).parent / "dflashbench"
    small = ["--sweep-arg=--num-prompts", "--sweep-arg=2", "--sweep-arg=--concurrency", "--sweep-arg=1",
             "--sweep-arg=--method", "--sweep-arg=ar,dflash"]  # fmt: skip
    done = subprocess.run([str(script), "calibrate", "-k", "2", *small, "-o", str(tmp_path / "calib")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    profile = json.loads((tmp_path / "calib" / "noise-profile.json").read_text())
    assert profile["backends"]["reference"]["terms"]["speedup"]["runs"] == 2


def test_a_child_of_ours_gets_this_package_first_unless_it_is_installed_in_site_packages(monkeypatch):
    from dflashbench import child_path

    env = child_path.with_own_package({"PYTHONPATH": "elsewhere", "OTHER": "1"})
    if child_path._needed():  # an editable install or a checkout: its folder first, the user's path after it
        assert env["PYTHONPATH"].split(os.pathsep) == [child_path.ROOT, "elsewhere"]
    else:  # a regular install: site-packages is on the path already, and stays behind the standard library
        assert env["PYTHONPATH"] == "elsewhere"
    assert env["OTHER"] == "1"
    monkeypatch.setattr(child_path, "_needed", lambda: False)
    assert child_path.with_own_package({}) == {}
