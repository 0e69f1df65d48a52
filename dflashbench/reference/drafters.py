"""Drafters: what proposes the block the target verifies. The decode loop sees only this interface.

A drafter has a ``block_size`` K (the target verifies K tokens per step: the anchor plus K-1 drafts),
``layer_ids`` (which target layers' hidden states it consumes, or ``None``), and per-batch state:

* ``start(prompt_ids, features) -> state``: a one-row state for a new request, given the prompt's target
  features ``[1, P, n*H]`` (or ``None``).
* ``propose(state, anchors [B], starts [B], ctx [B, Tc, n*H] | None, ctx_len [B]) -> drafts [B, K-1]``:
  ``anchors`` are the last verified tokens at positions ``starts``; ``ctx`` holds, left-aligned and padded, the
  target features of each row's tokens committed since the last call (positions ``starts-ctx_len .. starts-1``).
* ``state.extend(other)`` / ``state.select(rows)``: rows join and leave (continuous batching).

:class:`DFlashDrafter` is the real thing; :class:`NullDrafter` (K=1) turns the same loop into AR decoding;
:class:`OracleDrafter` proposes a known continuation (tests: tau = K; benchmarks: the mechanical ceiling), or
one that is always wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from dflashbench.reference.draft import DFlashDraftModel, DraftCache
from dflashbench.reference.target import Target, compaction_index


class NullDrafter:
    """No drafts: block size 1, so each step verifies only the anchor and commits one token (AR)."""

    block_size = 1
    layer_ids = None

    def start(self, prompt_ids: Sequence[int], features: torch.Tensor | None) -> _RowsState:
        return _RowsState([None])

    def propose(self, state, anchors, starts, ctx, ctx_len) -> torch.Tensor:
        return anchors.new_zeros(anchors.shape[0], 0)


@dataclass
class _RowsState:
    """Per-row Python objects, for drafters that keep no tensors."""

    rows: list = field(default_factory=list)

    def extend(self, other: _RowsState) -> None:
        self.rows.extend(other.rows)

    def select(self, rows: torch.Tensor) -> None:
        self.rows = [self.rows[i] for i in rows.tolist()]


class OracleDrafter:
    """Proposes ``sequence[start+1 : start+K]``: the target's own future tokens when ``sequence`` is its output.

    ``wrong=True`` proposes each of those tokens plus one (mod vocab): never accepted under greedy decoding.
    ``inner`` (another drafter) is run and its proposals discarded: oracle acceptance at the real draft cost.
    """

    def __init__(self, sequence: Sequence[int], block_size: int, *, vocab_size: int | None = None,
                 wrong: bool = False, inner=None):
        self.sequence = list(sequence)
        self.block_size = block_size
        self.vocab_size = vocab_size or (max(self.sequence) + 2)
        self.wrong = wrong
        self.inner = inner
        self.layer_ids = inner.layer_ids if inner is not None else None

    def start(self, prompt_ids: Sequence[int], features: torch.Tensor | None) -> _RowsState:
        inner = self.inner.start(prompt_ids, features) if self.inner is not None else None
        return _RowsState([inner])

    def propose(self, state, anchors, starts, ctx, ctx_len) -> torch.Tensor:
        if self.inner is not None:
            self.inner.propose(state.rows[0], anchors, starts, ctx, ctx_len)
        K, out = self.block_size, []
        for s in starts.tolist():
            future = self.sequence[s + 1 : s + K]
            future += [0] * (K - 1 - len(future))
            out.append([(t + 1) % self.vocab_size for t in future] if self.wrong else future)
        return torch.tensor(out, dtype=torch.long, device=anchors.device).view(len(out), K - 1)


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
    def propose(self, state: DFlashState, anchors, starts, ctx, ctx_len) -> torch.Tensor:
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
