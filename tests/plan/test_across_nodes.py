"""Plans past one node (issue #67): a cluster's shape (--gpu 2x8xb200) lets the memory plan lay a server across
nodes as its engine does, and the placement put each method's server on node(s) of its own."""

from __future__ import annotations

import pytest

from dflashbench.errors import UserError
from dflashbench.plan.gpus import parse_gpu
from dflashbench.plan.pairing import resolve, server_spec
from dflashbench.plan.placement import place_nodes, plan_placement
from dflashbench.plan.preflight import preflight
from dflashbench.plan.suite_overrides import apply_overrides
from dflashbench.plan.suites import load_suite
from dflashbench.types import Method


def planned(engine: str, model: str, methods: str, gpu: str):
    suite = apply_overrides(load_suite("default"), backend=engine, model=model, methods=methods, cluster="slurm")
    return resolve(suite, gpus=parse_gpu(gpu))


@pytest.mark.parametrize(("engine", "model", "methods", "gpu", "layout"), [
    ("vllm", "glm-5.3", "ar,dflash2,mtp", "2x8xb200", (8, 2, 2)),
    # SGLang keeps GLM-5.3's MLA latent whole on every tp rank: two nodes hold 113 of 128 (refused with its fixes),
    # four hold 189
    ("sglang", "glm-5.3", "ar,dflash2,mtp", "4x8xb200", (32, 1, 4)),
    ("vllm", "qwen3.5-397b-a17b", "ar,dflash", "2x8xh200", (8, 2, 2)),
    ("sglang", "qwen3.5-397b-a17b", "ar,dflash", "2x8xh200", (16, 1, 2)),
])  # fmt: skip
def test_a_model_wider_than_a_node_is_planned_across_two(monkeypatch, engine, model, methods, gpu, layout):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    suite, pair = planned(engine, model, methods, gpu)
    memory = pair.memory
    assert (memory.tp, memory.pp, memory.nodes) == layout and not memory.problems
    assert memory.capacity >= 128  # the default suite's top concurrency, held
    assert memory.record()["nodes"] == layout[2]  # the manifest keeps it
    preflight(memory)  # not refused
    spec = server_spec(suite, Method.AR, pair, port=8000)
    assert (spec.tp, spec.pp, spec.nnodes) == layout


def test_one_node_still_refuses_and_names_the_cluster_shape(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _, pair = planned("vllm", "glm-5.3", "ar", "8xb200")
    assert pair.memory.nodes == 1
    with pytest.raises(UserError, match=r"a cluster's nodes, a server across them \(--gpu 2x8xb200 --cluster"):
        preflight(pair.memory)


def test_a_model_that_fits_a_node_stays_on_one(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _, pair = planned("vllm", "gpt-oss-120b", "ar,dflash", "2x8xh100")
    assert pair.memory.nodes == 1 and pair.memory.pp == 1


def test_methods_on_nodes_of_their_own_side_by_side_in_stages_or_in_turn():
    methods = [Method.AR, Method.DFLASH, Method.EAGLE3]
    side = place_nodes(methods, dict.fromkeys(methods, 1), 3)
    assert side.mode == "side" and [s.nodes for s in side.servers] == [(0,), (1,), (2,)]
    assert all(not s.gpus and not s.env() for s in side.servers)  # the scheduler gives the GPUs
    staged = place_nodes(methods, dict.fromkeys(methods, 2), 4)
    assert staged.mode == "side" and staged.stages == ((Method.AR, Method.DFLASH), (Method.EAGLE3,))
    alone = place_nodes(methods, dict.fromkeys(methods, 2), 2)
    assert alone.mode == "off"
    assert side.for_round(1) is side  # no rotation: the scheduler picks the machines


def test_a_cluster_places_by_node_even_on_one():
    gpu = parse_gpu("8xh100")
    placed = plan_placement([Method.AR, Method.DFLASH], "auto", launches=True, on_gpu=True, tp=2, gpu=gpu,
                            dry_run=True, cluster="slurm")  # fmt: skip
    assert placed.mode == "off" and all(s.nodes == (0,) for s in placed.servers)
    local = plan_placement([Method.AR, Method.DFLASH], "auto", launches=True, on_gpu=True, tp=2, gpu=gpu,
                           dry_run=True)  # fmt: skip
    assert local.mode == "side" and all(s.gpus for s in local.servers)  # unchanged on one machine
