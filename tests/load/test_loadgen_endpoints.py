"""Several endpoints: two stand-in replicas with different speculative step sizes behind no router."""

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.backends.base import LaunchPlan
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.cli import app
from dflashbench.errors import UserError
from dflashbench.load.endpoints import assign, normalize, sum_counters
from dflashbench.run.store import load_run
from dflashbench.types import AcceptCounters, Request

GSM8K = Path(__file__).parent.parent / "fixtures" / "datasets" / "openai--gsm8k"
MAX_TOKENS = 12


def test_round_robin_and_counter_sums():
    reqs = [Request(id=str(i), workload="w", category="c", messages=(), max_tokens=1) for i in range(5)]
    got = [r.metadata["endpoint"] for r in assign(reqs, ["http://a", "http://b"])]
    assert got == ["http://a", "http://b", "http://a", "http://b", "http://a"]
    assert assign(reqs, ["http://a"]) == reqs  # one endpoint: nothing tagged
    total = sum_counters([AcceptCounters(2, 6, 3, (2, 1)), AcceptCounters(5, 15, 10, (5, 4, 1))])
    assert total == AcceptCounters(7, 21, 13, (7, 5, 1))
    assert sum_counters([AcceptCounters(2, 6, 3), None]) is None  # a partial sum would pass for the whole
    with pytest.raises(UserError, match="given twice"):
        normalize(["http://a/", "http://a"])


def standin(tmp_path: Path, tokens_per_chunk: int):
    port = free_port()
    argv = (sys.executable, "-m", "dflashbench.bench.standin", "serve", "--port", str(port), "--pace-ms", "2",
            "--tokens-per-chunk", str(tokens_per_chunk), "--spec-tau", str(tokens_per_chunk), "--model", "standin-model")  # fmt: skip
    return ServerProcess(LaunchPlan(argv=argv), tmp_path / f"s{tokens_per_chunk}.log", name="stand-in"), port


def test_sweep_over_two_endpoints_tags_results_and_sums_counters(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text(f"""
name = "replicas"
backend = "vllm"
methods = ["dflash"]
model = "standin-model"
concurrency = [2]
num_prompts = 4
requests_per_stream = 1
warmup_requests = 1
max_tokens = {MAX_TOKENS}
timeout_s = 30
[drafts]
dflash = "standin-draft"
[[workloads]]
name = "gsm8k"
data = "{GSM8K}"
""")
    a, port_a = standin(tmp_path, 2)
    b, port_b = standin(tmp_path, 4)
    url_a, url_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    with a, b:
        a.wait_ready(url_a + "/health", timeout_s=60, progress=False)
        b.wait_ready(url_b + "/health", timeout_s=60, progress=False)
        result = CliRunner().invoke(app, ["sweep", "--suite", str(suite), "--endpoint", url_a, "--endpoint", url_b,
                                          "--method", "dflash", "-o", str(tmp_path / "r"), "--no-report"],
                                    catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
    run = load_run(run_dir)
    measured = run.requests[~run.requests["warmup"]]
    assert measured["endpoint"].value_counts().to_dict() == {url_a: 2, url_b: 2}  # every result tagged
    p = run.points[run.points["category"] == "all"].iloc[0]
    assert p["extra"]["endpoints"] == {"urls": [url_a, url_b], "requests": {url_a: 2, url_b: 2}}
    assert run.manifest["endpoints"] == [url_a, url_b]
    # per request of 12 tokens: replica A (2 per step) 6 drafts, 6 accepted; replica B (4 per step) 3 drafts,
    # 9 accepted. Summed over 2 + 2 requests: tau = 1 + 30 / 18. Either replica alone would give 2 or 4.
    assert p["tau"] == pytest.approx(1 + 30 / 18)
