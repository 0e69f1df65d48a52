"""A pull request's comment from ``compare``'s result: read in ten seconds, accepted by GitHub at any suite size.

GitHub refuses an issue or pull request comment body over 65,536 characters ("body is too long (maximum is 65536
characters)": https://github.com/orgs/community/discussions/41331). :func:`render` stays within :data:`LIMIT`
**by construction**, counted in UTF-8 bytes (never fewer than characters, nor than UTF-16 units): every part
above the fold has a cap of its own (a field's length, a count of lines), and the rest is cut to the space left.

The order a maintainer reads it in:

1. the marker (an HTML comment: this workflow finds its own comment by it and edits it in place) and **one
   heading**, the verdict in a few words;
2. **BASE first**: its run id, commit, date, and why it is the baseline; then NEW and what was built from the
   pull request; then what differs in their builds (engine release, dflashbench commit, drafters: each a reason
   the comparison may measure the build, not the change);
3. **one line per gated speedup**, BASE → NEW, ``ok`` or ``regression`` (regressions first), at most
   :data:`MAX_SPEEDUP_LINES`; then which run-to-run term judged them (:func:`noise_line`: the project's default is
   wide, and said to be);
4. everything else inside ``<details>``: the other regressions named, equal bullets grouped into one with their
   count, the gated figures' table (regressions first), the extra Markdown given (``history``'s summary, its
   headings made bold so the comment keeps one heading), cut at a line where the space ends, with a link to where
   the rest is (the artifact).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dflashbench.gate.compare import (
    CANNOT_JUDGE,
    EXIT_CANNOT_JUDGE,
    NA,
    REGRESSION,
    SHOWN,
    Comparison,
    Row,
    format_amount,
)
from dflashbench.gate.speedups import speedup_label

LIMIT = 65_536  # GitHub's most characters in one comment body; counted here in UTF-8 bytes, a stricter bound
MAX_SPEEDUP_LINES = 120  # gated speedups listed above the fold (3 pairs x 8 loads x 5 workloads fit)
MAX_FIELD = 300  # characters of any one field above the fold (a reason, a version string, a marker)
MAX_DIFFERENCES = 12  # build differences listed above the fold
DEFAULT_MARKER = "<!-- dflashbench-comment -->"
_FOLD_SHARE = 0.5  # at most this share of the limit above the fold; the rest is the details'


@dataclass(frozen=True)
class RunInfo:
    """What the comment says of one run, read from its manifest."""

    run_id: str
    commit: str  # the code under test: the CI job's GITHUB_SHA, else the run's --label commit=, else dflashbench's
    started: str
    engine: str
    dflashbench: str
    drafters: str

    @classmethod
    def of(cls, manifest: dict) -> RunInfo:
        from dflashbench.gate.history_read import marks_of

        marks = marks_of(manifest)
        commit = marks.get("commit") or (manifest.get("labels") or {}).get("commit") or ""
        return cls(str(manifest.get("run_id") or "?"), str(commit)[:12], str(manifest.get("started_at") or "?")[:16],
                   str(marks.get("engine") or "?"), str(marks.get("dflashbench") or "?"),
                   str(marks.get("drafters") or "-"))  # fmt: skip

    @classmethod
    def read(cls, run_dir: Path) -> RunInfo:
        try:
            return cls.of(json.loads((Path(run_dir) / "manifest.json").read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return cls(Path(run_dir).name, "", "?", "?", "?", "-")


def size(text: str) -> int:
    """A body's size as bounded here: UTF-8 bytes (at least its characters and its UTF-16 units)."""
    return len(text.encode("utf-8"))


def _cap(text: str, limit: int = MAX_FIELD) -> str:
    """One line of at most ``limit`` characters (of the field, before Markdown escaping)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _esc(text: str) -> str:
    from dflashbench.report.render import md_escape

    return md_escape(text)


def _marker(marker: str) -> str:
    text = _cap(marker or DEFAULT_MARKER, 100)
    if not (text.startswith("<!--") and text.endswith("-->")) or "--" in text[4:-3]:
        from dflashbench.errors import UserError

        raise UserError(f"--comment-marker {marker!r}: give an HTML comment such as {DEFAULT_MARKER}")
    return text


def headline(comparison: Comparison) -> str:
    """The verdict in a few words: what the heading says."""
    code = comparison.exit_code
    n = len(comparison.regressions) + len(comparison.failed_in_new) + len(comparison.only_in_base)
    if code == 1:
        return f"❌ {n} regression(s)"
    if code == 2:
        return "❌ unusable input (the runs differ: --strict)"
    if comparison.cannot_judge:
        return f"⚠️ cannot judge: {len(comparison.cannot_judge)} figure(s) moved with the machine's speed"
    if comparison.weak:
        return "⚠️ weak pass" + (" (accepted)" if comparison.accept_weak else ": no regression seen, little evidence")
    return "✅ no regression"


def differences(base: RunInfo, new: RunInfo) -> list[str]:
    """What differs in the two runs' builds: a reason the comparison may measure the build, not the change."""
    out = []
    for label, b, n in (("engine", base.engine, new.engine), ("dflashbench", base.dflashbench, new.dflashbench),
                        ("drafters", base.drafters, new.drafters)):  # fmt: skip
        if b != n:
            out.append(f"{label}: BASE {b} → NEW {n}")
    return out


