"""A paced stand-in for an OpenAI-compatible streaming server: the truth the load generator is measured against.

``python -m dflashbench.bench.standin serve --port P`` emits ready-made tokens at a fixed pace: chunk ``i`` of
every stream is sent at ``t0 + i * pace`` (absolute deadlines, no drift), carrying ``tokens_per_chunk`` tokens,
so the true per-token ITL is ``pace / tokens_per_chunk``. It keeps its own lateness statistics (``GET /stats``)
so a run can tell a slow server from a slow client, and it can run as several processes on one port
(``SO_REUSEPORT``). It doubles as the fault injector of the load-generator tests: a user message containing
``FAULT:http500``, ``FAULT:malformed``, ``FAULT:disconnect``, ``FAULT:error_event``, ``FAULT:hang`` or
``FAULT:nodata`` (a 200 stream of bare JSON lines without the ``data:`` prefix, then ``data: [DONE]``) makes
that request fail that way. ``--reject-auth-every N`` answers every N-th completion request with a 401 that
echoes the credentials it got, as some servers do (``Incorrect API key provided: <key>``), and prints that line
to its log; ``--models-answer list|text`` makes ``/v1/models`` answer a bare JSON list, or text that is no JSON;
``--restart-at-scrape N`` makes the N-th ``/metrics`` read show a new process start time (a restart, seen by the
counters' reader); ``--slow-down-ms X`` makes each request's pace X ms slower than the one before (a server slowing
down steadily during a point); ``--usage-tokens N`` makes every usage object report N completion tokens whatever was streamed
(a server that miscounts, :mod:`dflashbench.load.usage_check`); ``--token-ids`` puts each chunk's token ids in its
choice where the request asks (vLLM's ``return_token_ids``); ``--token-text`` sets the text of a token (``"tok "``),
``--reasoning-tokens N`` streams a chat's first N tokens as ``reasoning_content``. With ``--spec-tau T`` it also exposes vLLM-named speculative counters on
``/metrics`` (written with ``prometheus_client``, as vLLM's are) consistent with what it streamed (``T`` tokens
per chunk = one verification step). ``--burst K`` makes chunks on pace but writes them K at a time (0: the
whole output at the end), as a server whose consumer lags delivers them, so the tests of the burst rule
(:mod:`dflashbench.measure.observability`) have a server that bursts; ``/metrics`` always carries vLLM-named latency
histograms timed when each chunk was made. :class:`StandinBackend` lets a sweep launch it (tests register it).

The benchmarks that drive it are :mod:`dflashbench.bench.client_capacity` and :mod:`dflashbench.bench.overhead`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from dflashbench.reference.serving.metrics import ServerMetrics

STAT_FIELDS = ("requests", "chunks", "late_sum_ns", "late_max_ns", "late_over_1ms")
FAULTS = ("http500", "malformed", "disconnect", "error_event", "hang", "nodata")


@dataclass(frozen=True)
class StandinConfig:
    pace_s: float = 0.01  # time between two chunks of one stream
    tokens_per_chunk: int = 1
    ttft_s: float = 0.0  # extra delay before the first chunk
    spec_tau: float | None = None  # expose vLLM spec-decode counters as if each chunk were one step
    keepalive: bool = False  # send ": keep-alive" comment lines between chunks
    split_writes: bool = False  # write every event in two halves (exercises client-side reassembly)
    model: str = "standin"
    die_file: str | None = None  # tests: if this file exists, SIGKILL the server mid-stream ...
    die_after: int = 1  # ... of the die_after-th request (the file is removed first: a restart lives)
    # Chunks per flush: 1 sends each chunk at its deadline; k > 1 makes chunks on pace but holds them and writes
    # k at a time (one network write, as a server whose consumer lags delivers them); 0 holds the whole output
    # and writes it at the end. The /metrics latency histograms time the chunks when made, not when flushed.
    burst: int = 1
    reject_auth_every: int = 0  # every N-th completion request: 401 echoing its Authorization header
    models_answer: str = "openai"  # /v1/models: "openai" (an object with data), "list" (a bare list), "text"
    restart_at_scrape: int = 0  # the N-th /metrics read shows a new process start time, as after a restart
    usage_tokens: int | None = None  # every usage object reports this many completion tokens, whatever was streamed
    token_ids: bool = False  # each choice carries its tokens' ids where the request asks (vLLM's return_token_ids)
    token_text: str = "tok "  # the text of one streamed token
    reasoning_tokens: int = 0  # chat: the first N tokens stream as reasoning_content, as a reasoning parser sends
    # tests: each request's pace this much slower than the one before (a server slowing down steadily)
    slow_down_s: float = 0.0


class _Standin:
    """Request handlers and state of one stand-in process."""

    def __init__(self, cfg: StandinConfig, shared_stats=None, worker: int = 0) -> None:
        self.cfg = cfg
        # lateness statistics: this process's slice of a shared array (several workers), or a private list
        self.stats = shared_stats if shared_stats is not None else [0.0] * len(STAT_FIELDS)
        self.base = worker * len(STAT_FIELDS) if shared_stats is not None else 0
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "requests": 0, "received": 0, "scrapes": 0}
        self.started = time.time()
        self.timing = ServerMetrics()  # this process's latency histograms (vLLM's names, on /metrics)

    def bump(self, field: int, value: float, is_max: bool = False) -> None:
        i = self.base + field
        self.stats[i] = max(self.stats[i], value) if is_max else self.stats[i] + value

    def event(self, kind: str, text: str | None, finish: str | None, usage: dict | None,
              ids: list[int] | None = None, reasoning: str | None = None) -> bytes:  # fmt: skip
        if kind == "chat":
            delta = {"content": text, **({"reasoning_content": reasoning} if reasoning is not None else {})}
            choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if text is not None else []
            obj: dict[str, Any] = {"id": "x", "object": "chat.completion.chunk", "model": self.cfg.model, "choices": choices}
        else:
            choices = [{"index": 0, "text": text, "finish_reason": finish}] if text is not None else []
            obj = {"id": "x", "object": "text_completion", "model": self.cfg.model, "choices": choices}
        if ids is not None and choices:
            choices[0]["token_ids"] = ids
        if usage is not None:
            obj["usage"] = usage
        return b"data: " + orjson.dumps(obj) + b"\n\n"  # every chunk of every stream: orjson keeps the pace cheap

    async def send(self, resp, data: bytes) -> None:
        if self.cfg.split_writes and len(data) > 8:
            half = len(data) // 2
            await resp.write(data[:half])
            await asyncio.sleep(0.0005)
            data = data[half:]
        await resp.write(data)

    async def completions(self, request, kind: str):
        from aiohttp import web

        body = await request.json()
        prompt = json.dumps(body.get("messages") or body.get("prompt") or "")
        fault = next((f for f in FAULTS if f"FAULT:{f}" in prompt), None)
        self.counters["received"] += 1
        if self.cfg.reject_auth_every and self.counters["received"] % self.cfg.reject_auth_every == 0:
            got = request.headers.get("Authorization", "")
            message = f"Incorrect API key provided: {got.removeprefix('Bearer ')}"  # what some servers echo
            if got.startswith("Basic "):  # and the user:password it decodes to
                message += f" ({base64.b64decode(got[6:]).decode('latin-1')})"
            print(f"401 {message}", flush=True)
            return web.json_response({"error": {"message": message, "type": "invalid_request_error",
                                                "code": "invalid_api_key"}}, status=401)  # fmt: skip
        if fault == "http500":
            return web.json_response({"error": {"message": "injected failure", "type": "InternalServerError",
                                                "code": 500}}, status=500)  # fmt: skip
        self.bump(0, 1)
        self.counters["requests"] += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await self.stream(request, resp, kind, body, prompt, fault)
        return resp

    async def wait_for(self, deadline: float) -> None:
        """Sleep until ``deadline`` (event-loop time) and record how late the chunk goes out."""
        loop = asyncio.get_running_loop()
        delay = deadline - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        late = max(loop.time() - deadline, 0.0)
        self.bump(1, 1)
        self.bump(2, late * 1e9)
        self.bump(3, late * 1e9, is_max=True)
        if late > 1e-3:
            self.bump(4, 1)

    async def inject(self, request, resp, fault: str | None, doomed: bool, i: int) -> bool:
        """Apply a fault before chunk ``i``; True when the response must end here."""
        if fault in ("malformed", "error_event", "disconnect") and i == 2:
            if fault == "malformed":
                await resp.write(b"data: {this is not json\n\n")
            elif fault == "error_event":
                await resp.write(b'data: {"error": {"message": "injected error event", "code": 500}}\n\n')
            else:
                request.transport.close()
            return True
        if doomed and i == 1:
            os.remove(self.cfg.die_file)
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "hang" and i == 1:
            await asyncio.sleep(3600)
        return False

    async def stream(self, request, resp, kind: str, body: dict, prompt: str, fault: str | None) -> None:
        cfg = self.cfg
        # AIPerf sends max_completion_tokens (its `aiperf profile --help`, --output-tokens-mean, 0.13.0)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        opts = body.get("stream_options") or {}
        continuous = bool(opts.get("continuous_usage_stats"))
        with_ids = cfg.token_ids and bool(body.get("return_token_ids"))
        prompt_tokens = max(len(prompt.split()), 1)
        reported = (lambda n: cfg.usage_tokens) if cfg.usage_tokens is not None else (lambda n: n)  # noqa: E731
        doomed = bool(cfg.die_file) and self.counters["requests"] >= cfg.die_after and os.path.exists(cfg.die_file)
        if fault == "nodata":  # what a server speaking another streaming format might send
            for sent in range(1, max_tokens + 1):
                await resp.write(self.event(kind, "tok ", None, _usage(prompt_tokens, sent))[len(b"data: "):-1])
            await resp.write(b"data: [DONE]\n\n")
            return
        loop = asyncio.get_running_loop()
        arrived = loop.time()
        t0 = arrived + cfg.ttft_s
        pace = cfg.pace_s + cfg.slow_down_s * max(self.counters["requests"] - 1, 0)
        sent = i = 0
        held: list[bytes] = []  # chunks made but not yet written (cfg.burst)
        made: list[tuple[float, int]] = []  # (when, tokens) of each chunk, for the latency histograms
        while sent < max_tokens:
            await self.wait_for(t0 + i * pace)
            if cfg.keepalive:
                await resp.write(b": keep-alive\n\n")
            if await self.inject(request, resp, fault, doomed, i):
                return
            k = min(cfg.tokens_per_chunk, max_tokens - sent)
            sent += k
            made.append((loop.time(), k))
            usage = _usage(prompt_tokens, reported(sent)) if continuous else None
            thought = min(max(cfg.reasoning_tokens - (sent - k), 0), k) if kind == "chat" else 0  # of these k
            held.append(self.event(kind, cfg.token_text * (k - thought), "length" if sent >= max_tokens else None,
                                   usage, [TOKEN_ID] * k if with_ids else None,
                                   cfg.token_text * thought if thought else None))  # fmt: skip
            if cfg.burst == 1 or (cfg.burst > 1 and len(held) >= cfg.burst):
                await self.send(resp, b"".join(held))
                held.clear()
            if cfg.spec_tau:  # one chunk = one verification step whose every proposal was accepted
                self.counters["drafts"] += 1
                self.counters["accepted"] += k - 1
                self.counters["draft_tokens"] += max(int(round(cfg.spec_tau)) - 1, k - 1)
            i += 1
        if opts.get("include_usage") or continuous:
            held.append(self.event(kind, None, None, _usage(prompt_tokens, reported(sent))))
        await resp.write(b"".join([*held, b"data: [DONE]\n\n"]))
        # Booked after the chunks now due: a closed loop's streams end together, and booking 128 ITL samples per
        # stream at once (about 0.1 ms each stream) would make the last chunks of the streams after it late.
        loop.call_soon(self.timing.observe_request, arrived, made)

    async def metrics(self, _request):
        from aiohttp import web

        self.counters["scrapes"] += 1
        if self.counters["scrapes"] == self.cfg.restart_at_scrape:  # a new identity, counters kept: looks like growth
            self.started = time.time() + 1.0
        return web.Response(text=render_metrics(self.cfg.model, self.started, self.counters if self.cfg.spec_tau else None,
                                                self.timing), content_type="text/plain")  # fmt: skip

    async def stat(self, _request):
        """Lateness statistics of every worker process, combined."""
        from aiohttp import web

        width = len(STAT_FIELDS)
        total = dict.fromkeys(STAT_FIELDS, 0.0)
        for w in range(len(self.stats) // width):
            for j, name in enumerate(STAT_FIELDS):
                v = self.stats[w * width + j]
                total[name] = max(total[name], v) if name == "late_max_ns" else total[name] + v
        return web.json_response(total)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip


SPEC_COUNTERS = (("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", "drafts"),
                 ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", "draft_tokens"),
                 ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", "accepted"))  # fmt: skip


class _Scrape:
    """A prometheus_client collector over one read of the stand-in's numbers: its start time (a restarted
    stand-in is a new server), its latency histograms and, as vLLM names them, the speculative counters when it
    plays one."""

    def __init__(self, model: str, started: float, counters: dict[str, int] | None,
                 timing: ServerMetrics | None = None) -> None:  # fmt: skip
        self.model, self.started, self.counters, self.timing = model, started, counters, timing

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        yield GaugeMetricFamily("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                                value=self.started)  # fmt: skip
        for name, help_, key in SPEC_COUNTERS if self.counters is not None else ():
            counter = CounterMetricFamily(name, help_, labels=["model_name"])
            counter.add_metric([self.model], self.counters[key], created=self.started)
            yield counter
        t = self.timing
        for hist, name in ((t.ttft, "time_to_first_token_seconds"), (t.itl, "inter_token_latency_seconds"),
                           (t.tpot, "request_time_per_output_token_seconds"),
                           (t.e2e, "e2e_request_latency_seconds")) if t is not None else ():  # fmt: skip
            yield hist.family(f"vllm:{name}", f"The stand-in's {name}, timed when each chunk was made.",
                              ["model_name"], [self.model])  # fmt: skip


def render_metrics(model: str, started: float, counters: dict[str, int] | None,
                   timing: ServerMetrics | None = None) -> str:  # fmt: skip
    """The ``/metrics`` page: Prometheus text exposition written by ``prometheus_client``."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Scrape(model, started, counters, timing))
    return generate_latest(registry).decode()


