"""The README a newcomer reads in five minutes (issue #52), and docs/ that hold the rest.

- README.md has at most 1,500 words (as ``wc -w`` counts them: runs of non-blank characters), code included;
- no prose line of README.md or docs/*.md is over 120 characters (fenced code blocks and table rows are exempt:
  a command or a table row is not wrapped);
- every relative link and ``#anchor`` in README.md and every page under docs/ resolves (GitHub's heading anchors);
- every docs/*.md page, and every measurement's README, is reachable from README.md by following links;
- every relative link of an HTML page kept under docs/ (a measurement's ``history.html``) resolves.

Each rule is shown failing on a small tree of its own, so none is a check that cannot fail.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS = 1500
MAX_LINE = 120
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, ``_``, ``-`` and spaces
    kept), spaces turned to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link in a heading anchors by its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a Markdown page; a repeated heading gets ``-1``, ``-2`` as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = anchor(m.group(1))
            out.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return out


def links(text: str) -> list[tuple[int, str]]:
    """``(line number, target)`` of every inline link and image outside code (blocks and `spans`)."""
    out = []
    for n, line in prose_lines(text):
        for m in LINK.finditer(re.sub(r"`[^`]*`", lambda c: " " * len(c.group()), line)):
            out.append((n, m.group(1)))
    return out


def broken_links(page: Path, root: Path) -> list[str]:
    """Each relative link of ``page`` whose file, folder or ``#anchor`` is not there, as ``page:line: target``."""
    problems = []
    text = page.read_text()
    for n, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:: outside the repository
            continue
        path_part, _, fragment = target.partition("#")
        where = (page.parent / unquote(path_part)).resolve() if path_part else page
        said = f"{page.relative_to(root)}:{n}: {target}"
        if not where.exists():
            problems.append(f"{said}: no such file or folder")
        elif fragment and (where.is_dir() or where.suffix != ".md"):
            problems.append(f"{said}: an anchor into something that is not a Markdown page")
        elif fragment and fragment not in anchors(where.read_text()):
            problems.append(f"{said}: no heading with the anchor #{fragment} in {where.name}")
        elif where != page and root not in where.parents:
            problems.append(f"{said}: outside the repository")
    return problems


def long_lines(page: Path, root: Path) -> list[str]:
    return [f"{page.relative_to(root)}:{n}: {len(line)} characters" for n, line in prose_lines(page.read_text())
            if len(line) > MAX_LINE and not line.lstrip().startswith("|")]  # fmt: skip


def reachable(start: Path) -> set[Path]:
    """The Markdown pages reached from ``start`` by following relative links (a link to a folder reaches its
    README.md)."""
    seen, todo = set(), [start.resolve()]
    while todo:
        page = todo.pop()
        if page in seen or not page.is_file():
            continue
        seen.add(page)
        for _, target in links(page.read_text()):
            path_part = target.partition("#")[0]
            if not path_part or re.match(r"^[a-z][a-z0-9+.-]*:", path_part, re.I):
                continue
            where = (page.parent / unquote(path_part)).resolve()
            where = where / "README.md" if where.is_dir() else where
            if where.suffix == ".md":
                todo.append(where)
    return seen


def pages(root: Path) -> list[Path]:
    """The pages every rule covers: README.md and every Markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def must_reach(root: Path) -> list[Path]:
    """The pages a reader must be able to reach: each docs/*.md, and each measurement's README (its raw outputs
    beside it are records, not pages)."""
    return [*sorted((root / "docs").glob("*.md")), *sorted((root / "docs" / "measurements").glob("*/README.md"))]


def orphans(root: Path) -> list[str]:
    found = reachable(root / "README.md")
    return [str(p.relative_to(root)) for p in must_reach(root) if p.resolve() not in found]


