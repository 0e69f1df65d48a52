"""Where the load generator's time goes: cProfile of one client process driving the pace-exact stand-in.

    python tools/profile_client.py [STREAMS ...]      (default 64 256; writes nothing, prints the top costs)

The stand-in runs as its own process (50 ms TTFT, 10 ms per token, 128 tokens, as ``bench loadgen --overhead``);
the client runs here, in this process, under cProfile, two requests per stream. Printed per stream count: the
functions with the most own time (tottime), per chunk and per request, so a change to the per-chunk path shows.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

from dflashbench.bench.overhead import MAX_TOKENS, PACE_MS, TTFT_MS
from dflashbench.bench.standin import run_standin
from dflashbench.load.loadgen import LoadGenConfig, run_closed_loop_sync
from dflashbench.types import Request

TOP = 5


def profile(base_url: str, streams: int, rounds: int = 2) -> None:
    reqs = [Request(id=f"p{i}", workload="bench", category="bench", messages=({"role": "user", "content": "go"},),
                    max_tokens=MAX_TOKENS) for i in range(streams * rounds)]  # fmt: skip
    cfg = LoadGenConfig(base_url=base_url, model="standin", timeout_s=300)
    prof = cProfile.Profile(time.process_time)  # CPU time: waiting in epoll costs nothing, as it should
    prof.enable()
    results = run_closed_loop_sync(reqs, streams, cfg)
    prof.disable()
    chunks = sum(len(r.chunk_ns) for r in results)
    stats = pstats.Stats(prof)
    total = stats.total_tt
    print(f"\n== {streams} streams: {len(results)} requests, {chunks} chunks, {total:.2f} s CPU in the client "
          f"({total / chunks * 1e6:.1f} us per chunk, {total / len(results) * 1e3:.2f} ms per request); "
          f"own CPU time per function:")
    # a function called about once per chunk or more is a per-chunk cost; one called a few times per request
    # (building and sending it, the result, the output's hash) a per-request cost
    by_own = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])
    per_chunk = [kv for kv in by_own if kv[1][1] >= chunks / 2][:TOP]
    per_request = [kv for kv in by_own if kv[1][1] < chunks / 2 and kv[1][1] >= len(results) / 2][:TOP]
    for title, rows, unit, count in (("per chunk", per_chunk, "us/chunk", chunks),
                                     ("per request", per_request, "us/request", len(results))):
        print(f"  top {TOP} {title}:")
        for (file, line, name), (_cc, calls, own, _cum, _callers) in rows:
            where = f"{file.rsplit('/', 2)[-2]}/{file.rsplit('/', 1)[-1]}:{line}" if "/" in file else file
            print(f"    {own / count * 1e6:7.2f} {unit}  {own / total:5.1%}  {calls:>9} calls  {name}  ({where})")


def main(argv: list[str]) -> None:
    streams = [int(a) for a in argv] or [64, 256]
    with run_standin("--pace-ms", str(PACE_MS), "--ttft-ms", str(TTFT_MS)) as base_url:
        for n in streams:
            profile(base_url, n)


if __name__ == "__main__":
    main(sys.argv[1:])
