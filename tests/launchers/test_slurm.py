"""``sweep --cluster slurm`` on a real Slurm (issue #67): the embedded default with each method's reference server as
a Slurm job; its verdict against a local run's; SIGINT, SIGKILL and a cancelled job, each followed by ``--resume``.

These need a Slurm cluster that answers (``sinfo``) and run only where ``DFLASHBENCH_SLURM_TESTS=1`` says so: the
``slurm`` nox session installs Debian's slurm-wlm and munge, sets up a one-host cluster
(``tools/slurm_one_host.py up``) and runs this file. The default test session skips it (a whole sweep per test,
minutes each)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflashbench.launchers import jobs
from dflashbench.run.store import load_run

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

if os.environ.get("DFLASHBENCH_SLURM_TESTS") != "1":
    pytest.skip("the Slurm tests run in `nox -s slurm`, which sets up a one-host cluster; elsewhere set "
                "DFLASHBENCH_SLURM_TESTS=1 where a Slurm cluster answers", allow_module_level=True)  # fmt: skip
if shutil.which("sinfo") is None or subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
    pytest.skip("no Slurm cluster answers here (sinfo): `nox -s slurm` installs and starts a one-host one",
                allow_module_level=True)  # fmt: skip

SMALL = ("--concurrency", "1,2", "--num-prompts", "2")  # 3 methods x 2 loads: 6 points, seconds each
ROOT = Path(__file__).resolve().parents[2]


def sweep(*args, check: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "dflashbench", "sweep", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=800)  # fmt: skip
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def sweep_process(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dflashbench", "sweep", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=ROOT)  # fmt: skip


def wait_for(what, timeout_s: float, label: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {label}")


def run_dir_in(out: Path) -> Path | None:
    found = [p for p in out.glob("*") if (p / "manifest.json").exists()] if out.is_dir() else []
    return found[0] if found else None


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "points.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def queued(run_dir: Path) -> list[str]:
    """This run's jobs Slurm still has queued or running (squeue by the job names the run recorded)."""
    names = {e["name"] for e in jobs.read(run_dir) if e.get("launcher") == "slurm"}
    out = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True).stdout.split("\n")
    return [line for line in out if line.strip() and line.split()[1] in names]


def readings(run_dir: Path) -> dict[tuple, dict]:
    doc = json.loads((run_dir / "readings.json").read_text())
    return {(r["workload"], r["category"], r["concurrency"], r["figure"], r["method"], r["baseline"]): r
            for r in doc["readings"] if r.get("interval")}  # fmt: skip


def test_the_embedded_default_on_slurm_reads_as_the_local_run_does(tmp_path):
    """Each method's reference server a Slurm job (the scripts, job ids and logs in the run directory); its readings'
    intervals overlap the local run's, and DFlash's latency verdict at c=1 is the same."""
    on_slurm, local = tmp_path / "slurm", tmp_path / "local"
    done = sweep("--cluster", "slurm", "-o", on_slurm, check=True)
    run_dir = run_dir_in(on_slurm)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["suite_config"]["cluster"]["kind"] == "slurm"
    for name in ("ar", "dflash", "eagle3"):
        server = manifest["servers"][name]
        assert server["launcher"] == "slurm" and server["job_id"].isdigit(), server
        assert server["nodes"] and server["host"]  # where the scheduler ran it
        assert (run_dir / server["script"]).read_text().startswith("#!/bin/bash")
        log = (run_dir / f"server-reference-{name}.log").read_text()
        assert f"dflashbench: job {server['job_id']} on " in log and "listening on http://0.0.0.0:" in log
    assert "waiting for Slurm to run" in done.stderr + done.stdout or "Slurm job" in done.stderr + done.stdout
    assert not queued(run_dir)  # torn down at the end
    assert all(r["status"] == "ok" for r in rows(run_dir))

    sweep("-o", local, check=True)
    ours, theirs = readings(run_dir), readings(run_dir_in(local))
    shared = sorted(set(ours) & set(theirs))
    assert len(shared) >= 6, (list(ours), list(theirs))
    apart = [k for k in shared if ours[k]["interval"][1] < theirs[k]["interval"][0]
             or theirs[k]["interval"][1] < ours[k]["interval"][0]]  # fmt: skip
    assert not apart, [(k, ours[k]["interval"], theirs[k]["interval"]) for k in apart]
    key = ("synthetic", "all", 1, "latency", "dflash", "ar")
    assert ours[key]["verdict"] == theirs[key]["verdict"] == "better"


