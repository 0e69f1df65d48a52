"""`dflashbench sweep` on the reference backend, end to end with real processes: the CLI as a user runs it,
`dflashbench serve` launched per method, the reference decoder on a tiny random pair. The run's figures are
checked against the decoder itself, run in this process on the same prompts."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from dflashbench.run.store import load_run

pytestmark = pytest.mark.timeout(600)

MAX_TOKENS = 24
NUM_PROMPTS = 4
BLOCK = 4
C = 20  # the token the tiny target always chooses


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A tiny pair whose drafter is right part of the time, so tau lies strictly between 1 and the block size.

    The target is made a predictable machine (its layers' output projections zeroed, and one shared
    embedding direction that makes token ``C`` its every greedy choice); the random drafter's final norm gets a
    small weight on that direction, so its proposals are ``C`` at some block positions and not at others.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from dflashbench.reference.dflash.checkpoint import load_draft, save_draft
    from dflashbench.reference.tiny import write_tiny_pair

    target, draft = write_tiny_pair(tmp_path_factory.mktemp("pair"), vocab_size=64, block_size=BLOCK, seed=3)
    model = AutoModelForCausalLM.from_pretrained(target)
    drafter = load_draft(draft)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight[:, 0] += 3.0
        model.lm_head.weight[C, 0] = 3.0
        drafter.norm.weight[0] = 0.01
    model.save_pretrained(target)
    save_draft(drafter, draft)
    return str(target), str(draft)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    """GSM8K in its own layout, with questions in the tiny tokenizer's vocabulary (w0 w1 ...)."""
    root = tmp_path_factory.mktemp("gsm8k")
    (root / "main").mkdir()
    questions = [" ".join(f"w{(7 * i + 3 * j) % 50}" for j in range(6 + i)) for i in range(NUM_PROMPTS)]
    pd.DataFrame({"question": questions, "answer": ["#### 1"] * NUM_PROMPTS}).to_parquet(
        root / "main" / "test-00000-of-00001.parquet"
    )
    return root


@pytest.fixture(scope="module")
def run(pair, prompts, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    suite = tmp / "tiny.toml"
    suite.write_text(f"""
name = "tiny-reference"
backend = "reference"
methods = ["ar", "dflash"]
model = "{pair[0]}"
concurrency = [1, 2]
num_prompts = {NUM_PROMPTS}
requests_per_stream = 1  # each prompt once: outputs are checked against the decoder per prompt
warmup_requests = 1
max_tokens = {MAX_TOKENS}
timeout_s = 120
[drafts]
dflash = "{pair[1]}"
[[workloads]]
name = "gsm8k"
data = "{prompts}"
""")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "dflashbench", "sweep", "--suite", str(suite), "-o", str(tmp / "results"),
                           "--no-report"], capture_output=True, text=True, env=env, timeout=540)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (tmp / "results").iterdir()
    return load_run(run_dir), proc.stdout


@pytest.fixture(scope="module")
def decoded(pair, run):
    """The decoder's own generation for every measured request of the run (same prompt token ids)."""
    from dflashbench.plan.grid import load_plan
    from dflashbench.plan.suites import parse_suite
    from dflashbench.reference.decode import ar_decode, dflash_decode
    from dflashbench.reference.dflash.checkpoint import load_draft
    from dflashbench.reference.target import load_target

    target, draft = load_target(pair[0]), load_draft(pair[1])
    suite = parse_suite(run[0].manifest["suite_config"], source="manifest")
    requests = {r.id: r for r in load_plan(suite)[0]}
    out = {}
    for rid, req in requests.items():
        text = target.tokenizer.apply_chat_template(
            list(req.messages), tokenize=False, add_generation_prompt=True,
            **req.metadata.get("chat_template_kwargs", {}),
        )  # fmt: skip
        ids = list(target.tokenizer(text, add_special_tokens=False)["input_ids"])
        stop = target.stop_token_ids()
        out[("ar", rid)] = ar_decode(target, ids, max_new_tokens=MAX_TOKENS, stop_token_ids=stop)
        out[("dflash", rid)] = dflash_decode(target, draft, ids, max_new_tokens=MAX_TOKENS, stop_token_ids=stop)
    return out


def test_every_point_ok_without_errors(run):
    results, stdout = run
    points = results.points
    assert len(points) == 4 and set(points["category"]) == {"all"}
    assert set(points["status"]) == {"ok"} and points["num_errors"].sum() == 0
    assert sorted(zip(points["method"], points["concurrency"], strict=True)) == [("ar", 1), ("ar", 2), ("dflash", 1), ("dflash", 2)]
    assert (points["num_requests"] == NUM_PROMPTS).all()
    assert results.requests["ok"].all()
    assert results.manifest["status"] == "complete" and results.manifest["num_gpus"] == 0
    assert "reference dflash" in stdout