def wrapped(root: Path) -> list[Path]:
    """The pages held to 120 characters: README.md and docs/*.md (a measurement's pages are records as written)."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


HREF = re.compile(r'\b(?:href|src)="([^"]+)"')


def html_broken_links(root: Path) -> list[str]:
    """Relative links of the HTML pages kept under docs/ (a measurement's ``history.html``) that lead nowhere in
    the tree: a committed page links to committed files, not to a runs folder only its maker had."""
    out = []
    for page in sorted((root / "docs").rglob("*.html")):
        for target in HREF.findall(page.read_text(encoding="utf-8")):
            path_part = target.partition("#")[0]
            if not path_part or re.match(r"^[a-z][a-z0-9+.-]*:", path_part, re.I):
                continue
            where = (page.parent / unquote(path_part)).resolve()
            if not where.is_relative_to((root / "docs").resolve()):  # e.g. a git-ignored runs/ folder of the tree
                out.append(f"{page.relative_to(root)}: {target}: outside docs/, not kept with the page")
            elif not where.exists():
                out.append(f"{page.relative_to(root)}: {target}: no such file or folder")
    return out


FIX = "see tests/test_docs.py's docstring for the rules"


def test_the_readme_is_read_in_five_minutes():
    words = len((ROOT / "README.md").read_text().split())
    assert words <= MAX_WORDS, (f"README.md has {words} words (wc -w), over {MAX_WORDS}: move detail to a page "
                                "under docs/ and link it from README's 'Where to read more'")  # fmt: skip


def test_no_prose_line_is_over_120_characters():
    found = [p for page in wrapped(ROOT) for p in long_lines(page, ROOT)]
    assert not found, f"lines over {MAX_LINE} characters (wrap them; {FIX}):\n" + "\n".join(found)


def test_every_link_and_anchor_resolves():
    found = [p for page in pages(ROOT) for p in broken_links(page, ROOT)]
    assert not found, "broken links:\n" + "\n".join(found)


def test_committed_html_pages_link_to_committed_files():
    found = html_broken_links(ROOT)
    assert not found, ("HTML pages under docs/ whose links lead nowhere (keep what they link to beside them, or "
                       "write them with links to what is kept):\n" + "\n".join(found[:20]))  # fmt: skip


def test_no_docs_page_is_orphaned():
    found = orphans(ROOT)
    assert not found, ("pages no link from README.md leads to (link each from README's 'Where to read more', "
                       "or a measurement from docs/measurements/README.md):\n" + "\n".join(found))  # fmt: skip


def test_the_readme_starts_with_its_two_commands():
    """The two commands a newcomer runs first, byte for byte (nox -s e2e runs the first; CI, .ci/run, the second)."""
    text = (ROOT / "README.md").read_text()
    assert text.startswith(
        "# dflashbench\n\n```bash\n"
        "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e . && .venv/bin/dflashbench sweep\n"
        "python3 -m pip install nox && python3 -m nox\n```\n"
    )


# --- each rule fails where it should ------------------------------------------------------------------------------


@pytest.mark.parametrize(("heading", "expected"), [
    ("What a run gives", "what-a-run-gives"),
    ("`dflashbench sweep`: every option in detail", "dflashbench-sweep-every-option-in-detail"),
    ("The verdict's answer", "the-verdicts-answer"),
    ("The noise rule (one rule: the verdict, the gate and the stopping rule)",
     "the-noise-rule-one-rule-the-verdict-the-gate-and-the-stopping-rule"),
    ("Acceptance: τ", "acceptance-τ"),
    ("The reference decoder: `dflashbench/reference/`", "the-reference-decoder-dflashbenchreference"),
    ("plan/: what to run", "plan-what-to-run"),
])  # fmt: skip
def test_anchors_are_githubs(heading, expected):
    assert anchor(heading) == expected


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_broken_link_a_missing_anchor_and_an_orphan_are_each_found(tmp_path):
    root = _tree(tmp_path, {
        "README.md": "# T\n\n[a](docs/a.md#there) [b](docs/b.md#nowhere) [c](docs/gone.md) [d](#t)\n"
                     "```\n[in code](docs/none.md)\n```\n`[in a span](docs/none.md)` [web](https://x.org/y)\n",
        "docs/a.md": "# A\n\n## There\n\n[back](../README.md#t)\n",
        "docs/b.md": "# B\n",
        "docs/lost.md": "# Lost\n",
        "docs/measurements/README.md": "# M\n",
        "docs/measurements/2026-01-01-x/README.md": "# X\n",
    })  # fmt: skip
    found = [p for page in pages(root) for p in broken_links(page, root)]
    assert found == ["README.md:3: docs/b.md#nowhere: no heading with the anchor #nowhere in b.md",
                     "README.md:3: docs/gone.md: no such file or folder"]  # fmt: skip
    assert orphans(root) == ["docs/lost.md", "docs/measurements/2026-01-01-x/README.md"]
    (root / "README.md").write_text("# T\n\n[m](docs/measurements/) [l](docs/lost.md)\n")
    (root / "docs/measurements/README.md").write_text("# M\n\n[x](2026-01-01-x/README.md)\n")
    assert orphans(root) == ["docs/a.md", "docs/b.md"]  # a folder's link reaches its README, and on from there
    (root / "docs/measurements/2026-01-01-x/runs").mkdir()
    (root / "docs/measurements/2026-01-01-x/runs/r1.json").write_text("{}")
    (root / "docs/measurements/2026-01-01-x/h.html").write_text(
        '<a href="runs/r1.json">1</a> <a href="../../../runs/h3/u01">2</a> <a href="#top">3</a> '
        '<img src="data:image/png;base64,AA"> <a href="https://x.org/y">4</a>')
    (root / "runs/h3/u01").mkdir(parents=True)  # there in its maker's tree, not kept with the page
    assert html_broken_links(root) == ["docs/measurements/2026-01-01-x/h.html: ../../../runs/h3/u01: outside docs/, "
                                       "not kept with the page"]  # fmt: skip
    (root / "docs/measurements/2026-01-01-x/runs/r1.json").unlink()
    assert len(html_broken_links(root)) == 2


def test_a_long_prose_line_is_found_and_code_and_tables_are_not(tmp_path):
    long = "x" * (MAX_LINE + 1)
    root = _tree(tmp_path, {"README.md": f"# T\n\n```\n{long}\n```\n\n| {long} |\n\n{long}\n"})
    assert long_lines(root / "README.md", root) == [f"README.md:9: {MAX_LINE + 1} characters"]
