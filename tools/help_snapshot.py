"""Print --help of every dflashbench command (the whole tree), for a byte-for-byte comparison."""
import os
import sys

os.environ["COLUMNS"] = "160"
os.environ["TERM"] = "dumb"
import click
import typer
from typer.testing import CliRunner

from dflashbench.cli import app

root = typer.main.get_command(app)


def walk(cmd, path):
    yield path
    if hasattr(cmd, "list_commands"):
        ctx = click.Context(cmd)
        for name in sorted(cmd.list_commands(ctx)):
            yield from walk(cmd.get_command(ctx, name), [*path, name])


runner = CliRunner()
for path in walk(root, []):
    r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "160"})
    sys.stdout.write(f"===== dflashbench {' '.join(path)} (exit {r.exit_code})\n{r.output}")
