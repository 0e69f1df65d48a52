"""Faults, round 6 (issue #61), part b: what overwrote, what was counted twice or dropped in silence, what was read as
fine when it could not be read, what had no bound; each with real processes over loopback where the fault needs them.

- ``history -o`` is checked as ``report -o`` is (one check, :func:`dflashbench.report.check_output`): a symbolic link,
  a named pipe, a device is refused with one line; the format follows the suffix (.html, .md, .txt) and any other is
  refused with the list (it wrote HTML into ``x.pdf``, through a link over its target, and hung on a pipe).
- ``history`` names a run folder it skipped (one without points.jsonl was dropped in silence) and counts a run_id
  once (``cp -a`` copies of 2 runs read as "5 runs"), naming the copies it folded.
- A point too small for the trend check (:mod:`dflashbench.measure.trend`) says so on its line and in its row, where
  it said nothing: a server slowing 15 % a request at c=1 and c=2 over 4 and 8 requests.
- One SSE line is capped (:data:`dflashbench.load.sse.MAX_LINE_BYTES`): a 50 MB line at c=4 fails its request naming
  the cap and the bytes held, the other requests of the point are measured, and the client holds at most the cap per
  stream (it peaked at 592 MB).
- A ``usage.completion_tokens`` of ``"abc"`` is read as missing and said (it failed the point with an
  ``ExceptionGroup``); one of twice the stream, with no token ids and no tokenizer to check it, is said to be
  unverified, on the point's line and as a trust flag (it was believed: throughput doubled).
- SIGTERM while ``report`` or ``history -o`` writes leaves no ``.NAME.tmp`` (Ctrl-C never did): the write is held
  mid-way by a slow ``fsync`` in a real subprocess, so the signal lands inside it every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest
from gate.history_factory import manifest as run_manifest
from gate.history_factory import write_run
from test_reliability import (  # noqa: F401 - standin_backend is an autouse fixture
    GSM8K,
    env_for_children,
    only_run_dir,
    standin_backend,
    sweep,
    wait_for,
    write_suite,
)
from typer.testing import CliRunner

from dflashbench.backends.process import free_port
from dflashbench.bench.standin import run_standin
from dflashbench.cli import app
from dflashbench.load.loadgen import LoadGenConfig, run_closed_loop_sync
from dflashbench.load.sse import MAX_LINE_BYTES, SSELineTooLong, SSEParser
from dflashbench.report.trust import trust_flags
from dflashbench.run.store import RunStore, load_run
from dflashbench.types import Request

SOURCE_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RUN = SOURCE_ROOT / "results" / "examples" / "demo-20261123-120110-e69c"


def cli(*args):
    return CliRunner().invoke(app, [*map(str, args)], catch_exceptions=False)


def cli_process(*args, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """The CLI as a process of its own: a command that would hang (writing into a pipe) times out, not the suite."""
    return subprocess.run([sys.executable, "-m", "dflashbench", *map(str, args)], capture_output=True, text=True,
                          env=env_for_children(), timeout=timeout_s)  # fmt: skip


# -- an OpenAI-style server on loopback whose faults the tests choose -------------------------------------------------
MODEL = "standin-model"
HUGE_BYTES = 50_000_000  # the line: 50 MB of one chunk's content, no line end until its last byte
STREAMED = 16  # tokens ("tok ", one a chunk) of every answer that is not a huge line


class FakeServer:
    """aiohttp on a free loopback port, in a thread of its own. A request whose last message holds ``HUGE`` gets one
    SSE line of :data:`HUGE_BYTES`; every other streams :data:`STREAMED` chunks of ``"tok "`` without token ids,
    then a usage chunk whose ``completion_tokens`` is ``usage`` (default: what was streamed)."""

    def __init__(self, usage=STREAMED) -> None:
        self.usage = usage
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def _models(self, _request):
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _metrics(self, _request):
        from aiohttp import web

        return web.Response(text="")

    async def _complete(self, request):
        from aiohttp import web

        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):  # the client closes a huge line's connection unread
            if "HUGE" in json.dumps(body.get("messages") or body.get("prompt")):
                await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":"')
                piece = b"x" * 2**20
                for _ in range(HUGE_BYTES // len(piece)):
                    await resp.write(piece)
                await resp.write(b'"}}]}\n\ndata: [DONE]\n\n')
                return resp
            for i in range(STREAMED):
                chunk = {"choices": [{"index": 0, "delta": {"content": "tok "},
                                      "finish_reason": "stop" if i == STREAMED - 1 else None}]}  # fmt: skip
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": self.usage}}
            await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    def _serve(self) -> None:
        from aiohttp import web

        app_ = web.Application()
        app_.router.add_get("/v1/models", self._models)
        app_.router.add_get("/metrics", self._metrics)
        app_.router.add_post("/v1/chat/completions", self._complete)
        app_.router.add_post("/v1/completions", self._complete)
        runner = web.AppRunner(app_, access_log=None)
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    def __enter__(self) -> FakeServer:
        self._thread.start()
        assert self._ready.wait(30), "the fake server did not start"
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


# -- 1. history -o as report -o --------------------------------------------------------------------------------------
def test_history_output_is_checked_as_report_output_and_its_format_follows_the_suffix(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, 1)
    fifo, link, target = tmp_path / "pipe.html", tmp_path / "link.html", tmp_path / "kept.html"
    os.mkfifo(fifo)
    target.write_text("not a history page\n")
    link.symlink_to(target)
    for path, kind in ((fifo, "a named pipe (FIFO)"), (link, f"a symbolic link (to {target})"),
                       (tmp_path, "a directory"), (Path("/dev/null"), "a character device")):  # fmt: skip
        if path == fifo:  # a process of its own: the unfixed command waited on the pipe for ever
            done = cli_process("history", runs, "-o", path, timeout_s=60)
            code, said = done.returncode, done.stderr
        else:
            done = cli("history", runs, "-o", path)
            code, said = done.exit_code, done.output
        assert code == 2, said
        assert said.strip() == (f"error: cannot write the history page to {path}: it is {kind}, and a history "
                                       "page replaces what is at its path; give the path of a regular file or of a "
                                       "new one (e.g. -o history.html)")  # fmt: skip
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and target.read_text() == "not a history page\n"
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    refused = cli("history", runs, "-o", tmp_path / "x.pdf")
    assert refused.exit_code == 2 and refused.output.strip() == (
        "error: cannot write 'x.pdf': history writes HTML (.html), Markdown (.md) or text (.txt); name the output "
        "file with one of those suffixes")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.html", "link.html", "pipe.html", "runs"]
    # each suffix its format; a regular file is replaced
    for name, start in (("h.md", "### dflashbench history: "), ("h.txt", "dflashbench history: "),
                        ("kept.html", "<!DOCTYPE html>")):  # fmt: skip
        done = cli("history", runs, "-o", tmp_path / name)
        assert done.exit_code == 3, done.output  # one run: cannot judge
        assert (tmp_path / name).read_text().startswith(start), name
        assert f"written to {tmp_path / name}" in done.output
    assert "The plots:" not in (tmp_path / "h.md").read_text()  # a Markdown file links no page it is not
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# -- 2. history: what it skipped, and a run_id once -------------------------------------------------------------------
def test_history_names_what_it_skipped_and_counts_a_run_once(tmp_path):
    root = tmp_path / "results"
    first, second = write_run(root, 1), write_run(root, 2)
    subprocess.run(["cp", "-a", str(first), str(root / "n01-copy")], check=True)
    subprocess.run(["cp", "-a", str(first), str(root / "n01-copy2")], check=True)
    subprocess.run(["cp", "-a", str(second), str(root / "n02-early")], check=True)
    early = root / "n02-early" / "points.jsonl"  # a copy taken before the run finished: its first rows only
    early.write_text("".join(early.read_text().splitlines(keepends=True)[:3]))  # round 1's c=1 points
    with RunStore.create(root, run_manifest(3), run_id="run-03") as store:
        lost = store.run_dir
    (lost / "points.jsonl").unlink()  # a run folder without its points: dropped in silence before
    done = cli("history", root, "--no-index")
    assert done.exit_code == 3, done.output
    assert done.output.startswith("dflashbench history: cannot judge (exit 3). 2 runs (1 folder(s) skipped; 2 "
                                  "run(s) found in several folders, counted once: see the notes), ")  # fmt: skip
    notes = done.output.split("\nnotes:\n", 1)[1]
    assert (f"  - skipped {lost}: a manifest (status 'complete') but no points.jsonl: a run folder copied in "
            "part, or its points file removed; nothing of it to read") in notes  # fmt: skip
    assert (f"  - run run-01 counted once: 3 folders hold it ({first} kept; folded {root / 'n01-copy'}, "
            f"{root / 'n01-copy2'}), with the same figures") in notes  # fmt: skip
    assert (f"  - run run-02 counted once: 2 folders hold it ({second} kept; folded {root / 'n02-early'}), with "
            "different figures (a copy taken before the run finished, or one resumed apart): kept the one with the "
            "most figures (30 against 15)") in notes  # fmt: skip


# -- 3. a point too small for the trend check -------------------------------------------------------------------------
def test_a_point_too_small_to_read_a_trend_says_so(tmp_path):
    """A stand-in slowing 15 % a request (2 ms a token, 0.3 ms more each request) at c=1 (4 requests) and c=2 (8):
    too few to read a trend; each point's line and row say so, and neither reads as a steady server."""
    suite = tmp_path / "small.toml"
    suite.write_text(f"""
name = "small"
backend = "standin"
methods = ["ar"]
model = "{MODEL}"
concurrency = [1, 2]
num_prompts = 4
requests_per_stream = 4
warmup_requests = 0
max_tokens = 8
timeout_s = 20
[[workloads]]
name = "gsm8k"
data = "{GSM8K}"
""")
    with run_standin("--pace-ms", "2", "--slow-down-ms", "0.3", "--model", MODEL) as url:
        result = sweep("--suite", suite, "--endpoint", url, "-o", tmp_path / "out", "--no-report")
    assert result.exit_code == 0, result.output
    run = load_run(only_run_dir(tmp_path / "out"))
    for c, n in ((1, 4), (2, 8)):
        line = result.output.split(f"standin ar gsm8k c={c}", 1)[1].splitlines()[0]
        assert f"too few requests to read a trend ({n} < 18)" in line, line
        (row,) = run.points[(run.points["concurrency"] == c) & (run.points["category"] == "all")].to_dict("records")
        assert row["extra"]["trend"] == {"slowed": None, "unread": f"too few requests to read a trend ({n} < 18)",
                                         "measured_requests": n}  # fmt: skip


