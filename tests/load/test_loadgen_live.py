"""The load generator against the paced stand-in server, a real process on loopback."""

import sys

import pytest

from dflashbench.backends.base import LaunchPlan
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.load.loadgen import LoadGenConfig, run_closed_loop_sync
from dflashbench.measure import metrics
from dflashbench.types import Request


def standin(tmp_path, *args):
    port = free_port()
    argv = (sys.executable, "-m", "dflashbench.bench.standin", "serve", "--port", str(port), *args)
    server = ServerProcess(LaunchPlan(argv=argv), tmp_path / f"standin-{port}.log", name="stand-in")
    server.start()
    server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=60, progress=False)
    return server, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def paced(tmp_path_factory):
    server, url = standin(tmp_path_factory.mktemp("standin"), "--pace-ms", "4", "--tokens-per-chunk", "3")
    yield url
    server.stop()


def make(i, text="hello", max_tokens=20, category="math", followups=()):
    return Request(id=f"r{i}", workload="w", category=category, messages=({"role": "user", "content": text},),
                   max_tokens=max_tokens, followup_turns=tuple(followups))  # fmt: skip


def test_closed_loop_counts_multi_token_chunks_and_keeps_concurrency(paced):
    seen = []
    reqs = [make(i) for i in range(10)]
    results = run_closed_loop_sync(reqs, 4, LoadGenConfig(base_url=paced, model="standin"), run_id="R",
                                   point_id="P", on_result=seen.append)  # fmt: skip
    assert seen == results and len(results) == 10
    assert sorted(r.request_id for r in results) == sorted(r.id for r in reqs)
    for r in results:
        assert r.ok, r.error
        assert (r.output_tokens, r.output_tokens_source, r.chunk_tokens_estimated) == (20, "server", False)
        assert r.chunk_tokens == (3, 3, 3, 3, 3, 3, 2)  # tokens per chunk from continuous usage
        assert r.queued_ns <= r.sent_ns < r.first_token_ns <= r.last_token_ns
        assert (r.run_id, r.point_id, r.concurrency, r.warmup) == ("R", "P", 4, False)
        # per-token ITL: 6 chunk gaps of ~4 ms split over the chunk's tokens (~1.33 ms per token)
        itl = metrics.itl_s(r)
        assert len(itl) == 17 and sum(itl) == pytest.approx(metrics.e2e_s(r) - metrics.ttft_s(r))
        assert 0.003 < sum(itl) / 6 < 0.05  # a chunk gap is the 4 ms pace, give or take a busy CPU
    # closed loop: never more than 4 streams in flight, and 4 at some moment
    events = sorted([(r.sent_ns, 1) for r in results] + [(r.last_token_ns, -1) for r in results])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak == 4


def test_faults_are_recorded_as_request_errors(paced):
    reqs = [make(0), make(1, "FAULT:http500"), make(2, "FAULT:malformed"), make(3, "FAULT:disconnect"),
            make(4, "FAULT:error_event"), make(5)]  # fmt: skip
    results = {r.request_id: r for r in run_closed_loop_sync(reqs, 3, LoadGenConfig(base_url=paced, model="standin"))}
    assert len(results) == 6
    assert results["r0"].ok and results["r5"].ok
    assert results["r1"].error == "HTTP 500: injected failure"
    assert results["r2"].error.startswith("malformed SSE data (not JSON)")
    assert "mid-response" in results["r3"].error or "disconnected" in results["r3"].error
    assert results["r4"].error == "server error mid-stream: injected error event"
    for rid in ("r2", "r3", "r4"):  # partial output is kept with the error
        assert not results[rid].ok and len(results[rid].chunk_ns) == 2


def test_a_200_stream_without_data_events_is_a_failed_request(paced):
    """JSON lines without the "data: " prefix, then "data: [DONE]": nothing parsed, so nothing was answered."""
    (bare, fine) = sorted(run_closed_loop_sync([make(0, "FAULT:nodata"), make(1)], 2,
                                               LoadGenConfig(base_url=paced, model="standin")),
                          key=lambda r: r.request_id)  # fmt: skip
    assert fine.ok
    assert not bare.ok and bare.output_tokens == 0 and bare.chunk_ns == ()
    assert bare.error.startswith("the HTTP 200 stream carried no JSON data: event (not OpenAI-style server-sent "
                                 "events); it began '{\"id\":\"x\"")  # fmt: skip


