"""ServerProcess with real stand-in processes: slow start, early exit, SIGTERM ignored, Ctrl-C, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dflashbench.backends.base import LaunchPlan
from dflashbench.backends.process import ServerProcess, ServerStartError, free_port
from dflashbench.errors import UserError

STANDIN = Path(__file__).parent / "standins" / "lifecycle_server.py"


def standin_plan(port: int, *flags: str) -> LaunchPlan:
    return LaunchPlan(argv=(sys.executable, str(STANDIN), "--port", str(port), *flags))


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (orphans are not reaped by PID 1 in every container)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def wait_file(path: Path, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


def test_slow_server_becomes_ready_and_is_stopped(tmp_path):
    port = free_port()
    log = tmp_path / "server-standin-ar.log"
    lines: list[str] = []
    with ServerProcess(standin_plan(port, "--ready-after", "1.5"), log, name="stand-in") as server:
        elapsed = server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=30, echo=lines.append)
        pid = server.pid
        assert alive(pid)
        assert elapsed >= 1.4
    assert not alive(pid)
    assert lines[0] == f"waiting for stand-in at http://127.0.0.1:{port}/health ..."
    assert lines[-1].startswith("stand-in ready after ")
    text = log.read_text()
    assert text.startswith("# dflashbench: ")  # the exact command heads the log
    # as the manifest names them: no path of this machine (the interpreter, the checkout) in a log a run keeps
    head = text.splitlines()[0]
    assert head == f"# dflashbench: python tests/backends/standins/lifecycle_server.py --port {port} --ready-after 1.5"
    assert "stand-in: loading shard 2" in text and f"listening on {port}" in text


def test_early_exit_reports_exit_code_and_log_tail(tmp_path):
    port = free_port()
    log = tmp_path / "server-standin-dflash.log"
    server = ServerProcess(standin_plan(port, "--exit-code", "3"), log, name="stand-in dflash")
    with pytest.raises(ServerStartError) as info, server:
        server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=30, progress=False)
    message = str(info.value)
    assert isinstance(info.value, UserError)
    assert message.startswith("stand-in dflash exited with code 3 while starting; last lines of ")
    assert str(log) in message
    assert message.rstrip().endswith("RuntimeError: CUDA out of memory (stand-in)")
    # the last 20 lines, not the whole log
    assert "stand-in: log line 29" in message and "stand-in: log line 11" in message
    assert "stand-in: log line 10\n" not in message
    assert server.returncode == 3


def test_never_ready_times_out_and_is_stopped(tmp_path):
    port = free_port()
    pid_file = tmp_path / "pid"
    server = ServerProcess(
        standin_plan(port, "--ready-after", "60", "--pid-file", str(pid_file)), tmp_path / "s.log", name="slow"
    )
    with pytest.raises(ServerStartError) as info, server:
        server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=1.0, progress=False)
    assert str(info.value).startswith(f"slow did not answer http://127.0.0.1:{port}/health within 1s")
    assert "stand-in: loading shard" in str(info.value)
    assert not alive(wait_file(pid_file))


def test_server_ignoring_sigterm_is_killed_with_its_children(tmp_path):
    port = free_port()
    child_file = tmp_path / "child.pid"
    plan = standin_plan(port, "--ignore-sigterm", "--child-pid-file", str(child_file))
    server = ServerProcess(plan, tmp_path / "s.log", name="stubborn", grace_s=0.5).start()
    server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=30, progress=False)
    leader, child = server.pid, wait_file(child_file)
    assert alive(leader) and alive(child)
    started = time.monotonic()
    code = server.stop()
    assert time.monotonic() - started < 5.0
    assert code == -signal.SIGKILL  # SIGTERM was ignored, SIGKILL ended it
    assert not alive(leader) and not alive(child)
    assert server.stop() == code  # idempotent


def test_plan_files_and_env_reach_the_process(tmp_path):
    plan = LaunchPlan(
        argv=(sys.executable, "-c", "import os; print(open('cfg/x.yaml').read(), os.environ['DFB_TEST_VAR'])"),
        env={"DFB_TEST_VAR": "from-plan"},
        files={"cfg/x.yaml": "speculative_config: {}"},
    )
    server = ServerProcess(plan, tmp_path / "s.log", cwd=tmp_path).start()
    server._proc.wait(timeout=30)
    assert "speculative_config: {} from-plan" in server.log_tail()
    server.stop()


def test_missing_executable_is_a_user_error(tmp_path):
    plan = LaunchPlan(argv=("/nonexistent/vllm", "serve"))
    with pytest.raises(ServerStartError, match=r"could not start vllm \(/nonexistent/vllm\)"):
        ServerProcess(plan, tmp_path / "s.log").start()


DRIVER = textwrap.dedent(
    """
    import signal, sys, time
    from dflashbench.backends.base import LaunchPlan
    from dflashbench.backends.process import ServerProcess
    port, standin, log, child_file = sys.argv[1:5]
    # as dflashbench sweep does (run_books.stop_on_signals): Ctrl-C is handled whatever disposition was inherited.
    # Python installs its KeyboardInterrupt handler only when SIGINT was not ignored at start, and a shell's `&`,
    # nohup and some CI runners start the test run with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    plan = LaunchPlan(argv=(sys.executable, standin, "--port", port, "--child-pid-file", child_file))
    try:
        with ServerProcess(plan, log, name="stand-in", grace_s=2) as server:
            server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=30, progress=False)
            print("READY", server.pid, flush=True)
            time.sleep(60)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


def inherit_sigint(disposition):
    """A preexec_fn that starts the driver with SIGINT as a foreground shell (default) or a background job, nohup
    or a CI runner (ignored) leaves it: the test must not depend on which one started pytest."""
    return lambda: signal.signal(signal.SIGINT, disposition)


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
@pytest.mark.parametrize(("sig", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_ctrl_c_or_sigterm_to_dflashbench_stops_the_server(tmp_path, sig, exit_code, inherited):
    port = free_port()
    child_file = tmp_path / "child.pid"
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(port), str(STANDIN), str(tmp_path / "s.log"), str(child_file)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=inherit_sigint(inherited),
    )
    try:
        line = driver.stdout.readline().split()
        assert line[0] == "READY", line
        server_pid, child = int(line[1]), wait_file(child_file)
        assert alive(server_pid) and alive(child)
        driver.send_signal(sig)
        assert driver.wait(timeout=20) == exit_code
        assert not alive(server_pid) and not alive(child)
    finally:
        driver.kill()
        driver.wait()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_plan_with_cpus_runs_the_server_and_its_children_on_them_only(tmp_path):
    """The engine's own CPUs (dflashbench.plan.cpus): set before exec, so the server and whatever it forks (vLLM's
    engine core and workers) stay there, while the sweep keeps its own mask."""
    cpu = max(os.sched_getaffinity(0))
    script = ("import os, subprocess, sys; print('server', sorted(os.sched_getaffinity(0)), flush=True); "
              "subprocess.run([sys.executable, '-c', 'import os; print(\"child\", sorted(os.sched_getaffinity(0)))'])")
    log = tmp_path / "server.log"
    before = os.sched_getaffinity(0)
    with ServerProcess(LaunchPlan(argv=(sys.executable, "-c", script), cpus=(cpu,)), log, name="pinned") as server:
        assert server.wait_exit(30) == 0
    text = log.read_text()
    assert f"server [{cpu}]" in text and f"child [{cpu}]" in text, text
    assert os.sched_getaffinity(0) == before
