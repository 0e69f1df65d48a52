"""Slurm: each server a batch job (``sbatch``), one job step per node (``srun --relative=N``), torn down with
``scancel``.

The job is the scheduler's own unit, so Slurm does the scheduling: the nodes (``--nodes``, one task each), the GPUs
(``--gres=gpu:N`` per node), a node of its own where the placement gives one (``--exclusive``), the partition and
whatever else the suite's ``[cluster] sbatch_args`` say. dflashbench asks, waits and reads; it picks no node.

The script (``slurm/<server>.sbatch`` in the run directory, so the run keeps what it submitted, and a dry run writes
the same file) is built from argv lists: every element of every node's command is quoted with :func:`shlex.quote`,
so no value a user, a suite or a dataset gave is ever read by the shell as anything but one word. The one expansion
is the leader's host, which Slurm knows only once the job runs: an argument holding
:data:`~dflashbench.backends.base.LEADER_HOST` is written with ``"$DFLASHBENCH_LEADER"`` in its place, a variable the
script sets from ``scontrol show hostnames "$SLURM_JOB_NODELIST"`` (the first node of the allocation, where step
``--relative=0`` runs). Secrets stay out of the script: a variable whose name is a secret's
(:func:`dflashbench.redact.is_secret_name`) reaches the job through sbatch's own ``--export=ALL`` from the
environment dflashbench runs sbatch in, and the script only checks that it is set.

The client measures from the submitting host (where ``dflashbench sweep`` runs): one clock for every method's
requests, so a load's points start together and a speedup pairs requests measured alike; the requests cross the
cluster's network to each server the same way, so the network's share of TTFT is the same for every method (a
client job beside each server would need the clocks of several nodes reconciled, which AIPerf does with per-worker
offsets). The server's host comes from ``scontrol show job`` (its first node) and ``scontrol show node``
(``NodeAddr``); the port is chosen when the sweep is planned and passed in the server's argv.

Logs: the job's output (the leader's) is the run directory's ``server-<backend>-<name>.log`` and each follower's
``...log.node<rank>`` (``--output``, so the run directory must be on a file system the nodes share, as a cluster's
home and project folders are); at teardown they are rewritten through :func:`dflashbench.redact.redact_text`.
Every submission is recorded in ``cluster-jobs.jsonl`` as it is made (:mod:`dflashbench.launchers.jobs`), so the
next ``--resume`` cancels whatever a SIGKILLed sweep left, by job id, or by job name where the kill came between
``sbatch`` and its answer.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from dflashbench.backends.base import LEADER_HOST
from dflashbench.backends.process import LiveServers, ServerStartError, health_ok, log_tail
from dflashbench.errors import UserError
from dflashbench.launchers import jobs
from dflashbench.launchers.base import Echo, ServerRequest
from dflashbench.redact import is_secret_name, redact_text

LEADER_VAR = "DFLASHBENCH_LEADER"
SCRIPT_DIR = "slurm"
POLL_S = 1.0
CANCEL_WAIT_S = 60.0  # scancel signals the steps (SIGTERM, then SIGKILL after KillWait): wait this long for the job
# Job states (squeue(1) "JOB STATE CODES"): before it runs, while it runs, and the ones that end it
WAITING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED"}
RUNNING = {"RUNNING"}
ENDING = {"COMPLETING", "SIGNALING", "STAGE_OUT"}  # on its way to its final state (CANCELLED, FAILED, ...)
ENDING_WAIT_S = 30.0  # how long the final state is waited for before a failure is described
_LIVE = LiveServers(lambda server: server.stop(grace_s=5.0))


def job_name(request: ServerRequest) -> str:
    """``dflashbench-<run>-<server>``: unique to the run's server, so ``--resume`` finds it by name too."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"dflashbench-{request.run_id or 'run'}-{request.name}")


