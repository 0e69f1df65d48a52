"""A trace's schedule: arrivals divided by the speed, the open loop sending no request before its time (the event
loop's timers wake up to a millisecond early), and the suite keys and flags that ask for a replay."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestServer

from dflashbench.bench.standin import StandinConfig, make_app
from dflashbench.errors import UserError
from dflashbench.load import eventloop
from dflashbench.load.loadgen import LoadGenConfig
from dflashbench.load.openloop import run_open_loop
from dflashbench.load.trace_replay import mean_rate_per_s, parse_speeds, schedule_s
from dflashbench.plan.grid import build_grid
from dflashbench.plan.suite_overrides import apply_overrides
from dflashbench.plan.suites import load_suite, parse_suite
from dflashbench.types import Request


def _req(i: int, arrival_s: float, max_tokens: int = 2) -> Request:
    return Request(id=f"t#{i}", workload="synthetic", category="code", messages=({"role": "user", "content": "hi"},),
                   max_tokens=max_tokens, metadata={"trace": {"arrival_s": arrival_s}})  # fmt: skip


def test_the_schedule_is_the_traces_arrivals_at_the_speed():
    reqs = [_req(i, a) for i, a in enumerate([0.0, 0.5, 0.5, 3.0])]
    assert schedule_s(reqs, 1.0) == [0.0, 0.5, 0.5, 3.0]
    assert schedule_s(reqs, 2.0) == [0.0, 0.25, 0.25, 1.5]
    assert mean_rate_per_s([0.0, 0.25, 0.25, 1.5]) == pytest.approx(2.0)
    assert mean_rate_per_s([0.0, 0.0]) == 2.0  # every request at once: n per second, never infinite
    with pytest.raises(UserError, match="above 0"):
        schedule_s(reqs, 0.0)
    assert parse_speeds("1, 2.5") == [1.0, 2.5]
    for bad, match in (("1,1", "listed twice"), ("0", "above 0"), ("fast", "like 1,2"), ("inf", "finite")):
        with pytest.raises(UserError, match=match):
            parse_speeds(bad)


def test_the_open_loop_never_sends_a_request_before_its_time():
    """Due times a fraction of a millisecond apart: uvloop rounds timers to whole milliseconds, and the loop used
    to send up to a millisecond early (a negative lateness, seen on the reference server by test_trace_replay)."""
    offsets = [i * 0.0037 for i in range(60)]
    reqs = [_req(i, a) for i, a in enumerate(offsets)]

    async def main():
        server = TestServer(make_app(StandinConfig(pace_s=0.001)))
        await server.start_server()
        try:
            cfg = LoadGenConfig(base_url=str(server.make_url("")).rstrip("/"), model="standin", timeout_s=30)
            return await run_open_loop(reqs, offsets, cfg, max_concurrency=64)
        finally:
            await server.close()

    results = eventloop.run(main())
    assert len(results) == 60 and all(r.ok for r in results)
    late_ms = sorted((r.sent_ns - r.queued_ns) / 1e6 for r in results)
    assert late_ms[0] >= 0, late_ms[:5]


def test_suite_keys_and_flags_for_a_trace():
    demo = load_suite("demo")
    suite = apply_overrides(demo, trace="azure-code", trace_window="2m", trace_speed="1,2",
                            trace_scale="input=0.02,output=0.5", trace_content="workloads,random")  # fmt: skip
    assert (suite.trace, suite.trace_window, suite.trace_speed) == ("azure-code", "2m", [1.0, 2.0])
    assert (suite.trace_input_scale, suite.trace_output_scale, suite.trace_content) == (0.02, 0.5, ["workloads", "random"])
    assert suite.concurrency == [] and suite.request_rate == []  # --trace alone: the replay replaces the ladder
    assert any("replace the suite's closed-loop" in n for n in suite.notes)
    ids = [p.point_id for p in build_grid(suite, "reference")]
    assert ids[:4] == ["reference:ar:workloads:tazure-codex1.0", "reference:ar:workloads:tazure-codex2.0",
                       "reference:ar:random:tazure-codex1.0", "reference:ar:random:tazure-codex2.0"]  # fmt: skip
    assert len(ids) == 4 * len(suite.methods)
    beside = apply_overrides(demo, trace="azure-code", concurrency="1")
    assert beside.concurrency == [1] and [p.point_id for p in build_grid(beside, "reference")][:2] == [
        "reference:ar:synthetic:c1", "reference:ar:workloads:tazure-codex1.0"]  # fmt: skip
    assert apply_overrides(demo, trace_scale="0.05").trace_input_scale == 0.05


@pytest.mark.parametrize(("key", "value", "match"), [
    ("trace_speed", [1, 1], "duplicates"),
    ("trace_speed", [0], "above 0"),
    ("trace_window", "soon", "trace_window soon: expected a duration"),
    ("trace_content", ["workloads", "workloads"], "once each"),
    ("trace_fill", "pad", "trace_fill"),
    ("trace_input_scale", 0, "trace_input_scale"),
])  # fmt: skip
def test_bad_trace_keys_name_the_key(key, value, match):
    data = {"name": "t", "methods": ["ar"], "model": "embedded", "concurrency": [], "trace": "azure-code",
            "workloads": [{"name": "synthetic"}], key: value}  # fmt: skip
    with pytest.raises(UserError, match=match):
        parse_suite(data, source="t.toml")


def test_an_empty_concurrency_list_needs_a_trace():
    data = {"name": "t", "methods": ["ar"], "model": "embedded", "concurrency": [], "workloads": [{"name": "synthetic"}]}
    with pytest.raises(UserError, match="empty only beside a trace"):
        parse_suite(data, source="t.toml")
    with pytest.raises(UserError, match="--trace-scale"):
        apply_overrides(load_suite("demo"), trace_scale="in=0.1")
