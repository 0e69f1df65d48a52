"""An EAGLE-3 draft head in plain torch, and the K/V cache it decodes with.

EAGLE-3 drafts *autoregressively*, one token per forward pass of a single decoder layer, conditioned on the
target's hidden states from three layers (low, middle, high). DFlash (:mod:`~dflashbench.reference.dflash.network`)
drafts a whole block in one pass of several layers; this module is the comparison point.

The network (``H`` hidden size, ``Ht`` the target's hidden size, usually ``H``):

* ``fc``: ``Linear(3*Ht, H)`` fuses the three target features of a position into one hidden state.
* ``midlayer``: one Llama decoder layer whose attention reads ``2H`` inputs:
  ``x = [input_layernorm(embed(token)) ; hidden_norm(hidden)]``, with ``q/k/v_proj: 2H -> heads``,
  ``o_proj: heads -> H`` (no q/k norm: a Llama layer), residual = ``hidden`` (or ``hidden_norm(hidden)`` with
  ``norm_before_residual``), then ``post_attention_layernorm`` + SwiGLU ``mlp`` with its residual.
* ``norm`` -> ``lm_head: Linear(H, draft_vocab_size)``; a draft id ``d`` is the target id ``d + d2t[d]``.
  ``t2d[v]`` says whether target id ``v`` is in the draft vocabulary.
* Token embeddings are the target's (a checkpoint may ship its own ``embed_tokens.weight``; then it is used).

An *entry* at position ``p`` pairs the hidden state of position ``p`` with the embedding of token ``p+1`` and
predicts token ``p+2``. Committed positions enter with the fused target features (``fc``); a chain of drafts
continues with the layer's own pre-norm output as the next hidden state (no ``fc``), at positions ``p+1,
p+2, ...``. Every entry's K/V (after RoPE) is cached; attention is causal over positions.

Training (:mod:`~dflashbench.reference.eagle3.ttt`) unrolls the same layer the way a chain runs at decoding
time (EAGLE-3's "training-time test"); :mod:`~dflashbench.reference.training.eagle3` has the recipe. Which
target layers feed ``fc`` is :class:`~dflashbench.reference.eagle3.config.Eagle3Config`'s business.

The config is :mod:`.config`; the checkpoint layout :mod:`.checkpoint`; the drafter :mod:`.drafter`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from dflashbench.errors import UserError
from dflashbench.reference.eagle3.config import Eagle3Config
from dflashbench.reference.layers import RMSNorm, RotaryEmbedding, SwiGLU, apply_rope, init_qwen_style
from dflashbench.reference.target import compaction_index


class Eagle3Attention(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        H, D, bias = cfg.hidden_size, cfg.head_dim, cfg.attention_bias
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, D
        self.q_proj = nn.Linear(2 * H, self.num_heads * D, bias=bias)
        self.k_proj = nn.Linear(2 * H, self.num_kv_heads * D, bias=bias)
        self.v_proj = nn.Linear(2 * H, self.num_kv_heads * D, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * D, H, bias=bias)

    def qkv(self, x: torch.Tensor, rope) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x ``[B, T, 2H]`` -> q ``[B, Hq, T, D]``, k/v ``[B, Hkv, T, D]`` (RoPE on q and k)."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(q, *rope), apply_rope(k, *rope), v

    def expand_kv(self, t: torch.Tensor) -> torch.Tensor:
        rep = self.num_heads // self.num_kv_heads
        return t if rep == 1 else t.repeat_interleave(rep, dim=1)


class Eagle3Layer(nn.Module):
    """The one decoder layer (``midlayer``)."""

    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Eagle3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act)
        self.norm_before_residual = cfg.norm_before_residual


class Eagle3Model(nn.Module):
    """The EAGLE-3 head. Parameter and buffer names are the checkpoint's tensor names."""

    def __init__(self, config: Eagle3Config):
        super().__init__()
        if config.num_hidden_layers != 1:
            raise UserError(
                f"EAGLE-3 config: num_hidden_layers {config.num_hidden_layers} is not supported; "
                "the reference head has exactly one layer"
            )
        self.config = config
        H = config.hidden_size
        self.fc = nn.Linear(3 * config.target_hidden_size, H, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = RMSNorm(H, config.rms_norm_eps)
        self.lm_head = nn.Linear(H, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(config.vocab_size, dtype=torch.bool))
        self.embed_tokens: nn.Embedding | None = None  # the target's, unless a checkpoint ships one
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02, generator: torch.Generator | None = None) -> None:
        init_qwen_style(self, std, generator)

    @torch.no_grad()
    def set_draft_vocab(self, target_ids: Sequence[int]) -> None:
        """Draft id ``i`` <-> target id ``target_ids[i]`` (sorted, ``draft_vocab_size`` of them)."""
        ids = torch.tensor(sorted(target_ids), dtype=torch.long, device=self.d2t.device)
        if ids.numel() != self.config.draft_vocab_size or len(set(ids.tolist())) != ids.numel():
            raise ValueError(f"need {self.config.draft_vocab_size} distinct target ids, got {ids.numel()}")
        self.d2t.copy_(ids - torch.arange(ids.numel(), device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True

    @property
    def draft_to_target(self) -> torch.Tensor:
        """``[draft_vocab]`` target ids of the draft vocabulary."""
        return torch.arange(self.d2t.shape[0], device=self.d2t.device) + self.d2t

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """Target features ``[B, T, 3*Ht]`` -> hidden ``[B, T, H]``."""
        return self.fc(features.to(self.fc.weight.dtype))

    def draft_logits(self, normed: torch.Tensor) -> torch.Tensor:
        """``[.., H]`` -> ``[.., draft_vocab]``."""
        return self.lm_head(normed)

    def greedy_tokens(self, normed: torch.Tensor) -> torch.Tensor:
        """Greedy drafts as *target* ids."""
        return self.draft_to_target[self.draft_logits(normed).argmax(-1)]

    def layer(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        attend,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One pass of the layer over entries: token embeddings ``[B, T, H]``, hidden ``[B, T, H]`` (fused
        target features or the previous pass's pre-norm output), positions ``[B, T]``.
        ``attend(q, k, v) -> [B, Hq, T, D]`` decides which keys each entry sees (cache, or the training-time-
        test layout). Returns ``(norm(h), h, (k, v))``: logits come from the first, the next chain step's
        hidden is the second (pre-norm), the third is this pass's K/V after RoPE."""
        m = self.midlayer
        dtype = self.fc.weight.dtype
        embeds, hidden = embeds.to(dtype), hidden.to(dtype)
        normed_hidden = m.hidden_norm(hidden)
        residual = normed_hidden if m.norm_before_residual else hidden
        x = torch.cat([m.input_layernorm(embeds), normed_hidden], dim=-1)  # [B, T, 2H]
        q, k, v = m.self_attn.qkv(x, self.rotary(positions, dtype))
        out = attend(q, k, v)  # [B, Hq, T, D]
        B, T = embeds.shape[:2]
        h = residual + m.self_attn.o_proj(out.transpose(1, 2).reshape(B, T, -1))
        h = h + m.mlp(m.post_attention_layernorm(h))
        return self.norm(h), h, (k, v)

    def forward(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        cache: Eagle3Cache,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inference: the entries' K/V join ``cache`` (``valid[b, t]`` False marks padding) and each entry
        attends to every valid cached or new entry at a position <= its own. -> ``(norm(h), h)``."""
        attn = self.midlayer.self_attn
        if valid is None:
            valid = torch.ones(positions.shape, dtype=torch.bool, device=positions.device)

        def attend(q, k, v):
            keys, values, mask = cache.append(k, v, positions, valid)  # [B, Hkv, L, D] x2, [B, T, L]
            return F.scaled_dot_product_attention(
                q, attn.expand_kv(keys), attn.expand_kv(values), attn_mask=mask[:, None]
            )

        normed, h, _ = self.layer(embeds, hidden, positions, attend)
        return normed, h


# ------------------------------------------------------------------------------------------------ cache


class Eagle3Cache:
    """K/V (after RoPE) of a batch of rows' entries: ``[B, Hkv, L, D]``, with ``valid [B, L]`` and the
    entries' positions ``pos [B, L]``. Rows join (right-padded), leave, and are compacted when holes pile up."""

    def __init__(self, batch: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device):
        self.k = torch.zeros(batch, num_kv_heads, 0, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        self.pos = torch.zeros(batch, 0, dtype=torch.long, device=device)

    @property
    def length(self) -> int:
        return int(self.valid.shape[1])

    def append(self, k, v, positions, valid) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Add ``T`` entries per row -> all keys, values and the mask ``[B, T, L]`` (valid and causal)."""
        self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.valid = torch.cat([self.valid, valid], dim=1)
        self.pos = torch.cat([self.pos, positions], dim=1)
        mask = self.valid[:, None, :] & (self.pos[:, None, :] <= positions[:, :, None])
        return self.k, self.v, mask

    def crop(self, length: int) -> None:
        self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]
        self.valid, self.pos = self.valid[:, :length], self.pos[:, :length]

    def select_rows(self, rows: torch.Tensor) -> None:
        self.k, self.v, self.valid, self.pos = self.k[rows], self.v[rows], self.valid[rows], self.pos[rows]

    def extend_rows(self, other: Eagle3Cache) -> None:
        L = max(self.length, other.length)

        def pad(t, n, dim):
            shape = list(t.shape)
            shape[dim] = n - t.shape[dim]
            return torch.cat([t, t.new_zeros(shape)], dim=dim)

        self.k = torch.cat([pad(self.k, L, 2), pad(other.k, L, 2)])
        self.v = torch.cat([pad(self.v, L, 2), pad(other.v, L, 2)])
        self.valid = torch.cat([pad(self.valid, L, 1), pad(other.valid, L, 1)])
        self.pos = torch.cat([pad(self.pos, L, 1), pad(other.pos, L, 1)])

    def compact(self, slack: int = 32) -> None:
        """Move each row's valid entries left once more than ``max(slack, L/4)`` columns are wasted."""
        L = self.length
        if self.valid.shape[0] == 0 or L - int(self.valid.sum(1).max()) <= max(slack, L // 4):
            return
        index, self.valid = compaction_index(self.valid)
        idx = index[:, None, :, None].expand(-1, self.k.shape[1], -1, self.k.shape[3])
        self.k, self.v = self.k.gather(2, idx), self.v.gather(2, idx)
        self.pos = self.pos.gather(1, index)