def test_output_tokens_match_the_server_and_the_decoder(run, decoded):
    results, _ = run
    measured = results.requests[~results.requests["warmup"]]
    assert set(measured["output_tokens_source"]) == {"server"}
    for _, r in measured.iterrows():
        method = r["point_id"].split(":")[1]
        assert r["output_tokens"] == len(decoded[(method, r["request_id"])].token_ids), r["point_id"]
        assert sum(r["chunk_tokens"]) == r["output_tokens"]  # tokens per chunk from continuous usage add up
    for _, p in results.points.iterrows():
        rows = measured[measured["point_id"] == p["point_id"]]
        assert p["output_tokens"] == rows["output_tokens"].sum()
    # the server's count checked against what it streamed, by the chunks' token ids: equal, nothing flagged (#52)
    assert set(measured["streamed_tokens_source"]) == {"token_ids"}
    assert (measured["streamed_tokens"] == measured["output_tokens"]).all()
    assert measured["server_output_tokens"].isna().all()
    assert (results.points["usage_checked_requests"] == NUM_PROMPTS).all()
    assert (results.points["usage_mismatch_requests"] == 0).all()


def test_tau_equals_the_decoders_own(run, decoded):
    results, _ = run
    gens = [g for (method, _), g in decoded.items() if method == "dflash"]
    own_tau = sum(sum(g.accept_lengths) for g in gens) / sum(g.num_steps for g in gens)
    points = results.points.set_index("point_id")
    for conc in (1, 2):
        assert points.loc[f"reference:dflash:gsm8k:c{conc}", "tau"] == pytest.approx(own_tau, abs=1e-9)
        assert points.loc[f"reference:ar:gsm8k:c{conc}", "tau"] == 1.0
    assert 1.5 < own_tau < BLOCK - 0.5  # some drafts accepted, not all: accepted and drafted counts differ
    assert points.loc["reference:dflash:gsm8k:c1", "acceptance_rate"] == pytest.approx((own_tau - 1) / (BLOCK - 1))
    # the server streams each verification step's tokens as one chunk, counted by continuous usage
    dflash = results.requests[~results.requests["warmup"] & results.requests["point_id"].str.contains(":dflash:")]
    own_chunks = {rid: [1, *g.accept_lengths] for (m, rid), g in decoded.items() if m == "dflash"}
    for _, r in dflash.iterrows():
        assert list(r["chunk_tokens"]) == own_chunks[r["request_id"]][: len(r["chunk_tokens"])]
        # per-request speculative stats from the response (what per-category tau is computed from)
        own = decoded[("dflash", r["request_id"])]
        assert (r["spec_verify_steps"], r["spec_accepted_tokens"]) == (own.num_steps, sum(own.accept_lengths) - own.num_steps)


def test_the_servers_own_timing_sits_beside_the_clients_and_a_flag_only_where_timing_was_lost(run):
    results, stdout = run
    unmeasured = 0
    for p in results.points.to_dict("records"):
        timing = p["extra"]["server_timing"]  # the reference server's vLLM-named histograms, over the point
        assert timing["source"] == "reference /metrics"
        assert timing["ttft_s"]["count"] == timing["tpot_s"]["count"] == timing["e2e_s"]["count"] == NUM_PROMPTS
        assert timing["ttft_s"]["mean_s"] < p["ttft_s_mean"]  # the client's TTFT adds the HTTP round trip
        # the pace-exact server streams one chunk per step; a busy machine can still make the client read several at
        # once (a burst). A point is flagged exactly when too few requests were observable, and then shows no TPOT
        # rather than a wrong one; otherwise the server's and the client's TPOT are the same decode, seen twice.
        if p["timing_observed_share"] >= 0.9:
            assert pd.isna(p["latency_not_measured_reason"]), p["point_id"]
            assert timing["tpot_s"]["mean_s"] == pytest.approx(p["tpot_s_mean"], rel=0.5), p["point_id"]
        else:
            unmeasured += 1
            assert isinstance(p["latency_not_measured_reason"], str) and pd.isna(p["tpot_s_p50"]), p["point_id"]
    assert ("n/m" in stdout) == (unmeasured > 0)


def test_the_sweep_ends_with_the_verdict_even_without_a_report(run):
    """Issue #27: each point's line leads with its figures (no client sentence on it), and the run ends with the
    report's verdict (issue #53: the answer first, then the lossless check and where it was measured)."""
    lines = run[1].rstrip("\n").splitlines()
    points = [line for line in lines if line.startswith("[")]
    assert len(points) == 4 and all(": " in p and " tok/s · " in p and "lagged" not in p for p in points), points
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Serve ") or ln.startswith("Cannot"))
    verdict = lines[start:]  # the answer first (issue #53), the rest indented under it
    assert verdict[0].startswith("Serve ") and all(ln.startswith("  ") for ln in verdict[1:])
    assert "  Lossless: DFlash identical to AR on 8/8 requests (greedy, full text)." in verdict
    items = " ".join(ln.strip() if ln.startswith("    ") else "\n" + ln for ln in verdict).split("\n")  # unwrapped
    assert any(re.match(r"  Measured on \d+ CPU cores?\b", ln) and ": not representative" in ln for ln in items), verdict
