"""The order a point sends its prompts in when it stops by precision (docs/metrics.md, "Sizing a point"): seeded,
random within each category, and stratified, so that every prefix holds each category in its share of the whole
(within one prompt). A point that stops after its first n prompts then measured a fair sample of the workload, not
the categories that happened to come first."""

from __future__ import annotations

import random
from collections.abc import Sequence

from dflashbench.types import Request


def stratified_order(requests: Sequence[Request], seed: int) -> list[Request]:
    """``requests`` reordered: each category shuffled with ``seed``, then dealt so that after every prompt each
    category's count is as close as it can be to its share of the whole (the category furthest behind its share
    goes next; ties by the order the categories first appear)."""
    rng = random.Random(seed)
    by_category: dict[str, list[Request]] = {}
    for r in requests:
        by_category.setdefault(r.category, []).append(r)
    for rows in by_category.values():
        rng.shuffle(rows)
    total = len(requests)
    taken = dict.fromkeys(by_category, 0)
    out: list[Request] = []
    for i in range(1, total + 1):
        # how far each category is behind its share of the first i prompts
        behind = {c: i * len(rows) / total - taken[c] for c, rows in by_category.items() if taken[c] < len(rows)}
        pick = max(behind, key=behind.__getitem__)
        out.append(by_category[pick][taken[pick]])
        taken[pick] += 1
    return out
