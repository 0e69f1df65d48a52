"""Nothing lost, nothing leaked: the sweep under real faults, with real processes over loopback.

- Secrets planted in every input (endpoint userinfo, a model id's query token, an ``--api-key`` in a
  launched server's arguments, which the server also prints back) appear in no file under the results or
  reports folders and in nothing printed.
- A second sweep on a run directory (``--resume`` while the first still runs) stops at once, naming the
  holder's PID; the first finishes with exactly one row per point and request.
- A full filesystem (tmpfs, where user namespaces allow mounting one; a file-size limit otherwise) stops the
  sweep with one line naming the file and the error, no traceback; the run resumes to completion elsewhere.
- A SIGKILLed sweep leaves no server running; ``--resume`` stops one that an earlier sweep could not.
- A 200 stream without ``data:`` events is a failed request; a point with too many failed requests is
  ``degraded`` and the sweep exits 1.

The sweeps that must be processes of their own (to be killed, to run two at once, to run on a small
filesystem) run ``tests/standin_cli.py``, the CLI with the stand-in backend registered.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dflashbench
from dflashbench.backends import BACKENDS
from dflashbench.backends.base import LaunchPlan
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.cli import app
from dflashbench.run import runlock
from dflashbench.run.store import load_run

HERE = Path(__file__).parent.parent
CLI = HERE / "standin_cli.py"
GSM8K = HERE / "fixtures" / "datasets" / "openai--gsm8k"
SOURCE_ROOT = Path(dflashbench.__file__).resolve().parents[1]
SECRETS = {"password": "pw-Zq8rT4vXa1", "query token": "tok-Kd93jQ0pL2", "api key": "key-Mn5bV7cWq3"}
PROMPTS = 3  # per point, plus one warm-up request


@pytest.fixture(autouse=True)
def standin_backend(monkeypatch):
    monkeypatch.setitem(BACKENDS, "standin", "dflashbench.bench.standin:StandinBackend")


def write_suite(tmp_path: Path, *, methods=("ar",), concurrency=(1,), extra: str = "", data: Path = GSM8K,
                name: str = "standin-test", requests_per_stream: int = 1, max_tokens: int = 12,
                model: str = "standin-model") -> Path:  # fmt: skip
    drafts = '[drafts]\ndflash = "standin-draft"\n' if "dflash" in methods else ""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
name = "{name}"
backend = "standin"
methods = {json.dumps(list(methods))}
model = "{model}"
concurrency = {json.dumps(list(concurrency))}
num_prompts = {PROMPTS}
requests_per_stream = {requests_per_stream}  # 1: each prompt once: the tests count requests and rows
warmup_requests = 1
max_tokens = {max_tokens}
timeout_s = 20
{drafts}{extra}
[[workloads]]
name = "gsm8k"
data = "{data}"
""")
    return path


def sweep(*args):
    return CliRunner().invoke(app, ["sweep", *map(str, args)], catch_exceptions=False)


