"""This machine's processes: today's servers, unchanged (:class:`~dflashbench.backends.process.ServerProcess`: an
argv in its own process group under a supervisor that redacts its log and stops it with the sweep, SIGKILL
included). A server that spans nodes needs a cluster's scheduler (``--cluster slurm`` or ``k8s``)."""

from __future__ import annotations

from pathlib import Path

from dflashbench.backends.process import ServerProcess, stop_leftover
from dflashbench.errors import UserError
from dflashbench.launchers.base import Echo, ServerRequest


class LocalServer:
    """A :class:`~dflashbench.backends.process.ServerProcess` as a :class:`~dflashbench.launchers.base.Launched`."""

    def __init__(self, request: ServerRequest) -> None:
        self.request = request
        self.process = ServerProcess(request.plans[0], request.log_path, name=request.label)
        self.name = request.label
        self.log_path = request.log_path

    @property
    def base_url(self) -> str:
        return f"http://{self.request.host}:{self.request.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def start(self) -> LocalServer:
        self.process.start()
        return self

    def wait_ready(self, health_path: str, timeout_s: float, *, progress: bool = True, echo=None) -> float:
        return self.process.wait_ready(self.base_url + health_path, timeout_s=timeout_s, progress=progress, echo=echo)

    def is_running(self) -> bool:
        return self.process.is_running()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def describe_exit(self) -> str:
        return f"exit status {self.returncode}"

    def wait_exit(self, timeout_s: float) -> int | None:
        return self.process.wait_exit(timeout_s)

    def log_tail(self, lines: int = 20) -> str:
        return self.process.log_tail(lines)

    def stop(self, grace_s: float | None = None) -> int | None:
        return self.process.stop(grace_s)

    def record(self) -> dict:
        """PID and start time: a later ``--resume`` stops this very process if it outlived the sweep."""
        return {"pid": self.process.pid, "pid_start_ticks": self.process.start_ticks()}

    def __enter__(self) -> LocalServer:
        self.process.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self.process.__exit__(*exc_info)


class LocalLauncher:
    kind = "local"
    listen_host = "127.0.0.1"
    where = "this machine: each server a process of its own, the client beside it"

    def start(self, request: ServerRequest) -> LocalServer:
        if request.nodes > 1:
            raise UserError(f"{request.label} spans {request.nodes} nodes: one machine runs no server wider than "
                            "itself; run it on a cluster (--cluster slurm or --cluster k8s, docs/cluster.md)")  # fmt: skip
        return LocalServer(request).start()

    def stop_leftovers(self, run_dir: Path, servers: dict, echo: Echo) -> None:
        """Stop the server processes an earlier sweep of this run launched, if they still run (the run directory's
        lock is held, so the sweep that launched them is gone: one still running is an orphan)."""
        for name, server in servers.items():
            pid = getattr(server, "pid", None)
            if pid is not None and stop_leftover(pid, getattr(server, "pid_start_ticks", None)):
                echo(f"stopped the {name} server (PID {pid}) that an earlier sweep of this run launched and that "
                     "was still running")  # fmt: skip

    def submission(self, request: ServerRequest) -> dict[str, str]:
        return {}
