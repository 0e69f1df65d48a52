"""Which GPUs a plan is made for: the ones NVML sees, the ones ``sweep --gpu NAME`` names, or an assumed H100.

Engine recipes depend on the GPU architecture (an attention backend that runs on Blackwell only, another on
Hopper only: see the registry's ``[models.recipes.<engine>.gpu.<arch>]`` tables), and the tensor-parallel size
on each GPU's memory. A dry run on a laptop sees no GPU, so ``--gpu`` says what to plan for, and without it the
plan says out loud that it assumed one.

Architectures by CUDA compute capability major (what NVML reports): 9 is Hopper (H100, H200), 10 is datacenter
Blackwell (B200, GB200 are SM100, B300 is SM103; SGLang's ``is_sm100`` and its "SM100/SM103 (Blackwell
B200/GB200/B300)" default-backend comment in sglang/srt/arg_groups/model_override_base.py, 0.5.23). Anything
else (Ampere, Ada, consumer Blackwell SM120) gets no architecture-bound recipe flags.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from dflashbench.errors import UserError

Arch = Literal["hopper", "blackwell"]
ARCHES: tuple[Arch, ...] = ("hopper", "blackwell")
ARCH_BY_CC_MAJOR: dict[int, Arch] = {9: "hopper", 10: "blackwell"}


# HGX baseboards hold 8 GPUs: Hopper "DGX/HGX ... (H100/H200) ... full-platform passthrough (e.g., 8-GPU systems)",
# "HGX B200 and B200-850 (8-GPU, SXM6 180GB HBM3e, AC)" (https://superprotocol.com/confidential-computing/gpu-cpu-tee-requirements,
# a provider's summary of NVIDIA's confidential-computing support, as of 2025-01-15).
NODE_SOURCE = "HGX 8-GPU baseboards (https://superprotocol.com/confidential-computing/gpu-cpu-tee-requirements)"


@dataclass(frozen=True)
class GpuModel:
    name: str  # what --gpu takes
    label: str
    arch: Arch
    memory_gib: float  # per GPU, what NVML reports as total (the engines' shares are fractions of it)
    source: str
    per_node: int = 8  # GPUs one machine holds: a server (one process tree) spans at most these
    node_source: str = NODE_SOURCE


GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("h100", "H100", "hopper", 79.6474609375,
                 "NVML total of an H100 80GB HBM3 (tests/fixtures/nvml-h100-dflash-c4.jsonl mem_total_gib)"),
        GpuModel("h200", "H200", "hopper", 143771 / 1024,
                 "nvidia-smi: NVIDIA H200 143771MiB, in a user's terminal log: tmp_memo.md of "
                 "https://github.com/sungwon-chae/arxiv_confi, a scratch file rewritten since (the revision read is "
                 "not known: unverified)"),
        GpuModel("b200", "B200", "blackwell", 183359 / 1024,
                 "nvidia-smi: NVIDIA B200 183359MiB (an 8 x B200 table in https://github.com/NVIDIA/TensorRT-LLM/issues/10278)"),
        GpuModel("gb200", "GB200", "blackwell", 186e9 / 2**30,
                 "GB200 NVL72: 13.4-13.5 TB HBM3e over 72 GPUs (https://awesomeagents.ai/hardware/nvidia-gb200-nvl72), "
                 "about 186 GB each (a vendor figure, not NVML's)", per_node=4,
                 node_source="GB200 NVL72: 18 compute trays of 4 Blackwell GPUs and 2 Grace CPUs "
                             "(https://setloop.io/blog/gb200-nvl72-architecture); one tray is one machine"),
        GpuModel("b300", "B300", "blackwell", 288e9 / 2**30,
                 "B300 (Blackwell Ultra): 288 GB HBM3e (https://glennklockwood.com/garden/processors/B300; a vendor "
                 "figure, not NVML's)"),
    )
}  # fmt: skip
ASSUMED = GPU_MODELS["h100"]  # a dry run with no GPU and no --gpu: the GPU most users have


@dataclass(frozen=True)
class GpuSpeed:
    """What bounds one GPU's decode step (:mod:`dflashbench.plan.decode_rate`): its HBM bandwidth and its dense
    BF16 tensor-core peak (the sparse figures NVIDIA also lists are twice these), from NVIDIA's own pages."""

    bandwidth_tb_s: float
    bf16_dense_tflops: float
    source: str


