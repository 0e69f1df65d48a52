"""The files a run read its requests from (each workload's ``--data``, the ``--trace``), by SHA-256: recorded in the
manifest (``inputs``) when the run starts, checked by ``--resume``.

A resumed run measures its remaining points on the prompts it reads again. Where a data or trace file changed in
between, those points measured other requests than the finished ones, and the run compared them as one (the c=1
point ran q0..q7, the resumed c=2 point z0..z2, with exit 0). So ``--resume`` refuses a file whose digest changed,
naming it and the fix. A folder given as ``--data`` is digested whole: every file under it by its path in the folder
and its bytes (names starting with ``.`` left out: locks and caches a reader may leave). Data read from the Hugging
Face Hub (no ``--data``) is the Hub's; its revision is not pinned here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from dflashbench.errors import UserError
from dflashbench.plan.suites import Suite

CHUNK_BYTES = 1 << 20


def _files(path: Path) -> list[Path]:
    """The files a digest covers: ``path`` itself, or every file under a folder, in a fixed order."""
    if path.is_file():
        return [path]
    found = [p for p in path.rglob("*") if p.is_file() and not any(part.startswith(".") for part in
                                                                   p.relative_to(path).parts)]  # fmt: skip
    return sorted(found, key=lambda p: p.relative_to(path).as_posix())


def digest(path: Path) -> dict:
    """``{"sha256": HEX, "bytes": N, "files": K}`` of a file, or of a folder's files (each one's path in the folder
    and its bytes hashed in turn)."""
    sha, size = hashlib.sha256(), 0
    files = _files(path)
    for file in files:
        if file != path:
            sha.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as fh:
            while chunk := fh.read(CHUNK_BYTES):
                sha.update(chunk)
                size += len(chunk)
        if file != path:
            sha.update(b"\0")
    return {"sha256": sha.hexdigest(), "bytes": size, "files": len(files)}


def read_paths(suite: Suite) -> list[tuple[str, Path]]:
    """What each input is (``--data of workload gsm8k``, ``--trace``) and the path it was read from."""
    out = [(f"--data of workload {w.label}", Path(w.data).expanduser()) for w in suite.workloads if w.data]
    if suite.trace:
        from dflashbench.workloads.traces import DATA_DIR, SHIPPED

        shipped = SHIPPED.get(suite.trace)
        out.append(("--trace", DATA_DIR / shipped.file if shipped else Path(suite.trace).expanduser()))
    return out


def record(suite: Suite) -> list[dict]:
    """The manifest's ``inputs``: each file the run reads, by what it is, its path as given and its digest."""
    return [{"what": what, "path": str(path), **digest(path)} for what, path in read_paths(suite) if path.exists()]


def check_unchanged(recorded: list[dict], suite: Suite, run_dir: Path) -> None:
    """A :class:`UserError` naming the first input of ``suite`` whose digest is not the one ``recorded`` when the run
    started (a run recorded before digests were kept has none to compare: nothing is refused)."""
    before = {entry.get("what"): entry for entry in recorded or [] if isinstance(entry, dict)}
    for what, path in read_paths(suite):
        old = before.get(what)
        if old is None or not old.get("sha256"):
            continue
        now = digest(path) if path.exists() else None
        if now is not None and now["sha256"] == old["sha256"]:
            continue
        state = "is gone" if now is None else (f"changed since the run read it (SHA-256 {old['sha256'][:12]}... and "
                                              f"{old.get('bytes', '?')} bytes then, {now['sha256'][:12]}... and "
                                              f"{now['bytes']} bytes now)")  # fmt: skip
        raise UserError(f"--resume {run_dir}: the {what}, {path}, {state}: the points still to run would measure "
                        "other requests than the finished ones. Put the file back as it was, or measure the new one "
                        "in a new run (dflashbench sweep without --resume); nothing was run or written")  # fmt: skip
