"""``calibrate``: k unchanged launches of a setting, read into a noise profile (``compare --noise-profile``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflashbench.errors import UserError


def calibrate(
    launches: Annotated[
        int, typer.Option("--launches", "-k", metavar="K", help="Unchanged sweeps to run (each its own launch).")
    ] = 4,
    suite: Annotated[
        str | None, typer.Option(metavar="NAME", help="Suite name or file. Default: the sweep's (demo on reference).")
    ] = None,
    backend: Annotated[str | None, typer.Option(metavar="NAME", help="reference, vllm, sglang or trtllm.")] = None,
    model: Annotated[str | None, typer.Option(metavar="NAME", help="Target model (a registry name, HF id or folder).")] = None,
    method: Annotated[str | None, typer.Option(metavar="LIST", help="Methods, e.g. ar,eagle3,dflash.")] = None,
    concurrency: Annotated[str | None, typer.Option(metavar="LIST", help="Concurrencies, e.g. 1,2,4.")] = None,
    num_prompts: Annotated[int | None, typer.Option(metavar="N", help="Prompts per workload.")] = None,
    sweep_arg: Annotated[
        list[str] | None, typer.Option("--sweep-arg", metavar="ARG", help="Any other sweep argument, passed as is "
                                       "(repeatable: --sweep-arg=--engine-cpus --sweep-arg=0-7).")
    ] = None,
    out: Annotated[Path, typer.Option("-o", "--output", help="Folder of the launches' run directories.")] = Path(
        "results/calibrate"),
    profile: Annotated[
        Path | None, typer.Option("--profile", help="Where to write the noise profile. Default: OUT/noise-profile.json.")
    ] = None,
    from_runs: Annotated[
        list[Path] | None, typer.Option("--from", help="Read these unchanged runs instead of sweeping (repeatable).")
    ] = None,
) -> None:
    """Run K unchanged launches of one setting (default: the embedded demo) and write the noise profile they show:
    per backend, the run-to-run term of a speedup and of a point's speed figure (a run's common shift and the point's
    own), with degrees of freedom, date and machine. compare --noise-profile FILE then judges with it."""
    import time

    from dflashbench.gate.calibrate import calibrate_runs, machine_of
    from dflashbench.measure import noise_model
    from dflashbench.run.launches import run_launches

    start = time.monotonic()
    if from_runs:
        runs, how = list(from_runs), "dflashbench calibrate --from"
    else:
        args = [a for flag, v in (("--suite", suite), ("--backend", backend), ("--model", model), ("--method", method),
                                  ("--concurrency", concurrency), ("--num-prompts", num_prompts)) if v is not None
                for a in (flag, str(v))] + list(sweep_arg or ())  # fmt: skip
        runs, _ = run_launches(out, launches, args, typer.echo)
        how = "dflashbench calibrate" + (f" {' '.join(args)}" if args else "")
    profiles, lines = calibrate_runs(runs, how)
    path = profile if profile is not None else out / "noise-profile.json"
    try:
        noise_model.write_profile(path, profiles, made_by=how, runs=[str(r) for r in runs], where=machine_of(runs))
    except OSError as exc:
        raise UserError(f"cannot write the noise profile {path}: {exc.strerror or exc}") from None
    for line in lines:
        typer.echo(line)
    typer.echo(f"noise profile written to {path} ({time.monotonic() - start:.0f} s); judge with: dflashbench compare "
               f"BASE NEW --noise-profile {path}")  # fmt: skip
