"""The report's answer in a terminal: the few lines a sweep and ``dflashbench report`` end with, and the same
lines appended to ``$GITHUB_STEP_SUMMARY`` in a CI job.

Nothing is computed here: the lines render the report's own verdict block (:class:`.summary.VerdictBlock`,
built by :func:`.summary.build_verdict`) and its warnings and notes, so the terminal and the report cannot
disagree. :func:`verdict_lines` is the one place the terminal's verdict is laid out.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Sequence

from dflashbench.redact import redact_text
from dflashbench.report.summary import NOTHING_TO_COMPARE, LosslessCheck, MethodVerdict, VerdictBlock

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"  # GitHub Actions: Markdown appended here shows on the job's page
INDENT = "  "


def _x(value: float) -> str:
    return f"{value:.2f}×"


def _matched_concurrency(pairs: Sequence[tuple[int, float]]) -> str:
    if not pairs:
        return "matched concurrency not measured"
    if len(pairs) == 1:
        return f"matched concurrency {_x(pairs[0][1])} at c={pairs[0][0]}"
    lo, hi = min(x for _, x in pairs), max(x for _, x in pairs)
    cs = sorted(c for c, _ in pairs)
    return f"matched concurrency {lo:.2f}–{_x(hi)} over c={cs[0]}–{cs[-1]}"


def _interactivity(m: MethodVerdict) -> str:
    rd = m.interactivity
    if rd is None or rd.ratio is None:
        return "matched interactivity not read"
    if rd.bound:  # no overlap: a bound, not a ratio
        return f"matched interactivity {rd.bound} {_x(rd.ratio)} (no overlap)"
    return f"matched interactivity {_x(rd.ratio)} at {rd.at_tok_per_s_user:,.0f} tok/s/user"


def method_line(m: MethodVerdict) -> str:
    """``DFlash vs AR: single-stream 2.74× [2.60–3.59] · matched concurrency 3.08–3.46× over c=1–4``; a matched
    interactivity ratio where the curves overlap (a bound goes on its own line, :func:`bound_lines`)."""
    single = f"single-stream {_x(m.single_x)}" if m.single_x is not None else "single-stream not measured"
    if m.single_x is not None and m.single_ci is not None:
        lo, hi = m.single_ci
        single += f" [{lo:.2f}–{hi:.2f}]" + (", no clear difference" if lo <= 1.0 <= hi else "")
    parts = [single, _matched_concurrency(m.matched_x)]
    if m.interactivity is None or not m.interactivity.bound:
        parts.append(_interactivity(m))
    return f"{m.label}: " + " · ".join(parts)


def bound_lines(block: VerdictBlock) -> list[str]:
    """The matched-interactivity bounds, labelled as bounds, after the measured lines."""
    return [f"bound, {m.label}: matched interactivity {m.interactivity.bound} {_x(m.interactivity.ratio)} "
            "(the curves do not overlap)" for m in block.methods
            if m.interactivity is not None and m.interactivity.bound and m.interactivity.ratio is not None]


def _check(c: LosslessCheck) -> str:
    if c.by == "token count":
        return f"{c.method} token counts equal to AR's on {c.equal}/{c.compared} (no stored text: not proof)"
    return f"{c.method} {'identical' if c.holds else 'NOT identical'} to AR on {c.equal}/{c.compared} requests"


def lossless_line(checks: Sequence[LosslessCheck]) -> str:
    if not checks:
        return "lossless: not checked (needs greedy AR and the method on the same prompts)"
    by_text = all(c.by == "text" for c in checks)
    return "lossless: " + "; ".join(map(_check, checks)) + (" (greedy, by output text)" if by_text else "")


def verdict_lines(block: VerdictBlock) -> list[str]:
    """The verdict in a few lines: the hardware it holds for, each method's three speedups, the lossless check."""
    lines = [f"Verdict, measured on {block.hardware}:"]
    lines += [INDENT + method_line(m) for m in block.methods]
    lines += [INDENT + h for h in block.head_to_head]
    if not block.methods:
        lines.append(INDENT + NOTHING_TO_COMPARE)
    lines += [INDENT + s for s in block.slo]
    lines += [INDENT + b for b in bound_lines(block)]
    lines += [INDENT + a for a in block.answer]
    lines.append(INDENT + lossless_line(block.checks))
    return lines


def closing_lines(model) -> list[str]:
    """What a sweep and ``report`` end with (``model``: a :class:`.model.ReportModel`): the report's warnings
    (which may change the reading) and notes (each explained once), then the verdict, last."""
    lines = [f"warning: {w}" for w in model.warnings] + [f"note: {n}" for n in model.notes]
    lines += [f"trust: {t}" for t in model.trust]  # what weakens the run, just before the verdict
    if model.verdict is not None:
        lines += ["", *verdict_lines(model.verdict)]  # set apart: the answer
    trace = getattr(model, "trace_verdict", None) or []  # replayed traffic (dflashbench.report.trace)
    lines += [f"{INDENT}{line}" for line in trace]
    return lines


def wrap(lines: Sequence[str], width: int | None) -> list[str]:
    """``lines`` wrapped at ``width`` columns, a continuation indented under its line (``None``: as they are,
    for logs that have no width)."""
    if not width:
        return list(lines)
    out = []
    for line in lines:
        lead = line[: len(line) - len(line.lstrip())] + INDENT
        out += textwrap.wrap(line, width=width, subsequent_indent=lead, break_on_hyphens=False) or [""]
    return out


def terminal_width() -> int | None:
    """The terminal's width, or ``None`` where stdout is not a terminal (a log, a pipe, a test)."""
    from rich.console import Console

    console = Console()
    return console.width if console.is_terminal else None


def print_closing(model, echo: Callable[[str], None]) -> None:
    """Print :func:`closing_lines` fitted to the terminal, and append the verdict to ``$GITHUB_STEP_SUMMARY``
    (both redacted, as every string leaving the process)."""
    for line in wrap(closing_lines(model), terminal_width()):
        echo(redact_text(line))
    if model.verdict is not None:
        runs = ", ".join(r.run_id for r in model.runs)
        append_step_summary(verdict_lines(model.verdict), title=f"dflashbench verdict — {runs}", echo=echo)


def step_summary_markdown(lines: Sequence[str], title: str) -> str:
    """The verdict lines as Markdown: a heading, the first line as a paragraph, the rest as a list."""
    from dflashbench.report.render import md_escape

    head, *rest = lines
    return "\n".join([f"### {md_escape(title)}", "", md_escape(head), "",
                      *(f"- {md_escape(line.strip())}" for line in rest), "", ""])  # fmt: skip


def append_step_summary(lines: Sequence[str], title: str, echo: Callable[[str], None] | None = None) -> bool:
    """Append ``lines`` to the file ``$GITHUB_STEP_SUMMARY`` names, where it is set; True when written. A file
    that cannot be written costs a note, never the run."""
    path = os.environ.get(STEP_SUMMARY_ENV)
    if not path or not lines:
        return False
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(redact_text(step_summary_markdown(lines, title)))
    except OSError as exc:
        if echo is not None:
            echo(f"note: ${STEP_SUMMARY_ENV} {path} not written: {exc.strerror or exc}")
        return False
    return True
