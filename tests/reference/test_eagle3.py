"""EAGLE-3 in the reference decoder: lossless, the head's incremental cache equals recomputing from scratch
(single stream and batched, rows joining and leaving), training == inference, checkpoint layout."""

from dataclasses import dataclass, field

import pytest
import torch

from dflashbench.reference.decode import DecodeBatch, SamplingParams, ar_decode, dflash_decode, generate
from dflashbench.reference.eagle3.drafter import Eagle3Drafter, Eagle3State
from dflashbench.reference.eagle3.network import Eagle3Cache
from dflashbench.reference.eagle3.ttt import ttt_unroll
from dflashbench.reference.target import extract_context_feature
from dflashbench.reference.tiny import tiny_eagle3, tiny_target

VOCAB = 64
_TARGETS: dict = {}


def target_for(arch: str, seed: int, dtype=torch.float32):
    if (arch, seed, dtype) not in _TARGETS:
        _TARGETS[arch, seed, dtype] = tiny_target(
            arch, seed=seed, vocab_size=VOCAB, init_std=0.5, dtype=dtype
        )
    return _TARGETS[arch, seed, dtype]


def prompt(n: int, seed: int) -> list[int]:
    return torch.randint(5, VOCAB - 1, (n,), generator=torch.Generator().manual_seed(100 + seed)).tolist()


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize(("k", "seed"), [(1, 0), (3, 1), (8, 2)])
def test_greedy_eagle3_equals_greedy_ar(arch, k, seed):
    target = target_for(arch, seed)
    drafter = Eagle3Drafter(tiny_eagle3(target, k=k, seed=10 + seed), target)
    assert drafter.block_size == k + 1
    for n in (1, 50):
        p = prompt(n, seed)
        free = ar_decode(target, p, max_new_tokens=40)
        stop = free.token_ids[len(free.token_ids) // 2]
        for stops in ((), (stop,)):
            ar = ar_decode(target, p, max_new_tokens=40, stop_token_ids=stops)
            e3 = dflash_decode(target, drafter, p, max_new_tokens=40, stop_token_ids=stops)
            assert e3.token_ids == ar.token_ids, (n, stops)
            assert e3.finish_reason == ar.finish_reason
            assert e3.num_steps == 0 or 1.0 <= e3.tau <= k + 1


# ---------------------------------------------------------------------- the cache against a recomputation


@dataclass
class TaggedState(Eagle3State):
    tags: list = field(default_factory=list)  # each row's known greedy continuation (prompt + output)

    def extend(self, other):
        super().extend(other)
        self.tags += other.tags

    def select(self, rows):
        super().select(rows)
        self.tags = [self.tags[i] for i in rows.tolist()]


class SteeredDrafter(Eagle3Drafter):
    """Runs the real head (its proposals are recorded), then proposes the row's true continuation with
    some tokens deliberately wrong, so acceptance lengths vary from 0 to k and every bookkeeping path
    (accepted prefix re-entered, rows of different lengths, holes, compaction) is exercised."""

    def __init__(self, head, target, k, futures: dict):
        super().__init__(head, target, k)
        self.futures, self.log, self.outputs = futures, [], []
        greedy = head.greedy_tokens

        def recording(normed):  # the head's outputs behind each draft, [B, 1, H] per chain pass
            self.outputs.append(normed)
            return greedy(normed)

        head.greedy_tokens = recording

    def start(self, prompt_ids, features):
        s = super().start(prompt_ids, features)
        return TaggedState(s.cache, s.pending, s.drafts, tags=[self.futures[tuple(prompt_ids)]])

    def propose(self, state, anchors, starts, ctx, ctx_len):
        self.outputs.clear()
        own = super().propose(state, anchors, starts, ctx, ctx_len)
        normed = torch.cat(self.outputs, dim=1)  # [B, k, H]
        steered = own.clone()
        for r, (seq, s) in enumerate(zip(state.tags, starts.tolist(), strict=True)):
            self.log.append((seq[: s + 1], own[r].tolist(), normed[r]))
            for j in range(self.k):
                true = seq[s + 1 + j] if s + 1 + j < len(seq) else 0
                wrong = (s * 2654435761 + j * 40503) % 97 % 4 == 0
                steered[r, j] = (true + 1) % VOCAB if wrong else true
        state.drafts = steered
        return steered


def scratch_drafts(head, target, committed: list[int], k: int) -> tuple[list[int], torch.Tensor]:
    """The head's k drafts after ``committed`` (anchor last) and its outputs behind them ``[k, H]``, computed
    from nothing: fresh target features of every committed position, every entry entered at once, the chain."""
    ids = torch.tensor([committed])
    out = target.model(input_ids=ids[:, :-1], output_hidden_states=True)
    feats = extract_context_feature(out.hidden_states, head.config.feature_layer_ids)
    attn = head.midlayer.self_attn
    cache = Eagle3Cache(1, attn.num_kv_heads, attn.head_dim, feats.dtype, "cpu")
    P = ids.shape[1] - 1
    normed, hidden = head(target.embed(ids[:, 1:]), head.fuse(feats), torch.arange(P)[None], cache)
    outputs = [normed[0, -1]]
    hidden = hidden[:, -1:]
    for j in range(1, k):
        draft = head.draft_to_target[head.draft_logits(outputs[-1]).argmax(-1)]
        normed, hidden = head(target.embed(draft.view(1, 1)), hidden, torch.tensor([[P - 1 + j]]), cache)
        outputs.append(normed[0, 0])
    outputs = torch.stack(outputs)
    return head.draft_to_target[head.draft_logits(outputs).argmax(-1)].tolist(), outputs


def check_against_recomputation(drafter, head, target, k):
    assert drafter.log
    for committed, own, normed in drafter.log:
        drafts, outputs = scratch_drafts(head, target, committed, k)
        assert own == drafts
        torch.testing.assert_close(normed, outputs)


def _futures(target, prompts, n_new):
    return {tuple(p): p + ar_decode(target, p, max_new_tokens=n_new + 16).token_ids for p in prompts}


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("k", [2, 5])
def test_incremental_drafts_equal_a_recomputation_single_stream(arch, k):
    target = target_for(arch, 3, torch.float64)
    head = tiny_eagle3(target, k=k, seed=4, draft_vocab_size=48)  # a compressed draft vocabulary (d2t)
    prompts = [prompt(1, 0), prompt(20, 1)]
    drafter = SteeredDrafter(head, target, k, _futures(target, prompts, 60))
    for p in prompts:
        gen = generate(target, drafter, p, SamplingParams(60))
        assert gen.token_ids == ar_decode(target, p, max_new_tokens=60).token_ids
        assert set(gen.accept_lengths) == set(range(1, k + 2))  # every acceptance length occurs
    check_against_recomputation(drafter, head, target, k)


def test_incremental_drafts_equal_a_recomputation_batched_rows_join_and_leave():
    target = target_for("qwen3", 5, torch.float64)
    k = 4
    head = tiny_eagle3(target, k=k, seed=6)
    prompts = [prompt(2, 2), prompt(30, 3), prompt(9, 4), prompt(1, 5)]
    budgets = [120, 25, 90, 60]
    drafter = SteeredDrafter(head, target, k, _futures(target, prompts, max(budgets)))
    batch = DecodeBatch(target, drafter)
    outputs = {i: [] for i in range(len(prompts))}
    pending = list(range(len(prompts)))
    steps = 0
    compactions = 0
    while pending or batch.rows:
        if pending and (steps % 7 == 0 or not batch.rows):  # rows join mid-way
            i = pending.pop(0)
            outputs[i] += batch.add(prompts[i], SamplingParams(budgets[i]), tag=i).token_ids
        before = batch.draft_state.cache.length if batch.draft_state is not None else 0
        for out in batch.step():
            outputs[out.row.tag] += out.token_ids
        if batch.draft_state is not None:
            compactions += batch.draft_state.cache.length < before
        steps += 1
    for i, p in enumerate(prompts):
        assert outputs[i] == ar_decode(target, p, max_new_tokens=budgets[i]).token_ids, i
    assert compactions >= 1  # holes were compacted away at least once
    check_against_recomputation(drafter, head, target, k)


def test_cache_compaction_keeps_attention():
    torch.manual_seed(0)
    cache = Eagle3Cache(2, 2, 4, torch.float64, "cpu")
    k, v = torch.randn(2, 2, 50, 4, dtype=torch.float64), torch.randn(2, 2, 50, 4, dtype=torch.float64)
    valid = torch.rand(2, 50) < 0.3
    valid[:, 0] = True
    cache.append(k, v, torch.arange(50).expand(2, 50), valid)
    q_pos = torch.tensor([[60], [61]])
    q = torch.randn(2, 2, 1, 4, dtype=torch.float64)

    def attend():
        keys, values, mask = (
            cache.k,
            cache.v,
            cache.valid[:, None, :] & (cache.pos[:, None, :] <= q_pos[:, :, None]),
        )
        return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask[:, None])

    before = attend()
    cache.compact(slack=0)
    assert cache.length == int(valid.sum(1).max())
    torch.testing.assert_close(attend(), before)


