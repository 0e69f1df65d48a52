"""``doctor``: what is installed and what each backend still needs."""

from __future__ import annotations

from typing import Annotated

import typer


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON rows.")] = False,
) -> None:
    """What is installed (engines, torch + CUDA, GPUs and driver) and what each backend still needs."""
    from dflashbench.backends.installed import doctor_text

    typer.echo(doctor_text(as_json), nl=False)
