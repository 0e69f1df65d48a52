"""Read the Markdown report as a reader's tool would: each "### title" (or "#### title": the readings under the
verdict) table as a list of {column: cell}."""

from __future__ import annotations

import re

_SPLIT = re.compile(r"(?<!\\)\|")


def cells(line: str) -> list[str]:
    return [c.strip() for c in _SPLIT.split(line.strip().strip("|"))]


def tables(text: str) -> dict[str, list[dict[str, str]]]:
    """{table title: rows as dicts}; a table is the first "| ... |" block after its "### " or "#### " heading."""
    out: dict[str, list[dict[str, str]]] = {}
    title, header, rows = None, None, []
    for line in text.splitlines() + [""]:
        if line.startswith(("### ", "#### ")):
            title, header, rows = line.lstrip("#").strip(), None, []
        elif line.startswith("|") and title is not None:
            if header is None:
                header = cells(line)
            elif not set(line.replace("|", "").split()) <= {"---"}:
                rows.append(dict(zip(header, cells(line), strict=True)))
        elif header is not None and title is not None:
            out.setdefault(title, rows)
            title, header, rows = None, None, []
    return out


def headers(text: str) -> dict[str, list[str]]:
    """{table title: its column names}, in order."""
    out, title = {}, None
    for line in text.splitlines():
        if line.startswith(("### ", "#### ")):
            title = line.lstrip("#").strip()
        elif line.startswith("|") and title is not None and title not in out:
            out[title] = cells(line)
    return out
