"""Issue #56, phase 2: the report, the verdict and compare with any set of methods. Each method is read against AR,
DFlash against every other method; compare gates each method over AR and DFlash over each other one (2N - 1 pairs a
load for N methods besides AR); the verdict keeps to its twelve lines with five methods. On the committed four-method
run (the embedded default with n-gram) and on it with a fifth method made of n-gram's points."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.gate import compare as cmp
from dflashbench.gate.speedups import gated_pairs
from dflashbench.measure.readings import pairs_of
from dflashbench.report import load_model, write_report

ROOT = Path(__file__).resolve().parents[2]
FOUR = ROOT / "results" / "examples" / "demo-20261127-053618-7ae2"  # ar, eagle3, dflash, ngram


def test_pairs_read_and_gated_with_n_methods():
    assert pairs_of(["ar", "eagle3", "dflash"]) == [("eagle3", "ar"), ("dflash", "ar"), ("dflash", "eagle3")]
    five = ["ar", "eagle3", "dflash", "mtp", "ngram", "suffix"]
    read = pairs_of(five)
    assert read[:5] == [(m, "ar") for m in ("eagle3", "dflash", "mtp", "ngram", "suffix")]
    assert [p for p in read if "dflash" in p and "ar" not in p] == [("dflash", "eagle3"), ("dflash", "mtp"),
                                                                     ("dflash", "ngram"), ("dflash", "suffix")]
    assert len(read) == 5 + 10  # every pair is read (the readings and the answer) ...
    gated = gated_pairs(five)  # ... and 2N - 1 are gated: each over AR, DFlash over each other one
    assert gated == read[:5] + [("dflash", m) for m in ("eagle3", "mtp", "ngram", "suffix")]
    assert gated_pairs(["ar", "dflash2", "ngram"]) == [("dflash2", "ar"), ("ngram", "ar"), ("dflash2", "ngram")]
    assert gated_pairs(["ar", "ngram"]) == [("ngram", "ar")]


def test_compare_gates_dflash_against_each_method_in_one_holm_family():
    result = cmp.compare_runs(FOUR, FOUR, cmp.effective_thresholds([]))
    gated = {row.key[1] for row in result.rows if row.metric == "speedup" and row.threshold is not None}
    assert gated == {"eagle3/ar", "dflash/ar", "ngram/ar", "dflash/eagle3", "dflash/ngram"}
    assert result.exit_code in (0, 3)  # a run against itself moves nothing (a weak pass on this noisy run)


def _with_a_fifth_method(tmp_path: Path) -> Path:
    """The four-method run with a fifth method, "suffix", whose points and requests are n-gram's (its servers'
    figures are real; only the method's name is new)."""
    run = tmp_path / FOUR.name
    shutil.copytree(FOUR, run)
    for name in ("points.jsonl", "requests.jsonl"):
        rows = [json.loads(line) for line in (run / name).read_text().splitlines()]
        extra = []
        for r in rows:
            if r.get("method") == "ngram" or ":ngram:" in str(r.get("point_id")):
                c = json.loads(json.dumps(r).replace(":ngram:", ":suffix:"))
                if "method" in c:
                    c["method"] = "suffix"
                extra.append(c)
        (run / name).write_text("".join(json.dumps(r) + "\n" for r in rows + extra))
    return run


def test_the_verdict_fits_twelve_lines_with_five_methods_answer_first(tmp_path, monkeypatch):
    run = _with_a_fifth_method(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    result = CliRunner().invoke(app, ["report", str(run), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    lines = result.output.rstrip("\n").split("report written to ", 1)[1].splitlines()[1:]
    assert 3 <= len(lines) <= 14 and lines[0].startswith("Serve ") and max(map(len, lines)) <= 100, "\n".join(lines)
    said = "\n".join(lines)
    assert "n-gram" in said and "suffix" in said  # every method is in the verdict, by its label
    md = write_report([run], tmp_path / "r5.md").read_text()
    for pair in ("n-gram vs AR", "suffix vs AR", "DFlash vs n-gram", "DFlash vs suffix", "DFlash vs EAGLE-3"):
        assert pair in md, pair
    model = load_model([run], with_figures=True)
    pareto = [f for sec in model.sections for f in sec.figures if "Pareto" in f.title or "Pareto" in f.alt]
    assert pareto and all(f.data_uri.startswith("data:image/png;base64,") for f in pareto)
    assert all(name in " ".join(f.alt for f in pareto) for name in ("n-gram", "suffix")), [f.alt for f in pareto]


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_the_four_method_report_has_its_tables_and_pareto_figure(tmp_path, fmt):
    out = write_report([FOUR], tmp_path / f"r.{fmt}").read_text()
    assert "n-gram" in out and "DFlash vs n-gram" in out
    assert ("data:image/png;base64," in out) if fmt == "html" else ("Pareto" in out)
