"""`dflashbench sweep` end to end against the paced stand-in server (real processes over loopback).

The stand-in backend streams one token per chunk for AR and 3 per chunk for DFlash, with vLLM-named counters
consistent with that, so every figure below is known exactly. The sweep runs in-process (CliRunner) so that
the stand-in can be registered as a backend; the servers it launches are real processes.
"""

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dflashbench.backends import BACKENDS
from dflashbench.backends.base import LaunchPlan
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.bench.standin import STANDIN_TAU
from dflashbench.cli import app
from dflashbench.measure import metrics
from dflashbench.run.store import load_run
from dflashbench.types import RequestResult

FIXTURES = Path(__file__).parent.parent / "fixtures" / "datasets"
GSM8K = FIXTURES / "openai--gsm8k"
MT_BENCH = FIXTURES / "HuggingFaceH4--mt_bench_prompts"
MAX_TOKENS = 12


@pytest.fixture(autouse=True)
def standin_backend(monkeypatch):
    monkeypatch.setitem(BACKENDS, "standin", "dflashbench.bench.standin:StandinBackend")


def write_suite(tmp_path, *, methods=("ar", "dflash"), concurrency=(1, 2), extra="", workloads=(GSM8K, MT_BENCH),
                num_prompts=3):  # fmt: skip
    names = {GSM8K: "gsm8k", MT_BENCH: "mt-bench"}
    wl = "".join(f'\n[[workloads]]\nname = "{names[w]}"\ndata = "{w}"\n' for w in workloads)
    text = f"""
name = "standin-test"
version = 3
backend = "standin"
methods = {json.dumps(list(methods))}
model = "standin-model"
concurrency = {json.dumps(list(concurrency))}
num_prompts = {num_prompts}
requests_per_stream = 1
warmup_requests = 1
max_tokens = {MAX_TOKENS}
timeout_s = 20
[drafts]
dflash = "standin-draft"
{extra}
{wl}"""
    path = tmp_path / "standin.toml"
    path.write_text(text)
    return path


def sweep(*args):
    return CliRunner().invoke(app, ["sweep", *map(str, args)], catch_exceptions=False)


