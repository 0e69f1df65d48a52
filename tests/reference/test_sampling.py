"""Sampled DFlash output follows the target's own distribution (chi-square on a tiny vocabulary).

On an 8-token vocabulary we compute the target's exact joint distribution of the first three generated
tokens (512 cells) and compare it with N = 4000 DFlash samples drawn at temperature 1. Cells with expected
count < 5 are pooled. Tolerance: the correct decoder must give p > 0.001 (seeded, so the verdict is
deterministic); an implementation that accepts draft tokens without checking them against the target's
sampled token must give p < 1e-6 on the very same setup (the negative control below), so the test has the
power to catch that bug.
"""

import collections

import pytest
import torch
from scipy.stats import chisquare

from dflashbench.reference import decode
from dflashbench.reference.decode import DecodeBatch, SamplingParams, ar_decode
from dflashbench.reference.dflash.drafter import DFlashDrafter
from dflashbench.reference.drafters import OracleDrafter
from dflashbench.reference.tiny import tiny_draft, tiny_target

V, N, PROMPT = 8, 4000, [2, 3, 4]


@pytest.fixture(scope="module")
def target():
    return tiny_target("qwen3", seed=0, init_std=0.5, vocab_size=V)


def exact_joint(target) -> torch.Tensor:
    """p(t0, t1, t2 | prompt) as a [V, V, V] tensor, from the target's own next-token distributions."""
    pairs = torch.cartesian_prod(torch.arange(V), torch.arange(V))  # [V*V, 2]
    seqs = torch.cat([torch.tensor(PROMPT).expand(V * V, -1), pairs], dim=1)
    with torch.no_grad():
        probs = torch.softmax(target.model(seqs).logits[:, -3:].double(), dim=-1)  # [V*V, 3, V]
    p0 = probs[0, 0]  # [V]
    p1 = probs[:, 1].view(V, V, V)[:, 0]  # p(t1 | t0): [V(t0), V(t1)]
    p2 = probs[:, 2].view(V, V, V)  # p(t2 | t0, t1)
    return p0[:, None, None] * p1[:, :, None] * p2


def sample_dflash(target, drafter, seed=0) -> tuple[collections.Counter, collections.Counter]:
    batch = DecodeBatch(target, drafter)
    outs = batch.add_copies(PROMPT, SamplingParams(3, temperature=1.0), N, torch.Generator().manual_seed(seed))
    tokens = {id(o.row): list(o.token_ids) for o in outs}
    accepted = collections.Counter()
    while batch.rows:
        for o in batch.step():
            tokens[id(o.row)] += o.token_ids
            accepted[o.accepted] += 1
    return collections.Counter(tuple(t) for t in tokens.values()), accepted


def p_value(counts: collections.Counter, joint: torch.Tensor) -> float:
    expected = (joint.flatten() * N).tolist()
    observed = [counts.get((i // (V * V), (i // V) % V, i % V), 0) for i in range(V**3)]
    assert sum(observed) == N
    big = [i for i, e in enumerate(expected) if e >= 5]
    small = [i for i, e in enumerate(expected) if e < 5]
    obs = [observed[i] for i in big] + [sum(observed[i] for i in small)]
    exp = [expected[i] for i in big] + [sum(expected[i] for i in small)]
    exp = [e * N / sum(exp) for e in exp]  # float round-off: totals must match exactly
    return float(chisquare(obs, exp).pvalue)


def greedy_oracle(target, block_size=4):
    """Drafts the target's greedy path: often right at temperature 1 on a peaked tiny model."""
    future = PROMPT + ar_decode(target, PROMPT, max_new_tokens=3 + block_size).token_ids
    return OracleDrafter(future, block_size, vocab_size=V)


def test_dflash_samples_follow_target_distribution(target):
    joint = exact_joint(target)
    draft = tiny_draft(target, block_size=4, seed=1, mask_token_id=V - 1)
    for drafter in (DFlashDrafter(draft, target), greedy_oracle(target)):
        counts, accepted = sample_dflash(target, drafter)
        assert sum(n for a, n in accepted.items() if a > 0) > 100, "drafts must be accepted for the test to bite"
        assert p_value(counts, joint) > 1e-3


def test_negative_control_accepting_unchecked_drafts_is_caught(target, monkeypatch):
    joint = exact_joint(target)
    monkeypatch.setattr(decode, "accepted_prefix_len",
                        lambda drafts, chosen: torch.full((drafts.shape[0],), drafts.shape[1], dtype=torch.long))
    counts, _ = sample_dflash(target, greedy_oracle(target))
    assert p_value(counts, joint) < 1e-6
