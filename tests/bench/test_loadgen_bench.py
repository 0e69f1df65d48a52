"""`dflashbench bench loadgen`: the stand-in server as a separate process, the real load generator, shards."""

import json

from typer.testing import CliRunner

from dflashbench.cli import app


def test_bench_loadgen_reports_trials_and_best(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, [
        "bench", "loadgen", "--pace-ms", "5", "--tokens-per-chunk", "2", "--max-tokens", "20", "--rounds", "1",
        "--concurrency", "2,4", "--processes", "1,2", "--tolerance", "0.5", "--json", str(out),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["config"]["true_itl_ms"] == 2.5  # 5 ms per chunk of 2 tokens
    trials = data["trials"]
    # the search: per process count, concurrencies in order, a failing trial tried once more, and the search
    # stops at a concurrency that failed twice (on a busy machine that can be the first one)
    for procs in (1, 2):
        tried = [(t["concurrency"], t["ok"]) for t in trials if t["processes"] == procs]
        i = 0
        for conc in (2, 4):
            first = tried[i] if i < len(tried) else None
            assert first is not None and first[0] == conc, tried
            i += 1
            if not first[1]:
                again = tried[i]
                assert again[0] == conc, tried
                i += 1
                if not again[1]:
                    break
        assert i == len(tried), tried
    for t in trials:
        assert t["errors"] == 0 and t["requests"] == t["concurrency"] and t["tokens"] == 20 * t["concurrency"]
        assert t["client_cpu_us_per_tok"] > 0 and t["server_late_ms_mean"] is not None
        # each trial's verdict is the rule applied to its own measured ITL (how fast this machine is, is not tested)
        within = abs(t["itl_ms_mean"] - 2.5) / 2.5 <= 0.5 and abs(t["itl_ms_p50"] - 2.5) / 2.5 <= 0.5
        assert t["ok"] == within, t
    assert "1 proc x     2 streams" in result.output and "2 proc x     2 streams" in result.output
    # "best" per process count: the largest concurrency reached before the first trial that failed twice
    for procs in (1, 2):
        mine = [t for t in trials if t["processes"] == procs]
        passed = [t["concurrency"] for t in mine if t["ok"]]
        best = data["best"].get(str(procs))
        if best is None:
            assert not passed and f"best with {procs} client" not in result.output
        else:
            assert best["concurrency"] == max(passed)
            assert f"best with {procs} client process(es): {best['concurrency']} streams" in result.output
