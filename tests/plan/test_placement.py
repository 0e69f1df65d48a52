"""Issue #55: where each method's server runs and which run at once (dflashbench.plan.placement), the wall time
one method at a time and as placed (dflashbench.plan.wall_time), from fake GPU lists and a fake NVML."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from dflashbench.errors import UserError
from dflashbench.plan import placement as pl
from dflashbench.plan.suite_overrides import suite_from_flags
from dflashbench.run.sweep import SweepConfig, prepare
from dflashbench.types import Method

AR, EAGLE3, DFLASH = Method.AR, Method.EAGLE3, Method.DFLASH


def _dry(**flags):
    gpu = flags.pop("gpu", None)
    suite = suite_from_flags(None, flags)
    return prepare(SweepConfig(suite=suite, dry_run=True, gpu=gpu, methods_given=False))


def _no_shared_gpu(placement: pl.Placement) -> None:
    for a, b in itertools.combinations(placement.servers, 2):
        assert not set(a.gpus) & set(b.gpus), (a, b)


@pytest.mark.parametrize("gpu", ["8xh100", "4xh100"])
def test_the_headline_placement_follows_the_memory_plan_and_no_two_servers_share_a_gpu(monkeypatch, gpu):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ctx = _dry(backend="vllm", model="gpt-oss-120b", gpu=gpu)
    plan, placement = ctx.pair.memory.record(), ctx.placement
    count = int(gpu.split("x")[0])
    tp = {m: plan["servers"][m.value]["tp"] for m in ctx.suite.methods}
    assert set(tp.values()) == {2}  # the memory plan's tp on an H100
    assert placement.mode == "side"
    for server in placement.servers:
        assert len(server.gpus) == tp[server.method]  # each server on exactly its method's tp GPUs
        assert set(server.gpus) <= set(range(count))
    if count >= 6:
        assert placement.stages == ()
        _no_shared_gpu(placement)
        assert sum(len(s.gpus) for s in placement.servers) <= count
        assert len(placement.servers) == count // 2  # 3 methods + 1 replica on 8 GPUs at tp 2
        assert {s.method for s in placement.servers if s.replica == 0} == set(ctx.suite.methods)
        for name, launch in ctx.server_launches.items():  # each server's own GPUs in its environment
            server = next(s for s in placement.servers if s.name == name)
            assert launch.plan.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, server.gpus))
            assert launch.plan.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    else:  # 4 GPUs hold two servers of tp 2, not three: AR and DFlash side by side, then EAGLE-3 (issue #63)
        assert placement.stages == ((AR, DFLASH), (EAGLE3,))
        for stage in placement.stages:
            _no_shared_gpu(dataclasses.replace(placement, servers=tuple(s for s in placement.servers
                                                                         if s.method in stage)))  # fmt: skip
        assert "4 x H100 holds 2 of the 3 servers of tp 2 at once: ar + dflash, then eagle3" in placement.why
        assert placement.count(EAGLE3) == 2  # its stage alone: a replica on the GPUs DFlash had


def test_servers_that_do_not_all_fit_run_side_by_side_in_stages_and_the_time_adds_up_stage_by_stage():
    """Issue #63 item 4: three methods of tp 4 on 8 GPUs: AR and DFlash side by side, then the third; each stage's
    sets rotate among its own servers; the wall time is each stage's schedule, one after the other."""
    topology = pl.assumed_topology(8, "a test")
    placed = pl.place_gpus([AR, EAGLE3, DFLASH], 4, topology, replicas=False)
    assert placed.mode == "side" and placed.stages == ((AR, DFLASH), (EAGLE3,))
    assert {s.name: s.gpus for s in placed.servers} == {"ar": (0, 1, 2, 3), "eagle3": (0, 1, 2, 3),
                                                        "dflash": (4, 5, 6, 7)}  # fmt: skip
    assert placed.record()["stages"] == [["ar", "dflash"], ["eagle3"]]
    table = "\n".join(placed.table())
    assert "ar + dflash, then eagle3" in table and "stage 2: alone (its stage)" in table
    assert "stage 1: dflash: a load's points start together" in table
    turned = placed.for_round(1)  # AR and DFlash swap sets; EAGLE-3 keeps its own
    assert {s.name: s.gpus for s in turned.servers} == {"ar": (4, 5, 6, 7), "eagle3": (0, 1, 2, 3),
                                                        "dflash": (0, 1, 2, 3)}  # fmt: skip
    assert placed.in_stages([EAGLE3, AR, DFLASH]) == [(EAGLE3,), (AR, DFLASH)]  # the tightest server's stage first
    cells = [{AR: 10.0, EAGLE3: 6.0, DFLASH: 4.0}] * 3
    assert pl.side_seconds(cells, placed) == 30.0 + 18.0  # AR's pace for stage 1, then EAGLE-3's alone
    # one method per stage is no side by side: one method's server at a time
    assert pl.place_gpus([AR, EAGLE3, DFLASH], 8, topology).mode == "off"
    assert pl.place_gpus([AR, EAGLE3, DFLASH], 4, topology, "off").stages == ()


