"""EAGLE-3's training-time test: the head's one layer unrolled over several draft steps the way a chain runs at
decoding time (each step sees the committed context, then its own chain's entries).
:mod:`~dflashbench.reference.training.eagle3` has the recipe that trains with it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from dflashbench.reference.eagle3.network import Eagle3Model


def ttt_attention(
    q: torch.Tensor,
    k0: torch.Tensor,
    v0: torch.Tensor,
    key_mask: torch.Tensor,
    diagonal: Sequence[tuple[torch.Tensor, torch.Tensor]],
    expand,
) -> torch.Tensor:
    """Attention of the training-time test: queries ``q [B, Hq, N, D]`` see the committed entries' keys
    ``k0/v0 [B, Hkv, T, D]`` where ``key_mask [B, N, T]`` allows, plus, from each earlier unrolled step
    (and their own), the one key at their *own* entry: ``diagonal`` = ``[(k [B, Hkv, N, D], v), ...]``.
    That is exactly what a chain query at inference sees: the committed context, then its chain's entries."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ expand(k0).transpose(-1, -2)) * scale  # [B, Hq, N, T]
    scores = scores.masked_fill(~key_mask[:, None], float("-inf"))
    diag = [(q * expand(k)).sum(-1, keepdim=True) * scale for k, _ in diagonal]  # [B, Hq, N, 1] each
    probs = torch.softmax(
        torch.cat([scores, *diag], dim=-1), dim=-1, dtype=torch.promote_types(q.dtype, torch.float32)
    )
    probs = probs.to(q.dtype)
    T = k0.shape[2]
    out = probs[..., :T] @ expand(v0)
    for j, (_, v) in enumerate(diagonal):
        out = out + probs[..., T + j : T + j + 1] * expand(v)
    return out


def ttt_unroll(
    head: Eagle3Model,
    embed,
    features: torch.Tensor,
    input_ids: torch.Tensor,
    anchors: torch.Tensor,
    steps: int,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The unrolled test. features ``[B, S, 3H]``, input_ids ``[B, S]``, anchors ``[B, N]`` (entry indices
    ``< S-1``) -> step 0's normed output at every entry ``[B, S-1, H]`` and steps ``1..steps-1``'s at the
    anchors ``[B, N, H]`` each. Step ``i`` at entry ``t`` reads token ``t+1+i`` (clamped past the end)."""
    B, S = input_ids.shape
    E, dev = S - 1, input_ids.device
    attn = head.midlayer.self_attn
    entries = torch.arange(E, device=dev)
    causal = (entries[None, :] <= entries[:, None])[None]  # [1, E, E]
    kv0: list[tuple[torch.Tensor, torch.Tensor]] = []

    def attend0(q, k, v):
        kv0.append((k, v))
        return ttt_attention(q, k, v, causal, [], attn.expand_kv)

    normed0, hidden, _ = head.layer(
        embed(input_ids[:, 1:]), head.fuse(features[:, :E]), entries[None].expand(B, E), attend0
    )
    ((k0, v0),) = kv0
    key_mask = entries[None, None, :] <= anchors[:, :, None]  # [B, N, E]
    index = anchors[:, :, None].expand(-1, -1, hidden.shape[-1])
    hidden = hidden.gather(1, index)  # [B, N, H]
    diagonal: list[tuple[torch.Tensor, torch.Tensor]] = []
    outs = []
    for i in range(1, steps):
        tokens = input_ids.gather(1, (anchors + 1 + i).clamp(max=S - 1))

        def attend(q, k, v):
            return ttt_attention(q, k0, v0, key_mask, [*diagonal, (k, v)], attn.expand_kv)

        normed, hidden, kv = head.layer(embed(tokens), hidden, anchors + i, attend)
        diagonal.append(kv)
        outs.append(normed)
    return normed0, outs
