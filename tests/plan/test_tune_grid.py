"""tune's grid and check, planned: one arm per K at the loads, within the drafter's limit; the check at the grid's
loads and both sides of each threshold; sweep --schedule."""

from __future__ import annotations

import json

import pytest

from dflashbench.errors import UserError
from dflashbench.plan.suites import load_suite
from dflashbench.plan.tune_grid import check_bound, default_ks, plan_tune, read_schedule_file, with_schedule
from dflashbench.reference.draft_length import DraftSchedule
from dflashbench.types import Method


@pytest.fixture(scope="module")
def demo():
    return load_suite("demo")


def test_the_grid_is_one_arm_per_k_at_the_suites_loads(demo):
    plan = plan_tune(demo, Method.DFLASH, block_size=16, block_why="its config.json")
    assert plan.ks == (1, 3, 7, 15) and plan.limit == 15 and plan.loads == tuple(demo.concurrency)
    assert [m.value for m in plan.grid.methods] == ["dflash-k1", "dflash-k3", "dflash-k7", "dflash-k15"]
    assert plan.grid.workloads == demo.workloads and plan.grid.name == "demo-tune-dflash"
    assert default_ks(Method.DFLASH, 7) == (1, 3, 7) and default_ks(Method.EAGLE3, None) == (1, 2, 3, 5, 7)
    assert default_ks(Method.MTP, None) == (1, 2, 3)
    small = plan_tune(demo, Method.EAGLE3, ks=[7, 1], loads=[4, 1])
    assert (small.ks, small.loads, small.limit) == ((1, 7), (1, 4), None)


@pytest.mark.parametrize(("kw", "message"), [
    ({"method": Method.DFLASH, "ks": [1, 16], "block_size": 16}, "drafts at most 15 tokens per step"),
    ({"method": Method.DFLASH, "ks": [3]}, "at least two Ks"),
    ({"method": Method.AR}, "has no draft length to tune"),
    ({"method": Method.SUFFIX}, "has no draft length to tune"),
    ({"method": Method.parse("dflash-k3")}, "name the method"),
])
def test_a_grid_that_cannot_be_tuned_is_refused_naming_why(demo, kw, message):
    with pytest.raises(UserError, match=message):
        plan_tune(demo, **kw)


def test_the_check_runs_the_fixed_k_beside_the_schedule_on_both_sides_of_each_threshold(demo):
    plan = plan_tune(demo, Method.DFLASH, ks=[1, 7], loads=[1, 4, 16], block_size=16)
    check = plan.check(DraftSchedule.parse("[[1,3,7],[4,64,1]]"), repeats=2)
    assert [m.value for m in check.methods] == ["dflash", "dflash-tuned"]
    assert check.schedules == {"dflash-tuned": [[1, 3, 7], [4, 64, 1]]}
    assert check.concurrency == [1, 3, 4, 16] and check.repeats == 2  # 3 | 4: the threshold's two sides
    assert check_bound(plan) == (2 * (3 + 2), 3 + 2)


def test_sweep_schedule_file_adds_the_tuned_arm_beside_its_method(demo, tmp_path):
    tuned = tmp_path / "schedule.json"
    tuned.write_text(json.dumps({"method": "eagle3", "num_speculative_tokens_per_batch_size": [[1, 2, 5], [3, 8, 2]]}))
    suite = with_schedule(demo, tuned)
    assert [m.value for m in suite.methods] == ["ar", "dflash", "eagle3", "eagle3-tuned"]
    assert suite.draft_schedule("eagle3-tuned") == DraftSchedule.parse("[[1,2,5],[3,8,2]]")
    bare = tmp_path / "bare.json"
    bare.write_text("[[1, 1, 3]]")
    assert read_schedule_file(bare) == (None, DraftSchedule.fixed(3))
    with pytest.raises(UserError, match="names no method and the run has 2 drafting methods"):
        with_schedule(demo, bare)
    assert [m.value for m in with_schedule(demo.model_copy(update={"methods": [Method.DFLASH]}), bare).methods] == \
        ["dflash", "dflash-tuned"]  # fmt: skip
    bad = tmp_path / "bad.json"
    bad.write_text('{"method": "dflash", "num_speculative_tokens_per_batch_size": [[2, 8, 3]]}')
    with pytest.raises(UserError, match="--schedule .*bad.json: the first batch-size range must start at 1"):
        with_schedule(demo, bad)
