"""A server launch's own speed: the third noise of the noise rule (docs/metrics.md).

Two launches of the same server, on the same machine, with the same code, do not run at the same speed. On this
project's 2-core machine the reference server's AR decode ran at a median TPOT from 2.95 to 3.79 ms over six
launches in a row while the CPU speed probe read 42.2-43.6 ms throughout: the launch, not the machine, moved
(memory layout, where its threads landed). The probe cannot see it, and neither can a bootstrap over one point's
requests: every request of a launch shares it.

A run measures it where it relaunches: each round of ``--repeats`` starts its servers again, so the repeats'
interval holds it. A run with one launch per method cannot; ``compare`` then adds the launch noise measured for
its backend by ``tools/launch_noise.py`` (``dflashbench/data/launch_noise.toml``, which says where and when),
and says so. A backend without a measurement adds none, and ``compare`` says that too.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from importlib import resources

CALIBRATION = "launch_noise.toml"


@dataclass(frozen=True)
class LaunchNoise:
    """One launch's speed against another's (log, 1 sd) for ``backend``; ``measured``: where it was read."""

    backend: str
    log_sd: float
    measured: str
    together_log_sd: float | None = None  # two servers up at once, measured in turn: what is left of a launch

    @property
    def text(self) -> str:
        together = (f"; ±{math.expm1(self.together_log_sd):.1%} for a speedup whose points were measured together"
                    if self.together_log_sd is not None else "")  # fmt: skip
        return (f"a server launch's own speed ±{math.expm1(self.log_sd):.0%} (1 sd) on the {self.backend} backend, "
                f"not in a run of one launch per method ({self.measured}){together}; --repeats 2+ measures it in "
                "the run")  # fmt: skip


def calibrations() -> dict[str, LaunchNoise]:
    """Every backend's measured launch noise (``dflashbench/data/launch_noise.toml``)."""
    text = resources.files("dflashbench").joinpath("data", CALIBRATION).read_text(encoding="utf-8")
    table = tomllib.loads(text)
    return {name: LaunchNoise(name, float(row["log_sd"]), f"{row['measured']}; {row['command']}",
                              float(row["together_log_sd"]) if "together_log_sd" in row else None)
            for name, row in table.items()}  # fmt: skip


def for_run(backend: str | None, repeats: int | None, launched: bool = True) -> LaunchNoise | None:
    """The launch noise a run's figures carry beyond its intervals: ``None`` where the run measured it (repeats,
    each round a new launch), where dflashbench launched no server (an ``--endpoint``), or where no measurement
    of ``backend`` exists."""
    if not launched or (repeats or 1) > 1 or not backend:
        return None
    return calibrations().get(backend)


def log_sd(noise: LaunchNoise | None) -> float:
    return noise.log_sd if noise is not None else 0.0


def per_launch_log_sd(medians_by_group: dict[str, list[float]]) -> float:
    """The pooled 1-sd spread (log) of one launch's figure around its group's typical value: ``medians_by_group``
    maps a group (a method's server) to one figure per launch (its median TPOT). Pooled over groups, each with
    its own mean taken out (n - 1 degrees of freedom each)."""
    ss, dof = 0.0, 0
    for values in medians_by_group.values():
        logs = [math.log(v) for v in values if v > 0]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        ss += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    if dof == 0:
        raise ValueError("the launch noise needs two launches or more of one server")
    return math.sqrt(ss / dof)