def test_sigint_then_resume_leaves_no_job_and_loses_no_row(tmp_path):
    out = tmp_path / "results"
    proc = sweep_process("--cluster", "slurm", *SMALL, "-o", out, "--no-report")
    run_dir = wait_for(lambda: run_dir_in(out), 60, "the run directory")
    first = wait_for(lambda: rows(run_dir), 300, "the first point")
    assert queued(run_dir)  # the servers are jobs now
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, output
    assert "interrupted by SIGINT" in output and f"dflashbench sweep --resume {run_dir}" in output
    assert not queued(run_dir), output  # scancel'd on the way out
    kept = rows(run_dir)
    assert len(kept) >= len(first)

    resumed = sweep("--resume", run_dir, "--no-report", check=True)
    assert not queued(run_dir), resumed.stdout
    final = rows(run_dir)
    ids = [r["point_id"] for r in final if r["category"] == "all"]
    assert len(ids) == len(set(ids)) == 6
    assert {r["point_id"] for r in kept if r["category"] == "all"} <= set(ids)  # no row written before is lost
    assert load_run(run_dir).manifest["status"] == "complete"


def test_sigkill_then_resume_cancels_what_the_sweep_left(tmp_path):
    out = tmp_path / "results"
    proc = sweep_process("--cluster", "slurm", *SMALL, "-o", out, "--no-report")
    run_dir = wait_for(lambda: run_dir_in(out), 60, "the run directory")
    wait_for(lambda: rows(run_dir), 300, "the first point")
    proc.kill()  # SIGKILL: no handler runs, nothing is cancelled
    proc.wait()
    left = queued(run_dir)
    assert left  # what a killed sweep leaves: its jobs, still running
    kept = {r["point_id"] for r in rows(run_dir) if r["category"] == "all"}

    resumed = sweep("--resume", run_dir, "--no-report", check=True)
    for line in left:
        assert f"cancelled Slurm job {line.split()[0]} ({line.split()[1]})" in resumed.stdout
    assert not queued(run_dir)
    ids = [r["point_id"] for r in rows(run_dir) if r["category"] == "all"]
    assert len(ids) == len(set(ids)) == 6 and kept <= set(ids)


def test_a_server_job_cancelled_mid_run_fails_its_points_clearly_and_resume_finishes(tmp_path):
    out = tmp_path / "results"
    proc = sweep_process("--cluster", "slurm", *SMALL, "-o", out, "--no-report", "--interleave", "off")
    run_dir = wait_for(lambda: run_dir_in(out), 60, "the run directory")
    # one method at a time (AR's server, then DFlash's): DFlash's job cancelled once its first point is written
    job = wait_for(lambda: next((e for e in jobs.read(run_dir) if e.get("server") == "dflash"
                                 and e.get("event") == "submitted"), None), 600, "DFlash's job")  # fmt: skip
    wait_for(lambda: any(r["method"] == "dflash" for r in rows(run_dir)), 300, "DFlash's first point")
    subprocess.run(["scancel", job["id"]], check=True)  # mid-run: its server has measured a point, one is left
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 1, output
    failed = [r for r in rows(run_dir) if r["status"] == "failed" and r["category"] == "all"]
    assert [r["point_id"] for r in failed] == ["reference:dflash:synthetic:c2"], output
    assert f"Slurm job {job['id']} CANCELLED" in failed[0]["failure_reason"], failed[0]["failure_reason"]
    assert not queued(run_dir)

    resumed = sweep("--resume", run_dir, "--no-report", check=True)
    assert f"{len(failed)} to run" in resumed.stdout
    assert all(r["status"] == "ok" for r in rows(run_dir) if r["method"] == "dflash" and r["category"] == "all")
    assert not queued(run_dir)