def make_app(cfg: StandinConfig, shared_stats=None, worker: int = 0):
    """The aiohttp application of the stand-in server (one per process)."""
    from aiohttp import web

    standin = _Standin(cfg, shared_stats, worker)

    async def chat(request):
        return await standin.completions(request, "chat")

    async def text(request):
        return await standin.completions(request, "text")

    async def health(_request):
        return web.Response(text="ok")

    async def models(_request):
        listed = [{"id": cfg.model, "object": "model"}]
        if cfg.models_answer == "list":
            return web.json_response(listed)
        if cfg.models_answer == "text":
            return web.Response(text="<html>models</html>", content_type="text/html")
        return web.json_response({"object": "list", "data": listed})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", text)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", standin.metrics)
    app.router.add_get("/stats", standin.stat)
    return app


def _serve_one(cfg: StandinConfig, host: str, port: int, shared_stats, worker: int, reuse_port: bool) -> None:
    from aiohttp import web

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # nothing to clean up; do not wait for streams
    web.run_app(make_app(cfg, shared_stats, worker), host=host, port=port, reuse_port=reuse_port,
                print=None, access_log=None, handle_signals=False)  # fmt: skip


def serve(cfg: StandinConfig, host: str = "127.0.0.1", port: int = 8000, workers: int = 1) -> None:
    """Run the stand-in in this process (``workers - 1`` more processes share the port)."""
    shared = mp.get_context("fork").Array("d", workers * len(STAT_FIELDS), lock=False) if workers > 1 else None
    children = []
    for w in range(1, workers):
        p = mp.get_context("fork").Process(target=_serve_one, args=(cfg, host, port, shared, w, True), daemon=True)
        p.start()
        children.append(p)
    try:
        _serve_one(cfg, host, port, shared, 0, workers > 1)
    finally:
        for p in children:
            p.terminate()
            p.join(5)