# NVIDIA's product pages, as read from summaries of them (the pages themselves were not reachable from here):
# H100 SXM and H200 SXM https://www.nvidia.com/en-us/data-center/h100/ and /h200/ (3.35 and 4.8 TB/s; BF16 1,979
# TFLOPS "with sparsity", 989 dense; https://glennklockwood.com/garden/processors/h100 and lzwjava.github.io's H200
# table quote them); HGX B200 and B300 8 TB/s and 2,250 dense BF16 TFLOPS at 1,000 W (DGX B200: 64 TB/s over 8 GPUs,
# https://www.nvidia.com/en-us/data-center/dgx-b200/; https://glennklockwood.com/garden/processors/B200 and /B300);
# GB200 (NVL72: 576 TB/s over 72 GPUs, 2,500 dense BF16 TFLOPS at 1,200 W, the same page); A100 40GB 1,555 GB/s and
# 312 BF16 TFLOPS (https://www.nvidia.com/en-us/data-center/a100/): a calibration figure's GPU only.
GPU_SPEEDS: dict[str, GpuSpeed] = {
    "h100": GpuSpeed(3.35, 989.0, "NVIDIA H100 SXM: 3.35 TB/s, 989 dense BF16 TFLOPS (nvidia.com/en-us/data-center/h100)"),
    "h200": GpuSpeed(4.8, 989.0, "NVIDIA H200 SXM: 4.8 TB/s, 989 dense BF16 TFLOPS (nvidia.com/en-us/data-center/h200)"),
    "b200": GpuSpeed(8.0, 2250.0, "NVIDIA HGX B200: 8 TB/s, 2,250 dense BF16 TFLOPS (nvidia.com/en-us/data-center/dgx-b200)"),
    "gb200": GpuSpeed(8.0, 2500.0, "NVIDIA GB200 NVL72: 8 TB/s, 2,500 dense BF16 TFLOPS per GPU "
                                   "(nvidia.com/en-us/data-center/gb200-nvl72)"),
    "b300": GpuSpeed(8.0, 2250.0, "NVIDIA HGX B300: 8 TB/s, 2,250 dense BF16 TFLOPS (nvidia.com/en-us/data-center/dgx-b300)"),
    "a100-40gb": GpuSpeed(1.555, 312.0, "NVIDIA A100 40GB: 1,555 GB/s, 312 BF16 TFLOPS (nvidia.com/en-us/data-center/a100)"),
}  # fmt: skip


def speed_of(label: str) -> GpuSpeed | None:
    """The bandwidth and peak of the GPUs ``label`` names (a --gpu label or NVML's name); ``None`` for another GPU."""
    text = label.lower().replace(" ", "")
    if text in GPU_SPEEDS:
        return GPU_SPEEDS[text]
    named = sorted((n for n in GPU_SPEEDS if n.split("-")[0] in text), key=lambda n: -len(n))  # gb200 before b200
    return GPU_SPEEDS[named[0]] if named else None


@dataclass(frozen=True)
class GpuPlan:
    """The GPUs a plan is made for, how many, and where that came from."""

    label: str  # "H100", or NVML's name
    arch: Arch | None  # None: an architecture no recipe is bound to
    memory_gib: float | None
    count: int | None  # GPUs planned for (None only in a plan made before counts were kept: one node's worth)
    origin: Literal["nvml", "--gpu", "assumed"]
    given: str | None = None  # the --gpu text as given
    nodes: int = 1  # machines of ``count`` GPUs each (--gpu 2x8xh100): a cluster's servers may span them (issue #67)

    def describe(self) -> str:
        """One line for the plan: how many GPUs, which, their architecture, and why these."""
        count = self.count or gpus_per_node(self.label)
        mem = f", {self.memory_gib:.1f} GiB each" if self.memory_gib else ""
        arch = self.arch.capitalize() if self.arch else "no architecture-bound recipe flags"
        if self.origin == "nvml":
            why = f"the {count} GPU{'s' if count != 1 else ''} NVML sees"
        elif self.origin == "assumed":
            why = ("assumed: no GPU visible and no --gpu, one node of the GPU most users have (pass --gpu NxNAME, "
                   "e.g. --gpu 1xh100 or 8xb200)")  # fmt: skip
        else:
            bare = self.given is not None and not re.match(r"\s*\d", self.given)
            why = f"from --gpu {(self.given or '').strip()}" + (
                f" (a name alone is one GPU; --gpu {gpus_per_node(self.label)}x{(self.given or '').strip()} for a "
                "node)" if bare else "")  # fmt: skip
        shape = f"{self.nodes} nodes of {count} x {self.label}" if self.nodes > 1 else f"{count} x {self.label}"
        return f"{shape} ({arch}{mem}), {why}"


