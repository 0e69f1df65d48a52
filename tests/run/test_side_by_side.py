"""Issue #55 on the reference backend, with real processes: two methods side by side on disjoint cores
(``--engine-cpus ar=0,dflash=1``), each load's points started together, the pairing recorded on every row, the
interference probe written to the manifest; and the methods in turn on a shared device, request by request."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.load.waves import Lane, waves

SUITE = """
name = "side"
version = 1
backend = "reference"
methods = ["ar", "dflash"]
model = "embedded"
concurrency = [1, 2]
num_prompts = 4
requests_per_stream = 2
warmup_requests = 1
max_tokens = 24
temperature = 0.0
timeout_s = 120
[drafts]
dflash = "embedded"
[[workloads]]
name = "synthetic"
"""


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_two_methods_side_by_side_on_disjoint_cores_start_together_and_record_their_pairing(tmp_path):
    suite = tmp_path / "side.toml"
    suite.write_text(SUITE)
    result = CliRunner().invoke(app, ["sweep", "--suite", str(suite), "-o", str(tmp_path / "out"), "--no-report",
                                      "--engine-cpus", "ar=0,dflash=1", "--interleave", "side"])  # fmt: skip
    assert result.exit_code == 0, result.output
    (run,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    manifest = json.loads((run / "manifest.json").read_text())
    placement = manifest["placement"]
    assert placement["mode"] == "side"  # --interleave side: kept side by side whatever the probe read
    assert [(s["name"], s["cpus"]) for s in placement["servers"]] == [("ar", [0]), ("dflash", [1])]
    assert manifest["cpus"]["servers"] == {"ar": [0], "dflash": [1]}
    assert "client shares CPU" in placement["notes"][0]  # on 2 cores the client shares an engine's core

    probe = manifest["interference"]  # one method's point alone, then with the other server busy
    assert probe["server"] == "ar" and probe["beside"] == ["dflash"] and probe["threshold"] == 0.10
    assert probe["alone_tok_per_s_user"] > 0 and probe["busy_tok_per_s_user"] > 0
    assert probe["slowdown"] == pytest.approx(1 - probe["busy_tok_per_s_user"] / probe["alone_tok_per_s_user"], abs=1e-3)
    assert ("interference: ar ran" in result.output) and (probe["flagged"] == (probe["slowdown"] > 0.10))

    rows = [r for r in _rows(run / "points.jsonl") if r["category"] == "all"]
    assert {r["status"] for r in rows} == {"ok"} and len(rows) == 4
    requests = [r for r in _rows(run / "requests.jsonl") if not r["warmup"]]
    for c in (1, 2):
        pair = {r["method"]: r for r in rows if r["concurrency"] == c}
        ar, dflash = pair["ar"]["extra"]["pairing"], pair["dflash"]["extra"]["pairing"]
        assert ar["mode"] == dflash["mode"] == "side"
        assert ar["with"] == [pair["dflash"]["point_id"]] and dflash["with"] == [pair["ar"]["point_id"]]
        assert (ar["server"], dflash["server"]) == ("ar", "dflash")
        # started together: both loads went off at the barrier, within a fraction of a request of each other
        assert abs(ar["load_started_ns"] - dflash["load_started_ns"]) < 0.2e9
        first = {m: min(q["sent_ns"] for q in requests if q["point_id"] == pair[m]["point_id"]) for m in pair}
        assert abs(first["ar"] - first["dflash"]) < 0.5e9
        # and ran at once: each point's requests overlap the other's in time
        span = {m: (first[m], max(q["last_token_ns"] for q in requests if q["point_id"] == pair[m]["point_id"]))
                for m in pair}  # fmt: skip
        assert span["ar"][0] < span["dflash"][1] and span["dflash"][0] < span["ar"][1]
    readings = _rows(run / "probes.jsonl")  # one speed-probe reading before each load's points, naming both
    assert any(r["at"] == f"before {pair['ar']['point_id']} & {pair['dflash']['point_id']}" for r in readings)


def test_in_turn_a_wave_goes_to_each_method_in_an_order_rotated_wave_by_wave():
    def lane(name: str, n: int) -> Lane:
        return Lane(name, [object()] * n, None, None)  # type: ignore[list-item,arg-type]

    assert waves([lane("ar", 3), lane("dflash", 3)], 1) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]
    # c=2: waves of two requests; a lane that has sent all its requests drops out
    assert waves([lane("ar", 4), lane("dflash", 2)], 2) == [(0, 0), (0, 1), (1, 0)]


def test_a_servers_telemetry_and_per_gpu_figures_come_from_its_own_gpus():
    """Side by side on a node, a point's NVML window samples its server's GPUs only (its energy per token), and its
    per-GPU figures count them (GPU-seconds per million tokens): not the neighbours' on the same node."""
    import time
    from types import SimpleNamespace

    from test_telemetry import FakeNvml

    from dflashbench.run.point import ServerTarget, point_sampler

    ctx = SimpleNamespace(suite=SimpleNamespace(telemetry_interval_s=0.02))
    target = ServerTarget(backend=None, base_url="", lg=None, name="dflash#2", gpus=(2, 3))
    sampler = point_sampler(ctx, target)(nvml=FakeNvml(powers_w=(100.0, 200.0, 400.0, 800.0)))
    sampler.start()
    time.sleep(0.1)
    window = sampler.stop()
    assert {s["gpu"] for s in window.samples} == {2, 3} and window.num_gpus == 2
    assert window.mean_power_w == pytest.approx(1200.0, rel=0.05)  # GPUs 2 and 3 only: 400 + 800 W


