"""The machine's speed probe: a fixed piece of work, timed at the start of a sweep, before each point and at the
end, so that the noise rule (docs/metrics.md, "The noise rule") can read the machine's drift from the run itself
instead of assuming a figure.

- **CPU**: a fixed single-threaded float32 matmul (256 x 256, 128 times per trial, 5 trials: about 0.25 s on an
  idle core of this project's CI machine). A trial lasts tens of milliseconds, several scheduler slices, so a
  core shared with other work reads slower in proportion to the share it lost; so does a frequency step.
  Where the sweep split the CPUs (an engine on the CPU, ``--engine-cpus``) the probe runs on the engine's CPUs,
  between points, when the engine is idle: that is the speed the engine will get. Idle is waited for, not
  assumed: an engine's threads can spin on for seconds after its last request (:mod:`dflashbench.run.engine_quiet`).
- **GPU**: where the engine computes on an NVIDIA GPU that this process can see through a CUDA build of torch, a
  fixed bf16 GEMM (2048^3, 20 per trial) and a 256 MiB device-to-device copy (10 per trial), timed with CUDA
  events, with NVML's SM and memory clocks, power and clock-event (throttle) reasons read at the same moment
  (``nvmlDeviceGetClockInfo``, ``nvmlDeviceGetPowerUsage``, ``nvmlDeviceGetCurrentClocksEventReasons``, as
  nvidia-ml-py 13.615 names them; older releases have only ``...ThrottleReasons``).

Each reading keeps every trial's time (``ProbeReading.trials_s``), so the probe's own noise is known apart from
the machine's drift (:mod:`dflashbench.measure.drift`). The probe never fails a sweep: a probe that cannot run
leaves no reading, and the rule then says drift was not measured.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence

from dflashbench.run.engine_quiet import MAX_WAIT_S, WINDOW_S, Quiet, group_cpu_s, wait_quiet
from dflashbench.types import ProbeReading, format_cpu_list

TRIALS = 5
CPU_N, CPU_REPS = 256, 128
GPU_N, GPU_GEMMS, GPU_COPY_MIB, GPU_COPIES = 2048, 20, 256, 10
CPU_WORK = f"matmul {CPU_N}x{CPU_N} fp32 x{CPU_REPS}, 1 thread"
GPU_WORK = f"GEMM {GPU_N}^3 bf16 x{GPU_GEMMS} + copy {GPU_COPY_MIB} MiB x{GPU_COPIES}"


@contextlib.contextmanager
def _on_cpus(cpus: Sequence[int] | None) -> Iterator[str | None]:
    """Run the body on ``cpus`` (this thread only), then restore; yields the CPUs it ran on."""
    if not hasattr(os, "sched_getaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    try:
        if cpus:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, set(cpus))
        yield format_cpu_list(os.sched_getaffinity(0))
    finally:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, before)


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e9


def cpu_reading(at: str, cpus: Sequence[int] | None = None, quiet: Quiet | None = None) -> ProbeReading:
    """One CPU reading: :data:`TRIALS` timings of the fixed matmul, on ``cpus`` when given; ``quiet``: what the wait
    for the launched engines to go quiet found just before (kept in the reading)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core's speed: the engine's threads and the client's share the rest
    try:
        gen = torch.Generator().manual_seed(0)
        a, b = torch.randn(CPU_N, CPU_N, generator=gen), torch.randn(CPU_N, CPU_N, generator=gen)

        def work() -> None:
            for _ in range(CPU_REPS):
                torch.mm(a, b)

        with _on_cpus(cpus) as ran_on:
            work()  # warm: first-call allocation and dispatch are not the machine's speed
            t_ns = time.perf_counter_ns()
            trials = tuple(_timed(work) for _ in range(TRIALS))
    finally:
        torch.set_num_threads(threads)
    settled = {} if quiet is None else {"settle_s": round(quiet.waited_s, 3), "engine_cores": round(quiet.engine_cores, 3)}
    return ProbeReading(kind="cpu", at=at, t_ns=t_ns, seconds=statistics.median(trials), trials_s=trials,
                        work=CPU_WORK, cpus=ran_on, **settled)  # fmt: skip


