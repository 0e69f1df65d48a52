"""Server process lifecycle, shared by every backend that launches its own server.

A :class:`ServerProcess` runs a :class:`~dflashbench.backends.base.LaunchPlan` (an argv list, never a shell
string) in its own process group, under a small supervisor (:mod:`dflashbench.backends.supervise`) that
copies its stdout and stderr, redacted, to a log file (the run directory's ``server-<backend>-<method>.log``)
and stops the group when the sweep dies, SIGKILL included. :attr:`ServerProcess.pid` is the supervisor's
(the group leader), and its exit status is the server's. :func:`stop_leftover` stops a group recorded by an
earlier sweep that is still running. :meth:`ServerProcess.wait_ready` polls the health URL with a progress
indicator and notices a server that died while starting (:class:`ServerStartError`, carrying the exit code
and the last lines of its log). :meth:`ServerProcess.stop` sends SIGTERM to the whole group, then SIGKILL
after a grace period, so engines that fork workers leave nothing behind. As a context manager it also stops
the server on Ctrl-C, on exceptions, and (while the block runs in the main thread) when dflashbench itself
gets SIGTERM.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from dflashbench.backends.base import LaunchPlan
from dflashbench.child_path import with_own_package
from dflashbench.errors import Interrupted, UserError
from dflashbench.redact import literals_env, redact_text, remember_env_secrets

LOG_TAIL_LINES = 20
SUPERVISOR = Path(__file__).with_name("supervise.py")


class ServerStartError(UserError):
    """The server exited, or never answered its health check, while starting."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``port`` now (a closed server's TIME_WAIT does not count as in use:
    servers set SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines)).rstrip("\n")
    except FileNotFoundError:
        return ""


class LiveServers:
    """Servers started in this interpreter and not yet stopped, each stopped at exit as a last resort by ``stop``
    (a process, a batch job, a Kubernetes object: one registry per kind of server)."""

    def __init__(self, stop: Callable[[object], object]) -> None:
        self._live: set = set()
        self._lock = threading.Lock()
        self._stop = stop
        atexit.register(self.stop_all)

    def add(self, server) -> None:
        with self._lock:
            self._live.add(server)

    def discard(self, server) -> None:
        with self._lock:
            self._live.discard(server)

    def stop_all(self) -> None:  # pragma: no cover - exercised by interpreter shutdown
        with self._lock:
            live = list(self._live)
        for server in live:
            self._stop(server)


_LIVE = LiveServers(lambda server: server.stop(grace_s=2.0))


