"""A suite's ``[cluster]`` table: which scheduler runs the servers, and what it is told besides the servers' needs.

It lives here, below the plan, for the reason a workload's entry lives in ``workloads/spec.py``: the suite reads it
and the launchers act on it. ``kind = "local"`` (the default) is this machine's processes, as before issue #67.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from dflashbench.workloads.spec import StrictModel

KINDS = ("local", "slurm", "k8s")


class ClusterSpec(StrictModel):
    """``[cluster]``: ``kind`` and the scheduler's own settings (each optional; the scheduler's defaults otherwise)."""

    kind: Literal["local", "slurm", "k8s"] = "local"
    # Slurm: where jobs go and what else sbatch is told, verbatim (e.g. ["--account", "abc", "--time", "04:00:00"]);
    # never a secret (the script keeps them)
    partition: str | None = None
    sbatch_args: list[str] = Field(default_factory=list)
    # Kubernetes: the namespace, the image each server's container runs (it must hold the engine), a Secret whose keys
    # become the servers' environment (envFrom: an API key, HF_TOKEN), and a nodeSelector for the GPU nodes
    namespace: str = "default"
    image: str | None = None
    secret: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    # How long a server may wait for the scheduler before it runs (a job pending, a pod that never schedules): past
    # it the server's points fail with the scheduler's reason, and --resume tries again
    queue_timeout_s: float = Field(3600.0, gt=0, le=7 * 86400)

    @field_validator("sbatch_args")
    @classmethod
    def _no_script_flags(cls, value: list[str]) -> list[str]:
        owned = ("--job-name", "-J", "--output", "-o", "--nodes", "-N", "--wrap")
        bad = [a for a in value if a.split("=", 1)[0] in owned]
        if bad:
            raise ValueError(f"sbatch_args {bad[0]!r}: dflashbench sets the job's name, nodes and log itself "
                             "(the run directory's server log); leave it out")
        return value
