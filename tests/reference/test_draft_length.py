"""Draft length below the drafter's, fixed or by batch size: vLLM's schedule rules, and still lossless.

The embedded pair (a trained DFlash drafter, block 16, and an EAGLE-3 head) accepts long runs of drafts, so a step
that verifies fewer than the block really changes what is accepted: greedy output must stay AR's at every K."""

from __future__ import annotations

import pytest
import torch

from dflashbench.reference.decode import DecodeBatch, SamplingParams, generate
from dflashbench.reference.draft_length import DraftSchedule

MAX_NEW = 40
PROMPTS = ("What is 17 plus 25? Show the steps.", "Write a python function that reverses a list.")


# --- the schedule: vLLM's rules (vllm/v1/spec_decode/dynamic/utils.py, 0.32.0) --------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    ("[]", "non-empty list"),
    ("[[1, 4]]", "three integers"),
    ("[[1, 4, 2.5]]", "three integers"),
    ("[[0, 4, 2]]", "must be positive"),
    ("[[1, 4, -1]]", "0 or more"),
    ("[[1, 4, 3], [3, 8, 1]]", "overlaps"),
    ("[[4, 1, 3]]", "starts after it ends"),
    ("[[2, 8, 3]]", "must start at 1"),
    ("[[1, 4, 3]", "is JSON"),
])
def test_a_schedule_vllm_would_refuse_is_refused_naming_the_rule(text, message):
    with pytest.raises(ValueError, match=message):
        DraftSchedule.parse(text)


def test_lookup_carries_gaps_and_the_tail_and_is_capped_as_vllm_expands_it():
    schedule = DraftSchedule.parse("[[32, 128, 2], [1, 16, 3]]")  # any order: sorted by the first batch size
    assert schedule.to_list() == [[1, 16, 3], [32, 128, 2]]
    # vLLM's own example: batch sizes 17-31 take the K before the gap; past the last range, the last K
    assert [schedule.k_at(b) for b in (1, 16, 17, 31, 32, 128, 500)] == [3, 3, 3, 3, 2, 2, 2]
    assert schedule.k_at(1, cap=1) == 1 and schedule.max_k == 3 and not schedule.is_fixed
    assert DraftSchedule.fixed(5).k_at(64) == 5 and DraftSchedule.fixed(5).is_fixed
    assert schedule.describe() == "c 1-16: K 3; c 32+: K 2"
    assert DraftSchedule.parse(schedule.to_json()) == schedule


# --- lossless at every K ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def embedded():
    from dflashbench.embedded import default_paths
    from dflashbench.reference.dflash.checkpoint import load_draft
    from dflashbench.reference.serving.oneshot import prompt_ids
    from dflashbench.reference.target import load_target

    paths = default_paths()
    target = load_target(paths.target)
    prompts = [prompt_ids(target.tokenizer, p) for p in PROMPTS]
    return target, load_draft(paths.dflash, dtype=target.dtype), paths.eagle3, prompts


def drafter_for(embedded, method: str, k: int):
    from dflashbench.reference.dflash.drafter import DFlashDrafter
    from dflashbench.reference.eagle3.drafter import load_eagle3_drafter
    from dflashbench.reference.ngram import NgramDrafter

    target, draft, eagle3, _ = embedded
    if method == "dflash":
        return DFlashDrafter(draft, target)  # the block of 16; the loop verifies its first k
    if method == "eagle3":
        return load_eagle3_drafter(eagle3, target, k)
    return NgramDrafter(k, 2, 3)


@pytest.mark.parametrize("method", ["dflash", "eagle3", "ngram"])
@pytest.mark.parametrize("k", [1, 3, 7, 15])
def test_greedy_output_is_the_targets_at_every_draft_length(embedded, method, k):
    target, _, _, prompts = embedded
    drafter = drafter_for(embedded, method, k)
    stop = tuple(target.stop_token_ids())
    for prompt in prompts:
        params = SamplingParams(MAX_NEW, stop_token_ids=stop)
        ar = generate(target, None, prompt, params)
        spec = generate(target, drafter, prompt, params, draft_len=lambda _batch, k=k: k)
        assert spec.token_ids == ar.token_ids
        assert spec.drafted and max(spec.drafted) <= k and max(spec.accept_lengths) <= k + 1
        if method == "dflash":  # the block drafts 15 every step: exactly k of them are verified
            assert set(spec.drafted) == {k}


