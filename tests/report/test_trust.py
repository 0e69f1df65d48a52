"""Issue #32 item 4: what weakens a run is said before its verdict (report, compare, the end of sweep), and
``report --strict`` exits 1 on it."""

import json
import shutil

from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.report import load_model
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
    # said once in the verdict, short, and whole below it (issue #53: the verdict is read in half a minute)
    short = "Read with care: no client-load record; the client and the engine shared the same cores."
    assert md.index("### Verdict") < md.index(short) < md.index("| run |") < md.index("**Read with care**")
    assert md.count("whether the client's own timing was noisy was never checked") == 1


def test_timing_noise_sets_the_clients_lag_against_the_gap_between_chunks_it_times(tmp_path):
    """Issue #53: the flag compared the event loop's lag with the per-token ITL, a chunk's gap divided by its tokens,
    so it landed on the speculative points (many tokens per chunk) and spared AR at the same lag. Set against the gap
    between chunks the client timestamps, the vLLM CPU example (lag 1.8-4.3 ms, AR's gaps 3.7-6.3 ms, DFlash's
    22-65 ms) raises none; the same run with AR's c=1 loop lagging 4.3 ms raises it there, and names AR's gap."""
    vllm = ROOT / "results" / "examples" / "demo-20261125-024540-6b40"
    assert trust_flags(load_run(vllm)) == []
    lagged = tmp_path / "lagged"
    shutil.copytree(vllm, lagged)
    rows = [json.loads(ln) for ln in (lagged / "points.jsonl").read_text().splitlines()]
    for r in rows:
        if r["method"] == "ar" and r["concurrency"] == 1 and r["category"] == "all":
            r["extra"]["client"]["loop_lag_ms_p99"] = 4.3
    (lagged / "points.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (flag,) = trust_flags(load_run(lagged))
    assert flag.startswith("timing noise at 1 point(s) (AR synthetic c=1): the client's event loop lagged 4.3 ms "
                           "(p99, worst of 1 process(es)) against a gap between chunks (p50) of 3.7 ms")  # fmt: skip
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
    said = next(ln for ln in result.output.splitlines() if "Read with care:" in ln)
    assert "not complete; 6 of 9 planned points are not in points.jsonl" in said  # in the verdict, short
    md = (tmp_path / "r.md").read_text()
    assert md.index("### Verdict") < md.index("Read with care: not complete") < md.index(
        "**Read with care**") and "6 of 9 planned points" in md
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
    brackets = load_model([GPU_RUN], with_figures=False).verdict.brackets
    assert "EAGLE-3 at c=4, 16 from a later sitting (a resumed run)" in brackets and "DFlash" not in brackets
    result = CliRunner().invoke(app, ["compare", str(GPU_RUN), str(EXAMPLE_RUN)])
    # after the verdict line and the setting warning, at the top
    assert result.output.splitlines()[3].startswith("trust: BASE: resumed 1 time")


def test_a_workload_label_with_a_slash_is_not_a_missing_point():
    """The demo-lengths run's points are "reference:ar:synthetic/long-context:c1": a workload label may hold "/", and
    only a repeat's "/r<round>" suffix comes off a point id before it is matched against the planned grid."""
    run = load_run(next((ROOT / "results" / "examples").glob("demo-lengths-*")))
    assert not any("planned points" in f for f in trust_flags(run)), trust_flags(run)
