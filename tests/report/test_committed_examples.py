"""The committed example reports are what today's code makes of the committed runs (reports/examples.toml).

A report that lags the code misleads whoever opens it first; `nox -s examples` writes them again."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from dflashbench.report import write_report

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = tomllib.loads((ROOT / "reports" / "examples.toml").read_text())["example"]
CASES = [(e["run"], report) for e in EXAMPLES for report in e["reports"]]
FIX = "run `nox -s examples` and commit reports/"


def comparable(text: str) -> str:
    """A report's text without its figures' bytes: a PNG depends on the fonts and the matplotlib build of the
    machine that drew it; what a figure shows is checked where it is drawn (test_figures)."""
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,…", text)


def test_every_committed_report_and_run_is_listed():
    listed = {r for _, r in CASES}
    committed = {f"reports/{p.name}" for p in (ROOT / "reports").iterdir() if p.suffix in (".html", ".md")}
    assert committed == listed, f"reports/ and reports/examples.toml disagree: {sorted(committed ^ listed)}"
    for run, _ in CASES:
        assert (ROOT / run / "points.jsonl").is_file(), run


@pytest.mark.parametrize(("run", "report"), CASES, ids=[r for _, r in CASES])
def test_a_committed_report_is_what_the_code_makes_of_its_run(run, report, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the run is named relative to the project, as the committed report names it
    fresh = write_report([Path(run)], tmp_path / Path(report).name).read_text()
    committed = (ROOT / report).read_text()
    assert comparable(fresh) == comparable(committed), f"{report} differs from what the code makes of {run}: {FIX}"
