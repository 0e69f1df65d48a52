"""``Eagle3Drafter``: an EAGLE-3 head behind the decode loop's drafter interface (see
:mod:`~dflashbench.reference.drafters`), so the same lossless draft-verify-accept-commit loop, batching and
serving run it.

Per verification step it drafts ``k`` tokens as a *chain*, one pass of the head per token:

1. the entries committed since the last call enter the head's cache: for each newly committed position
   ``p``, the target's fused features at ``p`` with the token at ``p+1`` (the accepted drafts are a prefix
   of this drafter's own previous proposals, so it knows those tokens; the anchor is the last one). The
   last entry's output is draft 1;
2. draft ``j+1`` = the head on (its own pre-norm output of the previous pass, draft ``j``) at the next
   position; ``k-1`` passes;
3. the chain's cache entries are dropped again (the next call re-enters whatever the target accepted, now
   with the target's own features).

So drafting ``k`` tokens costs ``k`` sequential passes, where DFlash drafts its whole block in one.
Drafts are greedy (argmax over the draft vocabulary, mapped to target ids), as for DFlash.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dflashbench.reference.eagle3.network import Eagle3Cache, Eagle3Model


@dataclass
class Eagle3State:
    """Per batch: the head's cache, each row's prompt-final features (entered at its first draft, when the
    token that pairs with them, the anchor, is known) and each row's last proposals."""

    cache: Eagle3Cache
    pending: torch.Tensor  # [B, 3*Ht]
    drafts: torch.Tensor  # [B, k]

    def extend(self, other: Eagle3State) -> None:
        self.cache.extend_rows(other.cache)
        self.pending = torch.cat([self.pending, other.pending])
        width = max(self.drafts.shape[1], other.drafts.shape[1])  # a step with a draft limit drafted fewer
        pad = torch.nn.functional.pad
        self.drafts = torch.cat([pad(self.drafts, (0, width - self.drafts.shape[1])),
                                 pad(other.drafts, (0, width - other.drafts.shape[1]))])

    def select(self, rows: torch.Tensor) -> None:
        self.cache.select_rows(rows)
        self.pending, self.drafts = self.pending[rows], self.drafts[rows]
        self.cache.compact()


class Eagle3Drafter:
    """An EAGLE-3 head over a target: ``k`` drafts per step (``block_size = k + 1``)."""

    def __init__(self, head: Eagle3Model, target, k: int | None = None):
        self.head, self.target = head, target
        self.k = int(k if k is not None else head.config.num_speculative_tokens)
        if self.k < 1:
            raise ValueError("an EAGLE-3 drafter drafts at least one token per step")
        self.block_size = self.k + 1
        self.layer_ids = head.config.feature_layer_ids
        attn = head.midlayer.self_attn
        self._cache_shape = (attn.num_kv_heads, attn.head_dim)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        own = self.head.embed_tokens
        return own(ids) if own is not None else self.target.embed(ids)

    def _new_cache(self, rows: int, device) -> Eagle3Cache:
        return Eagle3Cache(rows, *self._cache_shape, self.head.fc.weight.dtype, device)

    @torch.no_grad()
    def start(self, prompt_ids: Sequence[int], features: torch.Tensor | None) -> Eagle3State:
        """Enter the prompt's entries ``p = 0..P-2`` (features at ``p``, token ``p+1``); keep the features
        at ``P-1`` until the anchor that pairs with them arrives."""
        dev, P = features.device, features.shape[1]
        cache = self._new_cache(1, dev)
        if P > 1:
            ids = torch.tensor([list(prompt_ids[1:P])], dtype=torch.long, device=dev)
            self.head(
                self._embed(ids),
                self.head.fuse(features[:, : P - 1]),
                torch.arange(P - 1, device=dev)[None],
                cache,
            )
        drafts = torch.zeros(1, self.k, dtype=torch.long, device=dev)
        return Eagle3State(cache, features[:, P - 1], drafts)

    @torch.no_grad()
    def propose(self, state: Eagle3State, anchors, starts, ctx, ctx_len, *, limit: int | None = None) -> torch.Tensor:
        """``k`` drafts, or ``limit`` (fewer chain passes; the first draft comes from the pass that enters the
        committed entries, which runs whatever the limit)."""
        B, dev = anchors.shape[0], anchors.device
        chain = self.k if limit is None else max(1, min(limit, self.k))
        # 1. committed entries p = starts-n .. starts-1: features of p, token of p+1 = [accepted drafts, anchor]
        n = ctx_len.clamp(min=1)  # a fresh row (nothing verified yet) enters its prompt's last position
        T = int(n.max())  # = ctx's width when there is a ctx
        feats = ctx if ctx is not None else state.pending.new_zeros(B, 1, state.pending.shape[-1])
        fresh = ctx_len == 0
        if bool(fresh.any()):
            feats = feats.clone()
            feats[fresh, 0] = state.pending[fresh].to(feats.dtype)
        tokens = torch.zeros(B, T, dtype=torch.long, device=dev)
        tokens[:, : T - 1] = state.drafts[:, : T - 1]
        tokens.scatter_(1, (n - 1)[:, None], anchors[:, None])  # [B, T]
        steps = torch.arange(T, device=dev)
        positions = (starts - n)[:, None] + steps  # [B, T]
        normed, hidden = self.head(
            self._embed(tokens), self.head.fuse(feats), positions, state.cache, valid=steps[None] < n[:, None]
        )
        last = (n - 1)[:, None, None].expand(B, 1, hidden.shape[-1])
        normed, hidden = normed.gather(1, last), hidden.gather(1, last)  # [B, 1, H]: the entry at starts-1
        # 2. the chain: draft j+1 from (own hidden, draft j) at position starts-1+j
        committed = state.cache.length
        drafts = [self.head.greedy_tokens(normed)[:, 0]]
        for j in range(1, chain):
            normed, hidden = self.head(
                self._embed(drafts[-1][:, None]), hidden, (starts - 1 + j)[:, None], state.cache
            )
            drafts.append(self.head.greedy_tokens(normed)[:, 0])
        # 3. forget the chain: the next call enters what the target accepted, with the target's features
        state.cache.crop(committed)
        state.cache.compact()
        state.drafts = torch.stack(drafts, dim=1)  # [B, chain]
        return state.drafts


def load_eagle3_drafter(path, target, k: int | None = None) -> Eagle3Drafter:
    """Load a head from ``path`` in the target's device and dtype, check it fits, wrap it (``k`` defaults to
    the head's ``dflashbench.num_speculative_tokens``)."""
    from dflashbench.reference.eagle3.checkpoint import check_eagle3_fits, load_eagle3

    head = load_eagle3(path, device=target.device, dtype=target.dtype)
    check_eagle3_fits(head.config, target.num_layers, target.hidden_size, target.vocab_size)
    return Eagle3Drafter(head, target, k)
