"""The GPUs a plan is made for: `sweep --gpu NAME`, what NVML sees, or an assumed H100 said out loud."""

from __future__ import annotations

import pytest

from dflashbench.errors import UserError
from dflashbench.plan.gpus import GPU_MODELS, GpuPlan, arch_of, gpus_per_node, parse_gpu, resolve_plan


@pytest.mark.parametrize(("text", "arch", "count", "memory"), [
    ("h100", "hopper", None, 79.6), ("H200", "hopper", None, 140.4), ("b200", "blackwell", None, 179.1),
    ("gb200", "blackwell", None, 173.2), ("b300", "blackwell", None, 268.2), ("8xb200", "blackwell", 8, 179.1),
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
    assert parse_gpu("8xb200").describe() == "planned for 8 x B200 (Blackwell, 179.1 GiB each), from --gpu"


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
