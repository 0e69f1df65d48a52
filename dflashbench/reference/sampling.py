"""Token selection: greedy (temperature 0) or plain temperature sampling (no top-k/top-p), per row."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def sample(logits: torch.Tensor, temperature: torch.Tensor,
           generator: torch.Generator | Sequence[torch.Generator | None] | None = None) -> torch.Tensor:
    """logits ``[B, T, V]``, temperature ``[B]`` (0 = greedy) -> tokens ``[B, T]``.

    ``generator`` is one generator for the whole batch, or one per row (``None`` entries use the global RNG).
    """
    B, T, V = logits.shape
    out = logits.argmax(-1)  # [B, T]
    hot = (temperature > 0).nonzero().flatten().tolist()
    if not hot:
        return out
    if generator is None or isinstance(generator, torch.Generator):
        probs = torch.softmax(logits[hot].float() / temperature[hot, None, None].float(), dim=-1)  # [b, T, V]
        out[hot] = torch.multinomial(probs.reshape(-1, V), 1, generator=generator).view(len(hot), T)
        return out
    for r in hot:
        probs = torch.softmax(logits[r].float() / float(temperature[r]), dim=-1)  # [T, V]
        out[r] = torch.multinomial(probs, 1, generator=generator[r]).flatten()
    return out
