"""Client TTFT overhead: ``dflashbench bench loadgen --overhead``.

The paced stand-in server (:mod:`dflashbench.bench.standin`) waits a realistic TTFT before the first chunk of
every stream (``--ttft-ms``, 50 by default) and sends the next ones at exact deadlines (``--pace-ms``, 10), and
records its own TTFT (arrival to first chunk made, the ``vllm:time_to_first_token_seconds`` histogram on its
``/metrics``). The client's TTFT mean minus the server's own, over the same requests, is the client's overhead
(event-loop lag, JSON parsing, connection set-up): the figure AIPerf and the other peers are compared on. What
the stand-in itself fell behind it reports (``server late``) so a slow server is not charged to the client. Each
cell is one point of ``dflashbench sweep --endpoint`` with ``--client-processes p`` at ``c`` streams, run by the
sweep's own code with everything a sweep keeps on (:mod:`dflashbench.bench.sweep_point`: its store, progress bar,
counter scrapes, telemetry), so the table measures what a user's sweep adds. Cells run interleaved, ``repeats``
times; the table gives the median and the range (min-max) of each figure over the repeats.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

from dflashbench.backends.counters import parse_latency_histograms, server_timing
from dflashbench.bench.common import num, with_range
from dflashbench.bench.standin import read_stats, run_standin
from dflashbench.bench.sweep_point import run_sweep_point
from dflashbench.load.loadgen_procs import choose_processes
from dflashbench.measure import metrics


@dataclass
class OverheadCell:
    processes: int
    concurrency: int
    repeat: int
    requests: int
    errors: int
    server_requests: int  # what the stand-in answered over the cell (its own count, from /stats)
    ttft_overhead_ms: float | None  # client TTFT mean - the server's own TTFT mean, over the same requests
    client_ttft_ms_mean: float | None
    server_ttft_ms_mean: float | None
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    itl_ms_mean: float | None
    itl_err_pct: float | None  # |mean ITL - true ITL| / true
    itl_err_vs_server_pct: float | None  # |mean ITL - the server's own mean ITL| / the server's: the client's part
    server_late_ms_mean: float | None
    busy_share_max: float | None  # the busiest client process's CPU / wall
    loop_lag_ms_p99: float | None  # the worst client process's event-loop lag, p99
    wall_s: float


@dataclass(frozen=True)
class ServerSide:
    """What the stand-in itself saw over a window: requests it answered, its own TTFT mean (arrival to first chunk
    made), and how late its chunks went out on average (its own lag, not the client's)."""

    requests: int
    ttft_ms_mean: float | None
    late_ms_mean: float | None
    itl_ms_mean: float | None = None  # its own gaps between chunks made, per token (the pace it really kept)


class ServerWindow:
    """The stand-in's counters read before a client runs; :meth:`close` reads them again and gives the difference."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.stats, self.hist = read_stats(base_url), read_ttft_histogram(base_url)

    def close(self) -> ServerSide:
        stats, hist = read_stats(self.base_url), read_ttft_histogram(self.base_url)
        timing = server_timing(self.hist, hist)
        ttft_s = timing.get("ttft_s", {}).get("mean_s")
        itl_s = timing.get("itl_s", {}).get("mean_s")
        chunks = stats["chunks"] - self.stats["chunks"]
        late_ns = stats["late_sum_ns"] - self.stats["late_sum_ns"]
        return ServerSide(requests=int(stats["requests"] - self.stats["requests"]),
                          ttft_ms_mean=ttft_s * 1e3 if ttft_s is not None else None,
                          late_ms_mean=late_ns / chunks / 1e6 if chunks else None,
                          itl_ms_mean=itl_s * 1e3 if itl_s is not None else None)  # fmt: skip


def measure_cell(base_url: str, processes: int | str, concurrency: int, *, max_tokens: int, rounds: int,
                 true_itl_s: float, repeat: int = 0) -> OverheadCell:  # fmt: skip
    """One cell: ``concurrency`` streams x ``rounds`` requests each, from ``processes`` client processes (a number,
    or ``"auto"``), run as ``dflashbench sweep --endpoint`` runs a point
    (:func:`dflashbench.bench.sweep_point.run_sweep_point`)."""
    window = ServerWindow(base_url)
    t0 = time.perf_counter()
    point = run_sweep_point(base_url, concurrency, rounds=rounds, max_tokens=max_tokens, processes=processes)
    wall = time.perf_counter() - t0
    server = window.close()
    results = point.results
    client = (point.row.extra or {}).get("client") or {}
    ok = [r for r in results if r.ok]
    ttfts = np.asarray([metrics.ttft_s(r) for r in ok if metrics.ttft_s(r) is not None])
    itls = np.asarray([g for r in ok for g in metrics.itl_s(r)])
    client_ttft_ms = float(ttfts.mean()) * 1e3 if ttfts.size else None
    itl_ms = float(itls.mean()) * 1e3 if itls.size else None
    return OverheadCell(
        processes=client.get("processes") or processes, concurrency=concurrency, repeat=repeat, requests=len(results),
        errors=len(results) - len(ok), server_requests=server.requests,
        ttft_overhead_ms=overhead_ms(client_ttft_ms, server.ttft_ms_mean),
        client_ttft_ms_mean=client_ttft_ms, server_ttft_ms_mean=server.ttft_ms_mean,
        ttft_ms_p50=float(np.percentile(ttfts, 50)) * 1e3 if ttfts.size else None,
        ttft_ms_p99=float(np.percentile(ttfts, 99)) * 1e3 if ttfts.size else None,
        itl_ms_mean=itl_ms, itl_err_pct=itl_error_pct(itl_ms, true_itl_s * 1e3),
        itl_err_vs_server_pct=itl_error_pct(itl_ms, server.itl_ms_mean),
        server_late_ms_mean=server.late_ms_mean, busy_share_max=client.get("busy_share_max"), wall_s=wall,
        loop_lag_ms_p99=client.get("loop_lag_ms_p99"),
    )  # fmt: skip


def overhead_ms(client_ttft_ms: float | None, server_ttft_ms: float | None) -> float | None:
    """The client's TTFT overhead: its TTFT mean minus the server's own, over the same requests."""
    if client_ttft_ms is None or server_ttft_ms is None:
        return None
    return client_ttft_ms - server_ttft_ms


def itl_error_pct(itl_ms: float | None, true_itl_ms: float | None) -> float | None:
    """|measured ITL - true pace| / true pace, in percent; ``None`` when either is unknown."""
    if itl_ms is None or not true_itl_ms:
        return None
    return abs(itl_ms - true_itl_ms) / true_itl_ms * 100


def read_ttft_histogram(base_url: str) -> dict:
    """The stand-in's own latency histograms (``GET /metrics``), as the sweep reads an engine's."""
    import urllib.request

    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        return parse_latency_histograms(r.read().decode())


# The setting of the peers' comparison (issue #29): a realistic first-token wait and per-token pace.
TTFT_MS, PACE_MS, MAX_TOKENS = 50.0, 10.0, 128


def run_overhead(*, concurrencies=(64, 256, 1024), processes=("auto",), repeats: int = 1, pace_ms: float = PACE_MS,
                 ttft_ms: float = TTFT_MS, max_tokens: int = MAX_TOKENS, rounds: int = 2, server_workers: int = 1,
                 on_cell=None) -> dict:  # fmt: skip
    """Start the stand-in, run every (processes, concurrency) cell ``repeats`` times, interleaved. With several
    ``server_workers`` the server's TTFT is read from one of them (the one that answers ``/metrics``), so the
    overhead is only given with one."""
    config = dict(pace_ms=pace_ms, max_tokens=max_tokens, rounds=rounds, repeats=repeats, server_workers=server_workers,
                  concurrencies=list(concurrencies), processes=list(processes), cpus=os.cpu_count(),
                  true_ttft_ms=ttft_ms)  # fmt: skip
    cells: list[OverheadCell] = []
    with run_standin("--pace-ms", str(pace_ms), "--ttft-ms", str(ttft_ms), "--workers", str(server_workers)) as base_url:
        for repeat in range(repeats):
            for conc in concurrencies:
                for procs in resolve_processes(processes, conc):
                    cell = measure_cell(base_url, procs, conc, max_tokens=max_tokens, rounds=rounds,
                                        true_itl_s=pace_ms / 1e3, repeat=repeat)  # fmt: skip
                    cells.append(cell)
                    if on_cell:
                        on_cell(cell)
    return {"config": config, "cells": [asdict(c) for c in cells], "table": summarize(cells)}


def resolve_processes(settings, concurrency: int) -> list[int]:
    """The client process counts to try at ``concurrency`` streams: each setting a number, or ``"auto"`` as a sweep
    with ``--client-processes auto`` would choose (:func:`dflashbench.load.loadgen_procs.choose_processes`), once each."""
    return list(dict.fromkeys(choose_processes(s, concurrency) for s in settings))


def summarize(cells: list[OverheadCell]) -> list[dict]:
    """Per (processes, concurrency): median and range over repeats of each figure."""
    out = []
    keys = sorted({(c.processes, c.concurrency) for c in cells}, key=lambda k: (k[1], k[0]))
    for procs, conc in keys:
        group = [c for c in cells if (c.processes, c.concurrency) == (procs, conc)]
        row: dict = {"processes": procs, "concurrency": conc, "repeats": len(group),
                     "errors": sum(c.errors for c in group)}  # fmt: skip
        for name in ("ttft_overhead_ms", "client_ttft_ms_mean", "server_ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_mean", "itl_err_pct", "itl_err_vs_server_pct", "server_late_ms_mean", "busy_share_max",
                     "loop_lag_ms_p99"):
            values = [getattr(c, name) for c in group if getattr(c, name) is not None]
            row[name] = statistics.median(values) if values else None
            row[name + "_range"] = [min(values), max(values)] if values else None
        out.append(row)
    return out


def overhead_words(overhead_ms: float | None, client_ms: float | None, server_ms: float | None) -> str:
    """``TTFT overhead X ms (client Y - server Z)``: the figure and what it is the difference of."""
    return f"TTFT overhead {num(overhead_ms)} ms (client {num(client_ms)} - server {num(server_ms)})"


def format_cell(c: OverheadCell) -> str:
    f = num
    return (f"repeat {c.repeat + 1}: {c.processes} proc x {c.concurrency:>5} streams: "
            f"{overhead_words(c.ttft_overhead_ms, c.client_ttft_ms_mean, c.server_ttft_ms_mean)}, "
            f"TTFT p50 {f(c.ttft_ms_p50)} ms "
            f"p99 {f(c.ttft_ms_p99)} ms, ITL error {f(c.itl_err_pct)}% (vs the server's own {f(c.itl_err_vs_server_pct, 2)}%), server late {f(c.server_late_ms_mean, 2)} ms, "
            f"busiest client {f((c.busy_share_max or 0) * 100, 0)}% CPU, loop lag p99 {f(c.loop_lag_ms_p99)} ms, "
            f"{c.errors} errors, {c.wall_s:.1f} s")  # fmt: skip


def format_table(rows: list[dict]) -> str:
    """A plain-text table: medians with [min-max] over the repeats."""
    def f(row, name, d=1, scale=1.0):
        return with_range(row[name], row[name + "_range"], d, scale)

    head = ("streams", "procs", "TTFT overhead ms", "TTFT p50 ms", "TTFT p99 ms", "ITL err %", "ITL err vs server %",
            "server late ms", "client CPU %",
            "loop lag p99 ms", "err")
    lines = [" | ".join(head)]
    for r in rows:
        lines.append(" | ".join((str(r["concurrency"]), str(r["processes"]), f(r, "ttft_overhead_ms"), f(r, "ttft_ms_p50"), f(r, "ttft_ms_p99"),
                                 f(r, "itl_err_pct"), f(r, "itl_err_vs_server_pct", 2), f(r, "server_late_ms_mean", 2), f(r, "busy_share_max", 0, 100),
                                 f(r, "loop_lag_ms_p99"), str(r["errors"]))))  # fmt: skip
    return "\n".join(lines)
