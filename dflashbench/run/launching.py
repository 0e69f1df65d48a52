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
    per_node = spec.num_gpus // max(len(launch.plans), 1) if ctx.num_gpus else 0
    return ServerRequest(name=name, label=f"{ctx.backend_name} {name} server", plans=launch.plans, port=spec.port,
                         log_path=log, host=spec.host, gpus_per_node=per_node, own_nodes=own_nodes, run_id=run_id,
                         follower_template=launch.follower_template, engine=ctx.backend_name,
                         health_path=_health_path(ctx.backend_name))  # fmt: skip


def _health_path(backend: str) -> str:
    from dflashbench.backends import get_backend

    try:
        return get_backend(backend).health_path()
    except Exception:  # noqa: BLE001 - an engine not installed here still answers on the usual path
        return "/health"


def dry_run_lines(ctx: SweepContext, folder: Path | None) -> list[str]:
    """What a dry run on a cluster says of each server: its nodes, each node's command (the leader's host as the
    scheduler will name it) and what the scheduler is handed (the sbatch script, the manifests), written into
    ``folder`` too when given, so ``sbatch`` or ``kubectl apply`` can take them as they are."""
    import shlex

    from dflashbench.backends.base import LEADER_HOST
    from dflashbench.redact import redact_text

    launcher = launcher_of(ctx)
    if launcher.kind == "local":
        return []
    out = [f"cluster: {launcher.where}"]
    for name, launch in ctx.server_launches.items():
        log = (folder or Path(".")) / f"server-{ctx.backend_name}-{name}.log"
        request = request_for(ctx, launch, name, log, "dry-run", own_nodes=own_nodes(ctx, name))
        gpus = f", {request.gpus_per_node} GPU(s) each" if request.gpus_per_node else ""
        out.append(f"{request.label}: {request.nodes} node(s){gpus}")
        for rank, plan in enumerate(request.plans):
            role = "leader, serves HTTP" if rank == 0 else "follower"
            shown = redact_text(shlex.join(plan.argv)).replace(LEADER_HOST, "<leader host>")
            out.append(f"  node {rank} ({role}): {shown}")
        for rel, text in launcher.submission(request).items():
            if folder is not None:
                path = folder / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                out.append(f"  {launcher.kind} submission written: {path}")
            out += [f"  | {line}" for line in text.rstrip("\n").splitlines()]
    return out


def own_nodes(ctx: SweepContext, name: str) -> bool:
    """Whether the placement gave server ``name`` node(s) of its own (side by side across a cluster's nodes)."""
    placed = next((s for s in ctx.placement.servers if s.name == name), None) if ctx.placement is not None else None
    return bool(getattr(placed, "nodes", ()))