# ------------------------------------------------------------------------------- training == inference


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_training_time_test_sees_what_a_decoding_chain_sees(arch):
    """Step i of the unrolled training at entry t == the inference chain's i-th pass after entries 0..t,
    fed the same tokens (positions, keys and hidden states all line up)."""
    target = target_for(arch, 7, torch.float64)
    head = tiny_eagle3(target, k=3, seed=8)
    S, steps = 24, 5
    ids = torch.randint(0, VOCAB, (2, S), generator=torch.Generator().manual_seed(0))
    hidden_states = target.model(input_ids=ids, output_hidden_states=True).hidden_states
    feats = extract_context_feature(hidden_states, head.config.feature_layer_ids)
    anchors = torch.tensor([[0, 9, 21], [4, 13, 22]])
    normed0, outs = ttt_unroll(head, target.embed, feats, ids, anchors, steps)
    attn = head.midlayer.self_attn
    for b in range(2):
        for a, t in enumerate(anchors[b].tolist()):
            cache = Eagle3Cache(1, attn.num_kv_heads, attn.head_dim, torch.float64, "cpu")
            normed, hidden = head(
                target.embed(ids[b : b + 1, 1 : t + 2]),
                head.fuse(feats[b : b + 1, : t + 1]),
                torch.arange(t + 1)[None],
                cache,
            )
            torch.testing.assert_close(normed[0, -1], normed0[b, t])
            hidden = hidden[:, -1:]
            for i in range(1, steps):
                tok = ids[b : b + 1, min(t + 1 + i, S - 1)][:, None]
                normed, hidden = head(target.embed(tok), hidden, torch.tensor([[t + i]]), cache)
                torch.testing.assert_close(normed[0, 0], outs[i - 1][b, a])
