"""n-gram (prompt lookup) drafting: no network, no training; the draft is copied from the request's own context.

The matching rule is vLLM's (vllm-project/vllm@v0.32.0:vllm/v1/spec_decode/ngram_proposer.py#L210-L295,
``_find_longest_matched_ngram_and_propose_tokens``), so tau compares with vLLM's ``ngram`` on the same prompts:

1. take the longest ``n`` in ``[min_n, max_n]`` such that the context's last ``n`` tokens also occur earlier in it
   (an occurrence that ends before the last token; it may overlap the suffix);
2. of the occurrences of that length, take the earliest;
3. draft the (up to) ``k`` tokens that followed it; fewer where the context ends first, none where nothing matched.

A step with no draft is a plain AR step: the loop verifies the anchor alone, and the step is not counted as a draft
(vLLM counts a draft only where tokens were proposed, vllm/v1/core/sched/scheduler.py#L2969).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

NO_DRAFT = -1  # pads a row's drafts after its last proposed token (the decode loop never accepts it)


def propose(context: Sequence[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The n-gram draft for ``context`` (every token so far, the anchor last): up to ``k`` tokens, maybe none."""
    total = len(context)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = list(context[total - n:])
        for start in range(0, total - n):  # occurrences ending at index total - 2 or before
            if list(context[start:start + n]) == suffix:
                follow = start + n
                return list(context[follow:follow + k])
    return []


@dataclass
class _Row:
    tokens: list[int]  # every committed token before the current anchor
    anchor: int | None = None  # the anchor and drafts of the last call, to learn what was accepted
    start: int = 0
    drafts: list[int] = field(default_factory=list)


@dataclass
class _RowsState:
    rows: list[_Row] = field(default_factory=list)

    def extend(self, other: _RowsState) -> None:
        self.rows.extend(other.rows)

    def select(self, rows: torch.Tensor) -> None:
        self.rows = [self.rows[i] for i in rows.tolist()]


class NgramDrafter:
    """Proposes up to ``k`` tokens per step by :func:`propose`; a row with fewer ends its drafts with
    :data:`NO_DRAFT`. The loop tells it nothing of acceptance: what was accepted is read from where the next anchor
    stands (``start`` moved by accepted + 1)."""

    layer_ids = None

    def __init__(self, k: int = 5, min_n: int = 4, max_n: int = 4):
        if not 1 <= min_n <= max_n or k < 1:
            raise ValueError(f"n-gram drafting needs 1 <= min_n <= max_n and k >= 1, got k={k}, n in [{min_n}, {max_n}]")
        self.k, self.min_n, self.max_n = k, min_n, max_n
        self.block_size = k + 1

    def start(self, prompt_ids: Sequence[int], features: torch.Tensor | None) -> _RowsState:
        return _RowsState([_Row(list(prompt_ids))])

    def propose(self, state: _RowsState, anchors: torch.Tensor, starts: torch.Tensor, ctx, ctx_len, *,
                limit: int | None = None) -> torch.Tensor:  # fmt: skip
        k = self.k if limit is None else max(0, min(limit, self.k))  # the tokens after a match, at most k
        out = torch.full((len(state.rows), k), NO_DRAFT, dtype=torch.long, device=anchors.device)
        for i, (row, anchor, start) in enumerate(zip(state.rows, anchors.tolist(), starts.tolist(), strict=True)):
            if row.anchor is not None:  # commit what the last step accepted: its anchor and the accepted drafts
                accepted = start - row.start - 1
                row.tokens += [row.anchor, *row.drafts[:accepted]]
            row.anchor, row.start = anchor, start
            row.drafts = propose([*row.tokens, anchor], k, self.min_n, self.max_n) if k else []
            if row.drafts:
                out[i, : len(row.drafts)] = torch.tensor(row.drafts, dtype=torch.long)
        return out
