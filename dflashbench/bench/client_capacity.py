"""How much load one client process can generate, measured against the paced stand-in server
(:mod:`dflashbench.bench.standin`): ``dflashbench bench loadgen``.

:func:`run_bench` starts the stand-in as a separate process, then drives it with the real load generator at
growing concurrency, first from one client process, then sharded across client processes (each with its own
event loop and a share of the streams), and reports the largest concurrency and tok/s at which the measured
ITL stays within a tolerance of the true pace.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import asdict, dataclass

from dflashbench.bench.standin import read_stats, run_standin


@dataclass
class Trial:
    processes: int
    concurrency: int
    requests: int
    errors: int
    tokens: int
    duration_s: float
    tok_per_s: float
    itl_ms_p50: float | None
    itl_ms_mean: float | None
    itl_ms_p99: float | None
    itl_err_pct: float | None  # |mean ITL - true| / true, in %
    server_late_ms_mean: float | None
    client_cpu_us_per_tok: float | None  # client CPU time (all shards, user + sys) per token received
    ok: bool
    server_bound: bool = False  # the stand-in itself fell behind (chunks sent later than one pace on average)


def _shard(base_url: str, n_requests: int, concurrency: int, max_tokens: int, queue, barrier) -> None:
    """One client process: its own event loop, ``concurrency`` streams, results summarised back. All shards
    start together (``barrier``), after their imports, so start-up cost is outside the measured window."""
    from dflashbench.load.loadgen import LoadGenConfig, run_closed_loop_sync
    from dflashbench.measure import metrics
    from dflashbench.types import Request

    reqs = [Request(id=f"b{i}", workload="bench", category="bench",
                    messages=({"role": "user", "content": "go"},), max_tokens=max_tokens)  # fmt: skip
            for i in range(n_requests)]
    cfg = LoadGenConfig(base_url=base_url, model="standin", timeout_s=300)
    barrier.wait()
    cpu0 = time.process_time()
    results = run_closed_loop_sync(reqs, concurrency, cfg)
    cpu_s = time.process_time() - cpu0
    itls = [g for r in results if r.ok for g in metrics.itl_s(r)]
    queue.put({
        "errors": sum(not r.ok for r in results), "requests": len(results),
        "tokens": sum(r.output_tokens for r in results if r.ok),
        "start": min(r.sent_ns for r in results), "end": max((r.last_token_ns or 0) for r in results),
        "itls": itls, "cpu_s": cpu_s,
    })  # fmt: skip


def _collect(queue, procs) -> list[dict]:
    """One summary per shard; a shard that died is an error, not a hang."""
    import queue as queue_mod

    parts: list[dict] = []
    while len(parts) < len(procs):
        try:
            parts.append(queue.get(timeout=1.0))
        except queue_mod.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                for p in procs:
                    p.terminate()
                raise RuntimeError(f"a load-generator shard exited with code {dead[0].exitcode}; see its traceback above") from None
    return parts


def _trial(base_url: str, processes: int, concurrency: int, max_tokens: int, rounds: int, true_itl_s: float,
           tolerance: float, tokens_per_chunk: int = 1) -> Trial:  # fmt: skip
    import numpy as np

    before = read_stats(base_url)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    shares = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    shares = [s for s in shares if s]
    barrier = ctx.Barrier(len(shares))
    procs = [ctx.Process(target=_shard, args=(base_url, s * rounds, s, max_tokens, queue, barrier)) for s in shares]
    for p in procs:
        p.start()
    parts = _collect(queue, procs)
    for p in procs:
        p.join()
    after = read_stats(base_url)
    itls = np.asarray([g for part in parts for g in part["itls"]])
    tokens = sum(p["tokens"] for p in parts)
    duration = (max(p["end"] for p in parts) - min(p["start"] for p in parts)) / 1e9
    chunks = after["chunks"] - before["chunks"]
    late = (after["late_sum_ns"] - before["late_sum_ns"]) / chunks / 1e6 if chunks else None
    mean_itl = float(itls.mean()) if itls.size else None
    err = abs(mean_itl - true_itl_s) / true_itl_s * 100 if mean_itl is not None else None
    p50 = float(np.percentile(itls, 50)) if itls.size else None
    errors = sum(p["errors"] for p in parts)
    ok = (errors == 0 and err is not None and err <= tolerance * 100
          and p50 is not None and abs(p50 - true_itl_s) / true_itl_s <= tolerance)  # fmt: skip
    return Trial(
        processes=processes, concurrency=concurrency, requests=sum(p["requests"] for p in parts), errors=errors,
        tokens=tokens, duration_s=duration, tok_per_s=tokens / duration if duration > 0 else 0.0,
        itl_ms_p50=p50 * 1e3 if p50 is not None else None, itl_ms_mean=mean_itl * 1e3 if mean_itl else None,
        itl_ms_p99=float(np.percentile(itls, 99)) * 1e3 if itls.size else None, itl_err_pct=err,
        server_late_ms_mean=late, ok=ok,
        client_cpu_us_per_tok=sum(p["cpu_s"] for p in parts) / tokens * 1e6 if tokens else None,
        server_bound=late is not None and late / 1e3 > true_itl_s * tokens_per_chunk,  # behind by > one chunk pace
    )  # fmt: skip


def format_trial(t: Trial) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.3f}"

    verdict = ("ok" if t.ok else "OVER") + (" (the stand-in server fell behind: the limit is this machine)" if t.server_bound else "")
    return (f"{t.processes} proc x {t.concurrency:>5} streams: {t.tok_per_s:>9.0f} tok/s, ITL p50 {ms(t.itl_ms_p50)} ms "
            f"mean {ms(t.itl_ms_mean)} ms p99 {ms(t.itl_ms_p99)} ms, error {ms(t.itl_err_pct)}%, server late "
            f"{ms(t.server_late_ms_mean)} ms, client CPU {ms(t.client_cpu_us_per_tok)} us/tok, {t.errors} errors "
            f"-> {verdict}")  # fmt: skip


def run_bench(
    *,
    pace_ms: float = 10.0,
    tokens_per_chunk: int = 1,
    max_tokens: int = 100,
    rounds: int = 2,
    concurrencies: list[int] | None = None,
    processes: list[int] | None = None,
    server_workers: int = 1,
    tolerance: float = 0.05,
    on_trial=None,
) -> dict:
    """Run the benchmark; returns ``{"config", "trials", "best": {processes: best passing trial}}``."""
    concurrencies = concurrencies or [16, 32, 64, 128, 256, 512, 1024]
    processes = processes or [1, max(2, min(os.cpu_count() or 2, 8) // 2)]
    true_itl = pace_ms / 1e3 / tokens_per_chunk
    config = dict(pace_ms=pace_ms, tokens_per_chunk=tokens_per_chunk, max_tokens=max_tokens, rounds=rounds,
                  server_workers=server_workers, tolerance_pct=tolerance * 100, true_itl_ms=true_itl * 1e3,
                  cpus=os.cpu_count())  # fmt: skip
    trials: list[Trial] = []
    best: dict[int, Trial] = {}
    with run_standin("--pace-ms", str(pace_ms), "--tokens-per-chunk", str(tokens_per_chunk),
                     "--workers", str(server_workers)) as base_url:  # fmt: skip
        for procs in processes:
            for conc in concurrencies:
                if conc < procs:
                    continue
                for _attempt in range(2):  # a failing trial is repeated once: one noisy run does not decide
                    trial = _trial(base_url, procs, conc, max_tokens, rounds, true_itl, tolerance, tokens_per_chunk)
                    trials.append(trial)
                    if on_trial:
                        on_trial(trial)
                    if trial.ok:
                        break
                if not trial.ok:
                    break
                best[procs] = trial
    return {"config": config, "trials": [asdict(t) for t in trials],
            "best": {str(k): asdict(v) for k, v in best.items()}}  # fmt: skip