def test_timeout_is_a_request_error(paced):
    cfg = LoadGenConfig(base_url=paced, model="standin", timeout_s=1.0)
    (hung, fine) = sorted(run_closed_loop_sync([make(0, "FAULT:hang"), make(1)], 2, cfg), key=lambda r: r.request_id)
    assert not hung.ok and hung.error == ("timeout: no complete response within 1 s (raise it with --request-timeout, "
                                         "suite key timeout_s)")
    assert fine.ok


def test_keepalive_comments_split_writes_and_no_continuous_usage(tmp_path):
    server, url = standin(tmp_path, "--pace-ms", "2", "--keepalive", "--split-writes")
    try:
        cfg = LoadGenConfig(base_url=url, model="standin", continuous_usage=False)
        results = run_closed_loop_sync([make(i, max_tokens=7) for i in range(3)], 2, cfg, warmup=True)
    finally:
        server.stop()
    for r in results:
        assert r.ok, r.error
        assert r.warmup and r.output_tokens == 7 and r.output_tokens_source == "server"
        assert r.chunk_tokens == (1,) * 7 and r.chunk_tokens_estimated


def test_multi_turn_sends_answers_as_history(paced):
    reqs = [make(0, max_tokens=5, followups=("and then?", "why?")), make(1, max_tokens=5)]
    results = run_closed_loop_sync(reqs, 2, LoadGenConfig(base_url=paced, model="standin"))
    conv = sorted((r for r in results if r.request_id == "r0"), key=lambda r: r.turn)
    assert [r.turn for r in conv] == [0, 1, 2] and all(r.ok for r in conv)
    # the stand-in counts prompt words: each turn carries the previous answers and questions
    assert conv[0].prompt_tokens < conv[1].prompt_tokens < conv[2].prompt_tokens
    assert conv[1].queued_ns >= conv[0].last_token_ns


def test_failed_turn_records_the_rest_of_the_conversation(paced):
    results = run_closed_loop_sync([make(0, "FAULT:http500", followups=("more",))], 1,
                                   LoadGenConfig(base_url=paced, model="standin"))  # fmt: skip
    assert [(r.turn, r.ok) for r in results] == [(0, False), (1, False)]
    assert results[1].error == "not sent: turn 0 of this conversation failed"


def test_unreachable_server_gives_request_errors():
    url = f"http://127.0.0.1:{free_port()}"
    results = run_closed_loop_sync([make(0), make(1)], 2, LoadGenConfig(base_url=url, model="m", timeout_s=5))
    assert len(results) == 2
    assert all(not r.ok and r.error.startswith(f"cannot connect to {url}") for r in results)


def test_standin_honours_max_completion_tokens_as_aiperf_sends_it(paced):
    """AIPerf asks for its output length as ``max_completion_tokens``; the stand-in must stop there, or the peers'
    comparison would time a different output length per tool."""
    import json
    import urllib.request

    body = {"model": "standin", "messages": [{"role": "user", "content": "go"}], "stream": True,
            "max_completion_tokens": 7, "stream_options": {"include_usage": True}}  # fmt: skip
    req = urllib.request.Request(paced + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as r:
        events = [json.loads(line[6:]) for line in r.read().decode().splitlines() if line.startswith("data: {")]
    usage = [e["usage"] for e in events if e.get("usage")]
    assert usage[-1]["completion_tokens"] == 7


def test_streams_start_on_connections_opened_before_the_first_request():
    """The closed loop opens its streams' connections first (one GET /v1/models each, at once), so the measured
    requests reuse them instead of starting with a storm of TCP connects: every completion arrives on a
    connection a GET opened, and there are as many as there are streams."""
    import asyncio
    import json

    from aiohttp import web

    from dflashbench.load.loadgen import run_closed_loop

    models_peers, completion_peers, order = set(), set(), []

    async def models(request):
        models_peers.add(request.transport.get_extra_info("peername"))
        order.append("models")
        await asyncio.sleep(0.01)  # all GETs in flight at once: each needs its own connection
        return web.json_response({"object": "list", "data": []})

    async def completions(request):
        completion_peers.add(request.transport.get_extra_info("peername"))
        order.append("completion")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "length"}]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    async def main():
        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", completions)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            cfg = LoadGenConfig(base_url=f"http://127.0.0.1:{port}", model="m")
            return await run_closed_loop([make(i, max_tokens=1) for i in range(16)], 4, cfg)
        finally:
            await runner.cleanup()

    results = asyncio.run(main())
    assert all(r.ok for r in results) and len(results) == 16
    assert order[:4] == ["models"] * 4 and "models" not in order[4:]
    assert len(models_peers) == 4 and completion_peers <= models_peers
