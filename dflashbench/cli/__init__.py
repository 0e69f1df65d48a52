"""The ``dflashbench`` command line: the root command, and each area's commands mounted from its own module.

Commands stay thin: build a config, call one function. Heavy imports (torch, transformers, matplotlib,
engines) happen inside the commands so that ``dflashbench --help`` is instant. Errors a user can fix
(:class:`UserError`), raised by a command or by an option's parser while the command line is read, print one
line, no traceback (:func:`user_errors`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Annotated

import typer
from typer.core import TyperGroup

from dflashbench import __version__
from dflashbench.cli import (
    bench,
    calibrate_command,
    catalog,
    doctor_command,
    history_command,
    reference_commands,
    results,
    sweep_command,
    train,
    tune_command,
)
from dflashbench.cli.common import CONTEXT
from dflashbench.errors import Interrupted, UserError

HELP = "Benchmark DFlash speculative decoding against AR and EAGLE-3 on real serving engines."


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn a :class:`UserError` into one line on stderr and its exit code; Ctrl-C into exit 130."""
    try:
        yield
    except UserError as exc:
        from dflashbench.redact import redact_text

        typer.echo(redact_text(f"error: {exc}"), err=True)
        raise typer.Exit(exc.exit_code) from None
    except Interrupted as exc:  # SIGINT or SIGTERM during a sweep: its books are closed, it says how to go on
        from dflashbench.redact import redact_text

        typer.echo(redact_text(exc.message or f"interrupted by {exc.signal_name}"), err=True)
        raise typer.Exit(exc.code) from None
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise typer.Exit(130) from None


class _Root(TyperGroup):
    """The root command: a subcommand's options are parsed and its body runs inside :meth:`invoke`, so one
    :func:`user_errors` covers every command and every option parser."""

    def invoke(self, ctx):
        with user_errors():
            return super().invoke(ctx)


app = typer.Typer(name="dflashbench", help=HELP, cls=_Root, context_settings=CONTEXT, no_args_is_help=True,
                  rich_markup_mode="rich", pretty_exceptions_enable=False)  # fmt: skip


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


# The command table, in the order ``dflashbench --help`` lists it (README's table follows it).
app.command()(results.report)
app.command()(results.compare)
app.command()(history_command.history)
app.command()(calibrate_command.calibrate)
app.command()(reference_commands.serve)
app.command()(doctor_command.doctor)
app.command()(sweep_command.sweep)
app.command()(reference_commands.generate)
app.command()(tune_command.tune)
app.add_typer(train.app, name="train")
app.add_typer(catalog.suites_app, name="suites")
app.add_typer(catalog.workloads_app, name="workloads")
app.add_typer(bench.app, name="bench")
app.add_typer(catalog.models_app, name="models")


def run() -> None:  # pragma: no cover - console entry point helper
    sys.exit(app())
