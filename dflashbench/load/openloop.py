"""Open-loop load: requests sent at scheduled arrival times (``--request-rate``), whatever the server's pace.

The schedule comes from :mod:`dflashbench.load.arrivals`. Each request becomes due at ``start + offset`` (that is
its ``queued_ns``); with ``max_concurrency`` set, a due request waits for one of that many slots before it is
sent (``sent_ns``), and the schedule does not speed up afterwards to catch up, as in ``vllm bench serve``
(``asyncio.Semaphore`` around the send). So ``sent_ns - queued_ns`` is the client's lateness plus the wait for
a slot; TTFT is measured from ``sent_ns``, like vLLM's. A multi-turn conversation arrives once and sends its
later turns as soon as the previous one ends, as the closed loop does.

Without ``max_concurrency`` the cap is :func:`default_in_flight_cap`: every request in flight holds a socket, and
a server that stalls would otherwise let the schedule open one per arrival until the process runs out of file
descriptors (the requests after that fail with ``Too many open files``, measuring the client, not the server).
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Callable, Sequence

import aiohttp

from dflashbench.load.loadgen import LoadGenConfig, Stopper, make_session, run_conversation
from dflashbench.types import Request, RequestResult

IN_FLIGHT_CAP_MAX = 4096  # the default cap where the open-file limit is higher (or unlimited)


def default_in_flight_cap() -> int:
    """The open loop's cap on requests in flight when none is given: half of this process's open-file limit
    (``RLIMIT_NOFILE``, soft), so that the other half is left for everything else it holds open, at most
    :data:`IN_FLIGHT_CAP_MAX`."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return IN_FLIGHT_CAP_MAX
    return max(1, min(IN_FLIGHT_CAP_MAX, soft // 2))


async def run_open_loop(
    requests: Sequence[Request],
    offsets_s: Sequence[float],
    cfg: LoadGenConfig,
    *,
    max_concurrency: int | None = None,
    start_ns: int | None = None,
    run_id: str = "",
    point_id: str = "",
    on_result: Callable[[RequestResult], None] | None = None,
    session: aiohttp.ClientSession | None = None,
    stop: Stopper | None = None,
    point_concurrency: int | None = None,
) -> list[RequestResult]:
    """Send ``requests[i]`` at ``start_ns + offsets_s[i]`` (``start_ns``: now when not given; several client
    processes share one), at most ``max_concurrency`` at once (default :func:`default_in_flight_cap`); return
    every result in completion order. Once ``stop`` is set no further arrival is sent; those sent finish.
    Results record ``point_concurrency``, the point's cap, where ``max_concurrency`` is one client process's
    share of it (default: the cap used here)."""
    if len(offsets_s) != len(requests):
        raise ValueError(f"{len(requests)} requests but {len(offsets_s)} arrival times")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    max_concurrency = max_concurrency or default_in_flight_cap()
    results: list[RequestResult] = []
    slots = asyncio.Semaphore(max_concurrency)
    concurrency = point_concurrency or max_concurrency  # what results record: the point's cap

    def record(result: RequestResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    async def one(sess: aiohttp.ClientSession, req: Request, due_ns: int) -> None:
        async with slots:
            await run_conversation(sess, cfg, req, due_ns, record, run_id=run_id, point_id=point_id,
                                   concurrency=concurrency, warmup=False)  # fmt: skip

    own = session is None
    sess = make_session(max_concurrency) if own else session
    start = time.perf_counter_ns() if start_ns is None else start_ns
    try:
        async with asyncio.TaskGroup() as tg:
            for req, offset in zip(requests, offsets_s, strict=True):
                due_ns = start + int(offset * 1e9)
                # until it is due: the event loop's timer may wake up to a millisecond early (uvloop rounds to
                # whole ms), which would send the request before its time
                while (delay_s := (due_ns - time.perf_counter_ns()) / 1e9) > 0:
                    await asyncio.sleep(delay_s)
                if stop is not None and stop.is_set():
                    break
                tg.create_task(one(sess, req, due_ns))
    finally:
        if own:
            await sess.close()
    return results
