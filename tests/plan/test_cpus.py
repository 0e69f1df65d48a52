"""The engine's CPUs and the client's: the split rule, CPU lists, and pinning this process for real."""

import os
import subprocess
import sys

import pytest

from dflashbench.errors import UserError
from dflashbench.plan.cpus import (
    available_cpus,
    check_setting,
    format_cpu_list,
    parse_cpu_list,
    pinned,
    plan_partition,
)


def test_cpu_lists_round_trip_in_the_linux_format():
    assert parse_cpu_list("0-2,5") == (0, 1, 2, 5)
    assert parse_cpu_list("3") == (3,) and parse_cpu_list("1, 0") == (0, 1)
    assert format_cpu_list((5, 0, 1, 2)) == "0-2,5" and format_cpu_list([7]) == "7"
    for bad in ("", "a", "2-1", "0-", "-1", "0,,1"):
        with pytest.raises(ValueError, match="not a CPU list"):
            parse_cpu_list(bad)
    assert check_setting("auto") == "auto" and check_setting("none") == "none" and check_setting("0-1") == "0-1"


def test_auto_splits_only_for_an_engine_that_computes_on_the_cpu():
    two = plan_partition("auto", (0, 1), engine_on_cpu=True, launches=True)
    assert (two.engine, two.client, two.split) == ((0,), (1,), True)
    assert two.describe().startswith("engine on CPU 0, client on CPU 1")
    sixteen = plan_partition("auto", range(16), engine_on_cpu=True, launches=True)
    assert sixteen.engine == tuple(range(14)) and sixteen.client == (14, 15)  # the client keeps n // 8
    for kw in ({"engine_on_cpu": False, "launches": True}, {"engine_on_cpu": True, "launches": False}):
        shared = plan_partition("auto", (0, 1), **kw)
        assert not shared.split and shared.client == (0, 1) and shared.client_mask is None
        assert shared.describe().startswith("client and engine shared CPU 0-1")
    single = plan_partition("auto", (3,), engine_on_cpu=True, launches=True)
    assert not single.split and "nothing to split" in single.reason
    assert not plan_partition("none", (0, 1), engine_on_cpu=True, launches=True).split


def test_a_cpu_list_pins_any_launched_engine_and_must_leave_the_client_one():
    forced = plan_partition("0-2", range(4), engine_on_cpu=False, launches=True)
    assert forced.engine == (0, 1, 2) and forced.client == (3,) and forced.client_mask == (3,)
    assert forced.record()["reason"] == "--engine-cpus 0-2"
    with pytest.raises(UserError, match="leaves no CPU for the client"):
        plan_partition("0-1", (0, 1), engine_on_cpu=True, launches=True)
    with pytest.raises(UserError, match="CPU 7 is not available to this process"):
        plan_partition("0,7", (0, 1), engine_on_cpu=True, launches=True)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(available_cpus()) < 2, reason="needs 2 CPUs")
def test_pinned_moves_every_thread_and_children_then_restores():
    before = os.sched_getaffinity(0)
    cpu = min(before)
    with pinned((cpu,)):
        assert os.sched_getaffinity(0) == {cpu}
        child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                               capture_output=True, text=True, check=True)  # fmt: skip
        assert child.stdout.strip() == f"[{cpu}]"  # processes started inside inherit it
    assert os.sched_getaffinity(0) == before
    with pinned(None):
        assert os.sched_getaffinity(0) == before


def test_a_cpu_set_for_a_method_the_run_lacks_is_refused_and_an_endpoint_says_it_ignores_the_setting():
    from dflashbench.plan.cpus import ignored_note

    kw = {"engine_on_cpu": True, "launches": True}
    with pytest.raises(UserError, match=r"dflash is not a method of this run \(it runs ar\), so CPU 1 would be kept"):
        plan_partition("ar=0,dflash=1", (0, 1, 2), methods=["ar"], **kw)
    assert plan_partition("ar=0,dflash=1", (0, 1, 2), methods=["ar", "dflash"], **kw).servers == {"ar": (0,),
                                                                                                  "dflash": (1,)}
    assert not plan_partition("ar=0,dflash=1", (0, 1, 2), methods=["ar"], engine_on_cpu=True, launches=False).split
    assert ignored_note("0-1", launches=False).startswith("--engine-cpus 0-1 is ignored: with --endpoint")
    assert ignored_note("auto", launches=False) is None and ignored_note("none", launches=False) is None
    assert ignored_note("0-1", launches=True) is None