def _pct(share: float | None) -> str:
    return "—" if share is None else f"{share * 100:+.1f}%"


def speedup_line(row: Row) -> str:
    """``DFlash vs AR speedup at c=1 (gsm8k): 2.81 → 2.12 (-24.6%) **regression** (fails at -9%)``"""
    where = f" ({row.key[2]})" if len(row.key) > 2 and row.key[2] else ""
    values = f"{row.base:.3g} → {row.new:.3g}" if row.base is not None and row.new is not None else "—"
    verdict = "**regression**" if row.verdict == REGRESSION else \
        "cannot judge" if row.verdict == CANNOT_JUDGE else "ok"  # fmt: skip
    fails = f" (fails at -{format_amount(row.threshold, row.detectable)})" if row.detectable is not None else ""
    return _esc(f"{speedup_label(row.key)}{where}: {values} ({_pct(row.change)}) ").rstrip() + f" {verdict}{fails}"


def noise_line(comparison: Comparison) -> str:
    """Which run-to-run term the gate judged with (:attr:`Comparison.terms`, NEW's where the runs' differ), and
    where it is the project's default, that it is not this machine's and how to measure this one's: the term sets
    the smallest move a gate can fail on ("fails at"), so a reader needs it beside the verdicts."""
    from dflashbench.measure import noise_model

    term = next((t for t in reversed(comparison.terms) if t is not None), None)
    if term is None:
        return "**Noise**: no run-to-run term known for this backend: each run's own requests judged alone"
    sizes = ", ".join(f"{kind} ±{math.expm1(term.sd(kind)):.1%}" for kind in (noise_model.SPEEDUP, noise_model.ABSOLUTE)
                      if term.sd(kind) is not None)  # fmt: skip
    line = f"**Noise**: the run-to-run term {_esc(term.source)} ({sizes}, log sd a run; {_esc(_cap(term.how, 160))})"
    if term.source == noise_model.DEFAULT:
        line += (": not this machine's, and wide; `dflashbench history RUNS --noise-profile-out FILE` (or "
                 "`dflashbench calibrate`) measures this one's, `compare --noise-profile FILE` judges with it")
    return line


def grouped(items: Iterable[str]) -> list[str]:
    """Equal bullets as one, with their count (``(x30)``), in first-seen order."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return [f"{text} (×{k})" if k > 1 else text for text, k in counts.items()]


def _demote(markdown: str) -> list[str]:
    """Another tool's Markdown inside the comment: its headings made bold (the comment keeps one heading)."""
    out = []
    for line in markdown.splitlines():
        m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        out.append(f"**{m.group(1)}**" if m else line)
    return out


def _table(comparison: Comparison) -> list[str]:
    """The gated figures of category all (speedups included), regressions first, as compare lists them."""
    from dflashbench.gate.compare_output import _fmt, _fmt_change, fails_at

    rows = [r for r in comparison.rows if r.threshold is not None and len(r.key) > 3 and r.key[3] == "all"
            and r.verdict not in (SHOWN, NA)]  # fmt: skip
    rows.sort(key=lambda r: (r.verdict != REGRESSION, r.verdict != CANNOT_JUDGE))  # stable: key order within
    lines = ["| method | workload | load | metric | BASE | NEW | change | fails at | verdict |", "|" + " --- |" * 9]
    for r in rows:
        cells = (r.key[1], r.key[2], r.key[-1], r.metric, _fmt(r.base), _fmt(r.new), _fmt_change(r), fails_at(r),
                 r.verdict)  # fmt: skip
        lines.append("| " + " | ".join(_esc(str(c)) for c in cells) + " |")
    return lines


def _fit(lines: Sequence[str], room: int, cut_note: str) -> list[str]:
    """The first of ``lines`` that fit in ``room`` bytes (each with its newline), and ``cut_note`` where not all
    did (the note's own size reserved first)."""
    total = sum(size(line) + 1 for line in lines)
    if total <= room:
        return list(lines)
    room -= size(cut_note) + 1
    out, used = [], 0
    for line in lines:
        if used + size(line) + 1 > room:
            break
        out.append(line)
        used += size(line) + 1
    return out + [cut_note.format(more=len(lines) - len(out))]


