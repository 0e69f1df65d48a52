"""A method's arms: the method at its own draft length (``dflash-k3``, or a named schedule ``dflash-tuned``), measured
beside it as a method of its own, on its method's draft and server."""

from __future__ import annotations

import pickle

import pytest

from dflashbench.errors import UserError
from dflashbench.methods import label, record
from dflashbench.plan import pairing
from dflashbench.plan.suites import parse_suite
from dflashbench.reference.draft_length import DraftSchedule
from dflashbench.types import Method

BASE = {"name": "arms", "model": "embedded", "concurrency": [1, 4], "workloads": [{"name": "synthetic"}]}


def suite(**keys):
    return parse_suite({**BASE, **keys}, source="test")


def test_an_arm_is_its_own_method_and_runs_its_methods_record():
    arm = Method.parse("DFlash-k3")
    assert arm is Method("dflash-k3") and arm is pickle.loads(pickle.dumps(arm))  # one object: `is` holds
    assert (arm.value, arm.base, arm.variant, arm.arm_k) == ("dflash-k3", Method.DFLASH, "k3", 3)
    assert arm != Method.DFLASH and arm not in list(Method)  # never listed as a method of its own
    assert Method.DFLASH.base is Method.DFLASH and Method.DFLASH.variant is None and Method.DFLASH.arm_k is None
    assert record(arm) is record(Method.DFLASH) and label(arm) == "DFlash-k3"
    assert Method.parse("eagle3-tuned").arm_k is None
    for bad in ("dflash-", "dflash-3", "medusa-k3", "dflash-K 3", "dflash-k3@x", "ar-k2-"):
        with pytest.raises(ValueError, match="unknown method"):
            Method.parse(bad)


def test_a_suite_runs_arms_beside_their_method_with_their_schedules():
    s = suite(methods=["ar", "dflash", "dflash-k3", "dflash-tuned"],
              schedules={"dflash-tuned": [[2, 64, 3], [1, 1, 7]]})  # fmt: skip
    assert s.schedules == {"dflash-tuned": [[1, 1, 7], [2, 64, 3]]}  # sorted, as vLLM normalises it
    assert s.draft_tokens("dflash-k3") == 3 and s.draft_tokens("dflash") is None
    assert s.draft_schedule("dflash-tuned") == DraftSchedule.parse("[[1,1,7],[2,64,3]]")
    assert s.methods_without_draft() == ["dflash"]  # one draft for the method and its arms


@pytest.mark.parametrize(("keys", "message"), [
    ({"methods": ["ar-k2"]}, "ar drafts nothing"),
    ({"methods": ["dflash-tuned"]}, 'dflash-tuned names no schedule: add schedules."dflash-tuned"'),
    ({"methods": ["dflash"], "schedules": {"dflash-fast": [[1, 1, 3]]}}, "the suite runs no method 'dflash-fast'"),
    ({"methods": ["dflash-k3"], "schedules": {"dflash-k3": [[1, 1, 3]]}}, "a -kN arm has one K"),
    ({"methods": ["dflash-x"], "schedules": {"dflash-x": [[2, 8, 3]]}}, "must start at 1"),
    ({"methods": ["dflash-k3"], "drafts": {"dflash-k3": "x"}}, "an arm runs its method's draft .* key the setting by the method, dflash"),
])
def test_an_arm_the_suite_cannot_run_is_refused_naming_the_fix(keys, message):
    with pytest.raises(UserError, match=message):
        suite(**keys)


def test_each_arm_gets_its_own_server_on_its_methods_drafter():
    s = suite(methods=["dflash", "dflash-k3", "eagle3-tuned"], schedules={"eagle3-tuned": [[1, 2, 4], [3, 64, 1]]})
    resolved, pair = pairing.resolve(s)
    assert set(pair.drafts) == {Method.DFLASH, Method.EAGLE3}
    plain, k3, tuned = (pairing.server_spec(resolved, m, pair, port=9) for m in resolved.methods)
    assert plain.method is k3.method is Method.DFLASH and tuned.method is Method.EAGLE3  # the engine runs the method
    assert plain.draft == k3.draft == pair.drafts[Method.DFLASH]
    assert (plain.num_speculative_tokens, k3.num_speculative_tokens) == (None, 3)
    assert tuned.draft_schedule == DraftSchedule.parse("[[1,2,4],[3,64,1]]") and tuned.num_speculative_tokens is None


def test_the_grid_names_each_arms_points_by_the_arm():
    from dflashbench.backends import get_backend
    from dflashbench.plan.grid import build_grid, plan_launches

    s = suite(methods=["dflash", "dflash-k2"])
    resolved, pair = pairing.resolve(s)
    launches = plan_launches(resolved, pair, get_backend("reference"))
    assert list(launches) == [Method.DFLASH, Method("dflash-k2")]
    assert "--num-speculative-tokens" in launches[Method("dflash-k2")].plan.argv
    assert "--num-speculative-tokens" not in launches[Method.DFLASH].plan.argv
    ids = [p.point_id for p in build_grid(resolved, "reference", launches)]
    assert ids == ["reference:dflash:synthetic:c1", "reference:dflash:synthetic:c4",
                   "reference:dflash-k2:synthetic:c1", "reference:dflash-k2:synthetic:c4"]  # fmt: skip
