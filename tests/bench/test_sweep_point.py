"""The load-generator benchmarks measure the sweep's own point (issue #44): a real stand-in on loopback, the
sweep's store, scrapes, progress bar and client processes."""

import io

import pytest
from rich.console import Console

from dflashbench.bench.standin import run_standin
from dflashbench.bench.sweep_point import run_sweep_point

pytestmark = pytest.mark.timeout(300)


def test_the_benchmark_point_is_a_sweeps_point_with_everything_on():
    drawn = io.StringIO()
    with run_standin("--pace-ms", "20", "--ttft-ms", "50") as url:
        point = run_sweep_point(url, 4, rounds=2, max_tokens=3, console=Console(file=drawn, force_terminal=True))
    row = point.row
    assert row.status == "ok" and row.num_requests == len(point.results) == 8 and row.num_errors == 0
    # each result went through the sweep's own consumer: annotated with its timing verdict, its output stored
    assert all(r.timing_observable is not None and r.output_sha256 for r in point.results)
    # the server's histograms were scraped around the load, the client's own cost recorded
    assert row.extra["server_timing"]["ttft_s"]["count"] == 8
    assert row.extra["client"]["processes"] == 1 and row.extra["client"]["event_loop"] in ("uvloop", "asyncio")
    assert "[1/1]" in drawn.getvalue() and "8/8" in drawn.getvalue()  # the progress bar, as a terminal shows it