def test_a_short_k_accepts_less_than_the_whole_block(embedded):
    """The limit is real: on the same prompt, DFlash verifying 1 token per step takes more steps than verifying 15
    (the embedded drafter accepts long runs), for the same output."""
    target, _, _, prompts = embedded
    drafter = drafter_for(embedded, "dflash", 15)
    params = SamplingParams(MAX_NEW, stop_token_ids=tuple(target.stop_token_ids()))
    short = generate(target, drafter, prompts[0], params, draft_len=lambda _b: 1)
    long = generate(target, drafter, prompts[0], params, draft_len=lambda _b: 15)
    assert short.token_ids == long.token_ids
    assert short.tau <= 2.0 < long.tau and short.num_steps > long.num_steps


def test_eagle3_drafts_only_the_chain_it_verifies(embedded):
    """A limit shortens EAGLE-3's chain (its cost): one pass enters the committed tokens and drafts the first token,
    then one pass per further draft."""
    target, _, _, prompts = embedded
    drafter = drafter_for(embedded, "eagle3", 7)
    calls = []
    hook = drafter.head.register_forward_hook(lambda *_: calls.append(1))
    try:
        batch = DecodeBatch(target, drafter, draft_len=lambda _b: 2)
        batch.add(prompts[0], SamplingParams(MAX_NEW))
        calls.clear()
        outs = batch.step()
    finally:
        hook.remove()
    assert [o.drafted for o in outs] == [2] and len(calls) == 2


def test_a_schedule_verifies_each_steps_k_by_its_batch_size_and_stays_lossless(embedded):
    """Rows join and leave: each step verifies the schedule's K for the rows decoded together, and every output is
    still the target's greedy one."""
    target, draft, _, prompts = embedded
    from dflashbench.reference.dflash.drafter import DFlashDrafter

    schedule = DraftSchedule.parse("[[1, 1, 9], [2, 2, 4], [3, 8, 1]]")
    stop = tuple(target.stop_token_ids())
    budgets = [MAX_NEW, 12, 25]
    requests = [(prompts[i % 2], SamplingParams(budgets[i], stop_token_ids=stop), i) for i in range(3)]
    expected = [generate(target, None, p, params).token_ids for p, params, _ in requests]
    batch = DecodeBatch(target, DFlashDrafter(draft, target), draft_len=schedule.k_at)
    got: dict[int, list[int]] = {i: [] for i in range(3)}
    for out in batch.add_many(requests):
        got[out.row.tag] += out.token_ids
    seen = set()
    while batch.rows:
        rows = len(batch.rows)
        for out in batch.step():
            got[out.row.tag] += out.token_ids
            assert out.drafted == schedule.k_at(rows)
            seen.add((rows, out.drafted))
    assert [got[i] for i in range(3)] == expected
    assert {(3, 1), (1, 9)} <= seen  # the batch shrank through the schedule's ranges


def test_k_zero_is_an_ar_step():
    from dflashbench.reference.drafters import OracleDrafter
    from dflashbench.reference.tiny import tiny_target

    target = tiny_target("qwen3", seed=3, vocab_size=64, init_std=0.5)
    prompt = torch.randint(5, 63, (20,), generator=torch.Generator().manual_seed(1)).tolist()
    ar = generate(target, None, prompt, SamplingParams(20))
    oracle = OracleDrafter(prompt + ar.token_ids, block_size=6)
    none = generate(target, oracle, prompt, SamplingParams(20), draft_len=lambda _b: 0)
    assert none.token_ids == ar.token_ids and set(none.drafted) == {0} and none.tokens_per_step == 1.0
