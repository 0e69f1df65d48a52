"""What every benchmark here shares: torch's CPU threads, the median of repeated timed runs, JSON output."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflashbench.reference.threads import torch_threads

if TYPE_CHECKING:  # torch is imported by the timing helper only: writing JSON needs none of it
    import torch

__all__ = ["median_seconds", "torch_threads", "write_json"]


def median_seconds(fn: Callable[..., object], repeats: int, *, setup: Callable[[], Any] | None = None,
                   warmup: int = 0, device: torch.device | str | None = None) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` runs, after ``warmup`` untimed ones.

    With ``setup``, each run is ``fn(setup())`` and only ``fn`` is timed (a fresh state per run). On a CUDA
    ``device`` the clock waits for queued kernels before and after, so the time is the work's, not its launch's.
    """
    import torch

    cuda = torch.device(device).type == "cuda" if device is not None else False
    times = []
    for i in range(warmup + repeats):
        args = (setup(),) if setup is not None else ()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def write_json(path: str | Path, data: dict) -> Path:
    """Write ``data`` as indented JSON (the ``--json`` output of every bench command)."""
    out = Path(path)
    out.write_text(json.dumps(data, indent=2) + "\n")
    return out


def num(value: float | None, digits: int = 1) -> str:
    """A figure for a benchmark's line or table: ``-`` when it is missing."""
    return "-" if value is None else f"{value:.{digits}f}"


def with_range(value: float | None, low_high, digits: int = 1, scale: float = 1.0) -> str:
    """``median [min-max]`` over repeats, each scaled (e.g. 100 for a share in percent); ``-`` when missing."""
    if value is None:
        return "-"
    low, high = low_high
    return f"{value * scale:.{digits}f} [{low * scale:.{digits}f}-{high * scale:.{digits}f}]"

