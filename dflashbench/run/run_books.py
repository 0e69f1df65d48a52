"""A sweep's books: the run's manifest, opening its store (new, or resumed with what is finished kept) and
closing it with how the sweep ended, a signal included (:func:`stop_on_signals`). Points themselves are written
by :mod:`dflashbench.run.point`."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from dflashbench.errors import Interrupted
from dflashbench.plan.grid import SweepContext
from dflashbench.run import input_files
from dflashbench.run.manifest import Manifest, environment, now_iso
from dflashbench.run.store import RunStore, StoreWriteError, new_run_id, read_manifest
from dflashbench.types import PointSummary

Echo = Callable[[str], None]


def new_manifest(ctx: SweepContext, *, api_key_env: str | None, store_text: bool) -> dict:
    """A new run's manifest: what it runs, on what, and how its outputs are kept; ``status`` running."""
    suite = ctx.suite
    return {
        "status": "running",
        "created_at": now_iso(),
        "started_at": now_iso(),
        "finished_at": None,
        "suite": {"name": suite.name, "version": suite.version, "file": suite.source_file,
                  "description": suite.description},  # fmt: skip
        "suite_config": suite.model_dump(mode="json", exclude={"source_file"}),
        "backend": ctx.backend_name,
        "endpoint": ctx.endpoint,
        "endpoints": ctx.endpoints if len(ctx.endpoints) > 1 else None,
        "model": ctx.pair.target,
        "drafts": {m.value: d for m, d in ctx.pair.drafts.items()},
        "num_gpus": ctx.num_gpus,
        "api_key_env": api_key_env,  # the variable's name, never its value
        "grid": [p.point_id for p in ctx.grid],
        "outputs": outputs_policy(store_text),
        "servers": {},
        "cpus": ctx.cpus.record() if ctx.cpus is not None else None,
        "inputs": input_files.record(suite),  # each --data and trace file by SHA-256: --resume refuses a changed one
        "engine": engine_record(ctx),
        **environment(),
    }


def engine_record(ctx: SweepContext) -> dict | None:
    """The engine that served, by name, distribution, version and build (vLLM's CPU build has its own PyPI name,
    so the manifest's package versions alone would miss it); ``None`` where dflashbench cannot tell."""
    if ctx.backend_name == "vllm" and not ctx.endpoint:
        from dflashbench.backends.vllm_install import find_vllm

        install = find_vllm()
        return install.record() if install is not None else None
    return None


def outputs_policy(store_text: bool) -> dict:
    """What requests.jsonl keeps of each output (the manifest's ``outputs``; ``--resume`` honours it)."""
    from dflashbench.load.outputs import TEXT_CAP_CHARS, TOKEN_CAP

    if not store_text:
        return {"store_text": False, "note": "--no-store-text: no output text, hash or token ids kept; only grades"}
    return {"store_text": True, "text_cap_chars": TEXT_CAP_CHARS, "token_cap": TOKEN_CAP}


def final_status(points: list[PointSummary]) -> str:
    """How a sweep that ran to its end did: partial (a point failed), degraded, or complete."""
    if any(p.status == "failed" for p in points):
        return "partial"
    return "degraded" if any(p.status == "degraded" for p in points) else "complete"


def stop_leftover_servers(ctx: SweepContext, run_dir: Path, manifest: Manifest, echo: Echo) -> None:
    """Tear down servers an earlier sweep of this run launched and recorded, if they still run: processes, or the
    jobs and objects a cluster's launcher recorded as it submitted them. The run directory's lock is held, so the
    sweep that launched them is gone: one still running is an orphan, holding GPUs and a port."""
    from dflashbench.run.launching import launcher_of

    launcher_of(ctx).stop_leftovers(run_dir, manifest.servers, echo)