def render(comparison: Comparison, base: RunInfo, new: RunInfo, *, marker: str = DEFAULT_MARKER,
           base_why: str = "", built: str = "", link: str = "", extras: Sequence[tuple[str, str]] = (),
           limit: int = LIMIT) -> str:  # fmt: skip
    """The comment (module docstring), at most ``limit`` UTF-8 bytes by construction. ``extras``: (title,
    Markdown) pairs put inside the details after compare's own (``history``'s summary)."""
    link_md = f"[the run's artifacts]({_cap(link, 500)})" if link else "the run's artifacts"
    top = [_marker(marker), f"### dflashbench: {headline(comparison)}", ""]
    top.append(f"**BASE** `{_cap(base.run_id, 80)}` · commit `{_cap(base.commit or '?', 40)}` · {_esc(_cap(base.started, 40))}"
               + (f" · {_esc(_cap(base_why))}" if base_why else " · the accepted baseline"))  # fmt: skip
    top.append(f"**NEW** `{_cap(new.run_id, 80)}` · commit `{_cap(new.commit or '?', 40)}` · {_esc(_cap(new.started, 40))}"
               + (f" · {_esc(_cap(built))}" if built else ""))  # fmt: skip
    diffs = differences(base, new)
    if diffs:
        shown = [f"> ⚠️ builds differ: {_esc(_cap(d))}" for d in diffs[:MAX_DIFFERENCES]]
        top += [""] + shown
    speedups = [r for r in comparison.rows if r.is_speedup and r.threshold is not None and r.key[3] == "all"]
    speedups.sort(key=lambda r: r.verdict != REGRESSION)  # stable: key order within
    top += ["", f"**Gated speedups** ({len(speedups)}, BASE → NEW):", ""]
    lines = [f"- {speedup_line(r)}" for r in speedups[:MAX_SPEEDUP_LINES]]
    if len(speedups) > MAX_SPEEDUP_LINES:
        lines.append(f"- … and {len(speedups) - MAX_SPEEDUP_LINES} more below")
    if not speedups:
        lines = ["- none in common (one method, or no AR)"]
    top += lines
    top += ["", noise_line(comparison)]
    failing = [r for r in comparison.regressions if not r.is_speedup]
    def whole(key: tuple) -> bool:  # a point of category all stands for its per-category rows
        return len(key) < 4 or key[3] == "all"

    missing = [f"{'/'.join(map(str, k))}: missing in NEW (with its per-category rows)"
               for k in comparison.only_in_base if whole(k)]  # fmt: skip
    missing += [f"{'/'.join(map(str, k))}: failed in NEW ({reason})" for k, reason in comparison.failed_in_new
                if whole(k)]  # fmt: skip
    if failing or missing:
        from dflashbench.gate.compare_output import regression_text

        named = [regression_text(r) for r in failing] + missing
        top += ["", f"**Other regressions** ({len(named)}):", ""]
        top += [f"- {_esc(_cap(t))}" for t in named[:10]] + ([f"- … and {len(named) - 10} more below"] if len(named) > 10 else [])
    head = "\n".join(top) + "\n"
    fold = int(limit * _FOLD_SHARE)
    if size(head) > fold:  # every part above has a cap; only an extreme number of regressions gets here
        head = "\n".join(_fit(top, fold, "- … cut here: the rest is in " + link_md)) + "\n"
    open_, close = "\n<details><summary>Everything else: notes, the gated table, the history</summary>\n\n", \
        "\n</details>\n"  # fmt: skip
    room = limit - size(head) - size(open_) - size(close) - 1
    body = _details(comparison, extras)
    details = _fit(body, room, "… {more} more line(s) cut to keep within GitHub's comment limit: see " + link_md)
    text = head + open_ + "\n".join(details) + close
    assert size(text) <= limit, (size(text), limit)  # by construction (module docstring)
    return text


def _details(comparison: Comparison, extras: Sequence[tuple[str, str]]) -> list[str]:
    from dflashbench.gate.compare_output import context_lines, gates_line, verdict_line

    out = [f"**compare**: {_esc(verdict_line(comparison))}", ""]
    notes = grouped([*context_lines(comparison), *(f"warning: {w}" for w in comparison.warnings)])
    out += [f"- {_esc(n)}" for n in notes] + ([""] if notes else [])
    out += [f"- {_esc(part)}" for part in grouped(gates_line(comparison).splitlines())] + [""]
    out += _table(comparison) + [""]
    for title, markdown in extras:
        if markdown.strip():
            out += [f"**{_esc(title)}**", ""] + _demote(markdown) + [""]
    return out


def write(path: Path, text: str) -> Path:
    from dflashbench.errors import UserError

    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write --comment {path}: {exc.strerror or exc}") from None
    return Path(path)


__all__ = ["EXIT_CANNOT_JUDGE", "LIMIT", "RunInfo", "differences", "grouped", "headline", "noise_line", "render",
           "size", "speedup_line", "write"]  # fmt: skip
