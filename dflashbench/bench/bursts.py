"""What the burst rule's gap floor rests on, measured on this machine: ``python -m dflashbench.bench.bursts``.

The real load generator drives the stand-in server (:mod:`dflashbench.bench.standin`) twice at each concurrency:

- *pace-exact* (a chunk every ``pace``): the shortest gaps the client records between chunks the server sent
  ``pace`` apart (the 1st percentile and the minimum), and how many requests the rule
  (:mod:`dflashbench.measure.observability`) flags: wrongly, unless the machine could not keep up (the stand-in's own
  share of chunks sent over 1 ms late says whether the server could);
- *whole output at the end* (``--burst 0``: every chunk in one write): how far apart the client stamps chunks
  that reached it together (the largest in-burst gap), and how many requests the rule flags.

The floor (:data:`~dflashbench.measure.observability.BURST_GAP_S`) must lie above the second and below the first.
"""

from __future__ import annotations

import argparse
import json

from dflashbench.bench.standin import read_stats, run_standin
from dflashbench.load.loadgen import LoadGenConfig, run_closed_loop_sync
from dflashbench.measure import observability
from dflashbench.types import Request


def _gaps_ms(results) -> list[float]:
    return [(b - a) / 1e6 for r in results if r.ok for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]


def measure(pace_ms: float, concurrency: int, burst: int, max_tokens: int, requests_per_stream: int) -> dict:
    """One stand-in, one closed-loop run: gap statistics and the rule's verdicts."""
    import numpy as np

    reqs = [Request(id=f"b{i}", workload="bench", category="bench", messages=({"role": "user", "content": "go"},),
                    max_tokens=max_tokens) for i in range(concurrency * requests_per_stream)]  # fmt: skip
    with run_standin("--pace-ms", str(pace_ms), "--burst", str(burst)) as url:
        results = run_closed_loop_sync(reqs, concurrency, LoadGenConfig(base_url=url, model="standin", timeout_s=300))
        late = read_stats(url)  # the stand-in's own lateness: a slow server bursts for real
    gaps = np.asarray(_gaps_ms(results))
    obs = observability.point_observability(results)
    return {"pace_ms": pace_ms, "concurrency": concurrency, "burst": burst, "requests": obs.requests,
            "flagged": obs.requests - obs.observed, "burst_token_share": round(1 - (obs.tokens_share or 0), 4),
            "gap_ms_min": round(float(gaps.min()), 4), "gap_ms_p1": round(float(np.percentile(gaps, 1)), 4),
            "gap_ms_max": round(float(gaps.max()), 4),
            "server_late_over_1ms_share": round(late["late_over_1ms"] / max(late["chunks"], 1), 4)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dflashbench.bench.bursts", description=__doc__.splitlines()[0])
    parser.add_argument("--pace-ms", type=float, default=3.0)
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"gap floor {observability.BURST_GAP_S * 1e3:g} ms; a request is flagged above "
          f"{observability.MAX_BURST_SHARE:.0%} of its tokens in bursts")  # fmt: skip
    for c in (int(x) for x in args.concurrency.split(",")):
        for burst in (1, 0):
            print(json.dumps(measure(args.pace_ms, c, burst, args.max_tokens, args.requests_per_stream)), flush=True)


if __name__ == "__main__":
    main()
