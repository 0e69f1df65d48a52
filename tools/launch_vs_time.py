"""A launch's own speed, told apart from the machine's speed moving in time (issue #41; the noise rule's launch term,
docs/metrics.md).

Usage (from the repository root, at normal priority, nothing else running):

    python tools/launch_vs_time.py [--pairs 5] [--batches 6] [--requests 6] [--method ar] [--max-tokens 64]

``tools/launch_noise.py`` launches servers one after another, so a launch's speed there also holds whatever the
machine did between launches. Here two servers of the same method (the embedded pair) are up **at once**, and
batches of requests go to them in turn (A B B A A B ...: a linear trend hits both alike), one request at a time
through dflashbench's own client (:func:`dflashbench.load.loadgen.run_closed_loop_sync`, the synthetic workload's
prompts). Per pair of servers it prints each batch's median TPOT; then three spreads (log, 1 sd):

- **time**: one server's batch against its next batch, seconds apart (the machine moving while a point runs);
- **same moment**: server A's batch against B's batch next to it (what two launches differ by at one time,
  plus the batches' own sampling noise);
- **launch**: the spread of a pair's mean log(A/B) across pairs, less the part the batches' own noise explains,
  per launch (divided by sqrt 2): a launch's own speed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
import urllib.request

from dflashbench.backends.process import free_port
from dflashbench.load.loadgen import LoadGenConfig, run_closed_loop_sync
from dflashbench.measure.metrics import tpot_s
from dflashbench.workloads import load_requests
from dflashbench.workloads.spec import WorkloadSpec


def _serve(method: str, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dflashbench", "serve", "--method", method, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def _served_model(port: int, proc: subprocess.Popen, timeout_s: float = 300.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server on port {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as resp:
                return json.load(resp)["data"][0]["id"]
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the server on port {port} did not answer in {timeout_s:.0f} s")


def _batch_tpot_ms(cfg: LoadGenConfig, requests) -> float:
    results = run_closed_loop_sync(requests, 1, cfg)
    return statistics.median(tpot_s(r) * 1e3 for r in results if r.ok and tpot_s(r) is not None)


def _pair(method: str, batches: int, requests, b_first: bool) -> tuple[list[float], list[float]]:
    ports = [free_port(), free_port()]
    while ports[1] == ports[0]:
        ports[1] = free_port()
    procs = [_serve(method, p) for p in (ports[::-1] if b_first else ports)]
    procs = procs[::-1] if b_first else procs  # procs[0] serves A, whichever started first
    try:
        cfgs = [LoadGenConfig(base_url=f"http://127.0.0.1:{p}", model=_served_model(p, proc), api="chat")
                for p, proc in zip(ports, procs, strict=True)]  # fmt: skip
        for cfg in cfgs:  # untimed: each server's first requests
            run_closed_loop_sync(requests[:2], 1, cfg)
        out: tuple[list[float], list[float]] = ([], [])
        for b in range(batches):  # the same prompts every batch (greedy: the same tokens), only the timing moves
            for side in ((0, 1) if b % 2 == 0 else (1, 0)):  # A B, B A, A B ...
                out[side].append(_batch_tpot_ms(cfgs[side], requests))
        return out
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--batches", type=int, default=6, help="batches per server and pair")
    ap.add_argument("--requests", type=int, default=6, help="requests per batch")
    ap.add_argument("--method", default="ar")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--b-first", action="store_true", help="start server B before A (is the first launched slower?)")
    args = ap.parse_args()
    spec = WorkloadSpec(name="synthetic", max_tokens=args.max_tokens)
    requests = load_requests(spec, num_prompts=args.requests, seed=0)
    time_steps, same_moment, pair_means = [], [], []
    for i in range(args.pairs):
        a, b = _pair(args.method, args.batches, requests, args.b_first)
        la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
        diffs = [x - y for x, y in zip(la, lb, strict=True)]
        time_steps += [s[k + 1] - s[k] for s in (la, lb) for k in range(len(s) - 1)]
        same_moment += diffs
        pair_means.append(statistics.mean(diffs))
        print(f"pair {i}: A " + " ".join(f"{x:.3f}" for x in a) + " | B " + " ".join(f"{x:.3f}" for x in b)
              + f" ms | mean log(A/B) {pair_means[-1]:+.3f}", flush=True)  # fmt: skip
    sd_time = statistics.pstdev(time_steps) / math.sqrt(2)  # one batch's deviation; a step holds two
    sd_same = statistics.stdev(same_moment)
    between = statistics.variance(pair_means) if len(pair_means) > 1 else float("nan")
    launch = math.sqrt(max(between - sd_same**2 / args.batches, 0.0) / 2)
    print(f"time (one server, batch to next batch): {sd_time:.3f}; same moment (A's batch vs B's beside it): "
          f"{sd_same:.3f}; launch (per launch, sampling noise removed): {launch:.3f}  [log, 1 sd; {args.pairs} pairs x "
          f"{args.batches} batches x {args.requests} requests, {args.method}, {'B' if args.b_first else 'A'} started first]")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
