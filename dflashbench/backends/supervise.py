"""The launched server's keeper: it dies with the sweep, and its log holds no secret.

``python .../supervise.py --log FILE --grace-s S [--cpus 0,1] -- ARGV...`` is what
:class:`~dflashbench.backends.process.ServerProcess` launches, in a session of its own; the server runs as its
child in the same process group, so stopping the group stops both. The supervisor

- copies every line the server prints (stdout and stderr) to the log through
  :func:`dflashbench.redact.redact_text`: engines print their own arguments (vLLM: ``non-default args:
  {... 'api_key': [...]}``), so redacting only the command line would not be enough; the values the sweep
  sends (its API key) come in ``DFLASHBENCH_SECRET_VALUES``, redacted literally and unset before the server
  starts;
- watches the sweep: its stdin is a pipe whose write end only the sweep holds, so end-of-file means the
  sweep is gone however it died (SIGKILL included, which no handler in the sweep can see; its parent PID
  changing is checked too). It then stops the whole group: SIGTERM, then SIGKILL after the grace period.
  Without it, a SIGKILLed sweep left the server running with PPID 1, holding its GPU memory and port;
- ignores SIGTERM itself: :meth:`ServerProcess.stop` signals the group, the server shuts down, and the
  supervisor drains the last log lines and exits with the server's own status (its exit code, or killed by
  its signal), so the sweep reads the server's status as before.

On Linux the server also gets ``PR_SET_PDEATHSIG(SIGTERM)`` tied to the supervisor, in case the supervisor
itself is killed first. Standard library only (plus :mod:`dflashbench.redact`): it starts in milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

if __package__ in (None, ""):  # run by path: use the dflashbench this file belongs to
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dflashbench.redact import adopt_literals_env, redact_text  # noqa: E402

READ_BYTES = 65536
DRAIN_AFTER_EXIT_S = 2.0  # children of the server may hold its output pipe open after it exits
POLL_S = 0.2
PR_SET_PDEATHSIG = 1


def _prctl():
    """libc's prctl on Linux, looked up before forking (the child between fork and exec should do little)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _child_setup(prctl, supervisor_pid: int, cpus: set[int] | None) -> None:
    """In the server's process before exec: die with the supervisor (Linux), which may already be gone; run on
    ``cpus`` when the sweep gave the engine CPUs of its own (children inherit the mask; dflashbench.plan.cpus)."""
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor_pid:
        os._exit(1)
    if cpus:
        os.sched_setaffinity(0, cpus)


class _LogPump(threading.Thread):
    """Server output -> redacted log, line by line (a line ends at \\n or \\r: progress bars redraw with \\r)."""

    def __init__(self, source, log_path: Path) -> None:
        super().__init__(name="log-pump", daemon=True)
        self.fd = source.fileno()
        self.log_path = log_path
        self.write_failed = False

    def run(self) -> None:
        with open(self.log_path, "ab", buffering=0) as log:
            pending = b""
            while True:
                try:
                    data = os.read(self.fd, READ_BYTES)
                except OSError:
                    data = b""
                if not data:
                    break
                pending += data
                cut = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
                if cut == 0 and len(pending) < READ_BYTES:
                    continue  # an unfinished line: wait for its end (a secret may be split across reads)
                cut = cut or len(pending)
                self._write(log, pending[:cut])
                pending = pending[cut:]
            if pending:
                self._write(log, pending)

    def _write(self, log, data: bytes) -> None:
        text = redact_text(data.decode("utf-8", errors="surrogateescape"))
        try:
            log.write(text.encode("utf-8", errors="surrogateescape"))
        except OSError:  # disk full: keep draining, or the server would block on a full pipe
            self.write_failed = True


def _watch_parent(proc: subprocess.Popen, parent: int, grace_s: float) -> None:
    """Stop the group once the sweep is gone: its end of our stdin closed, or we were handed to another parent."""
    while True:
        try:
            ready, _, _ = select.select([0], [], [], POLL_S)
            if ready and not os.read(0, 4096):
                break
        except OSError:
            break
        if os.getppid() != parent:
            break
    _stop_group(proc, grace_s)


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """The sweep is gone: SIGTERM the group (this process ignores it), SIGKILL what is left, this one included."""
    with contextlib.suppress(OSError):
        os.killpg(0, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    os.killpg(0, signal.SIGKILL)


def _exit_like(code: int) -> None:
    """Exit with the server's status: the same code, or killed by the same signal."""
    if code < 0:
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP take no handler
            signal.signal(-code, signal.SIG_DFL)
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), -code)
        os._exit(128 - code)
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="supervise", description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--grace-s", type=float, default=10.0)
    parser.add_argument("--cpus", default="", help="comma-separated CPU ids the server runs on")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no server command after --")

    adopt_literals_env()  # the sweep's API key and URL password, redacted literally; not passed on to the server
    # A Python-level handler, not SIG_IGN: an ignored signal would stay ignored in the server after exec.
    signal.signal(signal.SIGTERM, lambda *_: None)
    parent = os.getppid()
    me, prctl = os.getpid(), _prctl()
    cpus = {int(c) for c in args.cpus.split(",") if c} or None
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: _child_setup(prctl, me, cpus))  # fmt: skip
    except OSError as exc:
        with contextlib.suppress(OSError), open(args.log, "ab") as log:
            log.write(redact_text(f"# dflashbench: could not start {command[0]}: {exc}\n").encode())
        os._exit(127)
    pump = _LogPump(proc.stdout, args.log)
    pump.start()
    watch = threading.Thread(target=_watch_parent, args=(proc, parent, args.grace_s), name="parent-watch", daemon=True)
    watch.start()
    proc.wait()  # blocking: the server's exit is seen at once, and mirrored as soon as its output is drained
    pump.join(timeout=DRAIN_AFTER_EXIT_S)
    _exit_like(proc.returncode)


if __name__ == "__main__":
    main()
