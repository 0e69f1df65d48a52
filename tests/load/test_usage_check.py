"""A server's token count checked against what it streamed (dflashbench.load.usage_check): the tolerance, each way of
counting the stream, and the committed runs of real servers (the reference server and vLLM's CPU build on the
embedded pair), which must flag nothing, by their token ids or by the target's tokenizer on their text."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dflashbench.load.usage_check import even_split, mismatch_words, reconcile, tolerance_tokens
from dflashbench.run.store import load_run
from dflashbench.run.target_tokens import TargetTokenizer
from dflashbench.types import RequestResult

ROOT = Path(__file__).resolve().parents[2]
VLLM_CPU = ROOT / "results" / "examples" / "demo-20261125-024540-6b40"  # reports/examples.toml: vLLM's CPU build
REFERENCE = ROOT / "results" / "examples" / "demo-20261123-120110-e69c"  # the reference server, the README's run


def result(output_tokens: int, *, text: str = "", ids=None, chunks: int = 4, ok: bool = True,
           warmup: bool = False, source: str = "server") -> RequestResult:  # fmt: skip
    """A finished request as a client process leaves it: its raw output (full text and token ids) still on it."""
    return RequestResult(run_id="r", point_id="p", request_id="q", category="c", concurrency=1, ok=ok, error=None,
                         queued_ns=0, sent_ns=0, first_token_ns=1, last_token_ns=chunks, output_tokens=output_tokens,
                         output_tokens_source=source, chunk_ns=tuple(range(1, chunks + 1)),
                         chunk_tokens=(output_tokens,) + (0,) * (chunks - 1), warmup=warmup, output_text=text,
                         output_token_ids=tuple(ids) if ids is not None else None)  # fmt: skip


def test_the_tolerance_is_two_tokens_or_two_percent():
    assert tolerance_tokens(16) == 2 and tolerance_tokens(100) == 2 and tolerance_tokens(500) == 10
    assert not reconcile(result(18, ids=[7] * 16)).usage_mismatch  # 2 tokens off: within
    assert reconcile(result(19, ids=[7] * 16)).usage_mismatch  # 3 off
    assert not reconcile(result(510, ids=[7] * 500)).usage_mismatch and reconcile(result(511, ids=[7] * 500)).usage_mismatch


def test_a_server_reporting_999_for_16_streamed_tokens_is_not_believed():
    r = reconcile(result(999, text="tok " * 16, ids=[7] * 16, chunks=16))
    assert r.usage_mismatch and (r.server_output_tokens, r.output_tokens, r.output_tokens_source) == (999, 16, "streamed")
    assert (r.streamed_tokens, r.streamed_tokens_source) == (16, "token_ids")
    assert r.chunk_tokens == (1,) * 16 and r.chunk_tokens_estimated  # the server's per-chunk split is not kept either
    assert mismatch_words(r) == "999 reported against 16 streamed, counted by its token ids"
    honest = reconcile(result(16, text="tok " * 16, ids=[7] * 16, chunks=16))
    assert not honest.usage_mismatch and honest.output_tokens == 16 and honest.output_tokens_source == "server"
    assert honest.chunk_tokens == result(16, chunks=16).chunk_tokens  # an agreeing server's split is kept


def test_without_ids_the_targets_tokenizer_counts_the_text_and_reasoning_alike():
    embedded = TargetTokenizer("embedded")
    assert embedded(" the") is None and not embedded.tried  # a count never loads it (it may run mid-point)
    assert embedded.ready() and embedded(" the" * 40) == 40
    assert not reconcile(result(41, text=" the" * 40), embedded).usage_mismatch  # + its end-of-sequence token
    flagged = reconcile(result(999, text=" the" * 40), embedded)
    assert flagged.usage_mismatch and flagged.streamed_tokens_source == "tokenizer" and flagged.output_tokens == 40
    assert reconcile(result(30, text=" the" * 40), embedded).usage_mismatch  # a server that undercounts too


def test_without_ids_or_tokenizer_the_chunks_and_bytes_bound_the_count():
    none_here = TargetTokenizer("no-such-org/no-such-model")
    assert not none_here.ready() and none_here("text") is None and "no tokenizer of no-such-org/no-such-model on this machine" in none_here.missing
    # 16 chunks of "tok " (64 bytes): a speculative server's 40 tokens in them is possible, 999 is not, nor 10
    assert not reconcile(result(40, text="tok " * 16, chunks=16), none_here).usage_mismatch
    lying = reconcile(result(999, text="tok " * 16, chunks=16), none_here)
    assert lying.usage_mismatch and (lying.output_tokens, lying.streamed_tokens_source) == (16, "chunks")
    assert reconcile(result(10, text="tok " * 16, chunks=16), none_here).usage_mismatch
    assert "output chunks, a lower bound" in mismatch_words(lying)


def test_failed_requests_and_warmups_are_left_as_they_are():
    for r in (result(999, ids=[7] * 16, ok=False), result(999, ids=[7] * 16, warmup=True)):
        assert reconcile(r) is r and r.streamed_tokens is None
    no_usage = reconcile(result(4, ids=[7] * 9, source="chunks"))  # no server count to doubt: recorded, not flagged
    assert not no_usage.usage_mismatch and no_usage.streamed_tokens == 9 and no_usage.output_tokens == 4


def test_even_split():
    assert even_split(16, 5) == (4, 3, 3, 3, 3) and sum(even_split(999, 7)) == 999 and even_split(3, 0) == ()


def committed_measured(run_dir: Path) -> list[RequestResult]:
    run = load_run(run_dir)
    records = [r for r in run.request_records() if r.ok and not r.warmup]
    assert len(records) == 288 and all(r.output_token_ids for r in records)
    return records


@pytest.mark.parametrize("run_dir", [VLLM_CPU, REFERENCE], ids=["vllm-cpu", "reference"])
def test_real_servers_committed_runs_flag_nothing_by_ids_or_by_tokenizer(run_dir):
    """Every measured request of the committed vLLM CPU and reference-server runs, counted by its stored token ids
    and again by the embedded target's tokenizer on its stored text: 0 flagged either way. The same requests with
    the count a server that miscounts would report: every one flagged."""
    embedded = TargetTokenizer("embedded")
    assert embedded.ready()
    records = committed_measured(run_dir)
    by_ids = [reconcile(r, embedded) for r in records]
    assert {r.streamed_tokens_source for r in by_ids} == {"token_ids"}
    assert sum(r.usage_mismatch for r in by_ids) == 0
    by_text = [reconcile(dataclasses.replace(r, output_token_ids=None), embedded) for r in records]
    assert {r.streamed_tokens_source for r in by_text} == {"tokenizer"}
    assert sum(r.usage_mismatch for r in by_text) == 0
    assert max(r.output_tokens - r.streamed_tokens for r in by_text) == 1  # the end-of-sequence token, no text
    inflated = [reconcile(dataclasses.replace(r, output_tokens=999), embedded) for r in records]
    assert all(r.usage_mismatch and r.output_tokens == len(r.output_token_ids) for r in inflated)
