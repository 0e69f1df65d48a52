"""One sweep at a time per run directory: an exclusive OS file lock held for the sweep's whole life.

Two sweeps appending to one run directory (two ``--resume`` of one run, or a ``--resume`` while the original
still runs) would each run every unfinished point and write every row twice, or rewrite the files under the
other's feet. :func:`acquire` takes ``flock(LOCK_EX | LOCK_NB)`` on ``<run-dir>/.sweep.lock``: the second
sweep stops at once with a message naming the holder (PID, host, start time, written into the file by the
holder). The kernel drops the lock when the holder's process ends however it ends (SIGKILL included), so a
crashed sweep never leaves a stale lock behind, and the file itself is never deleted (deleting it would let
two sweeps lock two different files of the same name). The descriptor is not inherited by launched servers.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.redact import redact_secrets

LOCK_FILE = ".sweep.lock"


class RunDirectoryBusy(UserError):
    """Another sweep holds the run directory."""


class RunLock:
    """The held lock of one run directory; :meth:`release` (or process exit) lets the next sweep in."""

    def __init__(self, run_dir: Path, fd: int) -> None:
        self.run_dir = run_dir
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of the open file drops the flock
            self._fd = None

    def __del__(self) -> None:  # a store dropped without close() must not keep its run directory locked
        self.release()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire(run_dir: Path, started_at: str = "") -> RunLock:
    """Lock ``run_dir`` for this process, or raise :class:`RunDirectoryBusy` naming the sweep that holds it."""
    import fcntl  # POSIX only; imported here so that reading runs works everywhere

    run_dir = Path(run_dir)
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise UserError(f"cannot open the lock file {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise RunDirectoryBusy(
            f"{run_dir} is in use by another sweep ({holder}); one sweep at a time writes a run directory: wait "
            f"for that one to end (or stop it), then run dflashbench sweep --resume {run_dir}"
        ) from None
    except OSError as exc:  # a filesystem without flock (some network mounts)
        os.close(fd)
        raise UserError(f"cannot lock {path}: {exc.strerror or exc}; put the results folder on a local disk") from None
    _write_holder(fd, started_at)
    return RunLock(run_dir, fd)


def _write_holder(fd: int, started_at: str) -> None:
    """Who holds the lock, for the message the next sweep prints. Written over the old holder's line, then the
    file cut to it: never truncated first, which left a sweep racing in an empty file to read. Best effort: a
    full disk must not stop the sweep here (the lock itself is what counts, and the store names a full disk)."""
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": started_at,
              "argv": redact_secrets(list(sys.argv))}  # fmt: skip
    line = (json.dumps(holder) + "\n").encode()
    with contextlib.suppress(OSError):
        os.pwrite(fd, line, 0)
        os.ftruncate(fd, len(line))


HOLDER_WAIT_S = 2.0  # how long a refused sweep waits for the holder (just started) to write its line


def _read_holder(fd: int) -> str:
    """The holder's PID, host and start, as its first line says; a line naming a process that is gone (an
    earlier holder's, not yet overwritten by the sweep that just took the lock) is waited on briefly."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        data = _holder_line(fd)
        here = data.get("host") in (None, socket.gethostname())
        if data.get("pid") and (not here or _alive(int(data["pid"]))):
            break
        if time.monotonic() >= deadline:
            return "its PID is not recorded yet"
        time.sleep(0.02)
    where = f" on {data['host']}" if not here else ""
    since = f", started {data['started_at']}" if data.get("started_at") else ""
    return f"PID {data['pid']}{where}{since}"


def _holder_line(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 65536, 0).split(b"\n", 1)[0] or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("pid", 0), int) else {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True