SERVE = (sys.executable, "-m", "dflashbench.bench.standin", "serve")  # the argv that starts one


def read_stats(base_url: str) -> dict:
    """The stand-in's lateness statistics (``GET /stats``), every worker combined."""
    import urllib.request

    with urllib.request.urlopen(base_url + "/stats", timeout=10) as r:
        return json.load(r)


@contextlib.contextmanager
def run_standin(*options: str) -> Iterator[str]:
    """The stand-in as a server process of its own on a free loopback port (``options`` as its command line takes
    them): its base URL once it answers its health check; stopped after the block."""
    from dflashbench.backends.base import LaunchPlan
    from dflashbench.backends.process import ServerProcess, free_port

    port = free_port()
    plan = LaunchPlan(argv=(*SERVE, "--port", str(port), *options))
    with tempfile.TemporaryDirectory(prefix="dflashbench-standin-") as tmp, \
            ServerProcess(plan, log_path=Path(tmp) / "standin.log") as server:  # fmt: skip
        base_url = f"http://127.0.0.1:{port}"
        server.wait_ready(base_url + "/health", timeout_s=60, progress=False)
        yield base_url


class StandinBackend:
    """The stand-in as a backend the sweep can launch (tests register it; it is not in the public registry).

    AR streams one token per chunk and exposes no counters; a speculative method streams
    ``STANDIN_TAU`` tokens per chunk and exposes vLLM counters consistent with that (tau = STANDIN_TAU).
    """

    name = "standin"
    pace_ms = 3.0

    def launch_plan(self, spec):
        from dflashbench.backends.base import LaunchPlan

        argv = [*SERVE, "--host", spec.host, "--port",
                str(spec.port), "--pace-ms", str(self.pace_ms), "--model", spec.served_model_name or "standin"]  # fmt: skip
        if spec.method.value != "ar":
            argv += ["--tokens-per-chunk", str(STANDIN_TAU), "--spec-tau", str(STANDIN_TAU)]
        return LaunchPlan(argv=(*argv, *spec.extra_args))

    def health_path(self) -> str:
        return "/health"

    def concurrency_cap(self, spec) -> int | None:
        return None  # the stand-in serves every request at once

    async def read_counters(self, session, base_url: str):
        from dflashbench.backends._engine import VllmHttpApi

        return await VllmHttpApi().read_counters(session, base_url)  # vLLM's names, as the stand-in exposes them

    async def read_server_timing(self, session, base_url: str):
        from dflashbench.backends._engine import VllmHttpApi

        return await VllmHttpApi().read_server_timing(session, base_url)

    async def reset_cache(self, session, base_url: str) -> None:
        return None


