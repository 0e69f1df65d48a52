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
from dflashbench.report.summary import (
    NOTHING_TO_COMPARE,
    LosslessCheck,
    MethodVerdict,
    SettingVerdict,
    VerdictBlock,
)
from dflashbench.report.wording import SHORT

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"  # GitHub Actions: Markdown appended here shows on the job's page
INDENT = "  "


def _x(value: float) -> str:
    return f"{value:.2f}×"


def _short(r) -> str:
    """``1.22× [1.05–1.44] faster`` / ``0.82× (no interval)``."""
    if r.interval is None:
        return f"{_x(r.value)} (no interval)"
    lo, hi = r.interval
    return f"{_x(r.value)} [{lo:.2f}–{hi:.2f}] {SHORT[r.decision]}"


def _interactivity(m: MethodVerdict) -> str:
    rd = m.interactivity
    if rd is None or rd.ratio is None:
        return "matched interactivity not read"
    lo = rd.ratio_min if rd.ratio_min is not None else rd.ratio
    return f"matched interactivity {lo:.2f}–{_x(rd.ratio)} (read off the curves, no interval)"


def method_line(m: MethodVerdict) -> str:
    """``DFlash vs AR: single-stream 1.22× [1.05–1.44] faster · matched concurrency 1.01× [0.86–1.22] ≈ at c=2,
    ...``; the matched-interactivity range where the curves overlap (a bound goes on its own line,
    :func:`bound_lines`)."""
    single = next((r for r in m.readings if r.concurrency == 1), None) if m.single_x is not None else None
    parts = [f"single-stream {_short(single)}" if single is not None else "single-stream not measured"]
    past = [r for r in m.readings if r is not single]
    parts.append("matched concurrency " + ", ".join(f"{_short(r)} at c={r.concurrency}" for r in past) if past
                 else "matched concurrency not measured")  # fmt: skip
    if m.baseline == "ar" and (m.interactivity is None or not m.interactivity.bound):
        parts.append(_interactivity(m))
    return f"{m.label}: " + " · ".join(parts)


def bound_lines(s: SettingVerdict) -> list[str]:
    """The matched-interactivity bounds, labelled as bounds between points at different loads, after the
    measured lines."""
    return [f"bound, {m.label}: the curves do not overlap; comparing points at different loads gives matched "
            f"interactivity {m.interactivity.bound} {_x(m.interactivity.ratio)} (not a measurement)" for m in s.methods
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


def setting_lines(s: SettingVerdict, indent: str = INDENT) -> list[str]:
    """One setting's verdict: each pair's readings, TTFT, the SLO, energy, the bounds, the answer, lossless."""
    lines = [method_line(m) for m in [*s.methods, *s.head_to_head]]
    lines += [*s.ttft, *s.slo, *s.cost, *s.explain, *s.crossover, *bound_lines(s), s.answer, *s.extra]  # answer last
    lines.append(lossless_line(s.checks))
    return [indent + ln for ln in lines if ln]


def verdict_lines(block: VerdictBlock) -> list[str]:
    """The verdict in a few lines per setting: where it was measured, each pair's readings with their decisions,
    the answer, the lossless check."""
    if not block.several:
        lines = [f"Verdict, measured on {block.hardware}:"]
        if not block.settings:
            return [*lines, INDENT + NOTHING_TO_COMPARE, INDENT + lossless_line(())]
        return [*lines, *setting_lines(block.settings[0]), *(INDENT + e for e in block.extra)]
    lines = [f"Verdict, {len(block.settings)} settings, each from its own run(s):"]
    for s in block.settings:
        lines.append(f"{INDENT}{s.label} (measured on {s.hardware}):")
        lines += setting_lines(s, INDENT * 2)
    return [*lines, *(INDENT + e for e in block.extra)]


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
