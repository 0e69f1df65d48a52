"""NVML telemetry: the maths and threading against an injected fake NVML module; one real-GPU test."""

import json
import statistics
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dflashbench.telemetry import GIB, NO_GPU, NvmlSampler, gpu_info, visible_handles

# NVML samples recorded on an H100 80GB HBM3 (driver 580.159.04) during a gpu-embedded sweep point
# (reference backend, DFlash, c=4): what the real driver reports, replayed by ReplayNvml below.
H100_SAMPLES = Path(__file__).parent / "fixtures" / "nvml-h100-dflash-c4.jsonl"


@pytest.fixture(autouse=True)
def _all_gpus_visible(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


class NVMLError(Exception):
    pass


class FakeNvml:
    """Just the pynvml calls dflashbench makes. Each GPU draws a constant power; its energy counter
    advances with real time at that power, as the driver's does."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, powers_w=(300.0,), *, energy_counter=True, init_error=None, names=None):
        self.powers_w = list(powers_w)
        self.energy_counter = energy_counter
        self.init_error = init_error
        self.names = names or ["NVIDIA H200"] * len(powers_w)
        self.t0 = time.monotonic()
        self.inits = self.shutdowns = 0
        self.energy_offset_mj = [1.0e9 + 1234.0 * i for i in range(len(powers_w))]
        self.energy_calls = 0

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.powers_w)

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < len(self.powers_w):
            raise NVMLError("Invalid Argument")
        return SimpleNamespace(index=i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return SimpleNamespace(index=int(uuid.rsplit("-", 1)[1]))  # "GPU-fake-<index>"

    def nvmlDeviceGetIndex(self, h):
        return h.index

    def nvmlDeviceGetName(self, h):
        return self.names[h.index].encode()  # older nvidia-ml-py returns bytes

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080

    def nvmlDeviceGetPowerUsage(self, h):
        return int(self.powers_w[h.index] * 1000)  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.energy_counter:
            raise NVMLError("Not Supported")
        self.energy_calls += 1
        return int(
            self.energy_offset_mj[h.index] + self.powers_w[h.index] * (time.monotonic() - self.t0) * 1000
        )

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=50 + 10 * h.index, memory=20)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(10 + h.index) * GIB, total=141 * GIB, free=(131 - h.index) * GIB)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 41


def run_window(nvml, seconds=0.3, **kwargs):
    sampler = NvmlSampler(interval_s=0.02, nvml=nvml, **kwargs).start()
    time.sleep(seconds)
    return sampler.stop()


def test_energy_from_counter_delta_summed_over_gpus():
    nvml = FakeNvml(powers_w=(300.0, 500.0))
    w = run_window(nvml)
    assert w.energy_source == "energy_counter"
    assert w.num_gpus == 2
    # 800 W for the window's duration (counter resolution: 1 mJ per GPU)
    assert w.energy_j == pytest.approx(800.0 * w.duration_s, rel=0.02)
    assert w.mean_power_w == pytest.approx(800.0, rel=0.02)
    assert w.gpu_util_pct_mean == pytest.approx(55.0)  # 50 % and 60 %, equally often
    assert w.mem_used_gib_max == pytest.approx(11.0)
    assert w.reason is None
    assert nvml.shutdowns == nvml.inits == 1


def test_samples_carry_every_field_and_both_gpus_at_the_interval():
    w = run_window(FakeNvml(powers_w=(300.0, 500.0)), seconds=0.25)
    assert {s["gpu"] for s in w.samples} == {0, 1}
    ticks = len(w.samples) // 2
    assert 5 <= ticks <= 0.25 / 0.02 + 3  # start + ~12 ticks + stop, allowing for a busy machine
    s = w.samples[-1]
    assert s["power_w"] == 500.0 and s["sm_clock_mhz"] == 1980 and s["mem_clock_mhz"] == 2619
    assert s["temp_c"] == 41 and s["mem_total_gib"] == 141.0 and s["mem_util_pct"] == 20.0
    times = [s["t_s"] for s in w.samples if s["gpu"] == 0]
    assert times == sorted(times) and times[0] == pytest.approx(0.0, abs=0.01)


def test_without_energy_counter_power_is_integrated():
    w = run_window(FakeNvml(powers_w=(250.0,), energy_counter=False))
    assert w.energy_source == "power_integral"
    # constant power: the trapezoids cover first to last sample, which is the window up to a tick
    assert w.energy_j == pytest.approx(250.0 * w.duration_s, rel=0.05)


def test_counter_going_backwards_falls_back_to_power():
    nvml = FakeNvml(powers_w=(200.0,))
    sampler = NvmlSampler(interval_s=0.02, nvml=nvml).start()
    time.sleep(0.1)
    nvml.energy_offset_mj[0] = 0.0  # driver reloaded: the counter restarted
    w = sampler.stop()
    assert w.energy_source == "power_integral"
    assert w.energy_j == pytest.approx(200.0 * w.duration_s, rel=0.1)


def test_device_indices_restrict_sampling():
    w = run_window(FakeNvml(powers_w=(100.0, 900.0)), device_indices=[1])
    assert {s["gpu"] for s in w.samples} == {1}
    assert w.mean_power_w == pytest.approx(900.0, rel=0.02)


def test_sampler_thread_ends_on_stop_and_context_manager_stops():
    before = {t.name for t in threading.enumerate()}
    with NvmlSampler(interval_s=0.01, nvml=FakeNvml()) as sampler:
        assert "dflashbench-nvml" in {t.name for t in threading.enumerate()}
        time.sleep(0.05)
    assert "dflashbench-nvml" not in {t.name for t in threading.enumerate()} - before
    assert not sampler.available


def test_no_nvml_library_reports_none_and_says_why(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    w = NvmlSampler().start().stop()
    assert (w.energy_j, w.mean_power_w, w.gpu_util_pct_mean, w.mem_used_gib_max) == (None, None, None, None)
    assert w.samples == []
    assert w.reason.startswith(NO_GPU) and "nvidia-ml-py is not installed" in w.reason
    info = gpu_info()
    assert info["gpu"] == NO_GPU and info["gpu_count"] == 0 and "nvidia-ml-py" in info["reason"]


def test_driver_not_loaded_reports_none_and_says_why():
    nvml = FakeNvml(init_error=NVMLError("Driver Not Loaded"))
    w = NvmlSampler(nvml=nvml).start().stop()
    assert w.energy_j is None and w.reason == f"{NO_GPU}: Driver Not Loaded"
    assert gpu_info(nvml) == {"gpu": NO_GPU, "gpu_count": 0, "reason": f"{NO_GPU}: Driver Not Loaded"}


def test_gpu_info_names_model_count_and_driver():
    assert gpu_info(FakeNvml(powers_w=(1.0, 1.0))) == {
        "gpu": "NVIDIA H200",
        "gpu_count": 2,
        "driver": "570.86.15",
        "cuda_driver": "12.8",
        "gpus": ["NVIDIA H200", "NVIDIA H200"],
    }
    mixed = gpu_info(FakeNvml(powers_w=(1.0, 1.0), names=["NVIDIA H100 80GB HBM3", "NVIDIA A10"]))
    assert mixed["gpu"] == "NVIDIA H100 80GB HBM3, NVIDIA A10"


def test_bad_interval_is_refused():
    with pytest.raises(ValueError, match="interval_s"):
        NvmlSampler(interval_s=0)


@pytest.mark.gpu
def test_real_gpu_sampler():
    info = gpu_info()
    if info["gpu_count"] == 0:
        pytest.skip(info["reason"])
    w = run_window(None, seconds=1.0)
    assert w.num_gpus == info["gpu_count"]
    assert w.energy_j is not None and w.energy_j > 0
    assert 10 < w.mean_power_w / w.num_gpus < 2000  # an idle-to-busy datacentre GPU draws tens to ~1000 W
    assert w.mem_used_gib_max is not None and w.samples
    print(
        f"\n{info}\nenergy {w.energy_j:.1f} J over {w.duration_s:.2f} s ({w.energy_source}), "
        f"mean power {w.mean_power_w:.1f} W, util {w.gpu_util_pct_mean:.1f} %, "
        f"mem max {w.mem_used_gib_max:.2f} GiB, {len(w.samples)} samples"
    )


def test_samples_keep_the_interval_when_nvml_is_slow():
    """On the H100 one round of queries took ~3 ms, and sleeping the interval after each round ran 3% slow:
    samples sit on fixed ticks instead."""

    class SlowNvml(FakeNvml):
        def nvmlDeviceGetPowerUsage(self, h):
            time.sleep(0.006)
            return super().nvmlDeviceGetPowerUsage(h)

    w = run_window(SlowNvml(powers_w=(300.0,)), seconds=0.5)
    times = [s["t_s"] for s in w.samples][:-1]  # the last one is stop()'s
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert statistics.median(gaps) == pytest.approx(0.02, rel=0.1)
    assert times[-1] / (len(times) - 1) == pytest.approx(0.02, rel=0.1)  # no drift over the window


@pytest.mark.parametrize(("visible", "sampled"), [("1", {1}), ("2,0", {0, 2}), ("GPU-fake-2", {2}), ("1,x,0", {1})])
def test_cuda_visible_devices_choose_the_sampled_gpus(monkeypatch, visible, sampled):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    w = run_window(FakeNvml(powers_w=(100.0, 200.0, 400.0)))
    assert {s["gpu"] for s in w.samples} == sampled
    assert w.num_gpus == len(sampled)
    assert w.mean_power_w == pytest.approx(sum((100.0, 200.0, 400.0)[i] for i in sampled), rel=0.02)


def test_cuda_visible_devices_hiding_every_gpu_is_said(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    w = run_window(FakeNvml(powers_w=(100.0, 200.0)))
    assert w.energy_j is None and w.num_gpus == 0
    assert "CUDA_VISIBLE_DEVICES='' leaves no GPU visible" in w.reason
    assert visible_handles(FakeNvml(powers_w=(1.0, 1.0)), None) == [(0, SimpleNamespace(index=0)),
                                                                   (1, SimpleNamespace(index=1))]


def test_gpu_info_records_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu_info(FakeNvml(powers_w=(1.0, 1.0)))["cuda_visible_devices"] == "1"


class ReplayNvml(FakeNvml):
    """Replays NVML values recorded on a real H100 (tests/fixtures), stretched onto this test's clock."""

    def __init__(self, samples, speedup):
        super().__init__(powers_w=(samples[0]["power_w"],), names=["NVIDIA H100 80GB HBM3"])
        self.samples, self.speedup = samples, speedup

    def _now(self):
        t = (time.monotonic() - self.t0) * self.speedup
        return next((s for s in self.samples if s["t_s"] >= t), self.samples[-1]), t

    def nvmlDeviceGetPowerUsage(self, h):
        return int(self._now()[0]["power_w"] * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return int(self._now()[0]["energy_mj"])

    def nvmlDeviceGetUtilizationRates(self, h):
        s = self._now()[0]
        return SimpleNamespace(gpu=int(s["gpu_util_pct"]), memory=int(s["mem_util_pct"]))

    def nvmlDeviceGetMemoryInfo(self, h):
        s = self._now()[0]
        return SimpleNamespace(used=s["mem_used_gib"] * GIB, total=s["mem_total_gib"] * GIB, free=0)


def test_recorded_h100_values_energy_counter_matches_power_integral():
    """The real driver's counter is in millijoules and its power in milliwatts: on the recorded H100 samples the
    counter's delta and the integral of the sampled power agree within a few percent, and the counter wins."""
    samples = [json.loads(line) for line in H100_SAMPLES.read_text().splitlines()]
    recorded_j = (samples[-1]["energy_mj"] - samples[0]["energy_mj"]) / 1000
    assert 300 < recorded_j < 500  # ~120 W for ~3.2 s
    speedup = 8.0  # 3.2 s of recording in 0.4 s
    w = run_window(ReplayNvml(samples, speedup), seconds=samples[-1]["t_s"] / speedup)
    assert w.energy_source == "energy_counter"
    assert w.energy_j == pytest.approx(recorded_j, rel=0.15)  # the replay cuts a tick at either end
    assert w.energy_j_power_integral * speedup == pytest.approx(w.energy_j, rel=0.15)
    recorded_w = statistics.mean(s["power_w"] for s in samples)
    assert w.mean_power_w / speedup == pytest.approx(recorded_w, rel=0.15)  # energy over compressed time
    assert w.mem_used_gib_max == pytest.approx(max(s["mem_used_gib"] for s in samples))
    assert w.samples[0]["mem_total_gib"] == pytest.approx(79.65, abs=0.01)