# --- issue #65: a rate or trace point keeps its clock, never sent in turns ------------------------------------


def _dry(*args: str):
    return CliRunner().invoke(app, ["sweep", "--dry-run", *args], catch_exceptions=False)


def test_a_trace_suite_is_placed_point_by_point_not_in_turn():
    """``sweep --suite trace-demo --dry-run`` planned turns at 812e339 (a replay then sent each request after the
    last one ended); now its methods go one after another, the speed probe read before each, and it says why."""
    out = _dry("--suite", "trace-demo").output
    placement = next(line for line in out.splitlines() if line.startswith("placement:"))
    assert placement.startswith("placement: point (rate and trace points keep their arrival schedule"), placement
    assert "in turn" not in out.replace("(in turn, each request would wait for the one before)", "")


def test_turns_with_a_rate_or_a_trace_is_refused_naming_point_and_side():
    for load in (["--suite", "trace-demo"], ["--request-rate", "2"]):
        result = _dry(*load, "--interleave", "turns")
        assert result.exit_code == 2, result.output
        assert "--interleave turns" in result.output and "--interleave point" in result.output
        assert "--interleave side" in result.output and "follow the server's pace" in result.output


def test_closed_loop_points_stay_in_turn_beside_rate_points_that_go_one_after_another():
    from dflashbench.plan.placement import CLOCK_WHY, place_cpu, plan_placement
    from dflashbench.types import Method

    methods = [Method.AR, Method.DFLASH]
    mixed = plan_placement(methods, "auto", launches=True, on_gpu=False, tp=1, closed_loop=True, open_loop=True)
    assert mixed.mode == "turns" and mixed.open_loop_mode == "point" and CLOCK_WHY in mixed.notes
    assert mixed.record()["open_loop_mode"] == "point"
    only = plan_placement(methods, "auto", launches=True, on_gpu=False, tp=1, closed_loop=False, open_loop=True)
    assert only.mode == "point" and only.why == CLOCK_WHY
    side = place_cpu(methods, "auto", {Method.AR: (0,), Method.DFLASH: (1,)})  # each method its own cores
    assert side.mode == side.open_loop_mode == "side"  # side by side keeps the clock: each on its own resources
    assert _dry("--request-rate", "2").output.count(f"note: {CLOCK_WHY}") == 1


def test_a_rate_or_trace_load_is_never_sent_in_turns():
    from types import SimpleNamespace

    from dflashbench.run import turns

    rate = SimpleNamespace(closed_loop=False, method=None, point_id="x:r2.0")
    with pytest.raises(ValueError, match="never sent in turns"):
        turns.run_cell(None, None, [rate], {}, print)  # type: ignore[arg-type]
    assert turns.pairing_of("point", [rate], rate) == {"mode": "point", "with": [], "drift": turns.POINT_DRIFT}