def store_failure(exc: BaseException) -> StoreWriteError | None:
    """The run-file write error inside ``exc`` (raised in a load-generator task, it arrives in an
    ExceptionGroup), if there is one."""
    if isinstance(exc, StoreWriteError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = store_failure(inner)
        if found is not None:
            return found
    return None


def create_store(ctx: SweepContext, manifest: dict, *, out_dir: Path, run_id: str | None, echo: Echo) -> RunStore:
    """A new run directory under ``out_dir``, locked, its manifest written before anything else."""
    store = RunStore.create(out_dir, manifest, run_id=run_id or new_run_id(ctx.suite.name))
    echo(f"run directory: {store.run_dir}")
    return store


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT raise :class:`~dflashbench.errors.Interrupted` in the main thread:
    one path for every kind of sweep (servers it launched or an ``--endpoint``), so ``finally`` blocks stop the
    servers, end the client processes (their semaphores released) and mark the manifest interrupted. A second
    signal while that happens is ignored: the books would otherwise be left half closed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def interrupt(signum, _frame) -> None:
        if not fired:
            fired.append(signum)
            raise Interrupted(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupted_reason(exc: Interrupted) -> str:
    """The manifest's ``status_reason`` for a sweep a signal stopped."""
    what = "Ctrl-C (SIGINT)" if exc.signum == signal.SIGINT else exc.signal_name
    return f"{what} received: the point in flight was dropped; finished points are kept and --resume runs the rest"


def reopen_store(ctx: SweepContext, resume: Path, echo: Echo, store_text: bool = True) -> tuple[RunStore, set[str]]:
    """The resumed run's store, locked, and the ids of its finished points (leftover servers of its earlier
    sweep stopped, unfinished points' rows discarded, the resume recorded in the manifest, with the operational
    limits it changed: :data:`dflashbench.plan.suite_overrides.RESUMABLE`). ``store_text`` False (``--resume
    --no-store-text``) on a run that stored text: the points this sitting measures keep none, and the manifest's
    ``outputs.text_not_stored`` lists them (:func:`outputs_after_resume`)."""
    store = RunStore.open(resume)  # locks the run directory: a second sweep on it stops here
    try:
        books = store.manifest  # read again under the lock
        input_files.check_unchanged(books.inputs, ctx.suite, resume)  # before anything of the run changes
        stop_leftover_servers(ctx, store.run_dir, books, echo)
        finished, torn = store.point_states()
        redo = [p.point_id for p in ctx.grid if p.point_id not in finished]
        dropped = store.discard_points(redo)
        history = list(books.resumes)
        env = environment()  # the resumed points may run on other software than the first ones
        config, changed = resumed_config(read_manifest(store.run_dir).get("suite_config") or {}, ctx)
        history.append({"at": now_iso(), "points_to_run": redo, "rows_discarded": dropped,
                        **({"changed": changed} if changed else {}), **({"points_torn": torn} if torn else {}),
                        **({"lines_cut": store.cut_lines} if store.cut_lines else {}),
                        **{k: env[k] for k in ("dflashbench_version", "git_sha", "git_dirty", "versions", "cpu", "gpu")}})  # fmt: skip
        outputs = outputs_after_resume(books.outputs.model_dump(exclude_none=True), redo, store_text)
        if outputs is not None:
            history[-1]["store_text"] = False
        store.update_manifest(status="running", resumes=history, finished_at=None, suite_config=config,
                              **({"outputs": outputs} if outputs is not None else {}))  # fmt: skip
    except BaseException:
        store.close()
        raise
    for name, size in store.cut_lines.items():
        echo(f"note: {name} ended in a line cut short ({size} bytes, a crash or a full disk): dropped")
    for point_id, missing in torn.items():
        echo(f"note: {point_id} has {missing}: it is measured again")
    echo(f"resuming {store.run_dir}: {len(finished)} point(s) done, {len(redo)} to run")
    if not store_text and store.manifest.outputs.store_text and redo:
        echo(f"note: --no-store-text: the {len(redo)} point(s) this sitting measures keep no output text (the earlier "
             "points keep theirs); the manifest lists them under outputs.text_not_stored")  # fmt: skip
    for key, change in changed.items():
        echo(f"note: {key} {change['from']} -> {change['to']} for the points still to run (recorded in the manifest)")
    return store, finished


def outputs_after_resume(outputs: dict, redo: list[str], store_text: bool) -> dict | None:
    """The manifest's ``outputs`` after a resume that keeps no text (``--no-store-text``) on a run that kept it: the
    points it measures join ``text_not_stored``, so the record says which points have no text (``None``: nothing
    changes; a run that never stored text says so already)."""
    if store_text or not outputs.get("store_text", True) or not redo:
        return None
    before = [p for p in outputs.get("text_not_stored") or [] if p not in redo]
    return {**outputs, "text_not_stored": [*before, *redo]}


def resumed_config(recorded: dict, ctx: SweepContext) -> tuple[dict, dict]:
    """The run's ``suite_config`` with the operational limits this resume set, and what changed
    (``{key: {"from": old, "to": new}}``): later resumes start from the new values."""
    from dflashbench.plan.suite_overrides import RESUMABLE

    now = ctx.suite.model_dump(mode="json")
    changed = {k: {"from": recorded.get(k), "to": now[k]} for k in RESUMABLE if k in recorded and recorded[k] != now[k]}
    return {**recorded, **{k: c["to"] for k, c in changed.items()}}, changed


def close_store(store: RunStore, points: list[PointSummary], status: str, reason: str | None) -> StoreWriteError | None:
    """Record how the sweep ended in the manifest, close the files and release the lock; the error if the
    manifest could not be written (a full disk), which leaves it saying "running" (resumable all the same)."""
    try:
        store.update_manifest(status=status, status_reason=reason, finished_at=now_iso(),
                              failed_points=[p.point_id for p in points if p.status == "failed"],
                              degraded_points=[p.point_id for p in points if p.status == "degraded"])  # fmt: skip
    except StoreWriteError as exc:
        return exc
    finally:
        store.close()
    return None
