"""Lossless decoding: greedy DFlash == greedy AR, token for token, whatever the drafter proposes."""

import pytest
import torch

from dflashbench.reference.decode import SamplingParams, ar_decode, dflash_decode, generate
from dflashbench.reference.drafters import OracleDrafter
from dflashbench.reference.tiny import tiny_draft, tiny_target

VOCAB = 64
_TARGETS: dict = {}


def target_for(arch: str, seed: int):
    if (arch, seed) not in _TARGETS:
        _TARGETS[arch, seed] = tiny_target(arch, seed=seed, vocab_size=VOCAB, init_std=0.5)
    return _TARGETS[arch, seed]


def prompt(kind: str, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(100 + seed)
    n = 3 if kind == "short" else 150
    return torch.randint(5, VOCAB - 1, (n,), generator=g).tolist()


def new_token_near_middle(tokens: list[int]) -> int | None:
    """Index of a token that does not occur earlier, nearest the middle (a stop there ends generation there)."""
    fresh = [i for i in range(1, len(tokens)) if tokens[i] not in tokens[:i]]
    return min(fresh, key=lambda i: abs(i - len(tokens) // 2)) if fresh else None


# Each architecture with each block size, the seeds spread over them (targets and drafters are random).
@pytest.mark.parametrize(("arch", "block_size", "seed"), [
    ("qwen3", 2, 0), ("qwen3", 8, 1), ("qwen3", 16, 2), ("llama", 2, 1), ("llama", 8, 2), ("llama", 16, 0)])
def test_greedy_dflash_equals_greedy_ar(arch, block_size, seed):
    target = target_for(arch, seed)
    draft = tiny_draft(target, block_size=block_size, seed=10 + seed)
    for kind in ("short", "long"):
        p = prompt(kind, seed)
        ar = ar_decode(target, p, max_new_tokens=32)
        df = dflash_decode(target, draft, p, max_new_tokens=32)
        assert df.token_ids == ar.token_ids, kind
        assert ar.finish_reason == df.finish_reason == "length"
        assert ar.tau == 1.0 and 1.0 <= df.tau <= block_size
        assert sum(df.histogram) == df.num_steps and df.histogram[0] == 0
        # A stop token from the middle of the output: both end right after it, keeping it.
        idx = new_token_near_middle(ar.token_ids)
        assert idx is not None, "degenerate random target: pick another seed"
        stops = (ar.token_ids[idx],)
        ar_stop = ar_decode(target, p, max_new_tokens=32, stop_token_ids=stops)
        df_stop = dflash_decode(target, draft, p, max_new_tokens=32, stop_token_ids=stops)
        assert ar_stop.token_ids == df_stop.token_ids == ar.token_ids[: idx + 1]
        assert ar_stop.finish_reason == df_stop.finish_reason == "stop"


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("block_size", [2, 8, 16])
def test_oracle_drafter_reaches_block_size_and_wrong_drafter_one(arch, block_size):
    target = target_for(arch, 0)
    p = prompt("short", 0)
    ar = ar_decode(target, p, max_new_tokens=40)
    future = p + ar_decode(target, p, max_new_tokens=40 + block_size).token_ids
    params = SamplingParams(40)
    oracle = generate(target, OracleDrafter(future, block_size, vocab_size=VOCAB), p, params)
    wrong = generate(target, OracleDrafter(future, block_size, vocab_size=VOCAB, wrong=True), p, params)
    assert oracle.token_ids == wrong.token_ids == ar.token_ids
    assert oracle.tau == block_size and set(oracle.accept_lengths) == {block_size}
    assert oracle.num_steps == -(-(40 - 1) // block_size)  # prefill token + full blocks
    assert wrong.tau == 1.0 and wrong.num_steps == 39
    assert oracle.histogram[block_size] == oracle.num_steps


def test_stop_token_mid_block_is_kept_and_ends_generation():
    target = target_for("qwen3", 1)
    p = prompt("short", 1)
    free = ar_decode(target, p, max_new_tokens=40).token_ids
    # first index >= 3 whose token did not occur before: the stop hits there, inside the 2nd block of 8
    idx = next(i for i in range(3, len(free)) if free[i] not in free[:i])
    future = p + free
    out = generate(target, OracleDrafter(future, 8, vocab_size=VOCAB), p,
                   SamplingParams(40, stop_token_ids=(free[idx],)))
    assert out.token_ids == free[: idx + 1]
    assert out.finish_reason == "stop"
    assert idx % 8 != 0  # not on a block boundary: the cut happened mid-block


def test_max_new_tokens_and_first_token_only():
    target = target_for("qwen3", 0)
    draft = tiny_draft(target, block_size=8)
    p = prompt("short", 0)
    one = dflash_decode(target, draft, p, max_new_tokens=1)
    assert len(one.token_ids) == 1 and one.num_steps == 0 and one.finish_reason == "length"
    for n in (2, 7, 9, 23):
        assert len(dflash_decode(target, draft, p, max_new_tokens=n).token_ids) == n


def test_seeded_sampling_is_reproducible():
    target = target_for("qwen3", 0)
    draft = tiny_draft(target, block_size=4)
    p = prompt("short", 0)
    a = dflash_decode(target, draft, p, max_new_tokens=30, temperature=1.0, seed=7)
    b = dflash_decode(target, draft, p, max_new_tokens=30, temperature=1.0, seed=7)
    c = dflash_decode(target, draft, p, max_new_tokens=30, temperature=1.0, seed=8)
    assert a.token_ids == b.token_ids != c.token_ids


@pytest.mark.parametrize(("arch", "method"), [("qwen3", "ar"), ("qwen3", "dflash"), ("llama", "dflash")])
def test_requests_prefilled_together_equal_their_single_stream_output(arch, method):
    """add_many: one right-padded prefill pass for prompts of different lengths, rows that end at their
    first token dropped at once, then joined by a later request; every output is its own greedy AR output."""
    from dflashbench.reference.decode import DecodeBatch
    from dflashbench.reference.dflash.drafter import DFlashDrafter
    from dflashbench.reference.drafters import NullDrafter

    target = target_for(arch, 2)
    drafter = DFlashDrafter(tiny_draft(target, block_size=8, seed=5), target) if method == "dflash" else NullDrafter()
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(5, VOCAB - 1, (n,), generator=g).tolist() for n in (3, 57, 1, 20, 11)]
    budgets = [40, 25, 1, 33, 18]  # the third ends at its first token
    expected = [ar_decode(target, p, max_new_tokens=m).token_ids for p, m in zip(prompts, budgets, strict=True)]

    batch = DecodeBatch(target, drafter)
    got: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
    outs = batch.add_many([(prompts[i], SamplingParams(budgets[i]), i) for i in range(4)])
    assert [o.row.tag for o in outs] == [0, 1, 2, 3] and outs[2].finish_reason == "length"
    assert len(batch.rows) == 3 and batch.kv.batch_size == 3  # the finished row never joined
    for o in outs:
        got[o.row.tag] += o.token_ids
    for step in range(200):
        if step == 2:  # a late request joins a running, holed batch
            got[4] += batch.add(prompts[4], SamplingParams(budgets[4]), tag=4).token_ids
        if not batch.rows:
            break
        for o in batch.step():
            got[o.row.tag] += o.token_ids
    assert [got[i] for i in range(len(prompts))] == expected


def test_prefill_of_several_prompts_gives_each_prompts_own_last_logits():
    from dflashbench.reference.target import TargetKV

    target = target_for("qwen3", 0)
    prompts = [[7, 8, 9], [10, 11, 12, 13, 14, 15], [20]]
    logits, feats = TargetKV(target).prefill(prompts, [0, 1])
    assert logits.shape[:2] == (3, 1) and feats.shape[:2] == (3, 6)
    for i, p in enumerate(prompts):
        alone, alone_feats = TargetKV(target).prefill([p], [0, 1])
        torch.testing.assert_close(logits[i], alone[0], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(feats[i, : len(p)], alone_feats[0], rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="empty"):
        TargetKV(target).prefill([[1, 2], []])


def test_planted_acceptance_fault_breaks_losslessness_and_only_for_speculative_decoding():
    """``accept-extra-draft`` (``dflashbench serve --test-fault``, for the harness's quality tests) lets one
    rejected draft token through per step: DFlash output departs from AR's; AR (no drafts) is unchanged."""
    from dflashbench.reference.decode import DecodeBatch
    from dflashbench.reference.dflash.drafter import DFlashDrafter
    from dflashbench.reference.drafters import NullDrafter

    target = target_for("qwen3", 1)
    draft = tiny_draft(target, block_size=8, seed=11)
    p = prompt("long", 1)
    params = SamplingParams(32)

    def run(drafter, fault):
        batch = DecodeBatch(target, drafter, fault)
        tokens = batch.add(p, params).token_ids
        while batch.rows:
            tokens += [t for o in batch.step() for t in o.token_ids]
        return tokens

    ar = run(NullDrafter(), None)
    assert run(NullDrafter(), "accept-extra-draft") == ar
    assert run(DFlashDrafter(draft, target), None) == ar
    assert run(DFlashDrafter(draft, target), "accept-extra-draft") != ar
    with pytest.raises(ValueError, match="unknown fault"):
        DecodeBatch(target, NullDrafter(), "accept-everything")



def test_the_kv_cache_goes_by_the_name_the_installed_transformers_takes():
    """transformers renamed forward(past_key_values=) to cache= (5.24.0, removed in 5.40.0): the target passes the
    cache by the name the model's forward takes, so neither an older release nor the rename's warning breaks it."""
    import inspect
    import warnings

    from dflashbench.reference.target import _cache_keyword

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, use_cache=None):
            return input_ids

    assert _cache_keyword(Old()) == "past_key_values" and _cache_keyword(New()) == "cache"
    target = target_for("qwen3", 0)
    installed = inspect.signature(target.model.model.forward).parameters
    assert _cache_keyword(target.model.model) == ("cache" if "cache" in installed else "past_key_values")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a deprecated keyword's warning fails the decode
        assert len(ar_decode(target, prompt("long", 0), max_new_tokens=8).token_ids) == 8