# -- 4. a cap on one SSE line ----------------------------------------------------------------------------------------
def test_one_sse_line_is_capped_naming_the_cap_and_the_point_goes_on():
    """Four streams at once, four requests each with a 50 MB line and four without: the huge ones fail naming the cap
    and the bytes held, the others are measured; the client's Python allocations peak below four streams' caps plus
    room (tracemalloc: what the client held, read the same on any machine; the unfixed parser held 50 MB a stream and
    copied it at every read)."""
    requests = [Request(id=f"q{i}", workload="w", category="c", max_tokens=STREAMED,
                        messages=({"role": "user", "content": "HUGE" if i % 2 == 0 else "small"},))
                for i in range(8)]  # fmt: skip
    with FakeServer() as server:
        cfg = LoadGenConfig(base_url=server.url, model=MODEL, timeout_s=60)
        tracemalloc.start()
        try:
            results = run_closed_loop_sync(requests, 4, cfg)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    by_id = {r.request_id: r for r in results}
    assert len(by_id) == 8
    for i in range(8):
        r = by_id[f"q{i}"]
        if i % 2:
            assert r.ok and r.output_tokens == STREAMED, r.error
            continue
        assert not r.ok and r.error.startswith(f"an SSE line longer than the client's cap of {MAX_LINE_BYTES:,} "
                                               "bytes (16 MiB): "), r.error  # fmt: skip
        held = int(r.error.split("(16 MiB): ", 1)[1].split(" bytes", 1)[0].replace(",", ""))
        assert MAX_LINE_BYTES < held <= MAX_LINE_BYTES + 2**20  # stopped within one read past the cap
    assert peak < 4 * MAX_LINE_BYTES + 16 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_the_cap_holds_for_one_events_data_lines_and_reads_no_line_twice():
    parser = SSEParser(max_line_bytes=100)
    assert parser.feed(b"data: " + b"a" * 50 + b"\n") == [] and parser.feed(b"data: " + b"b" * 40 + b"\n\n") != []
    with pytest.raises(SSELineTooLong, match="cap of 100 bytes"):  # three lines of one event: 120 bytes of data
        parser.feed(b"data: " + b"a" * 40 + b"\ndata: " + b"a" * 40 + b"\ndata: " + b"a" * 40 + b"\n")
    pieces = SSEParser(max_line_bytes=100)
    for _ in range(9):  # an unfinished line held as its pieces until its end
        assert pieces.feed(b"x" * 10) == []
    assert pieces.feed(b"\ndata: ok\n\n") == [b"ok"]


