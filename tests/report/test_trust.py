"""Issue #32 item 4: what weakens a run is said before its verdict (report, compare, the end of sweep), and
``report --strict`` exits 1 on it."""

import json

from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.report.trust import trust_flags
from dflashbench.run.store import load_run

from .test_example import EXAMPLE_RUN, ROOT, _copy

GPU_RUN = next((ROOT / "results" / "examples").glob("gpu-embedded-*"))


def test_the_shipped_example_raises_no_flag_and_strict_passes(tmp_path):
    assert trust_flags(load_run(EXAMPLE_RUN)) == []
    result = CliRunner().invoke(app, ["report", str(EXAMPLE_RUN), "-o", str(tmp_path / "r.md"), "--strict"])
    assert result.exit_code == 0, result.output
    assert "Read with care" not in (tmp_path / "r.md").read_text()


def test_a_run_cut_to_a_third_says_so_before_the_verdict_and_strict_fails(tmp_path):
    cut = _copy(tmp_path, "cut", limit=12)
    manifest = json.loads((cut / "manifest.json").read_text())
    (cut / "manifest.json").write_text(json.dumps({**manifest, "status": "interrupted"}))
    with open(cut / "points.jsonl", "a") as fh:
        fh.write('{"point_id": "reference:ar:synth')  # a crash mid-write
    flags = trust_flags(load_run(cut))
    assert flags[0] == "not complete: the manifest says 'interrupted'"
    assert flags[1].startswith("6 of 9 planned points are not in points.jsonl")
    assert "ends in a line cut short" in flags[2]
    result = CliRunner().invoke(app, ["report", str(cut), "-o", str(tmp_path / "r.md"), "--strict"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    verdict = next(i for i, ln in enumerate(lines) if ln.startswith("Verdict"))
    assert any(ln.startswith("trust: 6 of 9 planned points") for ln in lines[:verdict])  # before the verdict
    md = (tmp_path / "r.md").read_text()
    assert md.index("Read with care") < md.index("### Verdict") and "6 of 9 planned points" in md
    assert CliRunner().invoke(app, ["report", str(cut), "-o", str(tmp_path / "plain.md")]).exit_code == 0


def test_the_gpu_example_is_flagged_resumed_dirty_and_without_text():
    flags = trust_flags(load_run(GPU_RUN))
    assert flags == [
        "resumed 1 time: its points were measured in separate sittings",
        "made from a tree with uncommitted changes (git 747d8693d0bb+dirty): the code it measured is not in any commit",
        "no output text stored (--no-store-text): lossless is judged by token counts, not proof",
    ]
    result = CliRunner().invoke(app, ["compare", str(GPU_RUN), str(EXAMPLE_RUN)])
    assert "trust: BASE: resumed 1 time" in result.output.splitlines()[1]  # after the setting warning, at the top