def env_for_children() -> dict[str, str]:
    """The child imports the dflashbench these tests import (a worktree, not another installed copy)."""
    path = os.pathsep.join(p for p in (str(SOURCE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def sweep_process(*args, **popen_kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(CLI), "sweep", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_for_children(), **popen_kw)  # fmt: skip


def only_run_dir(out: Path) -> Path:
    runs = [p for p in out.iterdir() if p.is_dir() and p.name != "reports"]
    assert len(runs) == 1, runs
    return runs[0]


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return False
    return state not in ("Z", "X")


def children_of(pid: int) -> list[int]:
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return out


def answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def launched_server(run_dir: Path, method: str = "ar") -> dict:
    """The manifest's record of a launched server, once its PID is in (the server is starting or up)."""

    def record():
        try:
            servers = json.loads((run_dir / "manifest.json").read_text()).get("servers") or {}
        except (OSError, ValueError):
            return None
        return servers.get(method) if (servers.get(method) or {}).get("pid") else None

    return wait_for(record, 60, f"the {method} server's PID in the manifest")


def assert_complete(run_dir: Path, points: int) -> None:
    """Every point ok, one row each; every request exactly once (no duplicates, nothing lost)."""
    run = load_run(run_dir)
    assert run.manifest["status"] == "complete", run.manifest.get("status_reason")
    assert len(run.points) == points and set(run.points["status"]) == {"ok"}
    measured = run.requests[~run.requests["warmup"]]
    # each point sends its prompts, reused up to one per stream where it has more streams (requests_per_stream 1)
    expected = {p.point_id: max(PROMPTS, p.concurrency) for p in run.points.itertuples()}
    assert measured.groupby("point_id").size().to_dict() == expected and measured["ok"].all()
    assert not measured.duplicated(["point_id", "request_id", "turn"]).any()
    assert len(run.requests) == len(measured) + points  # one warm-up each


# -- 1. secrets ------------------------------------------------------------------------------------------------
def assert_no_secret(root: Path, *printed: str, inputs: Path, secrets: dict[str, str] = SECRETS) -> int:
    """No planted secret in any file under ``root`` (but the ``inputs`` that plant them) or in what was printed;
    returns how many files were read."""
    files = [p for p in root.rglob("*") if p.is_file() and inputs not in p.parents]
    for path in files:
        data = path.read_bytes()
        for what, secret in secrets.items():
            assert secret.encode() not in data, f"the {what} is in {path}"
    for text in printed:
        for what, secret in secrets.items():
            assert secret not in text, f"the {what} was printed"
    return len(files)


def test_secrets_reach_no_file_report_or_console(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    port = free_port()
    argv = (sys.executable, "-m", "dflashbench.bench.standin", "serve", "--port", str(port), "--pace-ms", "2")
    model = f"org/standin-model?revision=main&token={SECRETS['query token']}"
    # an endpoint with a password in its URL, a model id with a token in its query
    with ServerProcess(LaunchPlan(argv=argv), tmp_path / "elsewhere" / "endpoint.log", name="endpoint") as server:
        server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=60, progress=False)
        url = f"http://alice:{SECRETS['password']}@127.0.0.1:{port}"
        first = sweep("--suite", write_suite(inputs), "--endpoint", url, "--model", model, "--unlisted-model", "-o",
                      tmp_path / "results")  # sent as given, though the server lists another  # fmt: skip
    assert first.exit_code == 0, first.output
    run = load_run(only_run_dir(tmp_path / "results"))
    assert run.manifest["endpoint"] == f"http://***@127.0.0.1:{port}"
    assert run.points.loc[0, "model"] == "org/standin-model?revision=main&token=***"
    assert run.points.loc[0, "extra"]["endpoint"] == f"http://***@127.0.0.1:{port}"

    # ... the same endpoint once it is gone: the error message names it, without the password
    gone = sweep("--suite", write_suite(inputs), "--endpoint", url, "-o", tmp_path / "results")
    assert gone.exit_code == 2 and f"error: cannot reach the server at http://***@127.0.0.1:{port}" in gone.output

    # an --api-key in a launched server's arguments, which the server prints back as vLLM does; the dflash
    # server fails at start, so its command line also reaches a failure reason, the report and the console
    key = SECRETS["api key"]
    extra = f'[extra_args]\nar = ["--api-key", "{key}"]\ndflash = ["--api-key={key}", "--no-such-flag"]\n'
    launched = sweep("--suite", write_suite(inputs, methods=("ar", "dflash"), extra=extra, name="launched"),
                     "-o", tmp_path / "results")  # fmt: skip
    assert launched.exit_code == 1, launched.output
    run_dir = next(p for p in (tmp_path / "results").iterdir() if p.name.startswith("launched"))
    run = load_run(run_dir)
    log = (run_dir / "server-standin-ar.log").read_text()
    assert log.startswith("# dflashbench: ") and "--api-key ***" in log.splitlines()[0]
    assert "non-default args: {'port': " in log and "'api_key': [***]" in log  # the server's own line
    failed = run.points[run.points["status"] == "failed"].iloc[0]
    assert failed["failure_reason"].startswith("server did not start: standin dflash server exited with code 2")
    assert "--api-key=***" in failed["failure_reason"]
    assert run.manifest["servers"]["dflash"]["argv"][-2:] == ["--api-key=***", "--no-such-flag"]
    assert "--api-key=***" in launched.output

    reports = sorted((tmp_path / "reports").glob("*.html"))
    assert len(reports) == 2  # the endpoint run's and the launched run's
    assert "--api-key=***" in reports[1].read_text() or "--api-key=***" in reports[0].read_text()
    assert assert_no_secret(tmp_path, first.output, gone.output, launched.output, inputs=inputs) >= 13  # two runs, their logs and reports


# -- 2. one sweep per run directory -------------------------------------------------------------------------------
def test_the_lock_names_its_holder_and_is_released(tmp_path):
    lock = runlock.acquire(tmp_path, started_at="2026-01-01T00:00:00")
    with pytest.raises(runlock.RunDirectoryBusy, match=rf"in use by another sweep \(PID {os.getpid()}, started 2026"):
        runlock.acquire(tmp_path)
    lock.release()
    runlock.acquire(tmp_path).release()  # free again


def test_resume_while_the_sweep_runs_is_refused_and_loses_nothing(tmp_path):
    # a slow server (100 ms per token) keeps the first sweep busy for several seconds
    suite = write_suite(tmp_path, extra='[extra_args]\nar = ["--pace-ms", "100"]\n')
    out = tmp_path / "results"
    first = sweep_process("--suite", suite, "-o", out, "--no-report")
    try:
        run_dir = wait_for(lambda: out.is_dir() and next(out.iterdir(), None), 30, "the run directory")
        launched_server(run_dir)
        started = time.monotonic()
        second = subprocess.run([sys.executable, str(CLI), "sweep", "--resume", str(run_dir), "--no-report"],
                                capture_output=True, text=True, env=env_for_children(), timeout=60)  # fmt: skip
        assert time.monotonic() - started < 30
        assert second.returncode == 2, second.stderr
        assert f"is in use by another sweep (PID {first.pid}, started " in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # refused at once: the first sweep is still at work
        stdout, stderr = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, stderr
    assert_complete(run_dir, points=1)


# -- 3. disk full --------------------------------------------------------------------------------------------------
def can_mount_tmpfs() -> bool:
    try:
        probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=8k tmpfs /mnt || "
                                "mount -t tmpfs -o size=8k tmpfs /tmp"], capture_output=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not can_mount_tmpfs(), reason="no user namespaces to mount a small tmpfs in")


def sweep_on_tmpfs(tmp_path: Path, size_kib: int, *sweep_args) -> tuple[subprocess.CompletedProcess, Path]:
    """Run the sweep with ``-o`` on a tmpfs of ``size_kib`` (a mount namespace of its own); copy what it
    wrote out before the namespace, and the tmpfs with it, goes."""
    mnt, copy = tmp_path / "mnt", tmp_path / "copy"
    mnt.mkdir()
    copy.mkdir()
    script = ('mount -t tmpfs -o size="$1"k tmpfs "$2" || exit 99; shift 3; "$@"; rc=$?; '
              'cp -a "$mnt"/. "$copy"/; exit $rc')  # fmt: skip
    argv = ["unshare", "-rm", "sh", "-c", script, "sh", str(size_kib), str(mnt), "--", sys.executable, str(CLI),
            "sweep", *map(str, sweep_args), "-o", str(mnt / "results"), "--no-report"]  # fmt: skip
    env = {**env_for_children(), "mnt": str(mnt), "copy": str(copy)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 99, done.stderr
    return done, copy / "results"


@needs_tmpfs
def test_disk_full_at_start_is_one_line_and_leaves_no_half_run(tmp_path):
    done, results = sweep_on_tmpfs(tmp_path, 4, "--suite", write_suite(tmp_path))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    run_dir = re.escape(str(tmp_path / "mnt" / "results")) + r"/standin-test-[\w-]+"
    assert re.fullmatch(rf"error: cannot write ({run_dir})/manifest\.json: No space left on device \(ENOSPC, "
                        rf"errno 28\); nothing was run and \1 was removed", line), line  # fmt: skip
    assert list(results.iterdir()) == []  # no run directory that nothing could resume


@needs_tmpfs
def test_disk_full_mid_run_stops_with_one_line_and_resumes_elsewhere(tmp_path):
    suite = write_suite(tmp_path, concurrency=(1, 2, 3, 4))
    done, results = sweep_on_tmpfs(tmp_path, 24, "--suite", suite)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "ExceptionGroup" not in done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "No space left on device (ENOSPC, errno 28); the sweep stopped" in error[0]
    assert "free space, then dflashbench sweep --resume " in error[0]
    run_dir = only_run_dir(results)
    run = load_run(run_dir)
    assert run.manifest["status"] in ("interrupted", "running")  # "running" when even that update had no room
    kept = set(run.points["point_id"])
    assert len(kept) < 4 and set(run.points["status"]) <= {"ok"}

    resumed = sweep("--resume", run_dir, "--no-report")  # "after freeing space": on the real disk
    assert resumed.exit_code == 0, resumed.output
    assert f"{len(kept)} point(s) done, {4 - len(kept)} to run" in resumed.output
    assert_complete(run_dir, points=4)


def test_a_file_that_cannot_grow_stops_the_sweep_with_one_line(tmp_path):
    """Where no tmpfs can be mounted: a file-size limit (EFBIG) in the sweep's process is the same kind of
    fault, an OSError writing the store."""
    limit = 9000  # the manifest (3-4 kB) fits; requests.jsonl (about 900 bytes a request) outgrows it mid-run

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = tmp_path / "results"
    proc = sweep_process("--suite", write_suite(tmp_path, concurrency=(1, 2, 3, 4)), "-o", out, "--no-report",
                         preexec_fn=limit_file_size)  # fmt: skip
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr
    assert "Traceback" not in stderr
    (error,) = [line for line in stderr.splitlines() if line.startswith("error: ")]
    run_dir = only_run_dir(out)
    assert error.startswith(f"error: cannot write {run_dir}/requests.jsonl: File too large (EFBIG, errno 27); "
                            "the sweep stopped")  # fmt: skip
    run = load_run(run_dir)
    assert run.manifest["status"] == "interrupted" and "EFBIG" in run.manifest["status_reason"]
    kept = len(run.points)
    resumed = sweep("--resume", run_dir, "--no-report")
    assert resumed.exit_code == 0 and f"{kept} point(s) done, {4 - kept} to run" in resumed.output
    assert_complete(run_dir, points=4)


# -- 4. no orphaned server -------------------------------------------------------------------------------------------
def test_sigkill_of_the_sweep_takes_its_server_down(tmp_path):
    suite = write_suite(tmp_path, concurrency=(1, 2), extra='[extra_args]\nar = ["--pace-ms", "60"]\n')
    out = tmp_path / "results"
    proc = sweep_process("--suite", suite, "-o", out, "--no-report")
    try:
        run_dir = wait_for(lambda: out.is_dir() and next(out.iterdir(), None), 30, "the run directory")
        record = launched_server(run_dir)
        supervisor, port = record["pid"], record["port"]
        wait_for(lambda: answers(port), 60, "the server to listen")
        (server,) = children_of(supervisor)
        wait_for(lambda: (run_dir / "requests.jsonl").stat().st_size > 0, 60, "the first request")
    finally:
        proc.kill()  # SIGKILL: no handler in the sweep runs
        proc.wait()
    started = time.monotonic()
    wait_for(lambda: not alive(server) and not alive(supervisor), 20, "the server to go with its sweep")
    assert time.monotonic() - started < 15 and not answers(port)

    resumed = sweep("--resume", run_dir, "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert "stopped the ar server" not in resumed.output  # nothing was left to stop
    assert_complete(run_dir, points=2)


def test_resume_stops_a_server_its_run_left_running(tmp_path):
    suite = write_suite(tmp_path, extra='[extra_args]\nar = ["--pace-ms", "60"]\n')
    out = tmp_path / "results"
    proc = sweep_process("--suite", suite, "-o", out, "--no-report")
    try:
        run_dir = wait_for(lambda: out.is_dir() and next(out.iterdir(), None), 30, "the run directory")
        record = launched_server(run_dir)
        supervisor = record["pid"]
        wait_for(lambda: answers(record["port"]), 60, "the server to listen")
        (server,) = children_of(supervisor)
        os.kill(supervisor, signal.SIGSTOP)  # its keeper cannot act (as if it had been killed with the sweep)
    finally:
        proc.kill()
        proc.wait()
    try:
        time.sleep(1.0)
        assert alive(server) and answers(record["port"])  # a leftover, as a SIGKILL of both would leave
        resumed = sweep("--resume", run_dir, "--no-report")
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already, as it should be
            os.kill(supervisor, signal.SIGCONT)
    assert resumed.exit_code == 0, resumed.output
    assert f"stopped the ar server (PID {supervisor}) that an earlier sweep of this run launched" in resumed.output
    assert not alive(server) and not alive(supervisor)
    assert_complete(run_dir, points=1)


# -- 4b. no orphaned client either: every process a sweep starts ends with it, SIGKILL included --------------
def process_table() -> dict[int, tuple[int, int]]:
    """Every process on the machine: pid -> (parent pid, start time in clock ticks), read from /proc."""
    table = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(entry)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(root: int) -> dict[int, int]:
    """Every living descendant of ``root`` (children, their children, ...): pid -> start ticks, which tell a
    descendant from an unrelated process that reuses its PID later."""
    table, found, frontier = process_table(), {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, ticks) in table.items():
            if ppid == parent and pid not in found and alive(pid):
                found[pid] = ticks
                frontier.append(pid)
    return found


def still_running(procs: dict[int, int]) -> dict[int, str]:
    """Those of ``procs`` still running as the same process (a zombie nobody reaps has ended): pid -> its command."""
    table, left = process_table(), {}
    for pid, ticks in procs.items():
        if table.get(pid, (0, None))[1] == ticks and alive(pid):
            left[pid] = cmdline(pid).replace(b"\0", b" ").decode(errors="replace")[:160]
    return left


def kill_sweep_and_check_its_tree(proc: subprocess.Popen, ready, expect) -> dict[int, str]:
    """Once ``ready()`` holds, record every descendant of the sweep from /proc (``expect`` checks the tree has
    the processes the test is about), SIGKILL the sweep, and return what still runs 5 s later (killing it
    then, so that a failing test leaves no process behind)."""
    try:
        wait_for(ready, 60, "the point's requests in flight")
        tree = descendants(proc.pid)
        expect(tree)
    finally:
        proc.kill()  # SIGKILL: no handler in the sweep runs
        proc.wait()
    deadline = time.monotonic() + 5.0
    while still_running(tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = still_running(tree)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def client_workers(tree: dict[int, int]) -> list[int]:
    """The client processes among ``tree``: forked by the fork server (a multiprocessing.forkserver process)."""
    servers = [pid for pid in tree if b"multiprocessing.forkserver" in cmdline(pid)]
    table = process_table()
    return [pid for pid in tree if table.get(pid, (0,))[0] in servers]


def expect_clients(tree: dict[int, int]) -> None:
    """The tree holds what the tests are about: the fork server, multiprocessing's resource tracker, and two
    client processes (``auto`` at 33 streams or more, on two CPUs or more)."""
    commands = [cmdline(pid) for pid in tree]
    assert sum(b"multiprocessing.forkserver import main" in c for c in commands) >= 1, commands
    assert sum(b"multiprocessing.resource_tracker import main" in c for c in commands) == 1, commands
    assert len(client_workers(tree)) == min(2, os.cpu_count() or 1), commands


def requests_received(url: str) -> float:
    from dflashbench.bench.standin import read_stats

    try:
        return read_stats(url)["requests"]
    except OSError:
        return 0


# Requests per stream, one after another at 0.6 s each (12 tokens, 50 ms apart) while a server answers: a client that
# outlives its sweep has work left for more than 5 s. Where the server goes with the sweep, the rest fail at once, and
# their results (a few hundred bytes each, 24 or 32 streams x 40 of them a client) outgrow the results pipe nobody reads
# any more: such a client never exits (its queue's feeder blocks on the full pipe), as it did before the lifeline.
WORK_ROUNDS = 40


def test_sigkill_of_an_endpoint_sweep_leaves_no_client_process(tmp_path):
    """c=64 against a stand-in on loopback: two client processes by auto (on two CPUs or more), the fork server
    they come from and multiprocessing's resource tracker all end within 5 s of the sweep's SIGKILL."""
    port = free_port()
    argv = (sys.executable, "-m", "dflashbench.bench.standin", "serve", "--port", str(port), "--pace-ms", "50",
            "--model", "standin-model")
    url = f"http://127.0.0.1:{port}"
    with ServerProcess(LaunchPlan(argv=argv), tmp_path / "endpoint.log", name="endpoint") as server:
        server.wait_ready(f"{url}/health", timeout_s=60, progress=False)
        suite = write_suite(tmp_path, concurrency=(64,), requests_per_stream=WORK_ROUNDS)
        proc = sweep_process("--suite", suite, "--endpoint", url,
                             "-o", tmp_path / "results", "--no-report")  # fmt: skip

        left = kill_sweep_and_check_its_tree(proc, lambda: requests_received(url) >= 1 + 64, expect_clients)
    assert not left, f"still running 5 s after the sweep's SIGKILL: {left}"


def test_sigkill_of_a_sweep_with_a_launched_server_leaves_no_process(tmp_path):
    """The same at c=48 with the server launched by the sweep: its supervisor, the server, the client processes,
    the fork server and the resource tracker all end within 5 s."""
    suite = write_suite(tmp_path, concurrency=(48,), requests_per_stream=WORK_ROUNDS,
                        extra='[extra_args]\nar = ["--pace-ms", "50"]\n')
    out = tmp_path / "results"
    proc = sweep_process("--suite", suite, "-o", out, "--no-report")
    port = []

    def ready():
        if not port:
            run_dir = out.is_dir() and next(out.iterdir(), None)
            record = run_dir and launched_server(run_dir)
            port.extend([record["port"]] if record else [])
        return port and requests_received(f"http://127.0.0.1:{port[0]}") >= 1 + 48

    def expect(tree):
        expect_clients(tree)
        commands = [cmdline(pid) for pid in tree]
        supervisors = [c for c in commands if b"dflashbench/backends/supervise.py" in c]
        servers = [c for c in commands if b"\0-m\0dflashbench.bench.standin\0serve" in c and c not in supervisors]
        assert (len(supervisors), len(servers)) == (1, 1), commands

    left = kill_sweep_and_check_its_tree(proc, ready, expect)
    assert not left, f"still running 5 s after the sweep's SIGKILL: {left}"
    assert not answers(port[0])


# -- 5. no silent success ----------------------------------------------------------------------------------------------
def test_streams_without_data_events_fail_and_the_point_is_degraded(tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    questions = ["How many apples? FAULT:nodata", "How many pears?", "How many plums? FAULT:nodata"]
    data.write_text("".join(json.dumps({"question": q, "answer": "#### 1"}) + "\n" for q in questions))
    out = tmp_path / "results"
    result = sweep("--suite", write_suite(tmp_path, data=data), "-o", out, "--no-report")
    assert result.exit_code == 1, result.output
    assert "DEGRADED (2 of 3 requests failed (67% > max_error_rate 10%); first error: the HTTP 200 stream " \
           "carried no JSON data: event" in result.output
    assert "1 point(s) degraded (more failed requests than max_error_rate allows" in result.output
    run = load_run(only_run_dir(out))
    (point,) = run.points.to_dict("records")
    assert (point["status"], point["num_requests"], point["num_errors"]) == ("degraded", 3, 2)
    assert point["failure_reason"].startswith("2 of 3 requests failed")
    assert run.manifest["status"] == "degraded" and run.manifest["degraded_points"] == [point["point_id"]]
    failed = run.requests[~run.requests["ok"]]
    assert len(failed) >= 2 and (failed["output_tokens"] == 0).all()

    # the threshold is a flag (and a suite key): 2 of 3 is within 70%
    tolerant = sweep("--suite", write_suite(tmp_path, data=data), "-o", out, "--no-report", "--max-error-rate", "0.7")
    assert tolerant.exit_code == 0, tolerant.output
    assert "degraded" not in tolerant.output.lower()


# -- 6. counter resets -------------------------------------------------------------------------------------------
def test_a_restarted_server_whose_counters_look_like_growth_gives_no_mixed_tau(tmp_path):
    """A real stand-in server serves 2 requests, is killed and started again on the same port, then serves 4: its
    counters read higher than before, but its process start time changed, so the window is refused."""
    import asyncio

    import aiohttp

    from dflashbench.bench.standin import StandinBackend
    from dflashbench.run.point import counters_delta as _delta

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "dflashbench.bench.standin", "serve", "--port", str(port), "--pace-ms", "1",
            "--tokens-per-chunk", "3", "--spec-tau", "3"]  # fmt: skip

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(argv, env=env_for_children(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: answers(port), 30, "the stand-in server")
        return proc

    async def serve_and_read(n: int):
        async with aiohttp.ClientSession() as session:
            for _ in range(n):
                body = {"model": "standin", "prompt": "count", "max_tokens": 12, "stream": True}
                async with session.post(f"{url}/v1/completions", json=body) as resp:
                    await resp.read()
            return await StandinBackend().read_counters(session, url)

    proc = start()
    try:
        before = asyncio.run(serve_and_read(2))
        proc.terminate()
        proc.wait(10)
        time.sleep(0.05)
        proc = start()
        after = asyncio.run(serve_and_read(4))
    finally:
        proc.terminate()
        proc.wait(10)
    assert after.drafts > before.drafts and after.accepted_tokens > before.accepted_tokens  # looks like growth
    notes: list[str] = []
    assert _delta(before, after, notes) is None
    assert len(notes) == 1 and "the server restarted during the window" in notes[0]
    assert "tau comes from the requests' own speculative stats" in notes[0]


# -- 7. timeouts -------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def black_hole():
    """A TCP server (another process) that accepts every connection and never sends a byte."""
    code = ("import socket,time\ns=socket.socket();s.bind(('127.0.0.1',0));s.listen(64)\n"
            "print(s.getsockname()[1],flush=True)\nkept=[]\nwhile True:\n    kept.append(s.accept())\n")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.kill()
        proc.wait(10)


def test_a_server_that_never_answers_gets_a_reason_not_empty_brackets(tmp_path):
    with black_hole() as url:
        result = sweep("--endpoint", url, "--backend", "vllm", "--model", "m", "--method", "ar", "--data", GSM8K,
                       "--suite", write_suite(tmp_path), "-o", tmp_path / "out", "--no-report")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"cannot reach the server at {url} (no HTTP response within 10 s)" in result.output


def test_request_timeout_flag_fails_a_hung_request_and_says_which_flag(tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    questions = ["How many apples?", "How many pears? FAULT:hang", "How many plums?"]
    data.write_text("".join(json.dumps({"question": q, "answer": "#### 1"}) + "\n" for q in questions))
    out = tmp_path / "results"
    started = time.monotonic()
    result = sweep("--suite", write_suite(tmp_path, data=data), "-o", out, "--no-report", "--request-timeout", "1.5",
                   "--max-error-rate", "0.5")  # fmt: skip
    assert time.monotonic() - started < 15  # not the suite's timeout_s = 20
    assert result.exit_code == 0, result.output
    run = load_run(only_run_dir(out))
    failed = run.requests[~run.requests["ok"]]
    assert list(failed["error"]) == ["timeout: no complete response within 1.5 s (raise it with --request-timeout, "
                                     "suite key timeout_s)"]  # fmt: skip
    measured = run.requests[~run.requests["warmup"]]
    assert len(measured) >= 3 and measured["ok"].sum() == len(measured) - 1  # the others are kept


def test_ready_timeout_flag_and_suite_key_bound_the_wait_for_a_server(tmp_path, monkeypatch):
    from dflashbench.bench.standin import StandinBackend

    monkeypatch.setattr(StandinBackend, "health_path", lambda self: "/never-ready", raising=False)
    out = tmp_path / "results"
    started = time.monotonic()
    result = sweep("--suite", write_suite(tmp_path), "-o", out, "--no-report", "--ready-timeout", "2")
    assert time.monotonic() - started < 20
    assert result.exit_code == 1, result.output
    assert "within 2s (stopped it; if it is still loading, raise the readiness timeout: --ready-timeout, suite key " \
           "ready_timeout_s)" in result.output
    # the suite key does the same
    suite = write_suite(tmp_path, extra="ready_timeout_s = 1.5\n", name="ready-key")
    keyed = sweep("--suite", suite, "-o", out, "--no-report")
    assert keyed.exit_code == 1 and "within 1.5s" in keyed.output, keyed.output


# -- 8. paths and bounds -----------------------------------------------------------------------------------------
def test_an_unsafe_suite_name_is_refused_and_nothing_is_written_outside_o(tmp_path):
    suite = write_suite(tmp_path, name="standin-test")
    suite.write_text(suite.read_text().replace('name = "standin-test"', 'name = "../../../escaped"'))
    out = tmp_path / "a" / "b" / "results"
    result = sweep("--suite", suite, "-o", out, "--no-report")
    assert result.exit_code == 2, result.output
    assert f"error: {suite}: key 'name': '../../../escaped' is not a safe suite name" in result.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["standin-test.toml"]  # no run directory anywhere


def test_the_report_stays_inside_the_o_folder_it_was_given(tmp_path, monkeypatch):
    from dflashbench.cli.sweep_report import report_path

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out" / "base"
    result = sweep("--suite", write_suite(tmp_path), "-o", out)
    assert result.exit_code == 0, result.output
    run_dir = only_run_dir(out)
    report = out / "reports" / f"{run_dir.name}.html"
    assert f"report written to {report}" in result.output and report.stat().st_size > 1000
    assert not (tmp_path / "out" / "reports").exists()
    # the repository's layout: results/<run> -> reports/<run>.html beside it; -o . stays in .
    assert report_path(tmp_path / "results" / "r1") == tmp_path / "reports" / "r1.html"
    assert report_path(Path("r2")) == Path("reports/r2.html")


def test_sweep_suite_errors_name_the_file_and_key_and_bounds_give_their_reason(tmp_path):
    bad_backend = write_suite(tmp_path, name="bad-backend")
    bad_backend.write_text(bad_backend.read_text().replace('backend = "standin"', 'backend = "vlm"'))
    result = sweep("--suite", bad_backend, "--dry-run")
    assert result.exit_code == 2
    assert f"error: {bad_backend}: key 'backend': unknown backend 'vlm'" in result.output
    bad_workload = write_suite(tmp_path, name="bad-workload")
    bad_workload.write_text(bad_workload.read_text().replace('name = "gsm8k"', 'name = "gsmk"'))
    result = sweep("--suite", bad_workload, "--dry-run")
    assert f"error: {bad_workload}: key 'workloads[0]': unknown workload 'gsmk'" in result.output
    result = sweep("--suite", write_suite(tmp_path), "--concurrency", "1000000", "--dry-run")
    assert result.exit_code == 2
    assert "key 'concurrency': concurrency 1000000 is too large: at most 16384: each stream holds an open " \
           "connection" in result.output and "(set by --concurrency)" in result.output
    big = write_suite(tmp_path, name="big", extra="warmup_requests_x = 0\n")
    big.write_text(big.read_text().replace("warmup_requests = 1", "warmup_requests = 50000").replace("warmup_requests_x = 0\n", ""))
    result = sweep("--suite", big, "--dry-run")
    assert "key 'warmup_requests': Input should be less than or equal to 10000 (got 50000): warm-up requests are " \
           "sent before every point and not measured" in result.output
