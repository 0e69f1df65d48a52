"""``DFlashDrafter``: the DFlash draft network behind the decode loop's :class:`~dflashbench.reference.drafters.Drafter`
interface. One forward pass drafts the whole block (greedy); its state is the draft's context K/V cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dflashbench.reference.dflash.network import DFlashDraftModel, DraftCache
from dflashbench.reference.target import Target, compaction_index


@dataclass
class DFlashState:
    """The draft's context cache for a batch of rows; ``valid[r, c]``: column ``c`` is row ``r``'s context."""

    cache: DraftCache
    valid: torch.Tensor  # [B, L] bool

    def extend(self, other: DFlashState) -> None:
        self.cache.extend_rows(other.cache)
        length = self.cache.length
        pad = torch.nn.functional.pad
        self.valid = torch.cat([pad(self.valid, (0, length - self.valid.shape[1])),
                                pad(other.valid, (0, length - other.valid.shape[1]))])

    def select(self, rows: torch.Tensor) -> None:
        self.cache.select_rows(rows)
        self.valid = self.valid[rows]
        self.compact()

    def compact(self, slack: int = 32) -> None:
        length = self.valid.shape[1]
        if self.valid.shape[0] == 0 or length - int(self.valid.sum(1).max()) <= max(slack, length // 4):
            return
        index, self.valid = compaction_index(self.valid)
        self.cache.gather_columns(index)


class DFlashDrafter:
    """The DFlash draft network over a target: one forward pass drafts the whole block (greedy)."""

    def __init__(self, draft: DFlashDraftModel, target: Target):
        self.draft, self.target = draft, target
        self.block_size = draft.config.block_size
        self.layer_ids = draft.config.layer_ids
        self.mask_token_id = draft.config.mask_token_id
        self.dtype = next(draft.parameters()).dtype

    @torch.no_grad()
    def start(self, prompt_ids: Sequence[int], features: torch.Tensor | None) -> DFlashState:
        cache = self.draft.new_cache()
        P = features.shape[1]
        positions = torch.arange(P, device=features.device)[None]
        self.draft.prefill_context(features, positions, cache)
        return DFlashState(cache, torch.ones(1, P, dtype=torch.bool, device=features.device))

    @torch.no_grad()
    def propose(self, state: DFlashState, anchors, starts, ctx, ctx_len, *, limit: int | None = None) -> torch.Tensor:
        """The whole block's drafts in one pass; ``limit`` changes nothing here (the loop verifies the first
        ``limit``): the block's masks attend to each other, so a shorter block would draft other tokens."""
        B, K, dev = anchors.shape[0], self.block_size, anchors.device
        block = torch.full((B, K), self.mask_token_id, dtype=torch.long, device=dev)
        block[:, 0] = anchors  # [B, K]: anchor + masks
        if ctx is None:  # nothing committed since the prompt primed the cache
            ctx = torch.zeros(B, 0, self.draft.fc.in_features, dtype=self.dtype, device=dev)
        Tc = ctx.shape[1]
        ctx_pos = (starts - ctx_len)[:, None] + torch.arange(Tc, device=dev)  # [B, Tc]
        state.valid = torch.cat([state.valid, torch.arange(Tc, device=dev)[None] < ctx_len[:, None]], dim=1)
        mask = None
        if not bool(state.valid.all()):  # [B, K, L + K]: valid context columns + the whole block
            keys = torch.cat([state.valid, torch.ones(B, K, dtype=torch.bool, device=dev)], dim=1)
            mask = keys[:, None, :].expand(B, K, keys.shape[1])
        embeds = self.target.embed(block).to(self.dtype)  # [B, K, H]
        hidden = self.draft(embeds, ctx, starts[:, None] + torch.arange(K, device=dev), ctx_pos.clamp(min=0),
                            attn_mask=mask, cache=state.cache)  # [B, K, H]
        state.compact()
        return self.target.lm_head(hidden[:, 1:].to(self.target.dtype)).argmax(-1)  # [B, K-1]: greedy drafts