STANDIN_TAU = 3
TOKEN_ID = 7  # the id of the stand-in's one token, "tok " (with --token-ids)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dflashbench.bench.standin")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the paced stand-in streaming server")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--pace-ms", type=float, default=10.0)
    s.add_argument("--tokens-per-chunk", type=int, default=1)
    s.add_argument("--ttft-ms", type=float, default=0.0)
    s.add_argument("--spec-tau", type=float, default=None)
    s.add_argument("--keepalive", action="store_true")
    s.add_argument("--split-writes", action="store_true")
    s.add_argument("--burst", type=int, default=1, help="chunks per flush; 0 = the whole output at the end")
    s.add_argument("--workers", type=int, default=1)
    s.add_argument("--model", default="standin")
    s.add_argument("--die-file", default=None, help="tests: die mid-stream while this file exists")
    s.add_argument("--die-after", type=int, default=1, help="tests: ... at this request")
    s.add_argument("--api-key", default=None, help="tests: accepted and printed back as vLLM prints its arguments")
    s.add_argument("--reject-auth-every", type=int, default=0, help="tests: every N-th request 401s, echoing its key")
    s.add_argument("--models-answer", choices=("openai", "list", "text"), default="openai",
                   help="tests: the shape of the /v1/models answer")
    s.add_argument("--restart-at-scrape", type=int, default=0, help="tests: the N-th /metrics read looks restarted")
    s.add_argument("--usage-tokens", type=int, default=None,
                   help="tests: every usage object reports N completion tokens, whatever was streamed")
    s.add_argument("--token-ids", action="store_true",
                   help="each chunk carries its token ids where the request asks (vLLM's return_token_ids)")
    s.add_argument("--token-text", default="tok ", help="the text of one streamed token")
    s.add_argument("--reasoning-tokens", type=int, default=0,
                   help="chat: the first N tokens stream as reasoning_content, as a reasoning parser sends them")
    s.add_argument("--slow-down-ms", type=float, default=0.0,
                   help="tests: each request's pace this many ms slower than the one before (a server slowing down)")
    args = parser.parse_args(argv)
    if args.cmd == "serve" and args.api_key is not None:  # vLLM logs its non-default arguments, secrets included
        print(f"non-default args: {{'port': {args.port}, 'api_key': [{args.api_key!r}]}}", flush=True)
    cfg = StandinConfig(pace_s=args.pace_ms / 1e3, tokens_per_chunk=args.tokens_per_chunk, ttft_s=args.ttft_ms / 1e3,
                        spec_tau=args.spec_tau, keepalive=args.keepalive, split_writes=args.split_writes,
                        model=args.model, die_file=args.die_file, die_after=args.die_after, burst=args.burst,
                        reject_auth_every=args.reject_auth_every, models_answer=args.models_answer,
                        restart_at_scrape=args.restart_at_scrape, usage_tokens=args.usage_tokens,
                        token_ids=args.token_ids, token_text=args.token_text,
                        reasoning_tokens=args.reasoning_tokens, slow_down_s=args.slow_down_ms / 1e3)  # fmt: skip
    serve(cfg, args.host, args.port, args.workers)


if __name__ == "__main__":
    main()