def test_the_sweep_runs_each_stage_s_points_on_its_own_servers_the_tightest_stage_first(monkeypatch):
    from types import SimpleNamespace

    from dflashbench.run import sweep

    placed = pl.place_gpus([AR, EAGLE3, DFLASH], 4, pl.assumed_topology(8, "a test"), replicas=False)
    grid = [SimpleNamespace(method=m, repeat=0, point_id=f"{m.value}:c{c}")
            for c in (1, 2) for m in (AR, EAGLE3, DFLASH)]  # fmt: skip
    ctx = SimpleNamespace(placement=placed, grid=grid, suite=SimpleNamespace(repeats=1), interleave=True)
    monkeypatch.setattr(sweep.capacity, "launch_order", lambda ctx: [EAGLE3, AR, DFLASH])
    ran = []
    monkeypatch.setattr(sweep, "_run_together",
                        lambda ctx, cfg, store, todo, *rest: ran.append([p.point_id for p in todo]))  # fmt: skip
    sweep._run_rounds(ctx, None, None, set(), None, None, print, None)
    assert ran == [["eagle3:c1", "eagle3:c2"], ["ar:c1", "dflash:c1", "ar:c2", "dflash:c2"]]


def test_spare_gpus_go_to_replicas_of_the_slowest_methods_and_sets_rotate_between_rounds():
    topology = pl.assumed_topology(8, "a test")
    placed = pl.place_gpus([AR, EAGLE3, DFLASH], 1, topology, weights={AR: 30.0, EAGLE3: 10.0, DFLASH: 20.0})
    counts = {m: placed.count(m) for m in (AR, EAGLE3, DFLASH)}
    assert counts == {AR: 4, EAGLE3: 2, DFLASH: 2}  # the largest seconds per server, taken down again and again
    _no_shared_gpu(placed)
    assert [s.name for s in placed.servers][:4] == ["ar", "eagle3", "dflash", "ar#2"]
    turned = placed.for_round(1)  # every server one set along: a method meets every set over the rounds
    assert [s.gpus for s in turned.servers] == [s.gpus for s in placed.servers[1:] + placed.servers[:1]]
    assert [s.name for s in turned.servers] == [s.name for s in placed.servers]
    _no_shared_gpu(turned)


def test_gpu_sets_prefer_nvlink_then_the_nearest_numa_node_read_from_nvml():
    class FakeNvml:
        NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_STATUS_OK = 2, 0

        def nvmlInit(self):
            pass

        def nvmlShutdown(self):
            pass

        def nvmlDeviceGetCount(self):
            return 4

        def nvmlDeviceGetHandleByIndex(self, i):
            return i

        def nvmlDeviceGetP2PStatus(self, a, b, cap):  # NVLink between 0-2 and 1-3 only
            return 0 if {a, b} in ({0, 2}, {1, 3}) else 5

        def nvmlDeviceGetTopologyCommonAncestor(self, a, b):  # 0,1 on one NUMA node, 2,3 on the other
            return 40 if a // 2 == b // 2 else 50

    topology = pl.read_topology(FakeNvml())
    assert topology.read and topology.distance(0, 2) == pl.NVLINK and topology.distance(0, 1) == 40
    placed = pl.place_gpus([AR, DFLASH], 2, topology)
    assert [s.gpus for s in placed.servers] == [(0, 2), (1, 3)] and placed.mode == "side"
    assert "NVML" in placed.topology


