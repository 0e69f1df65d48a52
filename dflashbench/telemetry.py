"""NVIDIA GPU telemetry through NVML (the ``nvidia-ml-py`` package, module ``pynvml``).

:func:`gpu_info` says which GPUs and driver a run had, or states plainly that there was no NVIDIA GPU.
:class:`NvmlSampler` samples power, the total-energy counter, utilisation, memory, SM/memory clocks and
temperature in a background thread while a sweep point runs; :meth:`NvmlSampler.stop` returns a
:class:`TelemetryWindow`. Energy over the window is the delta of NVML's total-energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded), summed over the sampled
GPUs; where a GPU has no such counter (pre-Volta) or it went backwards, the sampled power is integrated
over time instead (trapezoids) and the window says so. The power integral is kept beside the counter's
figure either way, as a cross-check. Without NVML or a GPU every figure is ``None`` and ``reason`` says why:
nothing stands in for an unknown value.

Which GPUs: those ``CUDA_VISIBLE_DEVICES`` leaves visible (indices or ``GPU-``/``MIG-`` UUIDs, as CUDA reads
it), so a run on GPUs 2,3 of an 8-GPU node does not count its neighbours' energy; every GPU when unset.
Samples are taken at fixed ticks ``t0 + n * interval_s`` (on an H100, one round of NVML queries takes a few
milliseconds, so sleeping ``interval_s`` after each round ran 3% slow).

The NVML module can be injected (``nvml=``) so the maths and threading are tested without a GPU.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

NO_GPU = "no NVIDIA GPU"
GIB = 1024**3


def load_nvml():
    """The ``pynvml`` module from nvidia-ml-py; ImportError with the install hint when it is missing."""
    try:
        import pynvml
    except ImportError:
        raise ImportError("nvidia-ml-py is not installed (pip install 'dflashbench[gpu]')") from None
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_info(nvml=None) -> dict[str, Any]:
    """GPU model, count and driver, e.g. ``{"gpu": "NVIDIA H200", "gpu_count": 1, "driver": "570.86.15",
    "cuda_driver": "12.8", "gpus": ["NVIDIA H200"]}``; or ``{"gpu": "no NVIDIA GPU", "gpu_count": 0,
    "reason": ...}`` where there is none (or NVML cannot be loaded), never an exception."""
    try:
        nvml = nvml or load_nvml()
        nvml.nvmlInit()
    except Exception as exc:  # ImportError, NVMLError (driver not loaded, library not found)
        return {"gpu": NO_GPU, "gpu_count": 0, "reason": _reason(exc)}
    try:
        count = nvml.nvmlDeviceGetCount()
        names = [_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        if not names:
            return {"gpu": NO_GPU, "gpu_count": 0, "reason": "NVML found no devices"}
        info: dict[str, Any] = {
            "gpu": names[0] if len(set(names)) == 1 else ", ".join(names),
            "gpu_count": count,
            "driver": _text(nvml.nvmlSystemGetDriverVersion()),
            "gpus": names,
        }
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            info["cuda_visible_devices"] = visible
        try:
            cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
            info["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except Exception:
            pass
        return info
    except Exception as exc:
        return {"gpu": NO_GPU, "gpu_count": 0, "reason": _reason(exc)}
    finally:
        _quietly(nvml.nvmlShutdown)


@contextlib.contextmanager
def nvml_session(nvml=None):
    """NVML initialised for the block and shut down after it, quietly; ``None`` where it cannot start (no driver,
    no library): the caller reads nothing then."""
    try:
        nvml = nvml or load_nvml()
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no library: nothing to read
        yield None
        return
    try:
        yield nvml
    finally:
        _quietly(nvml.nvmlShutdown)


def _reason(exc: Exception) -> str:
    return f"{NO_GPU}: {exc}" if str(exc) else f"{NO_GPU}: {type(exc).__name__}"


def _quietly(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


@dataclass
class TelemetryWindow:
    """What the GPUs did over one measurement window. ``None`` = not measured (see ``reason``)."""

    energy_j: float | None
    mean_power_w: float | None
    gpu_util_pct_mean: float | None
    mem_used_gib_max: float | None
    samples: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float | None = None
    energy_source: str | None = None  # "energy_counter" | "power_integral"
    energy_j_power_integral: float | None = None  # sampled power integrated over time: a cross-check
    interval_s: float | None = None  # the sampling interval asked for
    num_gpus: int = 0
    reason: str | None = None  # why figures are missing, e.g. "no NVIDIA GPU: ..."


class NvmlSampler:
    """Background sampling of the GPUs while a sweep point runs::

        sampler = NvmlSampler(interval_s=0.1)
        sampler.start()
        ...  # the measured window
        window = sampler.stop()  # TelemetryWindow

    ``device_indices=None`` samples the GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible (every GPU NVML sees
    when it is unset). Without NVML or a GPU, ``start()`` succeeds and ``stop()`` returns a window of ``None``
    figures with the reason.
    """

    def __init__(
        self, interval_s: float = 0.1, device_indices: list[int] | None = None, *, nvml=None
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self.device_indices = device_indices
        self._nvml = nvml
        self._handles: list[tuple[int, Any]] = []
        self._samples: list[dict[str, Any]] = []
        self._energy_start: dict[int, float | None] = {}
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reason: str | None = None

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def __enter__(self) -> NvmlSampler:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        if self._thread is not None or self.reason is not None:
            self.stop()

    def start(self) -> NvmlSampler:
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._stop.clear()
        self._samples = []
        self._handles = []
        self.reason = None
        try:
            self._nvml = self._nvml or load_nvml()
            self._nvml.nvmlInit()
        except Exception as exc:
            self.reason = _reason(exc)
            return self
        try:
            if self.device_indices is not None:
                self._handles = [(i, self._nvml.nvmlDeviceGetHandleByIndex(i)) for i in self.device_indices]
            else:
                self._handles = visible_handles(self._nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
        except Exception as exc:
            self.reason = _reason(exc)
            _quietly(self._nvml.nvmlShutdown)
            return self
        if not self._handles:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES") if self.device_indices is None else None
            hidden = f"CUDA_VISIBLE_DEVICES={visible!r} leaves no GPU visible" if visible is not None else ""
            self.reason = f"{NO_GPU}: {hidden or 'NVML found no devices'}"
            _quietly(self._nvml.nvmlShutdown)
            return self
        self._t0 = time.monotonic()
        self._energy_start = {i: self._energy_mj(h) for i, h in self._handles}
        self._sample_once()
        self._thread = threading.Thread(target=self._run, name="dflashbench-nvml", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> TelemetryWindow:
        if not self._handles:
            return TelemetryWindow(
                None, None, None, None, reason=self.reason or f"{NO_GPU}: sampler not started"
            )
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sample_once()
        duration = time.monotonic() - self._t0
        energy_end = {i: self._energy_mj(h) for i, h in self._handles}
        window = self._summarize(duration, energy_end)
        _quietly(self._nvml.nvmlShutdown)
        self._handles = []
        return window

    # --- sampling ---

    def _run(self) -> None:
        ticks = 1
        while not self._stop.wait(max(0.0, self._t0 + ticks * self.interval_s - time.monotonic())):
            self._sample_once()
            ticks = max(ticks + 1, int((time.monotonic() - self._t0) / self.interval_s) + 1)  # skip missed ticks

    def _energy_mj(self, handle) -> float | None:
        value = _quietly(self._nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        return float(value) if value is not None else None

    def _sample_once(self) -> None:
        nvml = self._nvml
        now = time.monotonic()
        wall = time.time()
        for index, h in self._handles:
            power_mw = _quietly(nvml.nvmlDeviceGetPowerUsage, h)
            util = _quietly(nvml.nvmlDeviceGetUtilizationRates, h)
            mem = _quietly(nvml.nvmlDeviceGetMemoryInfo, h)
            self._samples.append(
                {
                    "t_s": now - self._t0,
                    "unix_s": wall,
                    "gpu": index,
                    "power_w": power_mw / 1000.0 if power_mw is not None else None,
                    "energy_mj": self._energy_mj(h),
                    "gpu_util_pct": float(util.gpu) if util is not None else None,
                    "mem_util_pct": float(util.memory) if util is not None else None,
                    "mem_used_gib": mem.used / GIB if mem is not None else None,
                    "mem_total_gib": mem.total / GIB if mem is not None else None,
                    "sm_clock_mhz": _quietly(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
                    "mem_clock_mhz": _quietly(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
                    "temp_c": _quietly(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
                }
            )

    # --- the window's figures ---

    def _summarize(self, duration: float, energy_end: dict[int, float | None]) -> TelemetryWindow:
        samples = self._samples
        integral = _integrate_power(samples, [i for i, _ in self._handles])
        energy_j, source = self._energy_from_counters(energy_end), "energy_counter"
        if energy_j is None:
            energy_j, source = integral, "power_integral"
        if energy_j is None:
            source = None
        utils = [s["gpu_util_pct"] for s in samples if s["gpu_util_pct"] is not None]
        mems = [s["mem_used_gib"] for s in samples if s["mem_used_gib"] is not None]
        return TelemetryWindow(
            energy_j=energy_j,
            mean_power_w=energy_j / duration if energy_j is not None and duration > 0 else None,
            gpu_util_pct_mean=sum(utils) / len(utils) if utils else None,
            mem_used_gib_max=max(mems) if mems else None,
            samples=list(samples),
            duration_s=duration,
            energy_source=source,
            energy_j_power_integral=integral,
            interval_s=self.interval_s,
            num_gpus=len(self._handles),
            reason=None if energy_j is not None else "NVML reported neither energy nor power",
        )

    def _energy_from_counters(self, energy_end: dict[int, float | None]) -> float | None:
        """Sum over GPUs of the energy-counter delta in joules; ``None`` unless every GPU has a sane one."""
        total = 0.0
        for index, _ in self._handles:
            start, end = self._energy_start.get(index), energy_end.get(index)
            if start is None or end is None or end < start:
                return None
            total += (end - start) / 1000.0
        return total


def visible_handles(nvml, visible: str | None) -> list[tuple[int, Any]]:
    """``(NVML index, handle)`` of the GPUs ``visible`` (``CUDA_VISIBLE_DEVICES``) names; every GPU when it
    is ``None``. CUDA stops at the first entry it cannot parse; NVML's own errors (no such index or UUID)
    propagate, since a run on GPUs nobody can find has no telemetry to report."""
    if visible is None:
        return [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(nvml.nvmlDeviceGetCount())]
    handles = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit():
            handles.append((int(entry), nvml.nvmlDeviceGetHandleByIndex(int(entry))))
        elif entry.startswith(("GPU-", "MIG-")):
            handle = nvml.nvmlDeviceGetHandleByUUID(entry)
            handles.append((int(nvml.nvmlDeviceGetIndex(handle)), handle))
        else:
            break
    return handles


def _integrate_power(samples: list[dict[str, Any]], indices: list[int]) -> float | None:
    """Trapezoidal integral of sampled power (W) over time (s), summed over GPUs; ``None`` if impossible."""
    total = 0.0
    for index in indices:
        points = [(s["t_s"], s["power_w"]) for s in samples if s["gpu"] == index and s["power_w"] is not None]
        if len(points) < 2:
            return None
        total += sum(
            (t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False)
        )
    return total
