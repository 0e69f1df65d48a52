"""Is the speedup lossless? Real sweeps of the embedded pair (the bundled tiny target, its DFlash drafter and
EAGLE-3 head) on the reference backend, as a user runs them: the CLI, `dflashbench serve` per method, the report.

The reference decoder is lossless by construction, so greedy DFlash and EAGLE-3 must give AR's output exactly,
at every concurrency, and AR must agree with itself across concurrencies. A server started with a planted
acceptance bug (`serve --test-fault accept-extra-draft`, hidden) must show up as disagreement and a warning.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from dflashbench.measure import quality
from dflashbench.run.store import load_run

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

NUM_PROMPTS = 6  # synthetic: round robin over math, code, writing; the math prompts are graded
# (a point sends at least c x requests_per_stream requests: prompts are reused as <id>~k at higher concurrency)
SUITE = """
name = "{name}"
backend = "reference"
methods = {methods}
model = "embedded"
concurrency = {concurrency}
num_prompts = {num_prompts}
seed = 0
warmup_requests = 1
temperature = 0.0
max_tokens = 64
timeout_s = 300
[drafts]
dflash = "embedded"
eagle3 = "embedded"
[extra_args]
dflash = {dflash_args}
[[workloads]]
name = "synthetic"
"""


def sweep(tmp, name, *args, methods=("ar", "dflash", "eagle3"), concurrency=(1, 2, 4), dflash_args=(),
          num_prompts=NUM_PROMPTS):  # fmt: skip
    suite = tmp / f"{name}.toml"
    suite.write_text(SUITE.format(name=name, methods=json.dumps(list(methods)), concurrency=list(concurrency),
                                  num_prompts=num_prompts, dflash_args=json.dumps(list(dflash_args))))  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp / name
    proc = subprocess.run([sys.executable, "-m", "dflashbench", "sweep", "--suite", str(suite), "-o", str(out / "results"),
                           *args], capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (out / "results").iterdir()
    return run_dir, proc.stdout


def report_md(run_dir, tmp):
    md = tmp / f"{run_dir.name}.md"
    proc = subprocess.run([sys.executable, "-m", "dflashbench", "report", str(run_dir), "--format", "md", "-o", str(md)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return md.read_text()


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clean")
    run_dir, _ = sweep(tmp, "lossless", "--no-report")
    return load_run(run_dir), report_md(run_dir, tmp)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fault")
    run_dir, _ = sweep(tmp, "fault", "--no-report", methods=("ar", "dflash"), concurrency=(1, 2),
                       dflash_args=("--test-fault", "accept-extra-draft"))  # fmt: skip
    return load_run(run_dir), report_md(run_dir, tmp)


def test_embedded_dflash_and_eagle3_reproduce_ar_at_every_concurrency(clean):
    run, md = clean
    table = quality.agreement_table(run.points, run.requests)
    whole = table[table["category"] == "all"]
    measured = {(r["method"], int(r["concurrency"])) for r in whole.to_dict("records")}
    assert measured == {("ar", 2), ("ar", 4)} | {(m, c) for m in ("dflash", "eagle3") for c in (1, 2, 4)}
    for r in whole.to_dict("records"):
        assert r["compared"] >= NUM_PROMPTS and r["exact"] == r["compared"], r
    assert "Warnings" not in md
    speedups = md[md.index("### Single-stream speedup") : md.index("### Speedup at matched interactivity")]
    for method in ("DFlash", "EAGLE-3"):
        rows = [ln for ln in speedups.splitlines() if f"| all | {method} |" in ln]
        assert len(rows) == 4, rows  # single-stream at c=1, matched concurrency at c=1, 2, 4
        assert all(re.search(r"\| 100\.0% \((\d+)/\1\) \|", ln) for ln in rows), rows


def test_outputs_are_stored_with_token_ids_and_math_is_graded(clean):
    run, _ = clean
    measured = [r for r in run.requests.to_dict("records") if not r["warmup"]]
    assert measured and all(r["ok"] for r in measured)
    for r in measured:
        assert r["output_text"] and r["output_chars"] == len(r["output_text"]) and len(r["output_sha256"]) == 64
        assert len(r["output_token_ids"]) == r["output_tokens"]  # every committed token, EOS included
        assert (r["correct"] is not None) == (r["category"] == "math")
    maths = pd.DataFrame(measured).query("category == 'math'").groupby("point_id").size()
    points = run.points[run.points["category"] == "all"].set_index("point_id")
    assert (points["num_graded"] == maths.reindex(points.index)).all() and (points["num_graded"] > 0).all()
    for _, same_c in points.groupby("concurrency"):
        assert same_c["num_correct"].nunique() == 1, same_c  # identical outputs, identical accuracy


def test_planted_acceptance_fault_shows_as_disagreement_and_a_warning(faulty):
    run, md = faulty
    table = quality.agreement_table(run.points, run.requests)
    rows = {(r["method"], int(r["concurrency"])): r for r in table[table["category"] == "all"].to_dict("records")}
    assert rows["ar", 2]["exact"] == rows["ar", 2]["compared"] >= NUM_PROMPTS  # AR still agrees with itself
    for c in (1, 2):
        assert rows["dflash", c]["exact"] < rows["dflash", c]["compared"]
        assert rows["dflash", c]["div_tokens_min"] >= 0  # token ids tell where
    assert "**Warnings**" in md
    assert "DFlash output differs from AR on" in md and "greedy speculative decoding should reproduce AR's output" in md


def test_no_store_text_keeps_no_output_but_still_grades(tmp_path):
    run_dir, _ = sweep(tmp_path, "private", "--no-report", "--no-store-text", methods=("ar",), concurrency=(1,),
                       num_prompts=3)  # fmt: skip
    run = load_run(run_dir)
    assert run.manifest["outputs"]["store_text"] is False
    raw = (run_dir / "requests.jsonl").read_text()
    for r in map(json.loads, raw.splitlines()):
        assert (r["output_text"], r["output_chars"], r["output_sha256"], r["output_token_ids"], r["answer"]) == (None,) * 5
        assert (r["correct"] is not None) == (r["category"] == "math" and not r["warmup"])
