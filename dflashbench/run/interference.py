"""Interference measured, not assumed (issue #55): before a side-by-side round's first load, one method's server is
timed on a few requests alone, then on the same requests while every other server is busy with its own, twice in
turn (alone, busy, alone, busy). Where its per-user rate falls by more than :data:`THRESHOLD` beside the others, the
servers are not independent here (shared memory bandwidth, PCIe or NVLink traffic, CPU caches, the client's cores):
the run is flagged (``manifest.json`` ``interference``, a trust line in the report) and, unless ``--interleave side``
asked for it, falls back to the methods in turn (their points in the same minutes, never at once), saying why.

The requests are sent like a point's, from client processes (:func:`dflashbench.load.loadgen_procs.drive`), at one
stream: the probed server's first few requests of the first workload, the busy servers' the same prompts. Client
processes run where the sweep's client runs (``--engine-cpus``: the cores no engine has; on 2 cores they share an
engine's, which the manifest's ``cpus`` records).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import threading
from collections.abc import Callable

from dflashbench.load import eventloop
from dflashbench.load.loadgen_procs import PointLoad, StopSending, drive
from dflashbench.measure.metrics import per_user_tok_per_s_pooled
from dflashbench.plan.grid import SweepContext
from dflashbench.run.point import ServerTarget
from dflashbench.types import Request

THRESHOLD = 0.10  # a server 10 % slower beside the others is not measured as itself: more than a point's precision
PROBE_REQUESTS = 4  # per phase; 4 phases
PROBE_MAX_TOKENS = 256  # a probe request's cap: long enough to decode at a steady rate, short enough on a GPU model
ROUNDS = 2  # alone, busy, alone, busy

Echo = Callable[[str], None]


def _rate(target: ServerTarget, requests: list[Request], run_id: str, stop: StopSending | None = None):
    results, _ = eventloop.run(drive(requests, PointLoad(concurrency=1), target.lg, run_id=run_id,
                                     point_id="interference-probe", stop=stop))  # fmt: skip
    return per_user_tok_per_s_pooled(r for r in results if r.ok)


def measure(ctx: SweepContext, targets: dict[str, ServerTarget], run_id: str, echo: Echo) -> dict | None:
    """Probe the first server beside the others (module doc); the manifest's ``interference`` record, or ``None``
    where there is nothing to probe (one server, no requests read)."""
    names = list(targets)
    if len(names) < 2:
        return None
    requests = next((r for r in ctx.plan.values() if isinstance(r, list) and r), None)
    if not requests:
        return None
    probed, others = targets[names[0]], [targets[n] for n in names[1:]]
    sample = [dataclasses.replace(r, id=f"interference-{r.id}", max_tokens=min(r.max_tokens, PROBE_MAX_TOKENS))
              for r in ([r for r in requests if not r.followup_turns] or requests)[:PROBE_REQUESTS]]  # fmt: skip
    alone, busy = [], []
    for _ in range(ROUNDS):
        alone.append(_rate(probed, sample, run_id))
        stop = StopSending()
        loops = [threading.Thread(target=_rate, args=(t, sample * 50, run_id, stop), daemon=True) for t in others]
        for thread in loops:
            thread.start()
        try:
            busy.append(_rate(probed, sample, run_id))
        finally:
            stop.set()
            for thread in loops:
                thread.join()
    if not all(alone) or not all(busy):
        return {"server": probed.name, "reason": "a probe request failed: interference not measured"}
    alone_rate = math.exp(statistics.fmean(math.log(x) for x in alone))
    busy_rate = math.exp(statistics.fmean(math.log(x) for x in busy))
    slowdown = 1 - busy_rate / alone_rate
    return {"server": probed.name, "beside": [t.name for t in others], "requests": len(sample), "rounds": ROUNDS,
            "alone_tok_per_s_user": round(alone_rate, 2), "busy_tok_per_s_user": round(busy_rate, 2),
            "slowdown": round(slowdown, 4), "threshold": THRESHOLD, "flagged": slowdown > THRESHOLD}  # fmt: skip


def line(record: dict) -> str:
    """The probe as the console and the report say it."""
    if "slowdown" not in record:
        return f"interference: {record.get('reason', 'not measured')}"
    moved = f"{abs(record['slowdown']):.1%} {'slower' if record['slowdown'] > 0 else 'faster'}"
    return (f"interference: {record['server']} ran {moved} per user with {', '.join(record['beside'])} busy beside it "
            f"({record['busy_tok_per_s_user']:g} against {record['alone_tok_per_s_user']:g} tok/s/user alone, "
            f"{record['requests']} requests x {record['rounds']} rounds); threshold {record['threshold']:.0%}")
