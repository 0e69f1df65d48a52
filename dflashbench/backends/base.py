"""The one Protocol every serving backend implements, and the launch settings they all share.

A backend knows how to launch its server for a method (an argv list, never a shell string), how to tell
it is ready, how to read its acceptance counters, and how to reset its cache between points. Process
lifecycle (process group, readiness polling, log capture, stop on Ctrl-C) lives in
:mod:`dflashbench.backends.process` and is shared by all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from dflashbench.reference.draft_length import DraftSchedule
from dflashbench.types import AcceptCounters, Method

# Why a launched server's environment holds each variable dflashbench sets, for the dry run (--show-commands).
ENV_REASONS = {
    "VLLM_SERVER_DEV_MODE": "vLLM serves /reset_prefix_cache only in its development mode; the sweep resets the prefix "
                            "cache before each point (dflashbench/backends/vllm.py DEV_MODE_ENV)",
    "CUDA_VISIBLE_DEVICES": "the server's own GPUs (the placement)",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID: CUDA numbers the GPUs as NVML does (the placement)",
    "PYTHONUNBUFFERED": "the server's log lines arrive as they are written (the sweep reads its KV report from them)",
}  # fmt: skip


# A server that spans nodes names its leader (node 0) in its followers' argv (vLLM --master-addr, SGLang
# --dist-init-addr), and the leader's host is known only where it runs: the argv holds this word in its place, and
# each launcher writes the scheduler's own name for it (a Slurm script's variable from the allocation's first node,
# LeaderWorkerSet's $(LWS_LEADER_ADDRESS)).
LEADER_HOST = "@leader-host@"
# A template for every follower at once (LeaderWorkerSet's one worker template): the rank is the scheduler's too
# ($(LWS_WORKER_INDEX)); a launcher that starts each node itself (Slurm) gets each follower's own argv instead.
NODE_RANK = "@node-rank@"
# The port the followers reach the leader on for the engine's own process group (vLLM --master-port, SGLang
# --dist-init-addr's port): vLLM's default master_port, 29501 (vllm/config/parallel.py ParallelConfig.master_port,
# vllm-project/vllm@00193b82b0e2), given to SGLang too. A multi-node server has its nodes to itself, so one port
# serves every such server.
DIST_PORT = 29501


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """Everything needed to launch one server for one method."""

    method: Method
    model: str
    draft: str | None = None  # draft checkpoint (DFlash drafter or EAGLE-3 head); None for AR
    host: str = "127.0.0.1"
    port: int = 8000
    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1  # pipeline-parallel stages (vLLM across nodes: tp per node x pp nodes)
    # A server that spans nodes (issue #67): how many, which one this argv is for (0 serves HTTP; NODE_RANK in a
    # template), and where the followers find the leader (LEADER_HOST: its host as the scheduler names it)
    nnodes: int = 1
    node_rank: int | str = 0
    leader_host: str = LEADER_HOST
    dist_port: int = DIST_PORT
    num_speculative_tokens: int | None = None  # DFlash: block_size - 1; EAGLE-3: chain length k
    # The drafter's own tensor-parallel size where an engine recipe sets one (vLLM draft_tensor_parallel_size);
    # None: the engine's default (the target's tp)
    draft_tp: int | None = None
    dcp: int = 1  # vLLM's decode context parallel size: an MLA target's KV sharded over this many tp ranks
    # K by batch size (vLLM's num_speculative_tokens_per_batch_size; dflashbench.reference.draft_length), a tuned
    # schedule: each backend gives it in its engine's own form (or refuses it, naming why)
    draft_schedule: DraftSchedule | None = None
    # The DFlash drafter's block size (anchor + masks) where known, e.g. from the model registry: it fixes the
    # draft length without reading the checkpoint, which may be a hub id that nothing downloads to build a command.
    draft_block_size: int | None = None
    # Facts some engines' version-dependent flags depend on, from the model registry or the models' own config.json:
    # the target's architecture (SGLang's hybrid-Mamba cache option) and the DFlash drafter's attention layers
    # ("full", "sliding" or "mixed": vLLM's sliding-window support).
    target_architecture: str | None = None
    draft_layers: str | None = None
    # The engine's cap on concurrently running requests, for every method (the sweep sets it to at least the
    # suite's top concurrency): a cap below a point's concurrency queues requests and measures the queue.
    max_running_requests: int | None = None
    served_model_name: str | None = None
    extra_args: tuple[str, ...] = ()  # passed through verbatim, after dflashbench's own flags
    env: dict[str, str] = field(default_factory=dict)
    # Extra top-level keys merged into TensorRT-LLM's generated LLM-API YAML (e.g. enable_attention_dp: true);
    # the other engines take options as flags (extra_args) and refuse a non-empty engine_config.
    engine_config: dict = field(default_factory=dict)
    # The CPUs the server runs on (dflashbench.plan.cpus); None = wherever the OS puts it.
    engine_cpus: tuple[int, ...] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def num_gpus(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def follower(self) -> bool:
        """A node of a multi-node server other than the leader: it serves no HTTP."""
        return self.nnodes > 1 and self.node_rank != 0


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """An argv list plus the environment additions and files it needs (e.g. TRT-LLM's YAML)."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # path -> content, written before launch
    cpus: tuple[int, ...] | None = None  # the server's CPU affinity (set before exec); None = unpinned
    # Why a version- or model-dependent flag or variable is in or out, for the plan the user reads (never argv)
    notes: tuple[str, ...] = ()


API_KEY_FLAG = "--api-key"


def lift_api_key(extra_args: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """``extra_args`` without its ``--api-key KEY`` (or ``--api-key=KEY``), and the key: for an engine that reads
    its key from the environment as well, so that it never stands on a command line, which every user of the
    machine can read (``ps``, ``/proc/PID/cmdline``) while the server runs. Anything but one flag with one value
    (the flag twice, several keys) is left as given, with ``None``."""
    found = [i for i, a in enumerate(extra_args) if a == API_KEY_FLAG or a.startswith(API_KEY_FLAG + "=")]
    if len(found) != 1:
        return tuple(extra_args), None
    i = found[0]
    flag = extra_args[i]
    if flag.startswith(API_KEY_FLAG + "="):
        key, end = flag.split("=", 1)[1], i + 1
    else:
        values = list(extra_args[i + 1:i + 2])
        if not values or values[0].startswith("-") or (i + 2 < len(extra_args) and not extra_args[i + 2].startswith("-")):
            return tuple(extra_args), None  # no value, or more than one (a list of keys): as given
        key, end = values[0], i + 2
    return (*extra_args[:i], *extra_args[end:]), key or None


def api_key_argv_note(extra_args: tuple[str, ...], engine: str) -> str | None:
    """Where an engine takes its key only from its command line: the note that says the key is visible there."""
    if not any(a == API_KEY_FLAG or a.startswith(API_KEY_FLAG + "=") for a in extra_args):
        return None
    return (f"the suite's {API_KEY_FLAG} stays on {engine}'s command line, where ps shows it to every user of this "
            f"machine while the server runs: dflashbench knows no other way to give {engine} its key "
            "(docs/reliability.md, keys)")  # fmt: skip


@runtime_checkable
class Backend(Protocol):
    """A serving engine as dflashbench drives it."""

    name: str

    def launch_plan(self, spec: ServerSpec) -> LaunchPlan:
        """The exact command that starts the server for ``spec.method``."""
        ...

    def health_path(self) -> str:
        """HTTP path that answers 200 once the server can take requests."""
        ...

    async def read_counters(self, session, base_url: str) -> AcceptCounters | None:
        """Cumulative spec-decode counters now, or ``None`` where the server exposes none (AR)."""
        ...

    async def reset_cache(self, session, base_url: str) -> None:
        """Drop prefix/KV caches between points where the engine offers it; a no-op otherwise."""
        ...

    def concurrency_cap(self, spec: ServerSpec) -> int | None:
        """Most requests the server launched for ``spec`` runs at once (all replicas), or ``None`` if unknown.

        Pure: read from ``spec`` and the engine's documented defaults, nothing is launched. A point whose
        concurrency exceeds it measures a queue, not the engine, and the sweep warns.
        """
        ...