class ServerProcess:
    """One launched server. Use as a context manager::

        with ServerProcess(plan, run_dir / "server-reference-dflash.log", name="reference dflash") as server:
            server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=600)
            ...
    """

    def __init__(
        self,
        plan: LaunchPlan,
        log_path: str | os.PathLike,
        *,
        name: str | None = None,
        cwd: str | os.PathLike | None = None,
        grace_s: float = 10.0,
    ) -> None:
        if not plan.argv:
            raise ValueError("launch plan has an empty argv")
        self.plan = plan
        self.log_path = Path(log_path)
        self.name = name or Path(plan.argv[0]).name
        self.cwd = Path(cwd) if cwd is not None else None
        self.grace_s = grace_s
        self._proc: subprocess.Popen | None = None
        self._old_sigterm = None

    # --- state ---

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """Exit status once the process has ended (negative = killed by that signal), else ``None``."""
        return self._proc.poll() if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait_exit(self, timeout_s: float) -> int | None:
        """The exit status if the server ends within ``timeout_s``, else ``None`` (it is left running)."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)

    def command_line(self) -> str:
        """The argv as one copy-pasteable line, secrets redacted, and this machine's paths taken out as the manifest
        takes them (:func:`dflashbench.paths.portable`: the interpreter ``python``, a file of the checkout relative
        to it), so a committed log reads the same on every machine (for the log's first line; never executed)."""
        import shlex

        from dflashbench.paths import portable

        return redact_text(shlex.join(portable(a) for a in self.plan.argv))

    def start_ticks(self) -> int | None:
        """When the group leader started (see :func:`process_start_ticks`): with :attr:`pid`, what identifies
        this server to a later ``--resume`` that finds it still running."""
        return process_start_ticks(self.pid) if self.pid is not None else None

    # --- start ---

    def start(self) -> ServerProcess:
        """Write the plan's files, then launch the argv under its supervisor in a new process group (session)."""
        if self._proc is not None:
            raise RuntimeError(f"{self.name} was already started")
        env = {**os.environ, **self.plan.env}
        if _runs_this_package(self.plan.argv):  # the reference server finds this dflashbench, not a folder (child_path)
            env = with_own_package(env)
        remember_env_secrets(self.plan.env)  # a key the plan puts in the server's environment: out of its log too
        supervisor_env = {**env, **literals_env()}  # the values the log must not hold, for it alone (it unsets them)
        if _executable(self.plan.argv[0], env, self.cwd) is None:  # the supervisor would only log it: say it now
            raise ServerStartError(f"could not start {self.name} ({self.plan.argv[0]}): no such executable "
                                   "file (is the engine installed in this environment?)")  # fmt: skip
        base = self.cwd or self.log_path.parent
        for rel, content in self.plan.files.items():
            path = Path(rel) if Path(rel).is_absolute() else base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cpus = ["--cpus", ",".join(map(str, self.plan.cpus))] if self.plan.cpus else []
        supervisor = [sys.executable, str(SUPERVISOR), "--log", str(self.log_path.resolve()), "--grace-s",
                      str(self.grace_s), *cpus, "--", *self.plan.argv]  # fmt: skip
        with open(self.log_path, "ab") as log:
            log.write(f"# dflashbench: {self.command_line()}\n".encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    supervisor,
                    stdin=subprocess.PIPE,  # its write end stays here: EOF tells the supervisor the sweep is gone
                    stdout=log,  # the supervisor's own errors, if any; the server's output it copies itself
                    stderr=subprocess.STDOUT,
                    env=supervisor_env,
                    cwd=self.cwd,
                    start_new_session=True,  # own session => own process group, pgid == pid
                )
            except OSError as exc:
                raise ServerStartError(f"could not start {self.name} ({self.plan.argv[0]}): {exc}") from None
        _LIVE.add(self)
        return self

    def wait_ready(
        self,
        health_url: str,
        timeout_s: float = 600.0,
        *,
        progress: bool = True,
        interval_s: float = 0.25,
        echo: Callable[[str], None] | None = None,
    ) -> float:
        """Poll ``health_url`` until it answers 200; return the seconds it took.

        Raises :class:`ServerStartError` (after stopping the server) if the process exits first, or if it
        does not answer within ``timeout_s``; the message has the exit code and the last lines of the log.
        """
        if self._proc is None:
            raise RuntimeError(f"{self.name} was not started")
        started = time.monotonic()
        deadline = started + timeout_s
        with _ProgressLine(f"waiting for {self.name} at {health_url}", enabled=progress, echo=echo) as bar:
            while True:
                code = self._proc.poll()
                if code is not None:
                    self._forget()
                    what = f"exited with code {_describe_exit(code)} while starting"
                    raise ServerStartError(self._failure(what))
                if health_ok(health_url):
                    elapsed = time.monotonic() - started
                    bar.done(f"{self.name} ready after {elapsed:.1f}s")
                    return elapsed
                now = time.monotonic()
                if now >= deadline:
                    self.stop()
                    raise ServerStartError(
                        self._failure(
                            f"did not answer {health_url} within {timeout_s:g}s (stopped it; if it is still "
                            "loading, raise the readiness timeout: --ready-timeout, suite key ready_timeout_s)"
                        )
                    )
                bar.update(now - started, self.log_tail(1))
                time.sleep(min(interval_s, max(0.0, deadline - now)))

    def _failure(self, what: str) -> str:
        tail = self.log_tail()
        shown = f"; last lines of {self.log_path}:\n{tail}" if tail else f"; its log {self.log_path} is empty"
        return f"{self.name} {what}{shown}"

    # --- stop ---

    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM the whole process group, SIGKILL whatever is left after ``grace_s``; return the exit status.

        Safe to call more than once and on a server that already exited (its children are still reaped from
        the group).
        """
        proc = self._proc
        if proc is None:
            return None
        grace = self.grace_s if grace_s is None else grace_s
        pgid = proc.pid  # start_new_session: the leader's pid is the group id
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
        killed_by = time.monotonic() + 5.0  # SIGKILL is delivered asynchronously: wait until the group is gone
        while _group_alive(pgid) and time.monotonic() < killed_by:
            time.sleep(0.01)
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        self._forget()
        return proc.returncode

    def _forget(self) -> None:
        _LIVE.discard(self)

    # --- context manager: stops on normal exit, exceptions, Ctrl-C and SIGTERM ---

    def __enter__(self) -> ServerProcess:
        if self._proc is None:
            self.start()
        # SIGTERM unwinds like Ctrl-C, unless the caller handles it already (a sweep does: one path for every
        # kind of sweep, dflashbench.run.run_books.stop_on_signals)
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._old_sigterm = signal.signal(signal.SIGTERM, _sigterm_to_exit)
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self.stop()
        finally:
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
                self._old_sigterm = None


def _executable(program: str, env: dict[str, str], cwd: Path | None) -> str | None:
    """The file ``program`` names (a path, or a name looked up on ``env``'s PATH), if it is executable."""
    if os.sep in program:
        path = Path(program) if Path(program).is_absolute() or cwd is None else cwd / program
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(program, path=env.get("PATH"))


def _runs_this_package(argv: Sequence[str]) -> bool:
    """``argv`` is this interpreter running one of this package's modules (``python -m dflashbench serve``)."""
    return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2].split(".")[0] == "dflashbench"


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after ``pid (comm)``, the state first (field 3 of proc(5) at index 0; comm
    may hold spaces or parentheses, so the split is at the last ``)``); ``None`` with no such process or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22), or ``None`` where
    there is no such process or no /proc. A PID alone could have been reused by an unrelated process."""
    fields = stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def stop_leftover(pid: int, start_ticks: int | None, grace_s: float = 10.0) -> bool:
    """Stop the process group that an earlier sweep launched (``pid``, started at ``start_ticks``) if that very
    process still runs; True when there was one to stop. A PID that now names another process (other start
    time, or not leading its own group) is left alone; without /proc (macOS) nothing is stopped."""
    if start_ticks is None or process_start_ticks(pid) != start_ticks or _pgid_of(pid) != pid:
        return False
    if not _group_alive(pid):  # an exited leader nobody reaped (PID 1 of some containers reaps no orphan)
        return False
    _signal_group(pid, signal.SIGTERM)
    _signal_group(pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once it runs again
    deadline = time.monotonic() + grace_s
    while _group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_group(pid, signal.SIGKILL)
    killed_by = time.monotonic() + 5.0
    while _group_alive(pid) and time.monotonic() < killed_by:
        time.sleep(0.01)
    return True


def _sigterm_to_exit(signum, frame) -> None:
    """dflashbench got SIGTERM: unwind (``finally`` blocks and context managers stop the servers), exit 143."""
    raise Interrupted(signum)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True while any process of the group exists (zombies waiting for their reaper count as gone)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return any(_pgid_of(pid) == pgid and not _is_zombie(pid) for pid in all_pids())


def all_pids() -> list[int]:
    """Every process ID in /proc; none without /proc (macOS)."""
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:  # no /proc (macOS): trust killpg
        return []


def _pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _is_zombie(pid: int) -> bool:
    fields = stat_fields(pid)
    return bool(fields) and fields[0] in ("Z", "X")  # type: ignore[index]


def health_ok(url: str) -> bool:
    """Whether ``url`` answers 200 within 2 s (a server's readiness endpoint)."""
    try:
        with urllib.request.urlopen(url, timeout=2.0) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"{code} (killed by {signal.Signals(-code).name})"
        except ValueError:
            return str(code)
    return str(code)


class _ProgressLine:
    """A one-line "waiting ... 12s" indicator on stderr: live on a terminal, start/end lines otherwise."""

    def __init__(self, label: str, *, enabled: bool, echo: Callable[[str], None] | None) -> None:
        self.label = label
        self.enabled = enabled
        self.echo = echo or (lambda text: print(text, file=sys.stderr, flush=True))
        self.live = enabled and echo is None and sys.stderr.isatty()
        self._status = None
        self._last_echo = 0.0

    def __enter__(self) -> _ProgressLine:
        if self.live:
            from rich.console import Console

            self._status = Console(stderr=True).status(self.label)
            self._status.__enter__()
        elif self.enabled:
            self.echo(f"{self.label} ...")
        self._last_echo = time.monotonic()
        return self

    def update(self, elapsed: float, last_log_line: str) -> None:
        if self._status is not None:
            last = last_log_line.strip()[-80:]
            self._status.update(f"{self.label} ({elapsed:.0f}s){'  ' + last if last else ''}")
        elif self.enabled and time.monotonic() - self._last_echo >= 30.0:
            self._last_echo = time.monotonic()
            self.echo(f"  still waiting ({elapsed:.0f}s)")

    def done(self, text: str) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)
            self._status = None
        if self.enabled:
            self.echo(text)

    def __exit__(self, *exc_info) -> None:
        if self._status is not None:
            self._status.__exit__(*exc_info)
            self._status = None
