"""n-gram (prompt lookup) drafting: vLLM's matching rule, and lossless decoding with it."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dflashbench.reference.decode import DecodeBatch, SamplingParams, ar_decode, generate
from dflashbench.reference.ngram import NgramDrafter, propose
from dflashbench.reference.tiny import tiny_target

VOCAB = 64


@pytest.mark.parametrize(("context", "k", "min_n", "max_n", "expected"), [
    # the last 2 tokens (7, 8) occur at 1..2: the 3 tokens after them
    ([5, 7, 8, 9, 10, 11, 7, 8], 3, 2, 2, [9, 10, 11]),
    # fewer than k follow the match: as many as there are
    ([1, 2, 3, 1, 2], 5, 2, 2, [3, 1, 2]),
    # the longest n wins over an earlier shorter match: (2, 3) at 4..5 is longer than (3,) at 0
    ([3, 9, 9, 9, 2, 3, 4, 2, 3], 1, 1, 2, [4]),
    # of the longest, the earliest occurrence: (1, 2) at 0 and at 3, the first gives 3
    ([1, 2, 3, 1, 2, 4, 1, 2], 1, 2, 2, [3]),
    # n is capped at max_n: the whole (4, 5, 6) recurs, but only 2-grams are looked for; (5, 6) first at 1
    ([4, 5, 6, 7, 4, 5, 6], 2, 1, 2, [7, 4]),
    # no match of at least min_n: nothing
    ([1, 2, 3, 4], 3, 1, 3, []),
    ([1, 2, 1], 3, 2, 3, []),
    # a match overlapping the suffix (runs of one token): drafts continue the run
    ([6, 6, 6], 4, 2, 2, [6]),
    # the context is shorter than min_n
    ([1], 3, 2, 2, []),
])  # fmt: skip
def test_propose_follows_vllms_rule(context, k, min_n, max_n, expected):
    assert propose(context, k, min_n, max_n) == expected


def brute_force(context, k, min_n, max_n):
    """vLLM's rule as a search over every (n, start): the longest n, then the earliest start."""
    found = [(n, s) for n in range(min_n, max_n + 1) for s in range(len(context))
             if s + n <= len(context) - 1 and n <= len(context) and context[s:s + n] == context[len(context) - n:]]
    if not found:
        return []
    n, s = min(found, key=lambda p: (-p[0], p[1]))
    return context[s + n:s + n + k]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=40), st.integers(1, 6), st.integers(1, 3), st.integers(0, 3))
def test_propose_equals_the_brute_force_rule(context, k, min_n, extra):
    assert propose(context, k, min_n, min_n + extra) == brute_force(context, k, min_n, min_n + extra)


_TARGETS: dict = {}


def target_for(arch: str, seed: int):
    if (arch, seed) not in _TARGETS:
        _TARGETS[arch, seed] = tiny_target(arch, seed=seed, vocab_size=VOCAB, init_std=0.5)
    return _TARGETS[arch, seed]


def repetitive_prompt(seed: int, n: int = 60) -> list[int]:
    """A prompt made of a few repeated phrases, so n-grams match and drafts are long."""
    g = torch.Generator().manual_seed(seed)
    phrases = [torch.randint(5, VOCAB - 1, (6,), generator=g).tolist() for _ in range(3)]
    out: list[int] = []
    while len(out) < n:
        out += phrases[int(torch.randint(0, 3, (1,), generator=g))]
    return out[:n]


@pytest.mark.parametrize(("arch", "seed", "k", "min_n", "repetitive"), [
    ("qwen3", 0, 5, 2, True), ("llama", 1, 3, 1, True), ("qwen3", 1, 6, 1, False)])
def test_greedy_ngram_equals_greedy_ar(arch, seed, k, min_n, repetitive):
    target = target_for(arch, seed % 2)
    g = torch.Generator().manual_seed(seed)
    p = repetitive_prompt(seed) if repetitive else torch.randint(5, VOCAB - 1, (40,), generator=g).tolist()
    ar = ar_decode(target, p, max_new_tokens=24)
    ng = generate(target, NgramDrafter(k, min_n, min_n + 1), p, SamplingParams(24))
    assert ng.token_ids == ar.token_ids
    assert all(1 <= a <= k + 1 for a in ng.accept_lengths)


def test_ngram_drafts_on_a_repetitive_prompt_and_counts_only_steps_with_drafts():
    """The tiny random target repeats itself, so prompt lookup is accepted; each step reports how many tokens it
    drafted (0 where nothing matched), which is what the server counts as a draft (vLLM's meaning)."""
    target = target_for("qwen3", 0)
    p = repetitive_prompt(1)
    batch = DecodeBatch(target, NgramDrafter(5, 2, 2))
    batch.add(p, SamplingParams(60))
    steps = []
    while batch.rows:
        steps += batch.step()
    drafted = [s.drafted for s in steps]
    assert max(drafted) == 5 and all(0 <= d <= 5 for d in drafted)
    assert all(s.accepted <= s.drafted for s in steps)
    assert sum(s.accepted for s in steps) > 0  # something was accepted: tau > 1 over the steps with drafts


def test_rows_with_and_without_drafts_decode_together_losslessly():
    """One batch where some rows find matches and others do not: each row's output is its own greedy AR output."""
    target = target_for("llama", 1)
    g = torch.Generator().manual_seed(3)
    prompts = [repetitive_prompt(2), torch.randint(5, VOCAB - 1, (9,), generator=g).tolist(), repetitive_prompt(4, 30)]
    expected = [ar_decode(target, p, max_new_tokens=30).token_ids for p in prompts]
    batch = DecodeBatch(target, NgramDrafter(4, 1, 3))
    got = {i: o.token_ids for i, o in enumerate(batch.add_many([(p, SamplingParams(30), i) for i, p in
                                                                 enumerate(prompts)]))}  # fmt: skip
    while batch.rows:
        for o in batch.step():
            got[o.row.tag] = got[o.row.tag] + o.token_ids
    assert [got[i] for i in range(3)] == expected


def test_generation_tau_counts_steps_that_drafted_as_the_server_does():
    """Issue #56: a generation's tau follows vLLM's rule (1 + accepted / steps that drafted), the same figure the
    reference server reports for the same request; tokens_per_step averages over every step and is lower where some
    steps drafted nothing."""
    from dflashbench.reference.decode import decode_steps
    from dflashbench.reference.serving.engine import EngineStep
    from dflashbench.reference.serving.server import RequestState

    target = target_for("qwen3", 0)
    p, params = repetitive_prompt(1), SamplingParams(60)
    gen = generate(target, NgramDrafter(5, 2, 2), p, params)
    state = RequestState(prompt_tokens=len(p))
    for out in decode_steps(target, NgramDrafter(5, 2, 2), p, params):
        state.record(EngineStep(out.token_ids, out.drafted, out.accepted))
    served = state.spec_decode()
    assert 0 < gen.num_drafts < gen.num_steps  # some steps drafted, some found no match
    assert served["num_drafts"] == gen.num_drafts
    assert gen.tau == pytest.approx(1 + served["num_accepted_tokens"] / served["num_drafts"])
    assert gen.tokens_per_step < gen.tau
    assert ar_decode(target, p, max_new_tokens=60).tau == 1.0
