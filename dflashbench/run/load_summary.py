"""What a point's load shape adds to its summary: the open loop's target and achieved arrival rate, goodput
under the suite's SLO, the client's own overhead, and how the requests spread over several endpoints.

All of it goes into ``PointSummary.extra`` (free to extend; the frozen contract stays as it is):
``extra["load"]`` (rate points), ``extra["goodput"]``, ``extra["client"]``, ``extra["endpoints"]``, ``extra["trend"]``
(the point's last third against its first: :mod:`dflashbench.measure.trend`).
"""

from __future__ import annotations

from collections.abc import Sequence

from dflashbench.load.arrivals import achieved_rate_per_s
from dflashbench.load.endpoints import requests_per_endpoint
from dflashbench.load.loadgen_procs import PointLoad, choose_processes
from dflashbench.load.openloop import default_in_flight_cap
from dflashbench.measure.goodput import goodput
from dflashbench.measure.metrics import measured
from dflashbench.measure.trend import slowdown
from dflashbench.types import PointSummary, RequestResult


def point_load(suite, concurrency: int, request_rate: float | None) -> PointLoad:
    """The load of one grid point of ``suite``: closed loop at ``concurrency``, or open loop at ``request_rate``."""
    cap = (suite.max_concurrency or default_in_flight_cap()) if request_rate is not None else None  # recorded as set
    streams = cap if request_rate is not None else concurrency
    return PointLoad(concurrency=0 if request_rate is not None else concurrency, request_rate=request_rate,
                     arrivals=suite.arrivals, burstiness=suite.burstiness, max_concurrency=cap, seed=suite.seed,
                     processes=choose_processes(suite.client_processes, streams))  # fmt: skip


def plan_line(suite) -> str:
    """The dry run's line on the load shape: client processes, open-loop rates and their arrivals, the SLO."""
    from dflashbench.load.loadgen_procs import AUTO_STREAMS_PER_PROCESS

    procs = (f"auto (one per {AUTO_STREAMS_PER_PROCESS} streams, at most one per CPU)"
             if suite.client_processes == "auto" else str(suite.client_processes))  # fmt: skip
    line = f"client processes: {procs}"
    if suite.request_rate:
        burst = f", burstiness {suite.burstiness:g}" if suite.arrivals == "poisson" else ""
        cap = f", at most {suite.max_concurrency or default_in_flight_cap()} in flight" + (
            "" if suite.max_concurrency else " (default: half the open-file limit; --max-concurrency sets it)")
        line += (f"; open-loop points at {', '.join(f'{r:g}' for r in suite.request_rate)} requests/s, "
                 f"{suite.arrivals} arrivals (seed {suite.seed}{burst}){cap}")  # fmt: skip
    if suite.goodput:
        line += "; goodput SLO " + ", ".join(f"{k} <= {v:g}" for k, v in suite.goodput.items())
    return line


def load_extra(load: PointLoad, results: Sequence[RequestResult], client: dict | None,
               slo: dict[str, float] | None, endpoints: Sequence[str] = ()) -> dict:  # fmt: skip
    """The extras of one point (see the module docstring)."""
    extra: dict = {}
    rows = measured(results)
    if load.open_loop:
        arrivals = [r.sent_ns for r in rows if r.turn == 0]  # one arrival per conversation
        extra["load"] = {"request_rate": load.request_rate, "arrivals": load.arrivals, "burstiness": load.burstiness,
                         "max_concurrency": load.max_concurrency, "arrived": len(arrivals),
                         "achieved_rate_per_s": achieved_rate_per_s(arrivals)}  # fmt: skip
    figures = goodput(results, slo or {})
    if figures is not None:
        extra["goodput"] = figures
    if client:
        extra["client"] = client
    if load.schedule_s is None and (trend := slowdown(results)) is not None:  # a trace's load is the trace's own
        extra["trend"] = trend
    if len(endpoints) > 1:
        extra["endpoints"] = {"urls": list(endpoints), "requests": requests_per_endpoint(results)}
    return extra


def category_extra(extra: dict, results: Sequence[RequestResult], category: str, slo: dict[str, float] | None) -> dict:
    """A category row's extras: the point's, with goodput over that category's requests alone."""
    if "goodput" not in extra:
        return extra
    return {**extra, "goodput": goodput([r for r in results if r.category == category], slo or {})}


def console_suffix(p: PointSummary) -> list[str]:
    """What the point's console line adds: the open loop's achieved rate, goodput. (The client's own cost is
    a tag on the line and a note at the end: :mod:`dflashbench.run.sweep_console`.)"""
    extra = p.extra or {}
    parts = []
    load = extra.get("load")
    if load and load.get("achieved_rate_per_s") is not None:
        parts.append(f"arrivals {load['achieved_rate_per_s']:.2f}/s (target {load['request_rate']:g})")
    gp = extra.get("goodput")
    if gp:
        slo = ",".join(f"{k}={v:g}" for k, v in gp["slo"].items())
        parts.append(f"goodput {gp['goodput_req_per_s']:.2f} req/s ({gp['good']}/{gp['requests']} met {slo})")
    return parts
