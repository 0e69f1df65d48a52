"""The sweep's seam with the launchers: a planned server launch as a :class:`~dflashbench.launchers.base.ServerRequest`,
and the one launcher a sweep uses (the suite's ``[cluster]``: this machine, Slurm or Kubernetes)."""

from __future__ import annotations

from pathlib import Path

from dflashbench.launchers import get_launcher
from dflashbench.launchers.base import ServerRequest
from dflashbench.plan.grid import MethodLaunch, SweepContext


def launcher_of(ctx: SweepContext):
    """The sweep's launcher, made once and kept in the context."""
    if ctx.launcher is None:
        ctx.launcher = get_launcher(getattr(ctx.suite, "cluster", None))
    return ctx.launcher


def request_for(ctx: SweepContext, launch: MethodLaunch, name: str, log: Path, run_id: str = "",
                own_nodes: bool = False) -> ServerRequest:  # fmt: skip
    """``launch`` (every node's plan) as the request a launcher takes: ``name`` is the server's name in the placement
    (``ar#2``), ``log`` its log in the run directory; each node asks for the GPUs its share of the server holds."""
    spec = launch.spec
    per_node = spec.tp * getattr(spec, "pp", 1) * spec.dp // max(len(launch.plans), 1) if ctx.num_gpus else 0
    return ServerRequest(name=name, label=f"{ctx.backend_name} {name} server", plans=launch.plans, port=spec.port,
                         log_path=log, host=spec.host, gpus_per_node=per_node, own_nodes=own_nodes, run_id=run_id)
