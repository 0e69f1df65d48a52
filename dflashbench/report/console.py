"""The report's answer in a terminal: the verdict a sweep and ``dflashbench report`` end with, and the same lines
appended to ``$GITHUB_STEP_SUMMARY`` in a CI job.

Nothing is computed or worded here: the lines are the report's own verdict (:attr:`.answer.VerdictBlock.lines`),
so the terminal and the report cannot disagree. What the verdict leaves out (warnings, notes, the trust flags in
full) is in the report, whose path the command prints after these lines.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from dflashbench.redact import redact_text

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"  # GitHub Actions: Markdown appended here shows on the job's page
INDENT = "  "
NOTHING_TO_COMPARE = "No setting has AR and another method measured in one run: nothing to compare."


def verdict_lines(model) -> list[str]:
    """The verdict of a :class:`.model.ReportModel`: the answer first, every further line indented under it."""
    block = model.verdict
    lines = list(block.lines) if block is not None else []
    if block is not None and not block.settings and not block.extra:
        lines.insert(0, NOTHING_TO_COMPARE)
    return [(INDENT if i else "") + line for i, line in enumerate(lines)]


def closing_lines(model) -> list[str]:
    """What a sweep and ``report`` end with: the verdict (the warnings and notes are in the report)."""
    return verdict_lines(model)


def wrap(lines: Sequence[str], width: int | None) -> list[str]:
    """``lines`` wrapped at ``width`` columns, a continuation indented under its line (``None``: as they are,
    for logs that have no width): :func:`dflashbench.report.answer.wrap`, which the verdict's line count reads."""
    from dflashbench.report.answer import wrap as wrapped

    return wrapped(lines, width)


def terminal_width() -> int | None:
    """The terminal's width (``COLUMNS`` where set), or ``None`` where stdout is no terminal (a log, a pipe)."""
    from rich.console import Console

    console = Console()
    return console.width if console.is_terminal or os.environ.get("COLUMNS") else None


def print_closing(model, echo: Callable[[str], None]) -> None:
    """Print the verdict fitted to the terminal, and append it to ``$GITHUB_STEP_SUMMARY`` (both redacted, as
    every string leaving the process)."""
    for line in wrap(closing_lines(model), terminal_width()):
        echo(redact_text(line, words=False))  # from run files redacted as written: a word-like key spared
    if model.verdict is not None:
        runs = ", ".join(r.run_id for r in model.runs)
        append_step_summary(verdict_lines(model), title=f"dflashbench verdict — {runs}", echo=echo)


def step_summary_markdown(lines: Sequence[str], title: str) -> str:
    """The verdict lines as Markdown: a heading, the answer in bold, the rest as a list (a further setting's own lines
    nested under its answer)."""
    from dflashbench.report.render import md_escape

    head, *rest = lines
    return "\n".join([f"### {md_escape(title)}", "", f"**{md_escape(head)}**", "",
                      *(("  " if line.startswith(INDENT * 2) else "") + f"- {md_escape(line.strip())}" for line in rest),
                      "", ""])  # fmt: skip


def append_step_summary(lines: Sequence[str], title: str, echo: Callable[[str], None] | None = None) -> bool:
    """Append ``lines`` to the file ``$GITHUB_STEP_SUMMARY`` names, where it is set; True when written. A file
    that cannot be written costs a note, never the run."""
    path = os.environ.get(STEP_SUMMARY_ENV)
    if not path or not lines:
        return False
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(redact_text(step_summary_markdown(lines, title), words=False))
    except OSError as exc:
        if echo is not None:
            echo(f"note: ${STEP_SUMMARY_ENV} {path} not written: {exc.strerror or exc}")
        return False
    return True
