"""The GPUs a plan is made for: `sweep --gpu NAME`, what NVML sees, or an assumed H100 said out loud."""

from __future__ import annotations

import pytest

from dflashbench.errors import UserError
from dflashbench.plan.gpus import GPU_MODELS, GpuPlan, arch_of, gpus_per_node, parse_gpu, resolve_plan


@pytest.mark.parametrize(("text", "arch", "count", "memory"), [
    ("h100", "hopper", 1, 79.6), ("H200", "hopper", 1, 140.4), ("b200", "blackwell", 1, 179.1),
    ("gb200", "blackwell", 1, 173.2), ("b300", "blackwell", 1, 268.2), ("8xb200", "blackwell", 8, 179.1),
    (" 4 x h100 ", "hopper", 4, 79.6),
])  # fmt: skip
def test_gpu_names_and_counts(text, arch, count, memory):
    """Memory in GiB as NVML reports it (H100 79.65, H200 143771 MiB, B200 183359 MiB) or the vendor's GB figure."""
    plan = parse_gpu(text)
    assert (plan.arch, plan.count, round(plan.memory_gib, 1), plan.origin) == (arch, count, memory, "--gpu")


def test_gpus_per_node_bound_a_plan():
    """An HGX node holds 8 GPUs, a GB200 NVL72 compute tray 4; a name NVML reports finds its model."""
    assert [gpus_per_node(n) for n in ("H100", "NVIDIA H200", "B200", "GB200", "NVIDIA GB200", "B300", "L40S")] == \
        [8, 8, 8, 4, 4, 8, 8]


@pytest.mark.parametrize("text", ["a100", "h100x", "0xh100", ""])
def test_an_unknown_gpu_names_the_known_ones(text):
    with pytest.raises(UserError, match="name one of h100, h200, b200, gb200, b300|at least 1"):
        parse_gpu(text)


@pytest.mark.parametrize(("text", "fix", "nodes"), [("9xh100", "--gpu 8xh100", "2x8xh100"),
                                                    ("100000xh100", "--gpu 8xh100", "12500x8xh100"),
                                                    ("5xgb200", "--gpu 4xgb200", "2x4xgb200")])  # fmt: skip
def test_a_count_past_one_node_is_refused_with_the_node_that_fits(text, fix, nodes):
    """Issue #63: 9xh100 was taken as one node and 100000xh100 planned 49,997 replicas in 221 s. Issue #67: the
    fix names the cluster shape too."""
    import time

    start = time.perf_counter()
    with pytest.raises(UserError, match=f"node holds at most .*give {fix} for one node, or --gpu {nodes} for a"):
        parse_gpu(text)
    assert time.perf_counter() - start < 1.0  # refused before any plan is made


def test_a_cluster_shape_is_nodes_of_gpus():
    """Issue #67: --gpu 2x8xb200 is two machines of eight B200s."""
    plan = parse_gpu("2x8xb200")
    assert (plan.nodes, plan.count, plan.label) == (2, 8, "B200")
    assert plan.describe().startswith("2 nodes of 8 x B200")
    assert parse_gpu("8xh100").nodes == 1
    with pytest.raises(UserError, match="node holds at most 8"):
        parse_gpu("2x9xh100")


def test_compute_capability_to_architecture():
    assert [arch_of(cc) for cc in (8, 9, 10, 12, None)] == [None, "hopper", "blackwell", None, None]
    assert {m.arch for m in GPU_MODELS.values()} == {"hopper", "blackwell"}


def test_a_dry_run_plans_for_the_named_gpu_and_says_where_the_plan_came_from():
    here = GpuPlan("NVIDIA H100 80GB HBM3", "hopper", 79.6, 8, "nvml")
    assert resolve_plan("b200", dry_run=True, seen=here).label == "B200"
    assert resolve_plan(None, dry_run=True, seen=here) is here
    assumed = resolve_plan(None, dry_run=True, seen=None)
    assert assumed.origin == "assumed" and assumed.arch == "hopper"
    assert "assumed: no GPU visible and no --gpu" in assumed.describe()
    assert parse_gpu("8xb200").describe() == "8 x B200 (Blackwell, 179.1 GiB each), from --gpu 8xb200"
    assert parse_gpu("h100").describe() == ("1 x H100 (Hopper, 79.6 GiB each), from --gpu h100 (a name alone is one GPU; "
                                            "--gpu 8xh100 for a node)")  # fmt: skip


def test_a_real_run_refuses_a_gpu_of_another_architecture_than_the_ones_here():
    here = GpuPlan("NVIDIA H100 80GB HBM3", "hopper", 79.6, 8, "nvml")
    with pytest.raises(UserError, match="--gpu b200 plans for B200 .* but the servers would start on NVIDIA H100"):
        resolve_plan("b200", dry_run=False, seen=here)
    assert resolve_plan("h200", dry_run=False, seen=here) is here  # same architecture: the GPUs here win


class _Nvml:
    """What NVML answers on an 8 x B200 node (the calls dflashbench.plan.gpus.visible_plan makes)."""

    class _Mem:
        total = 191_000_000_000

    def nvmlInit(self):  # noqa: N802
        pass

    def nvmlShutdown(self):  # noqa: N802
        pass

    def nvmlDeviceGetCount(self):  # noqa: N802
        return 8

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return i

    def nvmlDeviceGetName(self, h):  # noqa: N802
        return b"NVIDIA B200"

    def nvmlDeviceGetCudaComputeCapability(self, h):  # noqa: N802
        return (10, 0)

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        return self._Mem()


def test_the_plan_takes_the_architecture_nvml_reports(monkeypatch):
    from dflashbench import telemetry
    from dflashbench.plan import gpus

    monkeypatch.setattr(telemetry, "load_nvml", lambda: _Nvml())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    plan = gpus.visible_plan()
    assert (plan.label, plan.arch, plan.count, round(plan.memory_gib)) == ("NVIDIA B200", "blackwell", 8, 178)
    assert gpus.resolve_plan(None, dry_run=False) == plan


def test_a_bare_gpu_name_plans_one_gpu_and_the_first_plan_line_says_so(monkeypatch):
    """Issue #63: `--gpu h100` planned "tp 4 … on 8 x H100"; a name alone is one GPU."""
    from typer.testing import CliRunner

    from dflashbench.cli import app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = CliRunner().invoke(app, ["sweep", "--backend", "sglang", "--model", "qwen3-8b", "--gpu", "h100",
                                   "--dry-run"]).output  # fmt: skip
    first = next(ln for ln in out.splitlines() if ln.startswith("plan: "))
    assert first.startswith("plan: GPUs: 1 x H100 (Hopper, 79.6 GiB each), from --gpu h100 (a name alone is one GPU"), out
    assert "plan: tp 1" in out and "on 8 x H100" not in out


def test_a_flag_the_reference_backend_ignores_is_said(monkeypatch):
    from typer.testing import CliRunner

    from dflashbench.cli import app

    out = CliRunner().invoke(app, ["sweep", "--backend", "reference", "--gpu", "h100", "--dry-run"]).output
    assert "note: --gpu h100 is ignored: the reference backend serves on this machine's own devices" in out