def only_run_dir(out: Path) -> Path:
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def test_sweep_end_to_end(tmp_path):
    out = tmp_path / "results"
    result = sweep("--suite", write_suite(tmp_path), "-o", out)
    assert result.exit_code == 0, result.output
    run = load_run(only_run_dir(out))

    everything = run.points[run.points["category"] == "all"]
    assert len(everything) == 2 * 2 * 2  # methods x workloads x concurrency
    assert set(everything["status"]) == {"ok"} and everything["num_errors"].sum() == 0
    assert list(everything["method"]) == ["ar"] * 4 + ["dflash"] * 4  # grid order: method, workload, concurrency
    assert list(everything["concurrency"]) == [1, 2] * 4
    for _, p in everything.iterrows():
        turns = 3 if p["workload"] == "gsm8k" else 6  # MT-Bench rows have two turns
        assert p["num_requests"] == turns and p["output_tokens"] == turns * MAX_TOKENS
        assert p["tau"] == (1.0 if p["method"] == "ar" else STANDIN_TAU)
        assert p["throughput_tok_per_s"] > 0 and p["ttft_s_p50"] > 0
        # TPOT where the client saw the tokens spread out; on a busy machine a point can lose that, and says so
        assert p["tpot_s_p50"] > 0 or (pd.isna(p["tpot_s_p50"]) and p["latency_not_measured_reason"]), p["point_id"]
    dflash = everything[everything["method"] == "dflash"]
    assert (dflash["acceptance_rate"] == 1.0).all()
    measured_timing = dflash["latency_not_measured_reason"].isna()
    assert dflash["itl_s_p50"][measured_timing].notna().all() and dflash["icl_s_p50"][measured_timing].notna().all()

    cats = run.points[(run.points["workload"] == "mt-bench") & (run.points["category"] != "all")]
    assert set(cats["category"]) == {"writing", "roleplay", "math"} and len(cats) == 3 * 4

    # requests: every measured turn plus one warm-up per point, each with server token counts
    assert len(run.requests) == 4 * (3 + 1) + 4 * (6 + 1)
    assert run.requests["warmup"].sum() == 8
    measured = run.requests[~run.requests["warmup"]]
    assert measured["ok"].all() and (measured["output_tokens"] == MAX_TOKENS).all()
    assert set(measured["output_tokens_source"]) == {"server"}
    # DFlash streams 3 tokens per chunk: each chunk gap (ICL) gives three per-token gaps (ITL) of a third
    for _, row in measured[measured["point_id"].str.contains(":dflash:")].iterrows():
        r = RequestResult.from_dict(row.to_dict())
        assert r.chunk_tokens == (3, 3, 3, 3)
        assert metrics.itl_s(r) == pytest.approx([g / 3 for g in metrics.icl_s(r) for _ in range(3)])

    m = run.manifest
    assert m["status"] == "complete" and m["finished_at"] and m["suite"]["version"] == 3
    assert set(m["servers"]) == {"ar", "dflash"} and "--spec-tau" in m["servers"]["dflash"]["argv"]
    assert m["gpu"]["gpu"] and m["versions"]["python"] and m["dflashbench_version"]
    assert (run.run_dir / "server-standin-ar.log").exists() and (run.run_dir / "server-standin-dflash.log").exists()
    assert "dflashbench sweep" in result.output and "tok/s" in result.output
    report = tmp_path / "reports" / f"{run.run_dir.name}.html"
    assert f"report written to {report}" in result.output and report.stat().st_size > 1000
    ending = result.output.split(f"report written to {report}\n", 1)[1]  # the report's verdict comes last
    verdict = ending.splitlines()  # the verdict, answer first (issue #53): one answer per setting, each named
    heads = [ln for ln in verdict if ln.lstrip().startswith("standin · standin-model · ")]
    assert [ln.lstrip().split(": Serve ")[0] for ln in heads] == ["standin · standin-model · gsm8k",
                                                                  "standin · standin-model · mt-bench"]  # fmt: skip
    assert verdict[0] == heads[0] and all(": Serve " in ln for ln in heads)  # two workloads: two settings
    assert any(ln.lstrip().startswith("Lossless: DFlash ") for ln in verdict)


def test_dry_run_launches_nothing(tmp_path):
    out = tmp_path / "results"
    result = sweep("--suite", write_suite(tmp_path), "-o", out, "--dry-run", "--verbose")
    assert result.exit_code == 0, result.output
    assert f"server for dflash: {sys.executable} -m dflashbench.bench.standin serve" in result.output
    assert "--spec-tau 3" in result.output
    assert "workload gsm8k: 3 requests (3 turns), max_tokens 12, categories: math 3" in result.output
    assert "standin:dflash:mt-bench:c2" in result.output
    assert not out.exists()


def test_unreachable_endpoint_is_a_clear_error_and_leaves_nothing(tmp_path):
    out = tmp_path / "results"
    url = f"http://127.0.0.1:{free_port()}"
    result = sweep("--suite", write_suite(tmp_path, methods=("ar",)), "--endpoint", url, "-o", out)
    assert result.exit_code == 2
    assert f"error: cannot reach the server at {url}" in result.output
    assert not out.exists()


def test_endpoint_needs_one_method(tmp_path):
    result = sweep("--suite", write_suite(tmp_path), "--endpoint", "http://127.0.0.1:9", "-o", tmp_path / "r")
    assert result.exit_code == 2 and "pass --method" in result.output


