"""Where the client's time goes, function by function: py-spy samples of one point against the pace-exact stand-in,
on the path a user runs (``dflashbench sweep --endpoint``) or the benchmark's own (``bench loadgen --overhead``'s
cell), from any code tree.

    python tools/profile_client.py [--tree DIR] [--path sweep|bench ...] [--streams 64 256] [--rate 500]

Needs ``py-spy`` (``pip install py-spy``). One stand-in (``--pace-ms 10 --ttft-ms 50 --keepalive``) runs for the
whole tool; each (path, streams) runs once under ``py-spy record --subprocesses --gil`` (samples of the threads
that hold the GIL: CPU spent in Python and in the C it calls, waiting in ``epoll`` left out), 4 requests per
stream, 128 tokens. Every sample is put in one of four places by its stack:

- ``client loop``: the event loop that sends the requests and reads their chunks, in a process that sends them
  (the sweep's own process when it drives the point itself, else a client worker process); whatever runs there
  delays the next chunk's timestamp;
- ``beside it``: that process's other threads during the point (a results collector, a progress bar's refresh):
  they take the interpreter's lock from the loop;
- ``other process``: a process that sends no request (the sweep's, when client processes send them): its own CPU;
- ``after``: the point's summary, once every request has finished.

Printed per (path, streams): GIL-held milliseconds per place, then the functions with the most own time in each
place during the point, in microseconds per request (``--top``), and with two paths the same functions side by
side. Samples before the point (imports, the suite) and in the stand-in are left out.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sweep_overhead import SUITE  # noqa: E402 - the suite a user's sweep runs, shared with the A/B tool

ROUNDS = 4
# Frames that mark where a sample was taken (function names, matched in the stack text).
AFTER_MARKS = ("_summaries ", "record_failure ", "summarize_point ", "steady_figures ", "point_line ")
POINT_MARKS = ("measure_point ", "measure_cell ", "_worker ", "run_sharded ")
LOOP_MARK = "Runner.run "  # asyncio.Runner: the event loop's own frame (uvloop's and asyncio's)
CLIENT_MARK = "send_request "  # a process that sends requests: a client
# a client worker process's own function (dflashbench.load.loadgen_procs._worker; concurrent.futures has a _worker too)
WORKER = re.compile(r"(?:^|;)_worker \([^;]*loadgen_procs\.py")
THREAD_MARK = "Thread._bootstrap "  # a thread besides the main one (a worker's queue feeder, its to_thread pool)


def drive_bench(url: str, streams: int) -> None:
    """The benchmark's cell as the tree on PYTHONPATH runs it (one client process)."""
    from dflashbench.bench.overhead import measure_cell

    measure_cell(url, 1, streams, max_tokens=128, rounds=ROUNDS, true_itl_s=0.01)


def command(path: str, url: str, streams: int, work: Path) -> list[str]:
    if path == "bench":
        return [sys.executable, __file__, "--drive-bench", url, str(streams)]
    suite = work / f"c{streams}.toml"
    suite.write_text(SUITE.format(c=streams, per_stream=ROUNDS, procs='"auto"'))
    return [sys.executable, "-m", "dflashbench", "sweep", "--suite", str(suite), "--endpoint", url, "-o",
            str(work / f"out-{path}-{streams}"), "--no-report"]  # fmt: skip


def _function(frame: str) -> str:
    """``name (pkg/file.py)``: the frame without its line number and with the path shortened."""
    frame = re.sub(r":\d+\)$", ")", frame)
    return re.sub(r"\((?:/[^()]*?/)?(?:site-packages|lib/python3\.\d+)/", "(", frame).replace(str(Path.cwd()) + "/", "")


def process_of(stack: str) -> str:
    """The process a sample was taken in: py-spy's last ``process PID:"argv"`` frame (a child's stack begins with
    its parent's)."""
    return [f for f in stack.split(";") if f.startswith("process ")][-1]