def gpus_per_node(label: str) -> int:
    """GPUs one machine of ``label`` holds (an unknown GPU: an 8-GPU node)."""
    text = label.lower()
    exact = [m for m in GPU_MODELS.values() if m.label.lower() == text]
    named = sorted((m for m in GPU_MODELS.values() if m.name in text), key=lambda m: -len(m.name))  # GB200 before B200
    model = (exact or named or [None])[0]
    return model.per_node if model else 8


def parse_gpu(text: str) -> GpuPlan:
    """``--gpu`` value: a name alone is one GPU (``h100``); ``NxNAME`` is N of them on one machine (``8xh100``), at
    most a node's worth (:attr:`GpuModel.per_node`); ``MxNxNAME`` is M machines of N each (``2x8xb200``), a cluster's
    shape, whose servers may span nodes (``--cluster slurm`` or ``k8s``, issue #67)."""
    match = re.fullmatch(r"\s*(?:(\d+)\s*[x*]\s*)?(?:(\d+)\s*[x*]\s*)?([a-z0-9]+)\s*", text.lower())
    model = GPU_MODELS.get(match[3]) if match else None
    if model is None:
        raise UserError(f"--gpu {text!r}: name one of {', '.join(GPU_MODELS)}, alone for one GPU, with a count "
                        "(e.g. 8xh100) or with nodes and a count per node (e.g. 2x8xb200)")  # fmt: skip
    assert match is not None
    nodes, count = (int(match[1]), int(match[2])) if match[2] else (1, int(match[1]) if match[1] else 1)
    if count < 1 or nodes < 1:
        raise UserError(f"--gpu {text!r}: the counts must be at least 1")
    if count > model.per_node:
        raise UserError(f"--gpu {text.strip()}: one {model.label} node holds at most {model.per_node} "
                        f"({model.node_source.split(' (http')[0]}); give --gpu {model.per_node}x{model.name} for one "
                        f"node, or --gpu {-(-count // model.per_node)}x{model.per_node}x{model.name} for a cluster's "
                        "nodes")  # fmt: skip
    return GpuPlan(model.label, model.arch, model.memory_gib, count, "--gpu", text, nodes)


def assumed_plan() -> GpuPlan:
    return GpuPlan(ASSUMED.label, ASSUMED.arch, ASSUMED.memory_gib, ASSUMED.per_node, "assumed")


def arch_of(cc_major: int | None) -> Arch | None:
    return ARCH_BY_CC_MAJOR.get(cc_major) if cc_major is not None else None


def visible_plan() -> GpuPlan | None:
    """What NVML sees (the smallest GPU's memory, the first GPU's architecture); ``None`` without NVML or GPUs."""
    try:
        from dflashbench.telemetry import GIB, nvml_session, visible_handles
    except ImportError:
        return None
    with nvml_session() as nvml:
        if nvml is None:
            return None
        try:
            handles = visible_handles(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
            if not handles:
                return None
            first = handles[0][1]
            name = nvml.nvmlDeviceGetName(first)
            name = name.decode() if isinstance(name, bytes) else str(name)
            major, _ = nvml.nvmlDeviceGetCudaComputeCapability(first)
            mem = min(nvml.nvmlDeviceGetMemoryInfo(h).total / GIB for _, h in handles)
            return GpuPlan(name, arch_of(major), mem, len(handles), "nvml")
        except Exception:  # noqa: BLE001
            return None


def resolve_plan(gpu: str | None, dry_run: bool, seen: GpuPlan | None = None) -> GpuPlan:
    """The GPUs to plan for: ``--gpu`` on a dry run, else what NVML sees, else the assumed H100. A real run with
    ``--gpu`` naming other GPUs than the ones here is an error (the servers start on these)."""
    planned = parse_gpu(gpu) if gpu is not None else None
    if planned is not None and dry_run:
        return planned
    seen = seen if seen is not None else visible_plan()
    if planned is None:
        return seen or assumed_plan()
    if seen is None:
        return planned
    if seen.arch != planned.arch:
        raise UserError(f"--gpu {gpu} plans for {planned.label} ({planned.arch}), but the servers would start on "
                        f"{seen.label} ({seen.arch or 'another architecture'}): drop --gpu, or use it with --dry-run")  # fmt: skip
    return seen
