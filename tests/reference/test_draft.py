"""The DFlash draft network: the target-layer rule, faithful Qwen3 layers, cache and mask conventions."""

import pytest
import torch

from dflashbench.reference.dflash.network import DFlashDraftConfig, DFlashDraftModel, build_target_layer_ids
from dflashbench.reference.target import extract_context_feature


def tiny_config(**kw) -> DFlashDraftConfig:
    base = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, num_target_layers=6, mask_token_id=3, block_size=4,
                rope_theta=10000.0, vocab_size=40)
    base.update(kw)
    return DFlashDraftConfig(**base)


@pytest.mark.parametrize(("L", "n", "expected"), [
    (36, 5, [1, 9, 17, 25, 33]),   # Qwen3-4B/8B
    (32, 5, [1, 8, 15, 22, 29]),   # Llama-3.1-8B
    (28, 1, [14]),
    (6, 2, [1, 3]),
])
def test_build_target_layer_ids_documented_rule(L, n, expected):
    assert build_target_layer_ids(L, n) == expected


def test_config_uses_default_rule_when_ids_absent():
    assert tiny_config(num_target_layers=36, num_hidden_layers=5).layer_ids == [1, 9, 17, 25, 33]
    assert tiny_config(target_layer_ids=[0, 5]).layer_ids == [0, 5]


def test_extract_context_feature_offsets_by_one():
    hs = tuple(torch.full((1, 3, 2), float(i)) for i in range(5))  # 0 = embeddings, i = layer i-1
    out = extract_context_feature(hs, [0, 2])
    assert out.shape == (1, 3, 4)
    assert out[0, 0].tolist() == [1.0, 1.0, 3.0, 3.0]


def test_layers_match_transformers_qwen3_without_context():
    """With no context and a causal mask the draft stack is a Qwen3 decoder: same numbers as transformers'."""
    from transformers import Qwen3Config, Qwen3Model

    torch.manual_seed(0)
    cfg = tiny_config()
    draft = DFlashDraftModel(cfg).double()
    hf = Qwen3Model(Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=8, vocab_size=40, rope_theta=10000.0,
                                rms_norm_eps=1e-6, attn_implementation="sdpa")).double()
    missing = hf.load_state_dict({k: v for k, v in draft.state_dict().items() if not k.startswith(("fc", "hidden"))},
                                 strict=False).missing_keys
    assert missing == ["embed_tokens.weight"]
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    pos = torch.arange(3, 8).expand(2, -1)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()[None]
    ours = draft(x, torch.zeros(2, 0, 64, dtype=torch.float64), pos, pos[:, :0], attn_mask=causal)
    theirs = hf(inputs_embeds=x, position_ids=pos).last_hidden_state
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


def _inputs(cfg, B=2, Tc=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    n = len(cfg.layer_ids)
    ctx = torch.randn(B, Tc, n * cfg.hidden_size, generator=g)
    blk = torch.randn(B, cfg.block_size, cfg.hidden_size, generator=g)
    return ctx, blk


def test_cache_gives_same_output_as_full_context():
    torch.manual_seed(0)
    cfg = tiny_config()
    draft = DFlashDraftModel(cfg)
    ctx, blk = _inputs(cfg, Tc=7)
    bpos = torch.arange(7, 11).expand(2, -1)
    full = draft(blk, ctx, bpos, torch.arange(7).expand(2, -1))
    cache = draft.new_cache()
    draft.prefill_context(ctx[:, :4], torch.arange(4).expand(2, -1), cache)
    assert cache.length == 4
    step = draft(blk, ctx[:, 4:], bpos, torch.arange(4, 7).expand(2, -1), cache=cache)
    assert cache.length == 7  # context appended, block not cached
    torch.testing.assert_close(step, full, rtol=1e-5, atol=1e-5)


def test_none_mask_is_all_true_mask_and_masked_keys_are_ignored():
    torch.manual_seed(0)
    cfg = tiny_config()
    draft = DFlashDraftModel(cfg)
    ctx, blk = _inputs(cfg, B=1, Tc=5)
    bpos, cpos = torch.arange(5, 9)[None], torch.arange(5)[None]
    a = draft(blk, ctx, bpos, cpos)
    b = draft(blk, ctx, bpos, cpos, attn_mask=torch.ones(1, 4, 9, dtype=torch.bool))
    torch.testing.assert_close(a, b)
    # Masking out context column 4 == not giving it at all.
    mask = torch.ones(1, 4, 9, dtype=torch.bool)
    mask[..., 4] = False
    c = draft(blk, ctx, bpos, cpos, attn_mask=mask)
    d = draft(blk, ctx[:, :4], bpos, cpos[:, :4])
    torch.testing.assert_close(c, d, rtol=1e-5, atol=1e-5)


def test_training_mask_convention_isolates_blocks():
    """Two blocks in one call with the documented dense mask == two separate inference calls."""
    torch.manual_seed(0)
    cfg = tiny_config()
    draft = DFlashDraftModel(cfg)
    S, K = 8, cfg.block_size
    ctx, blk0 = _inputs(cfg, B=1, Tc=S, seed=2)
    _, blk1 = _inputs(cfg, B=1, Tc=S, seed=3)
    anchors = [3, 6]
    blocks = torch.cat([blk0, blk1], dim=1)  # [1, 2K, H]
    bpos = torch.cat([torch.arange(a, a + K) for a in anchors])[None]
    mask = torch.zeros(1, 2 * K, S + 2 * K, dtype=torch.bool)
    for j, a in enumerate(anchors):
        rows = slice(j * K, (j + 1) * K)
        mask[0, rows, :a] = True  # context strictly before the anchor
        mask[0, rows, S + j * K:S + (j + 1) * K] = True  # own block, bidirectional
    out = draft(blocks, ctx, bpos, torch.arange(S)[None], attn_mask=mask)
    for j, (a, blk) in enumerate(zip(anchors, [blk0, blk1], strict=True)):
        ref = draft(blk, ctx[:, :a], torch.arange(a, a + K)[None], torch.arange(a)[None])
        torch.testing.assert_close(out[:, j * K:(j + 1) * K], ref, rtol=1e-5, atol=1e-5)


def test_bf16_cast_keeps_rope_in_float32():
    draft = DFlashDraftModel(tiny_config()).to(torch.bfloat16)
    assert draft.rotary.inv_freq.dtype == torch.float32
