"""Issue #32 item 4: what weakens a run is said before its verdict (report, compare, the end of sweep), and
``report --strict`` exits 1 on it."""

import json
import shutil

from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.report import load_model, write_report
from dflashbench.report.trust import trust_flags
from dflashbench.run.store import load_run

from .test_example import EXAMPLE_RUN, ROOT, _copy

GPU_RUN = next((ROOT / "results" / "examples").glob("gpu-embedded-*"))


def test_the_old_example_is_flagged_for_what_it_never_recorded_and_strict_fails(tmp_path):
    """Issue #40 item 10: a run made before the client-load record, whose CPU engine and client shared cores."""
    assert trust_flags(load_run(EXAMPLE_RUN)) == [
        "no client-load record (a run from before dflashbench recorded the client's CPU share and event-loop lag): "
        "whether the client's own timing was noisy was never checked",
        "the client and the engine shared the same cores: the engine computed on the CPU and no split was recorded "
        "(sweep --engine-cpus), so the client's timestamps carry the engine's load",
    ]
    result = CliRunner().invoke(app, ["report", str(EXAMPLE_RUN), "-o", str(tmp_path / "r.md"), "--strict"])
    assert result.exit_code == 1, result.output
    md = (tmp_path / "r.md").read_text()
    assert md.index("Read with care") < md.index("### Verdict")


def test_timing_noise_is_a_flag_above_the_verdict_and_shared_cores_are_named(tmp_path):
    """The vLLM CPU example: engine on CPU 0, client on CPU 1, a lagging event loop at four points. The timing
    noise that covers the points the verdict reads is a flag before it, not a note below it; the same run with
    its client put on the engine's core is flagged for sharing it."""
    vllm = ROOT / "results" / "examples" / "demo-20261125-024540-6b40"
    (flag,) = trust_flags(load_run(vllm))
    assert flag.startswith("timing noise at 4 point(s) (DFlash synthetic c=1, DFlash synthetic c=2, EAGLE-3 "
                           "synthetic c=1, EAGLE-3 synthetic c=2): the client's event loop lagged 4.3 ms")  # fmt: skip
    md = write_report([vllm], tmp_path / "v.md").read_text()
    assert md.index("timing noise at 4 point(s)") < md.index("### Verdict") and "_note: Timing noise" not in md
    shared = tmp_path / "shared"
    shutil.copytree(vllm, shared)
    manifest = json.loads((shared / "manifest.json").read_text())
    manifest["cpus"]["client"] = [0]
    (shared / "manifest.json").write_text(json.dumps(manifest))
    assert any(f.startswith("the client and the engine shared the same cores (CPUs [0])")
               for f in trust_flags(load_run(shared)))  # fmt: skip


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


def test_the_gpu_example_is_flagged_resumed_dirty_idle_and_without_text():
    flags = trust_flags(load_run(GPU_RUN))
    # which points a later sitting measured, when, and what that does to the readings across them
    assert flags[0].startswith("resumed 1 time: EAGLE-3 c=4, EAGLE-3 c=16 in a sitting at 2026-11-23T09:45:07+00:00, "
                               "12 minutes after the run started. A reading that compares")  # fmt: skip
    assert flags[1:3] == [
        "made from a tree with uncommitted changes (git 747d8693d0bb+dirty): the code it measured is not in any commit",
        "no output text stored (--no-store-text): lossless is judged by token counts, not proof",
    ]
    # a GPU that mostly waited: energy per token is idle power / throughput there
    assert flags[3].startswith("the GPU idled at 9 points (AR c=1, ") and "12–22% mean utilisation at 120–122 W" in flags[3]
    assert flags[4].startswith("no client-load record")
    # the verdict marks the readings that cross sittings (EAGLE-3 at c=4 and c=16 against AR of the first sitting)
    lines = load_model([GPU_RUN], with_figures=False).verdict.lines
    eagle = next(ln for ln in lines if ln.startswith("EAGLE-3 vs AR"))
    assert "clearly faster at c=4 (crosses sittings)" in eagle and "at c=16 (crosses sittings)" in eagle
    assert "(crosses sittings)" not in eagle.split(" · ")[0]  # c=1: both in the first sitting
    dflash = next(ln for ln in lines if ln.startswith("DFlash vs AR"))
    assert "crosses sittings" not in dflash
    result = CliRunner().invoke(app, ["compare", str(GPU_RUN), str(EXAMPLE_RUN)])
    # after the verdict line and the setting warning, at the top
    assert result.output.splitlines()[3].startswith("trust: BASE: resumed 1 time")