def quote_arg(arg: str) -> str:
    """One argv element for the script: :func:`shlex.quote` of it, the leader's host written as the variable the
    script sets (the only expansion the script makes)."""
    if LEADER_HOST not in arg:
        return shlex.quote(arg)
    parts = arg.split(LEADER_HOST)
    return f'"${LEADER_VAR}"'.join(shlex.quote(p) if p else "" for p in parts)


def quote_argv(argv) -> str:
    return " ".join(quote_arg(a) for a in argv)


def sbatch_argv(script: Path, cluster) -> list[str]:
    """``sbatch --parsable [--partition P] [sbatch_args...] SCRIPT``: the suite's options on the command line,
    verbatim (each one argv element)."""
    part = ["--partition", cluster.partition] if cluster is not None and cluster.partition else []
    extra = list(cluster.sbatch_args) if cluster is not None else []
    return ["sbatch", "--parsable", *part, *extra, str(script)]


def script(request: ServerRequest, cluster=None, cwd: str | None = None) -> str:
    """The batch script of ``request``: one job of ``request.nodes`` nodes, a step per node, the leader's
    (node 0) output the job's log. When any node's server ends, the script ends, and with it the job (its other
    steps are killed by Slurm), so a follower that dies fails its server at once instead of hanging the leader."""
    nodes = request.nodes
    log = request.log_path.resolve()
    cwd = cwd or os.getcwd()
    head = [
        "#!/bin/bash",
        f"# dflashbench: the {request.label} of run {request.run_id or '(dry run)'}, {nodes} node(s).",
        "# Written by dflashbench from argv lists: every argument is quoted with shlex.quote; the one expansion is",
        f"# ${LEADER_VAR}, the allocation's first node (the leader, step --relative=0). Submitted as:",
        f"#   {shlex.join(sbatch_argv(Path(f'{SCRIPT_DIR}/{request.name}.sbatch'), cluster))}",
        f"#SBATCH --job-name={job_name(request)}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --output={log}",
        "#SBATCH --open-mode=append",
        "#SBATCH --export=ALL",
    ]
    if request.gpus_per_node:
        head.append(f"#SBATCH --gres=gpu:{request.gpus_per_node}")
    if request.own_nodes or nodes > 1:
        head.append("#SBATCH --exclusive")
    body = ["set -u", f"cd {shlex.quote(cwd)}"]
    env = request.plans[0].env
    for name in sorted(env):
        if is_secret_name(name):  # from the environment sbatch ran in (--export=ALL), never written here
            body.append(f': "${{{name}:?{name} must be set in the environment dflashbench submits from}}"')
        else:
            body.append(f"export {name}={shlex.quote(env[name])}")
    body += [f'{LEADER_VAR}=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)', f"export {LEADER_VAR}",
             f'echo "dflashbench: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, leader ${LEADER_VAR}"']  # fmt: skip
    for rank in range(nodes - 1, -1, -1):  # followers first: the leader waits for them at its start
        plan = request.plans[rank]
        out = [] if rank == 0 else [f"--output={request.node_log(rank).resolve()}", "--open-mode=append"]
        step = ["srun", "--nodes=1", "--ntasks=1", f"--relative={rank}", *out, "--"]
        body.append(f"{' '.join(step)} {quote_argv(plan.argv)} &")
    body += ["wait -n", "status=$?",
             'echo "dflashbench: a node\'s server ended with status $status: the job ends, its other steps with it"',
             "exit $status"]  # fmt: skip
    return "\n".join(head + [""] + body) + "\n"