# -- 5. usage counts that are no integer, or that the bounds cannot confirm --------------------------------------------
@pytest.mark.parametrize(("usage", "note", "flag"), [
    ("abc", 'the server\'s usage.completion_tokens was no integer on 3 of 3 requests (e.g. "abc"): read as missing, '
            "their output tokens counted from the stream",
     "the server's token counts were no integers: usage.completion_tokens was no integer on 3 request(s) at 1 point "
     '(AR c=1: "abc"); read as missing'),
    (2 * STREAMED, "the server's usage.completion_tokens could not be checked on 3 of 3 requests (e.g. 32 reported for "
                   "16 output chunks of 64 characters): no token ids in their streams and no tokenizer of "
                   f"{MODEL} on this machine",
     "the server's token counts could not be checked: usage.completion_tokens could not be checked on 3 request(s) "
     "at 1 point (AR c=1: 32 reported for 16 output chunks of 64 characters)"),
], ids=["abc", "twice"])  # fmt: skip
def test_a_usage_count_that_is_no_integer_or_cannot_be_checked_is_said(tmp_path, usage, note, flag):
    with FakeServer(usage=usage) as server:
        result = sweep("--suite", write_suite(tmp_path, max_tokens=STREAMED), "--endpoint", server.url,
                       "-o", tmp_path / "out", "--no-report")  # fmt: skip
    assert result.exit_code == 0, result.output  # "abc" failed the point: ExceptionGroup in a TaskGroup
    run = load_run(only_run_dir(tmp_path / "out"))
    (point,) = run.points.to_dict("records")
    assert point["status"] == "ok" and point["num_errors"] == 0
    measured = [r for r in run.request_records() if not r.warmup]
    line = next(x for x in result.output.splitlines() if "ar gsm8k c=1:" in x)
    assert note in line, line
    assert any(f.startswith(flag) for f in trust_flags(run)), trust_flags(run)
    if usage == "abc":  # read as missing: the stream's own count, as for a server that sends no usage
        assert [(r.server_usage_invalid, r.output_tokens, r.output_tokens_source) for r in measured] == \
            [('"abc"', STREAMED, "chunks")] * 3  # fmt: skip
        assert point["output_tokens"] == 3 * STREAMED
    else:  # kept, since the bounds allow it, and said
        assert [(r.output_tokens, r.streamed_tokens, r.usage_mismatch) for r in measured] == \
            [(2 * STREAMED, STREAMED, False)] * 3  # fmt: skip
        assert point["extra"]["usage_check"]["unverified"] == 3


