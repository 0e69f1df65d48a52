"""The event loop the client runs on: uvloop where it is installed (a dependency on Linux and macOS), asyncio's
own elsewhere.

uvloop's loop is libuv underneath; per read and per callback it costs less than asyncio's selector loop, and the
client's per-chunk path is mostly loop work (``bench loadgen --overhead`` and ``tools/profile_client.py`` measure
it). Timestamps do not depend on the loop: the client stamps chunks with ``time.perf_counter_ns``/``monotonic``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


# DFLASHBENCH_EVENT_LOOP=asyncio runs the client on asyncio's own loop (to compare the two, or rule uvloop out).
ENV = "DFLASHBENCH_EVENT_LOOP"


def loop_factory():
    """uvloop's ``new_event_loop``, or ``None`` (asyncio's default) where uvloop is not installed or
    ``DFLASHBENCH_EVENT_LOOP=asyncio``."""
    if os.environ.get(ENV, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # Windows, or an install without it: asyncio's loop measures the same, a little slower
        return None
    return uvloop.new_event_loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the client's loop (:func:`loop_factory`)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coro)
