"""``dflashbench tune``'s two sweeps, planned: the K x load grid, then the check of the schedule it recommends.

**The grid** is a suite with one arm of the method per K (``dflash-k1``, ``dflash-k3``, ...: the method at that draft
length, each on its own server, measured as a method of its own) at the loads given (default: the suite's concurrency
ladder). The Ks default to a ladder up to the drafter's limit: a DFlash block of B drafts at most B - 1, so
1, 3, 7 and B - 1; EAGLE-3 and n-gram draft a chain of any length, so 1, 2, 3, 5, 7; MTP 1, 2, 3.

**The check** runs the method at its own fixed K beside its tuned schedule (``dflash-tuned``, the schedule in the
suite's ``schedules``) at the grid's loads and at the loads on both sides of each threshold where the schedule
changes K, so the report reads the tuned schedule's measured gain at each load, threshold crossings included.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.methods import record
from dflashbench.plan.suites import Suite
from dflashbench.reference.draft_length import DraftSchedule
from dflashbench.types import Method

TUNED = "tuned"  # the check's schedule arm: <method>-tuned
SCHEDULE_FORMAT = "dflashbench draft-length schedule"  # tune's schedule.json
BLOCK_METHODS = (Method.DFLASH, Method.DFLASH2)
CHAIN_KS = (1, 2, 3, 5, 7)
MTP_KS = (1, 2, 3)


@dataclass(frozen=True)
class TunePlan:
    method: Method
    ks: tuple[int, ...]
    loads: tuple[int, ...]
    limit: int | None  # the longest K the drafter drafts, where known
    limit_why: str
    grid: Suite

    @property
    def arms(self) -> list[Method]:
        return [arm_of(self.method, k) for k in self.ks]

    def check(self, schedule: DraftSchedule, repeats: int | None = None) -> Suite:
        """The check's suite: the method at its fixed K beside ``<method>-tuned`` running ``schedule``, at the
        grid's loads and both sides of each threshold."""
        return check_suite(self.grid, self.method, schedule, self.loads, repeats)


def arm_of(method: Method, k: int) -> Method:
    return Method.parse(f"{method.value}-k{k}")


def default_ks(method: Method, limit: int | None) -> tuple[int, ...]:
    """The grid's Ks when none are given (module docstring)."""
    if method in BLOCK_METHODS:
        top = limit if limit is not None else 15
        return tuple(sorted({k for k in (1, 3, 7, top) if 1 <= k <= top}))
    ks = MTP_KS if method is Method.MTP else CHAIN_KS
    return tuple(k for k in ks if limit is None or k <= limit)


def plan_tune(base: Suite, method: Method, *, ks: Sequence[int] | None = None, loads: Sequence[int] | None = None,
              block_size: int | None = None, block_why: str = "") -> TunePlan:  # fmt: skip
    """The grid for ``method`` from ``base`` (the suite the sweep would run: its model, drafts, workloads, prompts and
    limits are kept). ``block_size``: the DFlash drafter's block where known (its K is at most block - 1)."""
    method = Method.parse(str(method))
    if method.variant is not None:
        raise UserError(f"tune --method {method.value}: name the method ({method.base.value}); tune makes its arms")
    if method is Method.AR or record(method).draft_free and method is not Method.NGRAM:
        raise UserError(f"tune --method {method.value}: {record(method).label} has no draft length to tune; "
                        "choose dflash, dflash2, eagle3, mtp or ngram")  # fmt: skip
    limit, why = (block_size - 1, block_why or f"a DFlash block of {block_size}") \
        if method in BLOCK_METHODS and block_size else (None, "no fixed limit (a chain drafts any length)")  # fmt: skip
    ks = tuple(sorted(set(ks))) if ks else default_ks(method, limit)
    if any(k < 1 for k in ks):
        raise UserError(f"tune --k {','.join(map(str, ks))}: each K is 1 or more")
    if limit is not None and max(ks) > limit:
        raise UserError(f"tune --k {','.join(map(str, ks))}: the {method.value} drafter drafts at most {limit} tokens "
                        f"per step ({why}); drop the Ks above it")  # fmt: skip
    if len(ks) < 2:
        raise UserError(f"tune needs at least two Ks to fit how acceptance falls with K, got {list(ks)}: give --k 1,3,7")
    loads = tuple(sorted(set(loads))) if loads else tuple(base.concurrency)
    if not loads:
        raise UserError("tune needs at least one load: give --concurrency 1,4,16")
    arms = [arm_of(method, k) for k in ks]
    grid = base.model_copy(update={"methods": arms, "concurrency": list(loads), "schedules": {},
                                   "name": f"{base.name}-tune-{method.value}"[:80]})  # fmt: skip
    return TunePlan(method, ks, loads, limit, why, Suite.model_validate(grid.model_dump()))


