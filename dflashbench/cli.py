"""The ``dflashbench`` command line. Commands stay thin: build a config, call one function.

Heavy imports (torch, transformers, matplotlib, engines) happen inside the commands so that
``dflashbench --help`` is instant. Errors a user can fix (:class:`UserError`) print one line, no traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

from dflashbench import __version__
from dflashbench.errors import UserError

CONTEXT = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    name="dflashbench",
    help="Benchmark DFlash speculative decoding against AR and EAGLE-3 on real serving engines.",
    context_settings=CONTEXT,
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
train_app = typer.Typer(help="Train the embedded target or a drafter for any target.", context_settings=CONTEXT)
suites_app = typer.Typer(help="List, show and validate suite files.", context_settings=CONTEXT)
workloads_app = typer.Typer(help="List workloads and show exactly which requests they send.", context_settings=CONTEXT)
bench_app = typer.Typer(help="Micro-benchmarks of dflashbench's own parts (decoder, load generator).", context_settings=CONTEXT)
app.add_typer(train_app, name="train")
app.add_typer(suites_app, name="suites")
app.add_typer(workloads_app, name="workloads")
app.add_typer(bench_app, name="bench")

F = TypeVar("F", bound=Callable)


def user_errors(fn: F) -> F:
    """Turn a :class:`UserError` into one line on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dflashbench {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Benchmark DFlash speculative decoding against AR and EAGLE-3 on real serving engines."""


def run() -> None:  # pragma: no cover - console entry point helper
    sys.exit(app())


# --- commands are added below, one section per area; each body builds a config and calls one function ---