def test_cpu_servers_side_by_side_on_their_own_cores_else_in_turn():
    both = pl.place_cpu([AR, DFLASH], "auto", {AR: (0,), DFLASH: (1,)}, client=(0, 1))
    assert both.mode == "side" and [s.cpus for s in both.servers] == [(0,), (1,)]
    assert "the client shares CPU 0-1 with an engine" in both.notes[0]
    assert pl.place_cpu([AR, DFLASH]).mode == "turns"
    assert pl.place_cpu([AR, DFLASH], "point").mode == "point" and pl.place_cpu([AR, DFLASH], "on").mode == "point"
    with pytest.raises(UserError, match="names no CPUs for dflash"):
        pl.place_cpu([AR, DFLASH], "auto", {AR: (0,)})
    with pytest.raises(UserError, match="share CPU 1"):
        pl.place_cpu([AR, DFLASH], "auto", {AR: (0, 1), DFLASH: (1,)})
    with pytest.raises(UserError, match="side needs a server per method"):
        pl.place_gpus([AR, EAGLE3, DFLASH], 2, pl.assumed_topology(4, "a test"), "side")


def test_the_schedule_starts_a_load_once_a_server_of_every_method_is_free():
    cells = [{AR: 10.0, DFLASH: 4.0}, {AR: 10.0, DFLASH: 4.0}, {AR: 10.0, DFLASH: 4.0}]
    assert pl.simulate(cells, {AR: 1, DFLASH: 1}).end_s == 30.0  # AR's points set the pace
    two = pl.simulate(cells, {AR: 2, DFLASH: 1})  # a replica of AR: the next load starts when DFlash is free
    assert two.starts_s == (0.0, 4.0, 10.0) and two.end_s == 20.0


def test_the_dry_run_prints_the_placement_and_both_wall_times_from_one_estimator_on_one_screen(monkeypatch):
    from typer.testing import CliRunner

    from dflashbench.cli import app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(app, ["sweep", "--backend", "vllm", "--model", "gpt-oss-120b", "--gpu", "8xh100",
                                      "--dry-run"])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert sum(max(1, -(-len(ln) // 100)) for ln in lines) <= 45, "more than one screen at 100 columns"
    assert lines[[i for i, ln in enumerate(lines) if ln.startswith("placement: side")][0] + 1].split() == \
        ["server", "devices", "beside", "it"]  # fmt: skip
    duration = next(ln for ln in lines if ln.startswith("duration: "))
    assert "one method at a time" in duration and "side by side" in duration and "min server starts" in duration
    rates = next(ln for ln in lines if ln.strip().startswith("rates (tok/s/user, estimated, H100 x tp 2, vllm"))
    at_c1 = dict(part.split()[:2] for part in rates.split("c=1: ")[1].split(";")[0].split(", "))
    low = {m: float(v.split("–")[0]) for m, v in at_c1.items()}
    assert low["ar"] < low["eagle3"] < low["dflash"]  # each method's own rate: AR slower per user


def test_each_method_takes_its_own_time_over_the_requests_its_load_plans(monkeypatch):
    """A load's points plan the same requests (they stop together); AR, slower per user, takes longer over them: by
    the ratio of the published rates (figure C's DFlash 2.3x over AR), and longer still at a higher load."""
    from dflashbench.plan.pace import method_rates
    from dflashbench.plan.wall_time import cell_seconds, cells
    from dflashbench.run.sweep_console import trace_sizes, workload_sizes

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ctx = _dry(backend="vllm", model="gpt-oss-120b", gpu="8xh100")
    rates = method_rates(ctx.pair, ctx.suite, ctx.backend_name)
    loads = cells(ctx.grid)
    c1, c8 = (next(c for c in loads if c[0].concurrency == n and c[0].workload_label == "gsm8k") for n in (1, 8))
    s1, s8 = (cell_seconds(c, workload_sizes(ctx), ctx.suite, trace_sizes(ctx.traces), rates, 0) for c in (c1, c8))
    by = {p.method: s1[p.point_id] for p in c1}
    assert by[AR] / by[DFLASH] == pytest.approx(rates.user_tok_per_s("dflash", 1) / rates.user_tok_per_s("ar", 1))
    assert by[AR] > by[EAGLE3] > by[DFLASH]
    per_request = {n: s[next(p.point_id for p in c if p.method is AR)] for n, s, c in ((1, s1, c1), (8, s8, c8))}
    assert per_request[8] > per_request[1] / 8  # per-user rate falls with load: c=8 takes more than an eighth
