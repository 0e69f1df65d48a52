"""The committed example reports are what today's code makes of the committed runs (reports/examples.toml).

A report that lags the code misleads whoever opens it first; `nox -s examples` writes them again."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from dflashbench.errors import UserError
from dflashbench.report import snapshot, write_report

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "reports" / "examples.toml").read_text())
EXAMPLES = CONFIG["example"]
CASES = [(e["run"], report) for e in EXAMPLES for report in e["reports"]]
FIX = "run `nox -s examples` and commit reports/"
README = CONFIG["readme"]  # the README's picture of a run: its verdict block and Pareto PNG (tools/readme_example.py)
README_FIX = ("run `python tools/readme_example.py` (or `nox -s examples`, which also runs it) and commit "
              f"{README['readme']} and {README['pareto_png']}")  # fmt: skip


def comparable(text: str) -> str:
    """A report's text without its figures' bytes: a PNG depends on the fonts and the matplotlib build of the
    machine that drew it; what a figure shows is checked where it is drawn (test_figures)."""
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,…", text)


def committed_reports(root: Path) -> set[str]:
    """The reports the repository holds: what git tracks under reports/. A user's own runs write their reports
    there too (the README's first command does), and .gitignore keeps them out of the repository, so they are
    not examples. Outside a git checkout (an unpacked archive) the examples are the files named as .gitignore lets
    them be committed: reports/example*.html and .md."""
    if shutil.which("git") and (root / ".git").exists():
        tracked = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--", "reports"],
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
        return {p for p in tracked.split("\0") if p and Path(p).suffix in (".html", ".md")}
    return {f"reports/{p.name}" for p in (root / "reports").glob("example*") if p.suffix in (".html", ".md")}


def test_every_committed_report_and_run_is_listed():
    listed = {r for _, r in CASES}
    committed = committed_reports(ROOT)
    assert committed == listed, f"reports/ and reports/examples.toml disagree: {sorted(committed ^ listed)}"
    for run, _ in CASES:
        assert (ROOT / run / "points.jsonl").is_file(), run


@pytest.mark.parametrize(("run", "report"), CASES, ids=[r for _, r in CASES])
def test_a_committed_report_is_what_the_code_makes_of_its_run(run, report, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the run is named relative to the project, as the committed report names it
    fresh = write_report([Path(run)], tmp_path / Path(report).name).read_text()
    committed = (ROOT / report).read_text()
    assert comparable(fresh) == comparable(committed), f"{report} differs from what the code makes of {run}: {FIX}"


@pytest.mark.skipif(not shutil.which("git"), reason="needs git")
def test_a_users_own_report_in_reports_is_not_a_committed_example(tmp_path):
    """The README's first command writes reports/demo-<run-id>.html into the checkout; the second (the tests)
    must still pass: only what the repository tracks is an example, and outside git only example* names are."""
    (tmp_path / "reports").mkdir()
    for name in ("example.html", "example.md", "demo-20261201-000000-abcd.html", "demo-x.md"):
        (tmp_path / "reports" / name).write_text("x")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "reports/example.html", "reports/example.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "examples"], check=True)
    assert committed_reports(tmp_path) == {"reports/example.html", "reports/example.md"}
    shutil.rmtree(tmp_path / ".git")  # an unpacked archive
    assert committed_reports(tmp_path) == {"reports/example.html", "reports/example.md"}


def test_a_trace_only_report_names_its_points_by_their_trace_not_c0():
    """A run that only replayed a trace has no closed-loop setting: its verdict says what the trace showed, not
    "No setting has AR and a speculative method", and its notes name a trace point by its trace and rate."""
    text = (ROOT / "reports/example-trace.md").read_text()
    assert "No setting has AR" not in text and "nothing to compare" not in text
    assert "**Serve DFlash on azure-code, first 1 min at 1×, 2× (" in text and " c=0" not in text  # issue #65
    assert "DFlash trace azure-code" in text


def test_the_readmes_verdict_is_todays_rendering_of_its_run(monkeypatch):
    """README.md shows the verdict as a terminal 100 columns wide prints it for the run reports/examples.toml's
    [readme] names; a change to the verdict's wording must show there too (issue #52)."""
    monkeypatch.chdir(ROOT)
    shown = snapshot.read_block((ROOT / README["readme"]).read_text(), "verdict")
    assert shown is not None, f"{README['readme']} has no <!-- verdict --> block: {README_FIX}"
    fresh = "\n".join(snapshot.terminal_lines([README["run"]], width=snapshot.README_WIDTH)) + "\n"
    assert shown == fresh, f"{README['readme']}'s verdict is not today's rendering of {README['run']}: {README_FIX}"
    assert shown.startswith("Serve ") and max(map(len, shown.splitlines())) <= snapshot.README_WIDTH
    assert len(shown.splitlines()) <= 12  # issue #53: the verdict in a dozen lines, the answer first


def test_the_readmes_pareto_png_records_the_run_it_came_from():
    """The PNG's text names the run and the digest of its points.jsonl: a figure of another run, or of the same run
    before its points changed, fails. Its pixels depend on the fonts of the machine that drew it, so they are
    not compared (as for the reports' figures above)."""
    png = ROOT / README["pareto_png"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG: {README_FIX}"
    text = snapshot.png_text(png)
    assert text.get(snapshot.SOURCE_KEY) == README["run"], f"{png} was drawn from {text.get('Source')}: {README_FIX}"
    assert text.get(snapshot.POINTS_KEY) == snapshot.points_digest(ROOT / README["run"]), f"{png}: {README_FIX}"
    assert text.get("Title", "").startswith("Pareto frontier")
    readme = (ROOT / README["readme"]).read_text()
    assert f"]({README['pareto_png']})" in readme, f"{README['readme']} does not show {README['pareto_png']}"


def test_the_readme_tool_writes_the_block_and_a_png_that_names_its_run(tmp_path):
    """What tools/readme_example.py calls: a block is replaced in place (the text around it kept), and the PNG
    written carries the run's name and digest."""
    page = "intro\n<!-- verdict -->\n```text\nold\n```\n<!-- /verdict -->\nafter\n"
    assert snapshot.with_block(page, "verdict", "new\nlines") == page.replace("old", "new\nlines")
    with pytest.raises(UserError, match="no block <!-- verdict -->"):
        snapshot.with_block("no markers", "verdict", "x")
    run = ROOT / README["run"]
    out = snapshot.pareto_png(run, tmp_path / "figure.png")
    text = snapshot.png_text(out)
    assert text[snapshot.SOURCE_KEY] == str(run) and text[snapshot.POINTS_KEY] == snapshot.points_digest(run)
