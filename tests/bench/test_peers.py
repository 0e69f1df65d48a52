"""`dflashbench bench peers`: the peers' commands, their outputs read back (fixtures are real outputs of aiperf
0.13.0 and guidellm 0.8.1 against the stand-in, trimmed to a few metrics), the paired table. The real run of both
peers is `nox -s peers`."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.bench.peers import (
    PeerRun,
    aiperf_argv,
    find_peers,
    format_table,
    guidellm_argv,
    read_aiperf,
    read_guidellm,
    rotation,
    summarize,
)
from dflashbench.cli import app
from dflashbench.errors import UserError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "peers"


def test_aiperf_export_is_read_in_ms(tmp_path):
    shutil.copy(FIXTURES / "aiperf-0.13.0-profile_export_aiperf.json", tmp_path / "profile_export_aiperf.json")
    got = read_aiperf(tmp_path)
    assert got["requests"] == 128 and got["errors"] == 0
    assert got["ttft_ms"] == pytest.approx(80.3, abs=0.1)
    assert got["itl_ms"] == pytest.approx(10.32, abs=0.01)


def test_aiperf_units_and_errors_are_honoured(tmp_path):
    data = json.loads((FIXTURES / "aiperf-0.13.0-profile_export_aiperf.json").read_text())
    data["time_to_first_token"] = {"unit": "s", "avg": 0.08}
    data["error_summary"] = [{"error_details": {"code": 500, "message": "x"}, "count": 3}]
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(data))
    got = read_aiperf(tmp_path)
    assert got["ttft_ms"] == pytest.approx(80.0) and got["errors"] == 3


def test_guidellm_output_is_read(tmp_path):
    shutil.copy(FIXTURES / "guidellm-0.8.1-guidellm.json", tmp_path / "guidellm.json")
    got = read_guidellm(tmp_path)
    assert got == {"ttft_ms": pytest.approx(56.45, abs=0.01), "itl_ms": pytest.approx(10.0, abs=0.01),
                   "requests": 128, "errors": 0}  # fmt: skip


def test_a_peer_that_wrote_nothing_is_named(tmp_path):
    with pytest.raises(RuntimeError, match="aiperf wrote no profile_export_aiperf.json"):
        read_aiperf(tmp_path)


def test_peer_commands_are_argv_lists_with_the_same_load(tmp_path):
    a = aiperf_argv("aiperf", "http://127.0.0.1:9", 64, 128, 128, "/tok", tmp_path)
    assert a[:2] == ["aiperf", "profile"]
    assert a[a.index("--concurrency") + 1] == "64" and a[a.index("--request-count") + 1] == "128"
    assert a[a.index("--output-tokens-mean") + 1] == "128" and "--streaming" in a
    g = guidellm_argv("guidellm", "http://127.0.0.1:9", 64, 128, 128, "/tok", tmp_path)
    assert g[:2] == ["guidellm", "run"]
    assert "kind=concurrent,streams=64" in g and "kind=max_requests,count=128" in g
    assert any(x.startswith("kind=synthetic_text") and "output_tokens=128" in x for x in g)


def run(tool, conc, repeat, overhead, itl_err=0.5):
    return PeerRun(tool=tool, concurrency=conc, repeat=repeat, requests=8, errors=0, server_requests=8,
                   client_ttft_ms_mean=50 + overhead, server_ttft_ms_mean=50.0, ttft_overhead_ms=overhead,
                   itl_ms_mean=10.05, itl_err_pct=itl_err, itl_err_vs_server_pct=itl_err / 2,
                   server_late_ms_mean=0.5, wall_s=1.0)  # fmt: skip


def test_ratios_are_paired_by_repeat_and_judged_against_the_goal():
    runs = [run("dflashbench", 64, 0, 10.0), run("aiperf", 64, 0, 40.0),  # 0.25
            run("dflashbench", 64, 1, 30.0), run("aiperf", 64, 1, 20.0),  # 1.5
            run("dflashbench", 64, 2, 12.0), run("aiperf", 64, 2, 30.0)]  # 0.4  # fmt: skip
    rows = {r["tool"]: r for r in summarize(runs)}
    assert rows["aiperf"]["ratio"] == {"median": 0.4, "min": 0.25, "max": 1.5}
    assert rows["dflashbench"]["ratio"] is None and rows["dflashbench"]["ttft_overhead_ms"]["median"] == 12.0
    assert rows["aiperf"]["goal"] == 0.5
    assert "<= 0.5: met" in format_table(list(rows.values()))
    worse = summarize([run("dflashbench", 256, 0, 30.0), run("aiperf", 256, 0, 40.0, itl_err=3.0)])
    text = format_table(worse)
    assert "<= 0.25: NOT met" in text and "(goal <= 1: met)" in text
    # the ITL goal is the client's own part: against the server's own mean ITL, not the pace it was told to keep
    late_server = format_table(summarize([run("dflashbench", 64, 0, 5.0, itl_err=1.6)]))  # 0.8% against the server's
    assert "0.80 [0.80-0.80] (goal <= 1: met)" in late_server


def test_rotation_puts_each_tool_first_in_turn():
    tools = ["dflashbench", "aiperf", "guidellm"]
    assert [rotation(tools, r)[0] for r in range(4)] == ["dflashbench", "aiperf", "guidellm", "dflashbench"]


def test_missing_peers_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="none of aiperf, guidellm found on PATH"):
        find_peers({})
    with pytest.raises(UserError, match="--aiperf /nowhere/aiperf: no such file"):
        find_peers({"aiperf": "/nowhere/aiperf"})
    exe = tmp_path / "guidellm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert find_peers({}) == {"guidellm": str(exe)}  # aiperf not installed: left out


def test_peers_command_without_peers_says_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(app, ["bench", "peers", "--concurrency", "4", "--repeats", "1"])
    assert result.exit_code != 0
    assert "nox -s peers" in result.output


def test_every_tool_is_set_against_the_floor_of_the_same_repeat():
    runs = [run("dflashbench", 256, 0, 22.0), run("aiperf", 256, 0, 70.0), run("floor", 256, 0, 19.0),
            run("dflashbench", 256, 1, 15.0), run("aiperf", 256, 1, 60.0), run("floor", 256, 1, 14.0),
            run("dflashbench", 256, 2, 30.0), run("aiperf", 256, 2, 80.0), run("floor", 256, 2, 25.0)]  # fmt: skip
    rows = {r["tool"]: r for r in summarize(runs)}
    assert rows["dflashbench"]["over_floor_ms"] == {"median": 3.0, "min": 1.0, "max": 5.0}
    assert rows["aiperf"]["over_floor_ms"] == {"median": 51.0, "min": 46.0, "max": 55.0}
    # paired by repeat: 3/51, 1/46, 5/55, not the medians' ratio
    assert rows["aiperf"]["ratio_over_floor"]["min"] == pytest.approx(1 / 46)
    assert rows["aiperf"]["ratio_over_floor"]["median"] == pytest.approx(3 / 51)
    assert rows["floor"]["over_floor_ms"] is None and rows["dflashbench"]["ratio_over_floor"] is None
    # the floor's own paired ratio to the peer: 19/70, 14/60, 25/80; the goal (256 streams: 0.25) is judged beside it
    assert rows["aiperf"]["floor_ratio"]["median"] == pytest.approx(19 / 70)
    text = format_table(list(rows.values()))
    assert "over the floor" in text and "51.0 [46.0-55.0]" in text
    assert "<= 0.25: NOT met (the floor: 0.27)" in text
    # without the floor in the runs, the columns are empty, not zero
    bare = summarize([run("dflashbench", 64, 0, 10.0), run("aiperf", 64, 0, 40.0)])
    assert all(r["over_floor_ms"] is None and r["ratio_over_floor"] is None and r["floor_ratio"] is None for r in bare)
    assert "(the floor:" not in format_table(bare)
