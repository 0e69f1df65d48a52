"""Waiting for the sweep's launched engines to go quiet before the speed probe reads the machine.

The probe (:mod:`dflashbench.run.probe`) asks how fast the machine is *for the engine*: on a split machine it runs
on the engine's own CPUs, between points. An engine that keeps its threads spinning for a while after its last
request then competes with the probe, and the probe reads the engine's own idle spin as the machine's drift. On
vLLM's CPU build that is what the probe read: 0.040 s at the start and before each server's first point, then
0.08-0.14 s before its next points (two or three threads on one core: its trials alternate between the two),
and 0.040 s again at the end, in every launch of ``calibrate --backend vllm`` (docs/measurements/
2026-11-29-sharp-gate/, "The probe read the engine"). That made the gate's drift term ±18-36 % there.

So before a reading the probe waits, up to :data:`MAX_WAIT_S`, until the launched engines' process groups use
less than :data:`IDLE_CORES` of a core over a :data:`WINDOW_S` window (their CPU time from ``/proc/PID/stat``,
utime + stime of every process in the group). A neighbour's load is not waited for: it is the machine's, and
the probe is there to read it. What the wait found goes into the reading (``settle_s``, ``engine_cores``), so a
reading taken while an engine still ran says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dflashbench.backends.process import all_pids, process_start_ticks, stat_fields

# An idle server wakes now and then (its event loop, a stats log line): a fifth of a core is idle, a spinning thread
# reads a whole one. With the kernel's 10 ms ticks a 0.2 s window reads in steps of 0.05 core.
IDLE_CORES = 0.25
WINDOW_S = 0.2
MAX_WAIT_S = 20.0


@dataclass(frozen=True, slots=True)
class Quiet:
    """What the wait found: ``waited_s`` before the reading, ``engine_cores`` the engines' CPU use (cores) over the
    last window, ``settled`` whether that was below :data:`IDLE_CORES` (else the wait ran out)."""

    waited_s: float
    engine_cores: float
    settled: bool


def _ticks_per_s() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0


def group_cpu_s(pgids: Iterable[int]) -> float:
    """CPU seconds (user + system) used so far by every process in the process groups ``pgids``; 0 without /proc.
    A process that ends between the listing and the read is left out (its time is gone with it)."""
    groups = set(pgids)
    ticks = 0
    for pid in all_pids() if groups else ():
        fields = stat_fields(pid)  # after "pid (comm)": state ppid pgrp ...; utime, stime at 11, 12 (proc(5): 14, 15)
        if fields is not None and len(fields) > 12 and fields[2].isdigit() and int(fields[2]) in groups:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / _ticks_per_s()


def wait_quiet(cpu_s: Callable[[], float], *, window_s: float = WINDOW_S, idle_cores: float = IDLE_CORES,
               max_wait_s: float = MAX_WAIT_S, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> Quiet:  # fmt: skip
    """Wait until ``cpu_s`` (the engines' CPU seconds so far) grows by less than ``idle_cores`` per second over one
    ``window_s`` window, or ``max_wait_s`` has passed."""
    start = clock()
    before, t_before = cpu_s(), start
    while True:
        sleep(window_s)
        now_cpu, now = cpu_s(), clock()
        cores = max(0.0, now_cpu - before) / max(now - t_before, 1e-9)
        if cores < idle_cores:
            return Quiet(now - start, cores, True)
        if now - start >= max_wait_s:
            return Quiet(now - start, cores, False)
        before, t_before = now_cpu, now


def launched_groups(servers: Mapping[str, Any]) -> list[int]:
    """The process groups of the servers this sweep launched here that still run: the manifest's records
    (``ServerRecord``: ``pid``, the group's leader, and ``pid_start_ticks``, so a reused PID is not taken)."""
    groups = []
    for record in servers.values():
        pid, ticks = getattr(record, "pid", None), getattr(record, "pid_start_ticks", None)
        if pid is not None and ticks is not None and process_start_ticks(pid) == ticks:
            groups.append(int(pid))
    return groups
