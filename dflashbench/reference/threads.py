"""``torch_threads``: run a block with a given number of torch CPU threads, restoring the setting after.

The one copy, shared by training (:mod:`~dflashbench.reference.training`) and the benchmarks
(:mod:`dflashbench.bench`). On a small, busy CPU one thread is often several times faster than torch's default
for tiny models.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's CPU threads set to ``n`` (``None`` or 0: left as they are) for the block, restored after."""
    import torch  # here, not at the top: bench.common re-exports this, and its JSON writer needs no torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