def _nvml_state(device: int) -> dict:
    """NVML's view of ``device`` at this moment; ``{}`` where NVML cannot be read."""
    try:
        from dflashbench.telemetry import load_nvml

        nvml = load_nvml()
        nvml.nvmlInit()
        h = nvml.nvmlDeviceGetHandleByIndex(device)
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # fmt: skip
        state = {"sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
                 "mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM),
                 "power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                 "clock_event_reasons": int(reasons(h))}  # fmt: skip
        nvml.nvmlShutdown()
        return state
    except Exception:  # noqa: BLE001 - the probe's timing stands without NVML's view
        return {}


def _gpu_trials(device: int) -> tuple[int, tuple[float, ...]]:
    """``(t_ns, trial seconds)`` of the fixed GPU work on CUDA ``device``; its tensors are freed on return."""
    import torch

    dev = torch.device("cuda", device)
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(GPU_N, GPU_N, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(GPU_N, GPU_N, device=dev, dtype=torch.bfloat16, generator=gen)
    src = torch.empty(GPU_COPY_MIB * 2**20, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)

    def trial() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(GPU_GEMMS):
            torch.mm(a, b)
        for _ in range(GPU_COPIES):
            dst.copy_(src)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    trial()  # warm: kernels chosen and loaded
    t_ns = time.perf_counter_ns()
    return t_ns, tuple(trial() for _ in range(TRIALS))


def gpu_reading(at: str, device: int = 0) -> ProbeReading | None:
    """One GPU reading on CUDA ``device``: GEMM and copy time per trial (CUDA events), NVML's clocks beside it;
    ``None`` where this process sees no CUDA device."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        t_ns, trials = _gpu_trials(device)
        state = _nvml_state(device)
        torch.cuda.empty_cache()  # give the engine its memory back
    except Exception:  # noqa: BLE001 - no reading rather than a failed sweep
        return None
    return ProbeReading(kind="gpu", at=at, t_ns=t_ns, seconds=statistics.median(trials), trials_s=trials,
                        work=GPU_WORK, gpu=state)  # fmt: skip


class SpeedProbe:
    """Takes the sweep's readings and hands each to ``sink`` (the run store) as it is made.

    ``cpus``: where the CPU probe runs (the engine's CPUs when the sweep split them); ``gpu``: also read the GPU
    (the engine computes on one); ``engines``: the process groups of the engines the sweep launched here on the
    CPUs the probe runs on, whose own CPU use the CPU probe waits out first (:mod:`dflashbench.run.engine_quiet`;
    after one wait that ran out, an engine that never goes quiet, it only reads one window). A probe that raises
    leaves no reading and is not tried again."""

    def __init__(self, sink: Callable[[ProbeReading], None], cpus: Sequence[int] | None = None, gpu: bool = False,
                 engines: Callable[[], Sequence[int]] | None = None):  # fmt: skip
        self._sink, self._cpus, self._gpu, self._engines = sink, tuple(cpus or ()), gpu, engines
        self._broken = False
        self._max_wait_s = MAX_WAIT_S

    def _wait_quiet(self) -> Quiet | None:
        groups = list(self._engines()) if self._engines is not None else []
        if not groups:
            return None
        quiet = wait_quiet(lambda: group_cpu_s(groups), max_wait_s=self._max_wait_s)
        if not quiet.settled:  # an engine that spins on for good: later readings only say so (one window each)
            self._max_wait_s = WINDOW_S
        return quiet

    def read(self, at: str) -> list[ProbeReading]:
        if self._broken:
            return []
        try:
            readings = [cpu_reading(at, self._cpus, self._wait_quiet())]
        except Exception:  # noqa: BLE001 - torch missing or broken: the sweep goes on, drift unmeasured
            self._broken = True
            return []
        if self._gpu and (g := gpu_reading(at)) is not None:
            readings.append(g)
        for r in readings:
            self._sink(r)
        return readings