def check_suite(grid: Suite, method: Method, schedule: DraftSchedule, loads: Sequence[int],
                repeats: int | None = None) -> Suite:  # fmt: skip
    from dflashbench.measure.tune_fit import threshold_loads

    tuned = f"{method.value}-{TUNED}"
    levels = sorted({*loads, *threshold_loads(schedule)})
    update = {"methods": [method, Method.parse(tuned)], "schedules": {tuned: schedule.to_list()},
              "concurrency": levels, "name": grid.name.replace("-tune-", "-tuned-")[:80]}  # fmt: skip
    if repeats is not None:
        update["repeats"] = repeats
    return Suite.model_validate(grid.model_copy(update=update).model_dump())


def check_bound(plan: TunePlan) -> tuple[int, int]:
    """The most points the check can run (two arms at the grid's loads and both sides of each threshold the
    schedule could have, one fewer than the Ks), and its loads at most."""
    extra = 2 * (len(plan.ks) - 1)
    loads = len(plan.loads) + extra
    return 2 * loads * max(plan.grid.repeats, 1) * len(plan.grid.workloads), loads


def read_schedule_file(path: Path | str) -> tuple[str | None, DraftSchedule]:
    """A schedule file: tune's ``schedule.json`` (its method and ranges) or a bare ``[[lo, hi, K], ...]`` list."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"--schedule {path}: cannot read it as JSON ({exc})") from None
    method, ranges = (data.get("method"), data.get("num_speculative_tokens_per_batch_size")) \
        if isinstance(data, dict) else (None, data)  # fmt: skip
    try:
        return method, DraftSchedule.parse(ranges if ranges is not None else [])
    except ValueError as exc:
        raise UserError(f"--schedule {path}: {exc}") from None


def with_schedule(suite: Suite, path: Path | str) -> Suite:
    """``sweep --schedule FILE``: the suite with ``<method>-tuned`` running the file's schedule beside ``<method>`` at
    its fixed K (added where the suite lacks it), so one report reads the two side by side. The method is the file's,
    else the suite's one drafting method."""
    named, schedule = read_schedule_file(path)
    drafting = [m for m in suite.methods if m.variant is None and m is not Method.AR]
    if named is None and len(drafting) != 1:
        raise UserError(f"--schedule {path} names no method and the run has {len(drafting)} drafting methods: give "
                        "--method with one of them, or a schedule.json from dflashbench tune")  # fmt: skip
    try:
        method = Method.parse(named) if named is not None else drafting[0]
    except ValueError as exc:
        raise UserError(f"--schedule {path}: {exc}") from None
    arm = Method.parse(f"{method.value}-{TUNED}")
    methods = [*suite.methods, *[m for m in (method, arm) if m not in suite.methods]]
    update = {"methods": methods, "schedules": {**suite.schedules, arm.value: schedule.to_list()}}
    try:
        return Suite.model_validate(suite.model_copy(update=update).model_dump())
    except ValueError as exc:
        raise UserError(f"--schedule {path}: {exc}") from None
