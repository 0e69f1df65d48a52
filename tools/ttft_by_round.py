"""Client TTFT per round of a closed loop, against the pace-exact stand-in: where the TTFT overhead comes from.

    python tools/ttft_by_round.py [STREAMS ...]      (default 64 256; 3 rounds, 3 repeats; prints, writes nothing)

A closed loop's streams start together, so each round is a burst. Round 1 is the one that would open the
connections (see ``dflashbench.load.loadgen.open_connections``). Printed per repeat: the stand-in's own TTFT
mean, and the client TTFT mean and mean ITL of each round's requests (rounds by send order).
"""

from __future__ import annotations

import sys

import numpy as np

from dflashbench.bench.overhead import MAX_TOKENS, PACE_MS, TTFT_MS, ServerWindow
from dflashbench.bench.standin import run_standin
from dflashbench.load.loadgen import LoadGenConfig
from dflashbench.load.loadgen_procs import PointLoad, choose_processes, run_sharded
from dflashbench.measure import metrics
from dflashbench.types import Request

ROUNDS, REPEATS = 3, 3


def main(streams: list[int]) -> None:
    with run_standin("--pace-ms", str(PACE_MS), "--ttft-ms", str(TTFT_MS)) as url:
        for repeat in range(REPEATS):
            for c in streams:
                reqs = [Request(id=f"r{i}", workload="bench", category="bench",
                                messages=({"role": "user", "content": "go"},), max_tokens=MAX_TOKENS)
                        for i in range(c * ROUNDS)]  # fmt: skip
                results = []
                window = ServerWindow(url)
                run_sharded(reqs, None, PointLoad(concurrency=c, processes=choose_processes("auto", c)),
                            LoadGenConfig(base_url=url, model="standin", timeout_s=300), "bench", "bench",
                            results.append)  # fmt: skip
                server = window.close()
                results.sort(key=lambda r: r.sent_ns)
                rounds = [results[k * c:(k + 1) * c] for k in range(ROUNDS)]
                ttft = " ".join(f"{np.mean([metrics.ttft_s(r) for r in rs]) * 1e3:.1f}" for rs in rounds)
                itl = " ".join(f"{np.mean([g for r in rs for g in metrics.itl_s(r)]) * 1e3:.3f}" for rs in rounds)
                print(f"repeat {repeat + 1}, {c} streams: server TTFT {server.ttft_ms_mean:.1f} ms; client TTFT by "
                      f"round {ttft} ms; ITL by round {itl} ms", flush=True)  # fmt: skip


if __name__ == "__main__":  # client processes are spawned: they import this module
    main([int(a) for a in sys.argv[1:]] or [64, 256])
