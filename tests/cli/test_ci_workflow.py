"""The GitHub Actions workflow users copy (docs/ci/dflashbench-gpu.yml, explained in docs/ci.md): it is valid
YAML of a workflow, kept out of .github/workflows/, and every ``dflashbench`` command in it goes through the CLI's
own parser (click's, under Typer), so an option that does not exist, a bad choice or a missing argument fails
here rather than on a user's GPU runner."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
import yaml

from dflashbench.cli import app

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "docs" / "ci" / "dflashbench-gpu.yml"
_EXPRESSION = re.compile(r"\$\{\{[^}]*\}\}")  # ${{ github.sha }}: a value at run time
_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "&", "(", ")", "$("}


def _steps() -> list[dict]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    return [step for job in doc["jobs"].values() for step in job["steps"]]


def dflashbench_commands(script: str) -> list[list[str]]:
    """Each ``dflashbench ...`` command of a step's shell script as argv after the program: continuation lines
    joined, ``${{ }}`` expressions as a value, the command cut at the first shell operator or redirection."""
    joined = re.sub(r"\\\n\s*", " ", script)
    out = []
    for line in joined.splitlines():
        line = _EXPRESSION.sub("VALUE", line)
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
        for i, token in enumerate(tokens):
            if token.endswith("dflashbench") and not token.startswith("dflashbench-"):
                argv = []
                for t in tokens[i + 1:]:
                    if t in _OPERATORS or set(t) <= set("|&;<>()"):
                        break
                    argv.append(t)
                out.append(argv)
    return out


def parse(argv: list[str]):
    """``argv`` through dflashbench's own command-line parser (no command is run)."""
    root = typer.main.get_command(app)
    with root.make_context("dflashbench", list(argv), resilient_parsing=False) as ctx:
        name, cmd, rest = root.resolve_command(ctx, list(argv))
        return cmd.make_context(name, rest, parent=ctx)


def test_workflow_is_a_workflow_kept_where_it_does_not_run_here():
    assert WORKFLOW.is_file() and not (ROOT / ".github" / "workflows" / WORKFLOW.name).exists()
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert doc["name"] and doc["jobs"]["bench"]["runs-on"] == ["self-hosted", "gpu"]
    assert "pull_request" in doc[True] and "schedule" in doc[True]  # YAML 1.1 reads the key `on` as True


def test_every_dflashbench_command_parses_with_the_cli():
    commands = [argv for step in _steps() if "run" in step for argv in dflashbench_commands(step["run"])]
    names = [argv[0] for argv in commands]
    assert {"sweep", "compare", "history"} <= set(names), names
    for argv in commands:
        ctx = parse(argv)
        assert ctx.command.name == argv[0]
    history = next(parse(a) for a in commands if a[0] == "history")
    assert history.params["recent"] == 3 and history.params["fmt"] == "md"


@pytest.mark.parametrize("bad", [["history", "runs/", "--recnet", "3"], ["compare", "a", "b", "--format", "pdf"],
                                 ["sweep", "--label"], ["history"]])  # fmt: skip
def test_the_parser_refuses_what_a_typo_would_leave(bad):
    with pytest.raises(Exception) as found:  # Typer's own click's UsageError, or dflashbench's own parsers' UserError
        parse(bad)
    assert {"UsageError", "UserError"} & {c.__name__ for c in type(found.value).__mro__}, found.value


def test_commands_are_read_out_of_the_shell_script():
    script = 'X=$(dflashbench compare "$A" "$NEW" --format md \\\n  --summary "$GITHUB_STEP_SUMMARY" | tee out)\n' \
             'dflashbench history "${LAST[@]}" --recent ${{ env.K }} >> comment.md\n'  # fmt: skip
    assert dflashbench_commands(script) == [["compare", "$A", "$NEW", "--format", "md", "--summary",
                                             "$GITHUB_STEP_SUMMARY"],
                                            ["history", "${LAST[@]}", "--recent", "VALUE"]]  # fmt: skip
