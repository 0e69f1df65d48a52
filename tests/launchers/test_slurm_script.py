"""The sbatch script dflashbench writes (issue #67), read by a real bash: every argument reaches the server as the
one word it was, whatever it holds; the leader's host is the one expansion; secrets stay out; the scheduler gets
what the plan needs. Slurm's own commands are stand-ins here (a script on PATH that prints its argv as JSON), so
this runs in the default test session; ``test_slurm.py`` runs the same scripts on a real Slurm."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from dflashbench.backends.base import LEADER_HOST, LaunchPlan
from dflashbench.launchers import jobs
from dflashbench.launchers.base import ServerRequest
from dflashbench.launchers.cluster_spec import ClusterSpec
from dflashbench.launchers.slurm import job_name, sbatch_argv, script

HOSTILE = ["$(touch pwned)", "`touch pwned`", "a b", "it's", '"q"', "; rm -rf /", "\\n", "*", "$HOME", "--x=$((1+1))"]


def request(tmp_path: Path, plans: tuple[LaunchPlan, ...], **kw) -> ServerRequest:
    return ServerRequest(name=kw.pop("name", "dflash"), label="vllm dflash server", plans=plans, port=18123,
                         log_path=tmp_path / "run" / "server-vllm-dflash.log", run_id="demo-1", **kw)  # fmt: skip


def stand_ins(tmp_path: Path) -> dict[str, str]:
    """``srun`` that records its argv (one JSON line per step) and exits; ``scontrol`` that names the leader."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/usr/bin/env python3\nimport json, os, sys\n'
                                  'open(os.environ["STEPS"], "a").write(json.dumps(sys.argv[1:]) + "\\n")\n')  # fmt: skip
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho gpu-017\necho gpu-018\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[017-018]",
            "SLURM_JOB_ID": "42", "STEPS": str(tmp_path / "steps.jsonl")}  # fmt: skip


def run_script(tmp_path: Path, text: str, env: dict[str, str], steps: int = 1) -> list[list[str]]:
    """Run the script; every step's argv (the script ends with its first step, as a job does: the others, started
    before it, are waited for here)."""
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    done = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "steps.jsonl"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < steps):
        time.sleep(0.05)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_every_argument_reaches_the_server_as_one_word_and_the_shell_runs_none(tmp_path):
    argv = ("vllm", "serve", "org/model", *HOSTILE)
    text = script(request(tmp_path, (LaunchPlan(argv),)), cwd=str(tmp_path))
    (step,) = run_script(tmp_path, text, stand_ins(tmp_path))
    assert step[step.index("--") + 1:] == list(argv)
    assert not (tmp_path / "pwned").exists()
    assert "--relative=0" in step and "--nodes=1" in step


def test_followers_get_their_own_step_and_the_leader_host_from_the_allocation(tmp_path):
    leader = LaunchPlan(("vllm", "serve", "m", "--nnodes", "2", "--node-rank", "0", "--master-addr", LEADER_HOST))
    follower = LaunchPlan(("vllm", "serve", "m", "--nnodes", "2", "--node-rank", "1", "--master-addr", LEADER_HOST,
                           "--headless"))  # fmt: skip
    sglang = LaunchPlan(("sglang", "serve", "--dist-init-addr", f"{LEADER_HOST}:29501", "--node-rank", "1"))
    req = request(tmp_path, (leader, follower, sglang), gpus_per_node=8)
    text = script(req, cwd=str(tmp_path))
    assert "#SBATCH --nodes=3" in text and "#SBATCH --gres=gpu:8" in text and "#SBATCH --exclusive" in text
    steps = run_script(tmp_path, text, stand_ins(tmp_path), steps=3)
    by_rank = {int(next(a for a in s if a.startswith("--relative=")).split("=")[1]): s for s in steps}
    assert sorted(by_rank) == [0, 1, 2]
    assert by_rank[0][by_rank[0].index("--") + 1:] == ["vllm", "serve", "m", "--nnodes", "2", "--node-rank", "0",
                                                         "--master-addr", "gpu-017"]  # fmt: skip
    assert by_rank[1][-2:] == ["gpu-017", "--headless"]
    assert "gpu-017:29501" in by_rank[2]
    assert f"--output={req.node_log(1).resolve()}" in by_rank[1]  # a follower's own log
    assert not any(a.startswith("--output") for a in by_rank[0])  # the leader's is the job's


def test_a_secret_reaches_the_job_through_sbatch_never_the_script(tmp_path):
    plan = LaunchPlan(("vllm", "serve", "m"), env={"VLLM_API_KEY": "sk-live-Zq8rT4vXa1", "VLLM_SERVER_DEV_MODE": "1"})
    text = script(request(tmp_path, (plan,)), cwd=str(tmp_path))
    assert "sk-live-Zq8rT4vXa1" not in text
    assert "export VLLM_SERVER_DEV_MODE=1" in text
    assert ': "${VLLM_API_KEY:?' in text  # checked, from the environment sbatch ran in (--export=ALL)
    env = stand_ins(tmp_path)
    env.pop("VLLM_API_KEY", None)
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    done = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode != 0 and "VLLM_API_KEY must be set" in done.stderr  # said, not run without its key
    assert run_script(tmp_path, text, {**env, "VLLM_API_KEY": "x"})


def test_the_suite_s_options_go_to_sbatch_as_given_and_the_script_keeps_its_own(tmp_path):
    cluster = ClusterSpec(kind="slurm", partition="gpu", sbatch_args=["--account", "proj 1", "--time=04:00:00"])
    assert sbatch_argv(Path("s.sbatch"), cluster) == ["sbatch", "--parsable", "--partition", "gpu", "--account",
                                                     "proj 1", "--time=04:00:00", "s.sbatch"]  # fmt: skip
    with pytest.raises(ValueError, match="sets the job's name, nodes and log itself"):
        ClusterSpec(kind="slurm", sbatch_args=["--output=/tmp/x"])
    req = request(tmp_path, (LaunchPlan(("x",)),), name="ar#2")
    assert job_name(req) == "dflashbench-demo-1-ar-2"
    assert f"#SBATCH --job-name={job_name(req)}" in script(req, cluster, cwd="/")


def test_the_jobs_file_names_what_a_killed_sweep_left(tmp_path):
    jobs.append(tmp_path, launcher="slurm", event="submitting", name="a")
    jobs.append(tmp_path, launcher="slurm", event="submitted", name="a", id="7")
    jobs.append(tmp_path, launcher="slurm", event="submitting", name="b")  # killed before sbatch answered
    jobs.append(tmp_path, launcher="slurm", event="submitting", name="c")
    jobs.append(tmp_path, launcher="slurm", event="submitted", name="c", id="9")
    jobs.append(tmp_path, launcher="slurm", event="torn down", name="c", id="9")
    with open(tmp_path / jobs.JOBS_FILE, "a") as fh:
        fh.write('{"cut short')  # a crash mid-line
    assert jobs.outstanding(tmp_path, "slurm") == [{"name": "a", "id": "7"}, {"name": "b"}]
