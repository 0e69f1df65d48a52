"""The speed probe waits out a launched engine's own CPU use (dflashbench.run.engine_quiet): the wait's rule on a
scripted clock, and the CPU time of a real process group that spins and then sleeps, read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from dflashbench.backends.process import process_start_ticks
from dflashbench.run import engine_quiet, probe
from dflashbench.run.manifest import ServerRecord
from dflashbench.types import ProbeReading


class _Scripted:
    """A clock that moves only when slept on, and an engine whose CPU use per second follows ``cores``, a window each."""

    def __init__(self, cores: list[float]) -> None:
        self.t, self.cpu, self.cores = 0.0, 0.0, list(cores)

    def sleep(self, s: float) -> None:
        self.cpu += s * (self.cores.pop(0) if self.cores else 0.0)
        self.t += s

    def clock(self) -> float:
        return self.t

    def cpu_s(self) -> float:
        return self.cpu


def test_the_wait_ends_at_the_first_quiet_window():
    eng = _Scripted([1.0, 2.0, 1.0, 0.05])  # three windows of one or two spinning threads, then idle
    q = engine_quiet.wait_quiet(eng.cpu_s, window_s=0.2, sleep=eng.sleep, clock=eng.clock)
    assert q.settled and q.waited_s == pytest.approx(0.8) and q.engine_cores == pytest.approx(0.05)


def test_an_idle_engine_costs_one_window():
    eng = _Scripted([])
    q = engine_quiet.wait_quiet(eng.cpu_s, window_s=0.2, sleep=eng.sleep, clock=eng.clock)
    assert q.settled and q.waited_s == pytest.approx(0.2) and q.engine_cores == 0.0


def test_an_engine_that_never_goes_quiet_is_read_anyway_and_said():
    eng = _Scripted([1.0] * 1000)
    q = engine_quiet.wait_quiet(eng.cpu_s, window_s=0.2, max_wait_s=3.0, sleep=eng.sleep, clock=eng.clock)
    assert not q.settled and q.waited_s == pytest.approx(3.0) and q.engine_cores == pytest.approx(1.0)


# A process group that spins until it has used 0.4 s of CPU, then sleeps: an engine's threads after its last request.
_SPIN_THEN_SLEEP = "import time\nwhile time.process_time() < 0.4: pass\ntime.sleep(60)\n"


@pytest.fixture
def spinner():
    proc = subprocess.Popen([sys.executable, "-c", _SPIN_THEN_SLEEP], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_the_wait_reads_a_real_groups_cpu_time_and_waits_until_it_stops(spinner):
    q = engine_quiet.wait_quiet(lambda: engine_quiet.group_cpu_s([spinner.pid]), max_wait_s=30.0)
    spent = engine_quiet.group_cpu_s([spinner.pid])
    assert q.settled, q
    assert spent >= 0.35  # the group's whole spin was counted (in 10 ms ticks)
    # quiet now: another window of the same group reads (almost) nothing
    before = engine_quiet.group_cpu_s([spinner.pid])
    time.sleep(0.2)
    assert engine_quiet.group_cpu_s([spinner.pid]) - before < 0.05


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_only_a_live_server_with_its_own_start_time_is_waited_for(spinner):
    ticks = process_start_ticks(spinner.pid)
    servers = {"ar": ServerRecord(pid=spinner.pid, pid_start_ticks=ticks),
               "dflash": ServerRecord(pid=spinner.pid, pid_start_ticks=(ticks or 0) + 1),  # a reused PID
               "eagle3": ServerRecord()}  # fmt: skip
    assert engine_quiet.launched_groups(servers) == [spinner.pid]


def test_the_probe_keeps_what_the_wait_found_in_its_reading():
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)  # an idle engine
    seen: list[ProbeReading] = []
    try:
        probe.SpeedProbe(seen.append, engines=lambda: [sleeper.pid]).read("before x")
    finally:
        sleeper.kill()
        sleeper.wait()
    (r,) = seen
    assert r.settle_s is not None and r.settle_s >= engine_quiet.WINDOW_S * 0.9
    assert r.engine_cores is not None and r.engine_cores < engine_quiet.IDLE_CORES  # (its exec may cost a tick)
    assert ProbeReading.from_dict(r.to_dict()) == r
    # without engines to wait for, nothing is waited and nothing said
    seen.clear()
    probe.SpeedProbe(seen.append).read("start")
    assert seen[0].settle_s is None and seen[0].engine_cores is None


def test_after_one_wait_that_ran_out_the_probe_reads_one_window_only(monkeypatch):
    asked: list[float] = []

    def never_quiet(cpu_s, *, max_wait_s):
        asked.append(max_wait_s)
        return engine_quiet.Quiet(max_wait_s, 1.0, False)

    monkeypatch.setattr(probe, "wait_quiet", never_quiet)
    seen: list[ProbeReading] = []
    p = probe.SpeedProbe(seen.append, engines=lambda: [1])
    p.read("before a")
    p.read("before b")
    assert asked == [engine_quiet.MAX_WAIT_S, engine_quiet.WINDOW_S]  # an engine that spins for good costs 20 s once
    assert [r.engine_cores for r in seen] == [1.0, 1.0]  # and each reading says it shared its CPU with the engine