def test_sweep_against_a_running_endpoint(tmp_path):
    port = free_port()
    argv = (sys.executable, "-m", "dflashbench.bench.standin", "serve", "--port", str(port), "--pace-ms", "2",
            "--tokens-per-chunk", "2", "--spec-tau", "2", "--model", "standin-model")  # fmt: skip
    with ServerProcess(LaunchPlan(argv=argv), tmp_path / "endpoint.log", name="endpoint") as server:
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(url + "/health", timeout_s=60, progress=False)
        suite = write_suite(tmp_path, workloads=(GSM8K,), concurrency=(2,))
        result = sweep("--suite", suite, "--endpoint", url, "--backend", "vllm", "--method", "dflash",
                       "-o", tmp_path / "results", "--no-report")  # fmt: skip
    assert result.exit_code == 0, result.output
    run = load_run(only_run_dir(tmp_path / "results"))
    (p,) = run.points.to_dict("records")
    assert (p["backend"], p["method"], p["status"], p["tau"]) == ("vllm", "dflash", "ok", 2.0)
    assert p["extra"]["endpoint"] == url
    assert run.manifest["endpoint"] == url and run.manifest["servers"] == {}


def test_server_killed_mid_point_then_resume(tmp_path):
    die = tmp_path / "die-now"
    die.touch()
    # the DFlash server kills itself (SIGKILL) mid-stream on its 6th request: during the second point
    # (requests 1-4 are point c1's warm-up + 3 prompts; 5 is point c2's warm-up)
    extra = f'[extra_args]\ndflash = ["--die-file", "{die}", "--die-after", "6"]'
    suite = write_suite(tmp_path, workloads=(GSM8K,), extra=extra)
    out = tmp_path / "results"
    first = sweep("--suite", suite, "-o", out, "--no-report")
    assert first.exit_code == 1
    assert "1 point(s) failed; finish them with: dflashbench sweep --resume" in first.output
    run_dir = only_run_dir(out)
    run = load_run(run_dir)
    status = dict(zip(run.points["point_id"], run.points["status"], strict=True))
    assert status == {"standin:ar:gsm8k:c1": "ok", "standin:ar:gsm8k:c2": "ok", "standin:dflash:gsm8k:c1": "ok",
                      "standin:dflash:gsm8k:c2": "failed"}  # fmt: skip
    failed = run.points[run.points["status"] == "failed"].iloc[0]
    assert "the server exited during the point (exit status -9)" in failed["failure_reason"]
    assert run.manifest["status"] == "partial" and run.manifest["failed_points"] == ["standin:dflash:gsm8k:c2"]
    assert not run.requests[run.requests["point_id"] == "standin:dflash:gsm8k:c2"]["ok"].all()
    kept = run.requests[run.requests["point_id"] != "standin:dflash:gsm8k:c2"]
    assert kept["ok"].all() and len(kept) == 3 * 4

    second = sweep("--resume", run_dir, "--no-report")
    assert second.exit_code == 0, second.output
    assert "1 point(s) done" not in second.output and "3 point(s) done, 1 to run" in second.output
    run = load_run(run_dir)
    assert len(run.points) == 4 and set(run.points["status"]) == {"ok"}
    assert (run.points[run.points["method"] == "dflash"]["tau"] == STANDIN_TAU).all()
    assert len(run.requests) == 4 * 4 and run.requests["ok"].all()  # the broken point's rows were replaced
    assert run.manifest["status"] == "complete" and len(run.manifest["resumes"]) == 1


def test_resume_refuses_other_flags(tmp_path):
    result = sweep("--resume", tmp_path, "--concurrency", "4")
    assert result.exit_code == 2 and "drop --concurrency" in result.output


def test_no_server_outlives_the_sweeps():
    """No server launched by the sweeps above (children of this process) is still running."""
    leftovers = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"dflashbench.bench.standin" in cmd:
            leftovers.append(pid)
    assert leftovers == []


def test_a_launch_that_cannot_be_built_fails_before_anything_is_written(tmp_path):
    suite = tmp_path / "bad.toml"
    suite.write_text(f'name = "bad"\nbackend = "reference"\nmethods = ["ar"]\nmodel = "{tmp_path}"\nconcurrency = [1]\n'
                     f'tp = 2\n[[workloads]]\nname = "gsm8k"\ndata = "{GSM8K}"\n')  # fmt: skip
    out = tmp_path / "results"
    result = sweep("--suite", suite, "-o", out)
    assert result.exit_code == 2
    assert "error: the reference backend runs on one device: use --tp 1" in result.output
    assert not out.exists()
