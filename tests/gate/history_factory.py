"""Hand-made runs for the history tests: each a real run directory (RunStore), with repeat rounds, a manifest
that says where and when it ran, and speed-probe readings."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from report.factory import point

from dflashbench.run.store import RunStore
from dflashbench.types import ProbeReading

METHODS = ("ar", "dflash", "eagle3")
BASE_RATE = {"ar": 100.0, "dflash": 300.0, "eagle3": 200.0}  # per-user tok/s at c=1
TAU = {"ar": 1.0, "dflash": 6.0, "eagle3": 4.0}


def manifest(night: int, **over) -> dict:
    out = {
        "status": "complete", "started_at": f"2026-11-{night:02d}T02:00:00+00:00", "backend": "reference",
        "suite": {"name": "demo", "version": 1}, "model": "dflashbench/embedded/target",
        "drafts": {"dflash": "dflashbench/embedded/dflash", "eagle3": "dflashbench/embedded/eagle3"},
        "dflashbench_version": "0.1.0", "git_sha": "a" * 40, "versions": {"torch": "2.13.0", "transformers": "5.24"},
        "host": {"cpu_count": 2}, "gpu": {"gpu": "no NVIDIA GPU", "gpu_count": 0}, "labels": {}, "ci": None,
    }  # fmt: skip
    out.update(over)
    return out


def write_run(root: Path, night: int, *, factor: dict[str, float] | None = None, rounds: int = 3,
              noise: float = 0.02, probe_s: float = 0.04, seed: int | None = None, loads=(1, 2),
              **manifest_over) -> Path:  # fmt: skip
    """Night ``night``'s run under ``root/n<night>/``: each method's per-user rate at each load, ``rounds``
    rounds, each round's rates off by ``noise`` (log sd), the whole run's by ``factor[method]``."""
    rng = np.random.default_rng(night if seed is None else seed)
    factor = factor or {}
    folder = root / f"n{night:02d}"
    with RunStore.create(folder, manifest(night, **manifest_over), run_id=f"run-{night:02d}") as store:
        t = 0
        for r in range(rounds):
            for c in loads:
                for m in METHODS:
                    rate = BASE_RATE[m] / c**0.3 * factor.get(m, 1.0) * math.exp(rng.normal(0, noise))
                    pid = f"reference:{m}:synthetic:c{c}/r{r}"
                    t += 1
                    store.append_probe(ProbeReading("cpu", f"before {pid}", t * 10**9,
                                                    probe_s * math.exp(rng.normal(0, 0.01))))  # fmt: skip
                    store.append_point(point(m, c, rate, rate * c, run_id=f"run-{night:02d}", point_id=pid, repeat=r,
                                             tau=TAU[m], ttft_s_p99=0.05 * c, model="dflashbench/embedded/target"))
        return store.run_dir