def _run(argv: list[str], timeout_s: float = 30.0, env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except FileNotFoundError:
        raise UserError(f"{argv[0]} not found: --cluster slurm runs Slurm's own commands (sbatch, squeue, scontrol, "
                        "scancel) from the host dflashbench runs on, a login node; docs/cluster.md") from None  # fmt: skip


def _fields(text: str) -> dict[str, str]:
    """``scontrol show ... -o``'s one line as ``{key: value}`` (values hold no spaces but ``Reason=...`` may: the
    rest of a key's text up to the next `` Key=``)."""
    out = {}
    for match in re.finditer(r"(?:^|\s)([A-Za-z:/]+)=(.*?)(?=\s[A-Za-z:/]+=|$)", text.strip()):
        out[match[1]] = match[2]
    return out


def job_info(job_id: str) -> dict[str, str] | None:
    """``scontrol show job -o ID`` as fields; ``None`` once Slurm no longer knows the job (past MinJobAge)."""
    done = _run(["scontrol", "show", "job", "-o", job_id])
    if done.returncode != 0 or "JobState=" not in done.stdout:
        return None
    return _fields(done.stdout.splitlines()[0])


def node_address(node: str) -> str:
    """The address of ``node`` (``scontrol show node``'s ``NodeAddr``; its name where that is not set)."""
    done = _run(["scontrol", "show", "node", "-o", node])
    addr = _fields(done.stdout).get("NodeAddr") if done.returncode == 0 else None
    return addr or node


def first_host(nodelist: str) -> str:
    """The first node of a Slurm node list (``gpu[03-04]`` -> ``gpu03``), as ``scontrol show hostnames`` expands it."""
    done = _run(["scontrol", "show", "hostnames", nodelist])
    names = done.stdout.split() if done.returncode == 0 else []
    return names[0] if names else nodelist


def cancel(job_id: str | None = None, name: str | None = None) -> None:
    """``scancel JOB`` or ``scancel --name NAME`` (a job already gone is not an error)."""
    _run(["scancel", job_id] if job_id else ["scancel", f"--name={name}"])


def jobs_named(name: str) -> list[str]:
    """The ids of this user's jobs in Slurm's queue called ``name``."""
    done = _run(["squeue", "-h", "--name", name, "-o", "%i"])
    return done.stdout.split() if done.returncode == 0 else []


class SlurmServer:
    """One server's batch job, from ``sbatch`` to ``scancel``: a :class:`~dflashbench.launchers.base.Launched`."""

    def __init__(self, request: ServerRequest, cluster) -> None:
        self.request = request
        self.cluster = cluster
        self.name = request.label
        self.log_path = request.log_path
        self.job_id: str | None = None
        self.host: str | None = None
        self.script_path = request.run_dir / SCRIPT_DIR / f"{request.name}.sbatch"
        self._final: dict[str, str] | None = None
        self._stopped = False

    # --- submit ---

    def submit(self) -> SlurmServer:
        self.script_path.parent.mkdir(parents=True, exist_ok=True)
        self.script_path.write_text(script(self.request, self.cluster), encoding="utf-8")
        name = job_name(self.request)
        run_dir = self.request.run_dir
        jobs.append(run_dir, launcher="slurm", event="submitting", name=name, server=self.request.name)
        secrets = {k: v for k, v in self.request.plans[0].env.items() if is_secret_name(k)}
        done = _run(sbatch_argv(self.script_path, self.cluster), env={**os.environ, **secrets})
        if done.returncode != 0:
            jobs.append(run_dir, launcher="slurm", event="torn down", name=name, why="sbatch refused it")
            raise ServerStartError(f"sbatch refused the {self.name}'s job: {done.stderr.strip() or done.stdout.strip()}"
                                   f" (its script: {self.script_path})")  # fmt: skip
        self.job_id = done.stdout.strip().split(";")[0]
        jobs.append(run_dir, launcher="slurm", event="submitted", name=name, id=self.job_id, server=self.request.name)
        _LIVE.add(self)
        return self

    # --- state ---

    def info(self) -> dict[str, str] | None:
        if self._final is not None:
            return self._final
        found = job_info(self.job_id) if self.job_id else None
        if found is not None and found.get("JobState") not in WAITING | RUNNING | ENDING:
            self._final = found  # ended: it stays as it is
        return found

    def final_info(self) -> dict[str, str] | None:
        """The job's fields once it has ended (its state past COMPLETING), waited for a while."""
        deadline = time.monotonic() + ENDING_WAIT_S
        found = self.info()
        while found is not None and found.get("JobState") in ENDING and time.monotonic() < deadline:
            time.sleep(0.2)
            found = self.info()
        return found

    @property
    def state(self) -> str:
        found = self.info()
        return found.get("JobState", "UNKNOWN") if found else "GONE"

    @property
    def base_url(self) -> str:
        if self.host is None:
            raise RuntimeError(f"{self.name} has no host before it runs")
        return f"http://{self.host}:{self.request.port}"

    def is_running(self) -> bool:
        return self.state in RUNNING

    @property
    def returncode(self) -> int | None:
        found = self.info()
        if not found or found.get("JobState") in WAITING | RUNNING | ENDING:
            return None
        code, _, signal = found.get("ExitCode", "0:0").partition(":")
        return -int(signal) if signal.isdigit() and int(signal) else int(code) if code.isdigit() else None

    def describe_exit(self) -> str:
        found = self.final_info()
        if not found:
            return f"Slurm job {self.job_id} ended; Slurm no longer knows how"
        reason = found.get("Reason", "None")
        said = f"Slurm job {self.job_id} {found.get('JobState')}"
        if reason not in ("None", ""):
            said += f" ({reason})"
        return f"{said}, exit code {found.get('ExitCode', '?')}"

    def wait_exit(self, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        while self.state in WAITING | RUNNING | ENDING:
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(0.2, timeout_s))
        return self.returncode

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def record(self) -> dict:
        """The job (id, name, script) and, once it runs, its nodes and the leader's address."""
        nodes = (self.info() or {}).get("NodeList") if self.host is not None else None
        return {"launcher": "slurm", "job_id": self.job_id, "job_name": job_name(self.request),
                "script": str(self.script_path.relative_to(self.request.run_dir)),
                **({"nodes": nodes, "host": self.host} if nodes else {})}  # fmt: skip

    # --- ready ---

    def wait_ready(self, health_path: str, timeout_s: float, *, progress: bool = True, echo: Echo | None = None) -> float:
        """Wait for Slurm to run the job (up to the cluster's ``queue_timeout_s``), then for its leader to answer
        ``health_path`` (up to ``timeout_s`` from the moment it runs); the seconds from submission."""
        say = echo or (lambda text: print(text, file=sys.stderr, flush=True))
        started = time.monotonic()
        queue_limit = getattr(self.cluster, "queue_timeout_s", 3600.0)
        said_waiting = ""
        while True:
            found = self.info()
            state = found.get("JobState", "GONE") if found else "GONE"
            if state in RUNNING:
                break
            if state not in WAITING:
                self._forget()
                raise ServerStartError(self._failure(f"ended before it ran: {self.describe_exit()}"))
            reason = found.get("Reason", "") if found else ""
            if progress and f"{state} {reason}" != said_waiting:
                said_waiting = f"{state} {reason}"
                say(f"waiting for Slurm to run {self.name} (job {self.job_id}): {state} ({reason})")
            if time.monotonic() - started > queue_limit:
                self.stop()
                raise ServerStartError(self._failure(
                    f"was still {state} ({reason}) after {queue_limit:g}s: the scheduler did not run it (cancelled; "
                    "raise [cluster] queue_timeout_s, or --resume later)"))  # fmt: skip
            time.sleep(POLL_S)
        nodes = found.get("NodeList", "") if found else ""
        self.host = node_address(first_host(nodes))
        url = self.base_url + health_path
        if progress:
            say(f"waiting for {self.name} (Slurm job {self.job_id} on {nodes}) at {url} ...")
        running = time.monotonic()
        while True:
            if self.state not in RUNNING:
                self._forget()
                raise ServerStartError(self._failure(f"exited while starting: {self.describe_exit()}"))
            if health_ok(url):
                elapsed = time.monotonic() - started
                if progress:
                    say(f"{self.name} ready after {elapsed:.1f}s (on {self.host})")
                return elapsed
            if time.monotonic() - running > timeout_s:
                self.stop()
                raise ServerStartError(self._failure(
                    f"did not answer {url} within {timeout_s:g}s of running (cancelled job {self.job_id}; if it is "
                    "still loading, raise the readiness timeout: --ready-timeout)"))  # fmt: skip
            time.sleep(0.25)

    def _failure(self, what: str) -> str:
        tail = self.log_tail()
        shown = f"; last lines of {self.log_path}:\n{tail}" if tail else f"; its log {self.log_path} is empty"
        return f"{self.name} {what}{shown}"

    # --- stop ---

    def stop(self, grace_s: float | None = None) -> int | None:
        """``scancel`` the job and wait until Slurm says it ended (its steps get SIGTERM, then SIGKILL after the
        cluster's KillWait); then redact its logs where they are. Safe to call more than once."""
        if self.job_id is None or self._stopped:
            return self.returncode if self.job_id else None
        self._stopped = True
        if self.state in WAITING | RUNNING:
            cancel(self.job_id)
            deadline = time.monotonic() + (grace_s if grace_s is not None else CANCEL_WAIT_S)
            while self.state in WAITING | RUNNING and time.monotonic() < deadline:
                time.sleep(0.2)
        jobs.append(self.request.run_dir, launcher="slurm", event="torn down", name=job_name(self.request),
                    id=self.job_id, state=self.state)  # fmt: skip
        redact_logs(self.request)
        self._forget()
        return self.returncode

    def _forget(self) -> None:
        _LIVE.discard(self)

    def __enter__(self) -> SlurmServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def redact_logs(request: ServerRequest) -> None:
    """Every node's log rewritten through the redaction function (engines print their own arguments)."""
    for rank in range(request.nodes):
        path = request.node_log(rank)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        clean = redact_text(text)
        if clean != text:
            path.write_text(clean, encoding="utf-8")


class SlurmLauncher:
    kind = "slurm"
    listen_host = "0.0.0.0"  # noqa: S104 - the server is measured from the submitting host, across the network
    where = ("Slurm: each server a batch job (sbatch), a step per node; the client measures from this host, one clock "
             "for every method")  # fmt: skip

    def __init__(self, cluster=None) -> None:
        self.cluster = cluster

    def start(self, request: ServerRequest) -> SlurmServer:
        return SlurmServer(request, self.cluster).submit()

    def submission(self, request: ServerRequest) -> dict[str, str]:
        return {f"{SCRIPT_DIR}/{request.name}.sbatch": script(request, self.cluster)}

    def stop_leftovers(self, run_dir: Path, servers: dict, echo: Echo) -> None:
        """Cancel every job an earlier sweep of this run submitted and did not tear down (``cluster-jobs.jsonl``):
        by id, and by name where the id was never heard."""
        for entry in jobs.outstanding(Path(run_dir), "slurm"):
            ids = [entry["id"]] if entry.get("id") else jobs_named(entry["name"])
            live = [i for i in ids if (job_info(i) or {}).get("JobState") in WAITING | RUNNING]
            for job_id in live:
                cancel(job_id)
                echo(f"cancelled Slurm job {job_id} ({entry['name']}) that an earlier sweep of this run submitted "
                     "and that was still queued or running")  # fmt: skip
            deadline = time.monotonic() + CANCEL_WAIT_S
            while any((job_info(i) or {}).get("JobState") in WAITING | RUNNING for i in live) \
                    and time.monotonic() < deadline:  # fmt: skip
                time.sleep(0.2)
            jobs.append(Path(run_dir), launcher="slurm", event="torn down", name=entry["name"],
                        id=entry.get("id"), why="--resume: left by an earlier sweep")  # fmt: skip