def place(stack: str, clients: set[str], workers: set[str]) -> str | None:
    """Which place a sample belongs to (see the module docstring), or None (outside the point). ``workers``: the
    client worker processes (their every thread works for the point; their start-up does not); ``clients``: the
    processes that send requests themselves, where there are no workers. A sample in a worker's code is the
    client's whatever process py-spy files it under (it sometimes files a child's sample under its parent)."""
    if WORKER.search(stack):
        return "client loop" if LOOP_MARK in stack else "beside it"
    if process_of(stack) in workers:
        return "beside it" if THREAD_MARK in stack else None  # another thread of the worker, or its start-up
    if not any(m in stack for m in POINT_MARKS):
        return None
    if any(m in stack for m in AFTER_MARKS):
        return "after"
    if process_of(stack) not in clients:
        return "other process"
    return "client loop" if LOOP_MARK in stack else "beside it"


def profile(spy: str, tree: Path, path: str, url: str, streams: int, rate: int, work: Path) -> dict:
    raw = work / f"{path}-{streams}.txt"
    argv = [spy, "record", "--subprocesses", "--gil", "-r", str(rate), "--format", "raw", "-o", str(raw), "--",
            *command(path, url, streams, work)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    places: collections.Counter = collections.Counter()
    own: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    lines = [line.rpartition(" ") for line in raw.read_text().splitlines()]
    marked: collections.Counter = collections.Counter()
    total: collections.Counter = collections.Counter()
    for stack, _, n in lines:
        total[process_of(stack)] += int(n)
        marked[process_of(stack)] += int(n) if WORKER.search(stack) else 0
    workers = {proc for proc in total if marked[proc] > total[proc] / 2}  # most of its samples in a worker's code
    # without worker processes, the process that sends the requests itself is the client
    clients = set() if workers else {process_of(stack) for stack, _, _n in lines if CLIENT_MARK in stack}
    for stack, _, n in lines:
        where = place(stack, clients, workers)
        if where is None:
            continue
        places[where] += int(n)
        own[where][_function(stack.rsplit(";", 1)[-1])] += int(n)
    return {"requests": streams * ROUNDS, "rate": rate, "places": places, "own": own}


def us_per_request(samples: int, got: dict) -> float:
    return samples / got["rate"] / got["requests"] * 1e6


def report(got: dict[str, dict], streams: int, top: int) -> None:
    for path, prof in got.items():
        ms = {k: v / prof["rate"] * 1e3 for k, v in prof["places"].items()}
        print(f"\n== {path}, {streams} streams, {prof['requests']} requests: GIL-held ms in the client loop "
              f"{ms.get('client loop', 0):.0f}, beside it {ms.get('beside it', 0):.0f}, in another process "
              f"{ms.get('other process', 0):.0f}, after the point {ms.get('after', 0):.0f}")  # fmt: skip
    paths = list(got)
    for where in ("client loop", "beside it", "other process"):
        names: collections.Counter = collections.Counter()
        for prof in got.values():
            names.update(prof["own"][where])
        if not names:
            continue
        print(f"  {where}: own time, us per request ({' | '.join(paths)})")
        for name, _ in names.most_common(top):
            cells = " | ".join(f"{us_per_request(got[p]['own'][where][name], got[p]):7.0f}" for p in paths)
            print(f"    {cells}  {name}")
        totals = " | ".join(f"{us_per_request(sum(got[p]['own'][where].values()), got[p]):7.0f}" for p in paths)
        print(f"    {totals}  (all)")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--drive-bench"]:
        drive_bench(argv[1], int(argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=Path("."), help="the code tree to profile (its dflashbench/)")
    ap.add_argument("--path", action="append", choices=("sweep", "bench"), help="sweep (default) and/or bench")
    ap.add_argument("--streams", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--keep", type=Path, help="keep py-spy's raw samples in this folder")
    args = ap.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    from dflashbench.bench.standin import run_standin

    with tempfile.TemporaryDirectory(prefix="profile-client-") as tmp, \
            run_standin("--pace-ms", "10", "--ttft-ms", "50", "--keepalive") as url:  # fmt: skip
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for streams in args.streams:
            got = {p: profile(spy, args.tree, p, url, streams, args.rate, work) for p in args.path or ["sweep"]}
            report(got, streams, args.top)


if __name__ == "__main__":
    main(sys.argv[1:])
