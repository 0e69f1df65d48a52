"""Each node's argv of a server across nodes (issue #67), as each engine's own docs write it; the engines session
checks the same argv against the engines' parsers (tests/engines/check_argv.py, node_specs)."""

from __future__ import annotations

import dataclasses

import pytest

from dflashbench.backends import get_backend
from dflashbench.backends.base import LEADER_HOST, NODE_RANK, ServerSpec
from dflashbench.errors import UserError
from dflashbench.types import Method

SPEC = ServerSpec(method=Method.AR, model="org/m", nnodes=2)


def argv(engine: str, **kw) -> list[str]:
    return list(get_backend(engine).launch_plan(dataclasses.replace(SPEC, **kw)).argv)


def after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_vllm_runs_a_pipeline_stage_per_node_and_its_followers_headless():
    leader, follower = argv("vllm", tp=8, pp=2, node_rank=0), argv("vllm", tp=8, pp=2, node_rank=1)
    for args, rank in ((leader, "0"), (follower, "1")):
        assert (after(args, "--tensor-parallel-size"), after(args, "--pipeline-parallel-size")) == ("8", "2")
        assert (after(args, "--nnodes"), after(args, "--node-rank")) == ("2", rank)
        assert (after(args, "--master-addr"), after(args, "--master-port")) == (LEADER_HOST, "29501")
    assert "--headless" not in leader and "--headless" in follower
    assert after(argv("vllm", tp=8, pp=2, node_rank=NODE_RANK), "--node-rank") == NODE_RANK  # a template's rank


def test_sglang_runs_tp_over_every_node_and_names_the_leader_with_its_port():
    args = argv("sglang", tp=16, node_rank=1, leader_host="10.0.0.1")
    assert (after(args, "--tp-size"), after(args, "--nnodes"), after(args, "--node-rank")) == ("16", "2", "1")
    assert after(args, "--dist-init-addr") == "10.0.0.1:29501"


def test_one_node_keeps_its_argv_as_before():
    one = list(get_backend("vllm").launch_plan(ServerSpec(method=Method.AR, model="org/m", tp=8)).argv)
    assert not {"--nnodes", "--node-rank", "--master-addr", "--headless", "--pipeline-parallel-size"} & set(one)


@pytest.mark.parametrize(("engine", "says"), [("trtllm", "runs under MPI"), ("reference", "one device")])
def test_an_engine_not_launched_across_nodes_says_so(engine, says):
    with pytest.raises(UserError, match=says):
        get_backend(engine).launch_plan(dataclasses.replace(SPEC, draft=None))