# -- 6. SIGTERM while a file is written ------------------------------------------------------------------------------
HELD_WRITE = """
import os, pathlib, sys, time
ready = pathlib.Path(sys.argv[1])
def held_fsync(fd):  # the write's fsync, held: the signal lands while the temporary file is open, every time
    ready.write_text("writing")
    time.sleep(60)
os.fsync = held_fsync
from dflashbench.cli import app
app(sys.argv[2:], prog_name="dflashbench")
"""


@pytest.mark.parametrize("command", ["report", "history"])
def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path, command):
    script, ready, out = tmp_path / "held_write.py", tmp_path / "ready", tmp_path / "out" / "x.md"
    script.write_text(HELD_WRITE)
    out.parent.mkdir()
    source = EXAMPLE_RUN
    if command == "history":  # its own copy, so that the folder's index is written there, not in results/
        source = tmp_path / "run"
        shutil.copytree(EXAMPLE_RUN, source)
    args = [command, source, "-o", out] + (["--no-index"] if command == "history" else [])
    proc = subprocess.Popen([sys.executable, str(script), str(ready), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_for_children())  # fmt: skip
    try:
        wait_for(ready.exists, 60, "the write to start")
        assert [p.name for p in out.parent.iterdir()] == [".x.md.tmp"]
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "interrupted by SIGTERM" in stderr and "Traceback" not in stderr
    assert list(out.parent.iterdir()) == []  # no .x.md.tmp, and no half-written x.md
