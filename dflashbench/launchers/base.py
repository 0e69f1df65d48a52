"""What ``run/`` asks a launcher for, and what it gets back.

A :class:`ServerRequest` is one server as the plan built it: each node's launch plan (an argv list, never a shell
string; node 0 serves HTTP, the others follow it), where its leader listens, the GPUs each node needs and its log.
A :class:`Launcher` starts it where its scheduler says (this machine, a Slurm job, Kubernetes objects) and returns a
:class:`Launched`: its address once ready, whether it still runs, its log's last lines, and its teardown (as a
context manager it is torn down on exit, an exception, Ctrl-C or SIGTERM). Nothing above ``run/`` knows which
launcher ran a server. What identifies a server to a later ``--resume`` (a PID, a job id) is
:meth:`Launched.record`, kept in the manifest; a cluster launcher also appends every submission to the run
directory's ``cluster-jobs.jsonl`` (:mod:`dflashbench.launchers.jobs`) the moment it is made, so a sweep killed with
SIGKILL leaves nothing the next ``--resume`` cannot find and cancel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from dflashbench.backends.base import LaunchPlan

Echo = Callable[[str], None]


@dataclass(frozen=True)
class ServerRequest:
    """One server to launch: ``plans[0]`` is the leader's (node 0, the HTTP server), ``plans[1:]`` its followers'."""

    name: str  # the server's name in the placement and the manifest: ``ar``, ``ar#2``
    label: str  # what messages call it: ``vllm ar server``
    plans: tuple[LaunchPlan, ...]
    port: int  # where the leader serves HTTP
    log_path: Path  # the run directory's server-<backend>-<name>.log
    host: str = "127.0.0.1"  # where a local server listens; a cluster's listens on every interface of its node
    gpus_per_node: int = 0  # what the scheduler is asked for (Slurm --gres, Kubernetes nvidia.com/gpu)
    own_nodes: bool = False  # placed on node(s) of its own (side by side across nodes): Slurm --exclusive
    run_id: str = ""  # names the server's job or objects, so a leftover one can be found by name
    # Every follower's argv with its rank as backends.base.NODE_RANK, for a scheduler that starts them from one
    # template (LeaderWorkerSet); None for a server on one node
    follower_template: LaunchPlan | None = None
    health_path: str = "/health"  # what answers 200 once it serves (a Kubernetes readiness probe asks it too)
    engine: str = ""  # the backend's name (a Kubernetes image default is the engine's own)

    @property
    def nodes(self) -> int:
        return len(self.plans)

    @property
    def run_dir(self) -> Path:
        return self.log_path.parent

    def node_log(self, rank: int) -> Path:
        """The log of node ``rank``: the leader's is the server's log, a follower's ``...log.node<rank>``."""
        return self.log_path if rank == 0 else self.log_path.with_name(f"{self.log_path.name}.node{rank}")


@runtime_checkable
class Launched(Protocol):
    """A server a launcher started; the sweep's handle on it until it is torn down."""

    name: str
    log_path: Path

    @property
    def base_url(self) -> str:
        """Where requests go (``http://host:port``); known once :meth:`wait_ready` returned."""
        ...

    def wait_ready(self, health_path: str, timeout_s: float, *, progress: bool = True,
                   echo: Echo | None = None) -> float:  # fmt: skip
        """Block until the server answers ``health_path``; its seconds. Raises
        :class:`~dflashbench.backends.process.ServerStartError` (after tearing it down) when it ended first, never
        ran, or did not answer in time, with its log's last lines."""
        ...

    def is_running(self) -> bool: ...

    @property
    def returncode(self) -> int | None: ...

    def describe_exit(self) -> str:
        """How it ended, in words for a failed point (``exit status 1``, ``Slurm job 12 CANCELLED``)."""
        ...

    def wait_exit(self, timeout_s: float) -> int | None: ...

    def log_tail(self, lines: int = 20) -> str: ...

    def stop(self, grace_s: float | None = None) -> int | None:
        """Tear it down (process group, job, objects); its logs collected into the run directory."""
        ...

    def record(self) -> dict:
        """What identifies it to a later ``--resume`` (the manifest's server record keeps it)."""
        ...

    def __enter__(self) -> Launched: ...

    def __exit__(self, *exc_info) -> None: ...


@runtime_checkable
class Launcher(Protocol):
    """A scheduler as dflashbench uses it: it starts servers and finds the ones an earlier sweep left."""

    kind: str
    # The host a server listens on (``ServerSpec.host``): loopback here, every interface on a cluster's node
    listen_host: str
    # One line for the plan: where the servers run and where the client measures from
    where: str

    def start(self, request: ServerRequest) -> Launched: ...

    def stop_leftovers(self, run_dir: Path, servers: dict, echo: Echo) -> None:
        """On ``--resume``: tear down what an earlier sweep of this run launched and did not (``servers``: the
        manifest's server records by name)."""
        ...

    def submission(self, request: ServerRequest) -> dict[str, str]:
        """What the scheduler would be handed for ``request``, file name -> text (an sbatch script, manifests); a
        dry run prints it and writes it into a folder; ``{}`` where there is no file (a local process)."""
        ...
