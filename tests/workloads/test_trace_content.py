"""Content for a trace's requests, counted with the embedded target's own tokenizer: the nearest-length real
prompt (seeded per row), the trace's output length as max_tokens, the context respected and said, fill blocks
that keep the trace's shared prefixes, and random tokens of the same lengths."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dflashbench.workloads import load_requests
from dflashbench.workloads.spec import WorkloadSpec
from dflashbench.workloads.trace_content import NEAREST, ContentSettings, HfTokens, plan_content
from dflashbench.workloads.traces import Trace, TraceRow, load_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


@pytest.fixture(scope="module")
def tokens():
    from transformers import AutoTokenizer

    from dflashbench.embedded import default_paths

    return HfTokens(AutoTokenizer.from_pretrained(default_paths().target), "embedded")


@pytest.fixture(scope="module")
def pool():
    return load_requests(WorkloadSpec(name="synthetic", max_tokens=96), num_prompts=60, seed=0)


def _trace(rows, name="t", fmt="azure") -> Trace:
    return Trace(name=name, format=fmt, kind="code", path=Path("t.csv"), rows=tuple(rows), source="test")


def test_each_request_gets_a_prompt_among_the_nearest_in_length_and_the_traces_output(tokens, pool):
    lengths = sorted(tokens.count(r.messages, r.metadata["chat_template_kwargs"]) for r in pool)
    rows = [TraceRow(i, i * 0.5, n_in, n_out) for i, (n_in, n_out) in enumerate([(10, 5), (2000, 7), (3000, 300),
                                                                                  (4500, 1), (1500, 40)])]
    plan = plan_content(_trace(rows), pool, tokens, ContentSettings(input_scale=0.01, seed=3))
    assert [r.id for r in plan.requests] == [f"t#{i}" for i in range(5)]
    for row, req in zip(rows, plan.requests, strict=True):
        meta = req.metadata["trace"]
        target = max(1, round(row.input_tokens * 0.01))
        assert meta["target_input_tokens"] == target and req.max_tokens == row.output_tokens
        assert meta["planned_input_tokens"] == tokens.count(req.messages, req.metadata["chat_template_kwargs"])
        gap = abs(meta["planned_input_tokens"] - target)  # no other prompt is nearer than the NEAREST-th nearest
        assert sum(abs(n - target) < gap for n in lengths) < NEAREST, (target, meta)
        source = next(p for p in pool if p.id == meta["source"])  # the pool's own prompt, unchanged
        assert req.messages == source.messages and req.category == source.category
    # seeded per row: the same row gets the same prompt whatever else is in the window, another seed may not
    again = plan_content(_trace(rows[2:3]), pool, tokens, ContentSettings(input_scale=0.01, seed=3))
    assert again.requests[0].messages == plan.requests[2].messages
    seeds = {plan_content(_trace(rows), pool, tokens, ContentSettings(input_scale=0.01, seed=s)).requests[4].metadata["trace"]["source"]
             for s in range(8)}
    assert len(seeds) > 1


def test_requests_over_the_context_are_clipped_or_skipped_and_counted(tokens, pool):
    rows = [TraceRow(0, 0.0, 50, 10), TraceRow(1, 1.0, 50, 2040), TraceRow(2, 2.0, 50, 5000)]
    clip = plan_content(_trace(rows), pool, tokens, ContentSettings(context_tokens=2048))
    assert [r.max_tokens + r.metadata["trace"]["planned_input_tokens"] <= 2048 for r in clip.requests] == [True] * 3
    assert clip.requests[0].max_tokens == 10 and clip.clipped_output == 2 and clip.skipped == 0
    skip = plan_content(_trace(rows), pool, tokens, ContentSettings(context_tokens=2048, over_context="skip"))
    assert [r.id for r in skip.requests] == ["t#0"] and skip.skipped == 2
    assert skip.facts()["skipped"] == 2 and skip.facts()["sent"] == 1 and skip.facts()["rows"] == 3


def test_fill_reaches_the_input_length_and_keeps_the_traces_shared_prefixes(tokens, pool):
    trace = load_trace("mooncake-conv").window(60)  # rows 1 and 137 share 4 blocks, 10 and 134 too
    plan = plan_content(trace, pool, tokens, ContentSettings(input_scale=1 / 32, fill="context", context_tokens=2048))
    filled = [r for r in plan.requests if r.messages[0]["role"] == "system"]
    assert len(filled) > len(plan.requests) // 2
    for r in filled:  # up to the target, never past it, and within a block of it
        meta = r.metadata["trace"]
        assert meta["target_input_tokens"] - 2 * 16 <= meta["planned_input_tokens"] <= meta["target_input_tokens"]
    by_row = {r.metadata["trace"]["index"]: r for r in filled}
    rows = {row.index: row for row in trace.rows}
    shared = [(a, b) for a in by_row for b in by_row if a < b and rows[a].hash_ids[:3] == rows[b].hash_ids[:3]]
    assert shared, "the window has requests sharing their first three prefix blocks"
    for a, b in shared:  # the same blocks, the same text: at least two blocks of common prefix
        x, y = by_row[a].messages[0]["content"], by_row[b].messages[0]["content"]
        common = len(tokens.encode(x[: next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q),
                                              min(len(x), len(y)))]))  # fmt: skip
        shorter = min(len(tokens.encode(x)), len(tokens.encode(y)))  # a short target takes less than its blocks
        assert common >= min(2 * 16, shorter) - 2, (a, b, common, shorter)
    assert plan.facts()["prefix_blocks"]["shared"] > 0 and plan.facts()["prefix_blocks"]["block_tokens"] == 16


def test_random_content_has_the_same_lengths_and_nothing_of_the_prompts(tokens, pool):
    trace = load_trace("azure-code").window(20)
    settings = ContentSettings(input_scale=0.02, context_tokens=2048)
    real = plan_content(trace, pool, tokens, settings)
    rand = plan_content(trace, pool, tokens, replace(settings, content="random"))
    assert [r.id for r in rand.requests] == [r.id for r in real.requests]
    assert [r.max_tokens for r in rand.requests] == [r.max_tokens for r in real.requests]
    for a, b in zip(real.requests, rand.requests, strict=True):
        assert b.category == "random" and b.metadata["trace"]["source"] == "random" and "grader" not in b.metadata
        assert b.messages[-1]["content"] != a.messages[-1]["content"]
        assert abs(b.metadata["trace"]["planned_input_tokens"] - a.metadata["trace"]["planned_input_tokens"]) <= 2
    assert rand.categories == {"random": len(rand.requests)}


def test_code_traffic_takes_humaneval_and_speed_bench_coding(tokens):
    """The GPU suites' mix for Azure code (suites/trace-azure-code.toml), from the datasets in their own layout."""
    pool = load_requests(WorkloadSpec(name="humaneval", data=str(FIXTURES / "openai--openai_humaneval"), max_tokens=512),
                         num_prompts=None, seed=0)  # fmt: skip
    pool += load_requests(WorkloadSpec(name="speed-bench", config="qualitative", categories=["coding"],
                                       data=str(FIXTURES / "nvidia--SPEED-Bench"), on_placeholder="skip",
                                       max_tokens=512), num_prompts=None, seed=0)  # fmt: skip
    assert {r.workload for r in pool} == {"humaneval", "speed-bench"}
    plan = plan_content(load_trace("azure-code").window(10), pool, tokens, ContentSettings(context_tokens=32768),
                        labels={"humaneval": 3})  # fmt: skip
    assert {r.metadata["trace"]["source_workload"] for r in plan.requests} <= {"humaneval", "speed-bench"}
    assert all(r.category in ("code", "coding") for r in plan.requests)
    assert plan.facts()["pool"] == {"humaneval": 3}
