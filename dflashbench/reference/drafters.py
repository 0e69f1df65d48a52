"""Drafters: what proposes the block the target verifies. The decode loop sees only this interface.

A drafter has a ``block_size`` K (the target verifies K tokens per step: the anchor plus K-1 drafts),
``layer_ids`` (which target layers' hidden states it consumes, or ``None``), and per-batch state:

* ``start(prompt_ids, features) -> state``: a one-row state for a new request, given the prompt's target
  features ``[1, P, n*H]`` (or ``None``).
* ``propose(state, anchors [B], starts [B], ctx [B, Tc, n*H] | None, ctx_len [B], *, limit=None) -> drafts [B, K-1]``:
  ``anchors`` are the last verified tokens at positions ``starts``; ``ctx`` holds, left-aligned and padded, the
  target features of each row's tokens committed since the last call (positions ``starts-ctx_len .. starts-1``).
  ``limit``: the loop verifies only the first ``limit`` drafts this step (a draft length below the drafter's, see
  :mod:`~dflashbench.reference.draft_length`); a drafter that can draft fewer for less work does, and may return
  fewer columns (at least ``limit``, unless it proposes nothing).
* ``state.extend(other)`` / ``state.select(rows)``: rows join and leave (continuous batching).

:class:`Drafter` states this interface and what ``propose`` may change. The real drafters live with their
networks (:class:`~dflashbench.reference.dflash.drafter.DFlashDrafter`,
:class:`~dflashbench.reference.eagle3.drafter.Eagle3Drafter`); here are the two the loop needs on its own:
:class:`NullDrafter` (K=1) turns the same loop into AR decoding; :class:`OracleDrafter` proposes a known
continuation (tests: tau = K; benchmarks: the mechanical ceiling), or one that is always wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch


class DraftState(Protocol):
    """A drafter's state for the rows of a batch, one-to-one and in the batch's row order."""

    def extend(self, other: DraftState) -> None:
        """Append ``other``'s rows after this state's own (new requests join)."""

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (indices into the current rows, in that order; requests leave)."""


class Drafter(Protocol):
    """What the decode loop asks of a drafter. Shapes: see the module docstring.

    What ``propose`` may change: only ``state``. It takes in the context it is handed (``ctx``, ``ctx_len``) and
    may reorganise its own caches (compaction, dropping a chain's speculative entries), but its rows stay
    one-to-one and in order with ``anchors``. It must not modify the tensors it is given, the target (weights
    or KV cache: it may only read ``embed``/``lm_head``), or its own ``block_size``/``layer_ids`` while a batch
    runs (the loop sizes the verify block and the features it extracts from them). Its drafts are only a guess:
    whatever it returns, the loop's acceptance rule keeps every emitted token the target's own, so a drafter
    can make decoding slower but never different.
    """

    block_size: int
    layer_ids: Sequence[int] | None

    def start(self, prompt_ids: Sequence[int], features: torch.Tensor | None) -> DraftState: ...

    def propose(self, state: DraftState, anchors: torch.Tensor, starts: torch.Tensor, ctx: torch.Tensor | None,
                ctx_len: torch.Tensor, *, limit: int | None = None) -> torch.Tensor: ...


class NullDrafter:
    """No drafts: block size 1, so each step verifies only the anchor and commits one token (AR)."""

    block_size = 1
    layer_ids = None

    def start(self, prompt_ids: Sequence[int], features: torch.Tensor | None) -> _RowsState:
        return _RowsState([None])

    def propose(self, state, anchors, starts, ctx, ctx_len, *, limit: int | None = None) -> torch.Tensor:
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

    def propose(self, state, anchors, starts, ctx, ctx_len, *, limit: int | None = None) -> torch.Tensor:
        if self.inner is not None:
            self.inner.propose(state.rows[0], anchors, starts, ctx, ctx_len, **({} if limit is None else {"limit": limit}))
        K, out = self.block_size, []
        for s in starts.tolist():
            future = self.sequence[s + 1 : s + K]
            future += [0] * (K - 1 - len(future))
            out.append([(t + 1) % self.vocab_size for t in future] if self.wrong else future)
        return torch.tensor(out, dtype=torch.long, device=anchors.device).view(len(out), K - 1)
