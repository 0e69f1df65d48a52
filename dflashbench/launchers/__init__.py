"""Where a server runs: a local process, a Slurm job, Kubernetes objects; one :class:`~.base.Launcher` per scheduler.

Takes what a backend built (each node's :class:`~dflashbench.backends.base.LaunchPlan`) and gives back a running
server: its address once ready, its log in the run directory, and its teardown. Lazy registry: name -> "module:Class".
"""

from __future__ import annotations

import importlib

from dflashbench.errors import UserError

LAUNCHERS: dict[str, str] = {
    "local": "dflashbench.launchers.local:LocalLauncher",
    "slurm": "dflashbench.launchers.slurm:SlurmLauncher",
    "k8s": "dflashbench.launchers.k8s:K8sLauncher",
}


def get_launcher(cluster=None):
    """The launcher a suite's ``[cluster]`` table names (``None`` or kind ``local``: this machine's processes)."""
    kind = getattr(cluster, "kind", None) or "local"
    target = LAUNCHERS.get(kind)
    if target is None:
        raise UserError(f"cluster kind {kind!r}: expected one of {', '.join(LAUNCHERS)}")
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls() if kind == "local" else cls(cluster)


def listen_host(cluster=None) -> str:
    """Where a launched server listens: loopback on this machine; every interface on a cluster's node, since the
    client measures it from the submitting host."""
    kind = getattr(cluster, "kind", None) or "local"
    return "127.0.0.1" if kind == "local" else "0.0.0.0"  # noqa: S104
