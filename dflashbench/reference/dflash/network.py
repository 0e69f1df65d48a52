"""The DFlash draft network, in plain torch (no dependence on transformers' private Qwen3 classes).

A stack of Qwen3-style decoder layers that drafts a whole block of tokens in one pass, conditioned on the
target's hidden states. There is no embedding and no LM head: block tokens are embedded with the target's
``embed_tokens`` and draft logits come from the target's ``lm_head``.

Shapes (``H`` hidden size, ``n`` number of target layers fused, ``Hq``/``Hkv`` query/key-value heads,
``D`` head dim):

* ``context_features`` ``[B, Tc, n*H]``: the chosen target layers' hidden states, concatenated
  (:func:`~dflashbench.reference.target.extract_context_feature`). Fused once per call: ``ctx = hidden_norm(fc(context_features))``
  ``[B, Tc, H]``; the same tensor feeds every layer.
* In each layer, Q comes from the block stream only; K and V are ``[k_proj(ctx) ; k_proj(h)]`` and
  ``[v_proj(ctx) ; v_proj(h)]`` (the layer's own projections; ``k_norm`` on all K, RoPE at context and block
  positions, V not normed; ``input_layernorm`` only on the block stream).
* Output ``norm(h)`` ``[B, Tq, H]``, at block positions only.

Attention mask convention (``attn_mask``, bool, ``True`` = may attend), shape ``[B or 1, Tq, Lk]``:
the key/value sequence is ``[cached context (Lc) | new context (Tc) | block tokens (Tq)]``, so
``Lk = Lc + Tc + Tq``. Without a cache ``Lc = 0`` and the K/V sequence is ``[context (Tc) | block (Tq)]``.
``None`` means every block token attends to every key (inference: the context covers exactly the
positions before the anchor, and attention inside the block is bidirectional). Training builds a dense
mask over ``[context (S) | block_0 | ... | block_{N-1}]``: a block attends to context keys at positions
strictly before its anchor and to all tokens of its own block, never to other blocks. Every query row must
allow at least one key (a block token can always see itself).

With a :class:`DraftCache`, the new context K/V (after RoPE) are appended to the cache; the block's K/V are
never cached, so the cache holds context only (positions before the anchor) and needs no crop after a draft.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dflashbench.reference.layers import RMSNorm, RotaryEmbedding, SwiGLU, apply_rope, init_qwen_style


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """Target layers the draft fuses when the config names none.

    One draft layer: the middle layer ``[L // 2]``. Otherwise ``round(1 + i * (L - 4) / (n - 1))`` for
    ``i = 0..n-1``: evenly spaced from layer 1 to layer ``L - 3`` (Qwen3-8B, L=36, n=5: ``[1, 9, 17, 25, 33]``).
    """
    L, n = num_target_layers, num_draft_layers
    if n == 1:
        return [L // 2]
    # Python's round() rounds half to even; the rule rounds half up, so do that explicitly.
    return [int(math.floor(1 + i * (L - 4) / (n - 1) + 0.5)) for i in range(n)]


@dataclass
class DFlashDraftConfig:
    """The released ``config.json`` of a DFlash drafter (Qwen3 fields + DFlash fields).

    ``target_layer_ids`` may be ``None`` (then :func:`build_target_layer_ids` decides);
    :attr:`layer_ids` is the resolved list. Fields this class does not model are kept in ``extra`` and
    written back unchanged.
    """

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    num_target_layers: int
    mask_token_id: int
    block_size: int = 16
    target_layer_ids: list[int] | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 40960
    attention_bias: bool = False
    hidden_act: str = "silu"
    vocab_size: int | None = None
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    dtype: str = "bfloat16"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @property
    def layer_ids(self) -> list[int]:
        if self.target_layer_ids is not None:
            return list(self.target_layer_ids)
        return build_target_layer_ids(self.num_target_layers, self.num_hidden_layers)


# ----------------------------------------------------------------------------------------------- modules


class DraftCache:
    """Per-layer K/V of the draft's *context* (after RoPE): ``[B, Hkv, L, D]`` per layer.

    The block's K/V are never stored (see the module docstring), so after each draft call the cache covers
    exactly the context positions handed to it so far. Rows (the batch dimension) can be selected, merged and
    compacted for continuous batching; which columns are valid for which row is the caller's business
    (it builds ``attn_mask`` accordingly).
    """

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        k = self.keys[0]
        return 0 if k is None else k.shape[2]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def crop(self, length: int) -> None:
        """Keep the first ``length`` columns."""
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k is not None:
                self.keys[i], self.values[i] = k[:, :, :length], v[:, :, :length]

    def select_rows(self, rows: torch.Tensor) -> None:
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k is not None:
                self.keys[i], self.values[i] = k[rows], v[rows]

    def gather_columns(self, index: torch.Tensor) -> None:
        """Compaction: row r keeps columns ``index[r]`` (``[B, L']``), in that order."""
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k is not None:
                idx = index[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
                self.keys[i], self.values[i] = k.gather(2, idx), v.gather(2, idx)

    def extend_rows(self, other: DraftCache) -> None:
        """Append ``other``'s rows; the shorter side is right-padded with zero columns (mask them out)."""
        for i in range(len(self.keys)):
            if other.keys[i] is None:
                raise ValueError("cannot merge a draft cache that holds no context yet")
            if self.keys[i] is None:
                self.keys[i], self.values[i] = other.keys[i], other.values[i]
                continue
            length = max(self.keys[i].shape[2], other.keys[i].shape[2])
            self.keys[i] = torch.cat([_pad_cols(self.keys[i], length), _pad_cols(other.keys[i], length)])
            self.values[i] = torch.cat([_pad_cols(self.values[i], length), _pad_cols(other.values[i], length)])


def _pad_cols(t: torch.Tensor, length: int) -> torch.Tensor:
    if t.shape[2] == length:
        return t
    return F.pad(t, (0, 0, 0, length - t.shape[2]))


class DraftAttention(nn.Module):
    def __init__(self, cfg: DFlashDraftConfig):
        super().__init__()
        H, D = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, D
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(H, self.num_heads * D, bias=bias)
        self.k_proj = nn.Linear(H, self.num_kv_heads * D, bias=bias)
        self.v_proj = nn.Linear(H, self.num_kv_heads * D, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * D, H, bias=bias)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps)

    def _heads(self, x: torch.Tensor, proj: nn.Linear, heads: int) -> torch.Tensor:
        return proj(x).view(*x.shape[:2], heads, self.head_dim)  # [B, T, heads, D]

    def forward(self, h, ctx, rope_q, rope_c, attn_mask, cache: DraftCache | None, layer: int):
        B, Tq, _ = h.shape
        q = apply_rope(self.q_norm(self._heads(h, self.q_proj, self.num_heads)).transpose(1, 2), *rope_q)
        k_blk = apply_rope(self.k_norm(self._heads(h, self.k_proj, self.num_kv_heads)).transpose(1, 2), *rope_q)
        v_blk = self._heads(h, self.v_proj, self.num_kv_heads).transpose(1, 2)
        k_ctx = apply_rope(self.k_norm(self._heads(ctx, self.k_proj, self.num_kv_heads)).transpose(1, 2), *rope_c)
        v_ctx = self._heads(ctx, self.v_proj, self.num_kv_heads).transpose(1, 2)
        if cache is not None:  # [B, Hkv, Lc + Tc, D]
            k_ctx, v_ctx = cache.append(layer, k_ctx, v_ctx)
        k = torch.cat([k_ctx, k_blk], dim=2)  # [B, Hkv, Lk, D]
        v = torch.cat([v_ctx, v_blk], dim=2)
        if self.num_kv_heads != self.num_heads:  # GQA
            rep = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        mask = None if attn_mask is None else attn_mask[:, None]  # [B|1, 1, Tq, Lk]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False)  # [B, Hq, Tq, D]
        return self.o_proj(out.transpose(1, 2).reshape(B, Tq, -1))


class DraftLayer(nn.Module):
    def __init__(self, cfg: DFlashDraftConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act)

    def forward(self, h, ctx, rope_q, rope_c, attn_mask, cache, layer):
        h = h + self.self_attn(self.input_layernorm(h), ctx, rope_q, rope_c, attn_mask, cache, layer)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDraftModel(nn.Module):
    """The DFlash drafter. Parameter names are the released checkpoint's weight names."""

    def __init__(self, config: DFlashDraftConfig):
        super().__init__()
        self.config = config
        H = config.hidden_size
        self.layers = nn.ModuleList(DraftLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(H, config.rms_norm_eps)
        self.fc = nn.Linear(len(config.layer_ids) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)
        self.reset_parameters()

    @property
    def block_size(self) -> int:
        return self.config.block_size

    @property
    def layer_ids(self) -> list[int]:
        return self.config.layer_ids

    def new_cache(self) -> DraftCache:
        return DraftCache(len(self.layers))

    def reset_parameters(self, std: float = 0.02, generator: torch.Generator | None = None) -> None:
        init_qwen_style(self, std, generator)

    def forward(
        self,
        block_embeds: torch.Tensor,
        context_features: torch.Tensor,
        block_positions: torch.Tensor,
        context_positions: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        cache: DraftCache | None = None,
    ) -> torch.Tensor:
        """block_embeds ``[B, Tq, H]``, context_features ``[B, Tc, n*H]`` (raw, fused here),
        block/context positions ``[B, Tq]`` / ``[B, Tc]``, attn_mask ``[B|1, Tq, Lc+Tc+Tq]`` or None
        -> hidden ``[B, Tq, H]`` (after the final norm; logits = target lm_head of this)."""
        dtype = block_embeds.dtype
        ctx = self.hidden_norm(self.fc(context_features.to(dtype)))  # [B, Tc, H]
        rope_q = self.rotary(block_positions, dtype)  # [B, 1, Tq, D] x2
        rope_c = self.rotary(context_positions, dtype)  # [B, 1, Tc, D] x2
        h = block_embeds
        for i, layer in enumerate(self.layers):
            h = layer(h, ctx, rope_q, rope_c, attn_mask, cache, i)
        return self.norm(h)

    @torch.no_grad()
    def prefill_context(
        self, context_features: torch.Tensor, context_positions: torch.Tensor, cache: DraftCache
    ) -> None:
        """Append context K/V to ``cache`` without drafting (context K/V need no block: they are each
        layer's k_proj/v_proj of the fused context)."""
        dtype = next(self.parameters()).dtype
        ctx = self.hidden_norm(self.fc(context_features.to(dtype)))
        rope_c = self.rotary(context_positions, dtype)
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            k = apply_rope(a.k_norm(a._heads(ctx, a.k_proj, a.num_kv_heads)).transpose(1, 2), *rope_c)
            v = a._heads(ctx, a.v_proj, a.num_kv_heads).transpose(1, 2)
            cache.append(i, k, v)
