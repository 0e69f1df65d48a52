"""The same request in two runs (docs/compare.md, "The same requests"), and a figure's move tested on those pairs.

Two requests of two runs are **the same request** when they have the same prompt digest (``prompt_sha256``: the
SHA-256 of the messages, later turns, output cap, per-request template settings and sampling temperature,
:func:`dflashbench.types.prompt_digest`, written whether or not the run stores text), the same **occurrence** (a
prompt sent again to fill the streams is ``<id>~<k>``: its k-th reuse) and the same **turn** of its conversation.
The prompt's id is not part of it (a dataset's numbering is its own), nor the repeat round (a round of one run is
not a round of another). A key that two requests of one point share (a dataset holding the same prompt twice) pairs
neither.

On those pairs a figure's move between two runs holds each request's timing jitter and not the prompt mix: the same
code prompt decodes at the same tau in both runs. :func:`paired_null` resamples the pairs (each draw takes a request
in every side at once) for any sum of log ratios of sums: a point's figure (NEW over BASE) or a speedup's move
(NEW's speedup over BASE's: four points).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from dflashbench.measure.noise import N_RESAMPLES
from dflashbench.types import RequestResult

Key = tuple[str, int, int]


def occurrence(request_id: str) -> int:
    """The k of a reused prompt's id ``<id>~<k>``; 0 for its first send."""
    head, sep, tail = str(request_id).rpartition("~")
    return int(tail) if sep and head and tail.isdigit() else 0


def key_of(r: RequestResult) -> Key | None:
    """(prompt digest, occurrence, turn); ``None`` for a request recorded without a digest (a run from before it)."""
    digest = getattr(r, "prompt_sha256", None)
    return (str(digest), occurrence(r.request_id), int(r.turn or 0)) if digest else None


def digested(results: Iterable[RequestResult]) -> bool:
    """Whether every one of ``results`` carries its prompt digest (and there is at least one)."""
    found = [key_of(r) is not None for r in results]
    return bool(found) and all(found)


def keyed(results: Iterable[RequestResult], term: Callable[[RequestResult], tuple[float, float] | None]
          ) -> dict[Key, tuple[float, float]]:  # fmt: skip
    """Each request's ``term`` (numerator, denominator of a ratio of sums) by its key; keys that two requests of
    ``results`` share are left out, as are requests without a digest or a term."""
    found: dict[Key, tuple[float, float]] = {}
    seen: set[Key] = set()
    twice: set[Key] = set()
    for r in results:
        key = key_of(r)
        if key is None:
            continue
        if key in seen:
            twice.add(key)
        seen.add(key)
        t = term(r)
        if t is not None:
            found[key] = t
    return {k: v for k, v in found.items() if k not in twice}


def common_keys(sides: Sequence[Mapping[Key, object]]) -> list[Key]:
    """The keys every side holds, in a fixed order."""
    if not sides:
        return []
    common = set(sides[0])
    for s in sides[1:]:
        common &= set(s)
    return sorted(common)


def log_ratio_of_sums(terms: Mapping[Key, tuple[float, float]], keys: Sequence[Key]) -> float | None:
    """``log(sum(num) / sum(den))`` over ``keys``; ``None`` where either sum is not positive."""
    num = math.fsum(terms[k][0] for k in keys)
    den = math.fsum(terms[k][1] for k in keys)
    return math.log(num / den) if num > 0 and den > 0 else None


def paired_null(sides: Sequence[tuple[float, Mapping[Key, tuple[float, float]]]], n: int = N_RESAMPLES,
                seed: int = 0) -> tuple[float | None, np.ndarray, int]:  # fmt: skip
    """The observed value of ``sum(sign * log R_side)`` (``R`` a ratio of sums over the keys every side holds) and
    its resampled deviations around it, the keys drawn with replacement once for every side at a time (paired), and
    how many keys were drawn from. A point's move NEW / BASE: ``[(+1, new), (-1, base)]``; a speedup's move:
    ``[(+1, new_method), (-1, new_baseline), (-1, base_method), (+1, base_baseline)]``. ``(None, [], n)`` with fewer
    than two common keys or a side whose ratio is not positive."""
    keys = common_keys([s for _, s in sides])
    if len(keys) < 2:
        return None, np.zeros(0), len(keys)
    logs = [log_ratio_of_sums(s, keys) for _, s in sides]
    if any(v is None for v in logs):
        return None, np.zeros(0), len(keys)
    observed = math.fsum(sign * v for (sign, _), v in zip(sides, logs, strict=True))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(keys), size=(n, len(keys)))
    total = np.zeros(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        for sign, side in sides:
            arr = np.asarray([side[k] for k in keys], dtype=float)
            total += sign * np.log(arr[idx, 0].sum(1) / arr[idx, 1].sum(1))
    null = total - observed
    return observed, null[np.isfinite(null)], len(keys)


def pair_share(base: Iterable[RequestResult], new: Iterable[RequestResult]) -> float:
    """The share of the larger side's keyed requests that the other side holds too (0 where either has none)."""
    b = {k for r in base if (k := key_of(r)) is not None}
    n = {k for r in new if (k := key_of(r)) is not None}
    return len(b & n) / max(len(b), len(n)) if b and n else 0.0
