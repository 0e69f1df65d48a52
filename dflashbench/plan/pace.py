"""How fast each method decodes per user, at each load: the rates a sweep's duration is planned at (the dry run's
serial and side-by-side wall times, ``--budget``, the ETA's shape). Pure: the published figures and the arguments.

Where a published figure states a per-user band for the model (``interactivity_tok_per_s`` in
``suites/published/``), it is read as **DFlash's rate at c=1**: NVIDIA's Pareto curve compares throughput at
500-600 tok/s/user, an interactivity DFlash reaches at low concurrency. The other methods' rates at c=1 are
DFlash's divided by DFlash's published speedup over AR at matched concurrency and multiplied by theirs (NVIDIA's
SPEED-Bench table, figure C: gpt-oss-120b DFlash 2.3x, EAGLE-3 1.7x on average over its six categories); a method
without a published speedup is planned at AR's rate, said so. ``--assume-user-tok-per-s`` replaces all of it: the
rate given is every method's, at every load.

The load: per-user rate falls as concurrency rises, and no published figure in ``suites/published/`` gives the
curve (figure B is read off a plot as bounds). The plan assumes ``r(c) = r(1) x c^-LOAD_EXPONENT`` (0.38x at c=128)
and says so. Server starts are assumed too (:data:`SERVER_START_S`): they are not measured by any committed run on a
GPU.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from dflashbench.types import Method

LOAD_EXPONENT = 0.2  # assumed: per-user rate x c^-0.2 (no published curve; see the module doc)
# Assumed seconds for a launched server to be ready: a GPU engine loads its weights from local disk, captures CUDA
# graphs and compiles (vLLM's CPU build starts the embedded target in about 50 s with torch.compile,
# /work/shared/reference/engine-install-notes.md); the reference server loads the tiny pair in seconds.
SERVER_START_S = {"reference": 10.0, "vllm": 300.0, "sglang": 300.0, "trtllm": 300.0}
SERVER_START_WHY = "assumed: 5 min per GPU engine start (weights from local disk, CUDA graphs, compilation; not measured)"


@dataclass(frozen=True)
class Rates:
    """Each method's per-user rate at c=1 (low, high), how it falls with load, and where each came from."""

    at_c1: dict[str, tuple[float, float]]
    load_exponent: float
    sources: tuple[str, ...]
    assumed: tuple[str, ...] = ()

    def user_tok_per_s(self, method: str, concurrency: int, end: int = 0) -> float:
        """``method``'s per-user rate at ``concurrency`` (``end`` 0: the low end of its band, 1: the high end)."""
        lo_hi = self.at_c1.get(method) or self.at_c1[Method.AR.value]
        return lo_hi[end] * max(concurrency, 1) ** -self.load_exponent

    def lines(self) -> list[str]:
        """The rates as the dry run prints them."""
        shown = ", ".join(f"{m} {lo:.0f}" + (f"–{hi:.0f}" if round(hi) != round(lo) else "")
                          for m, (lo, hi) in self.at_c1.items())  # fmt: skip
        load = f", x c^-{self.load_exponent:g} (assumed)" if self.load_exponent else ", at every load"
        given = " (given)" if self.sources and self.sources[0].startswith("given") else ""
        head = f"rates at c=1 (tok/s/user): {shown}{load}{given}"
        return [head, *(f"  rate: {s}" for s in self.sources), *(f"  assumed: {a}" for a in self.assumed),
                *([f"  assumed: per-user rate x c^-{self.load_exponent:g} ({128 ** -self.load_exponent:.2f}x at c=128):"
                   " no published curve in suites/published/"] if self.load_exponent else [])]  # fmt: skip


def published_speedups(model: str) -> dict[str, float]:
    """Each method's mean published speedup over AR at matched concurrency for ``model`` (figure C's rows)."""
    from dflashbench.plan.published import _same_model, load_published

    figures = load_published()
    if figures.empty:
        return {}
    out: dict[str, list[float]] = {}
    for row in figures.to_dict("records"):
        if (row.get("metric") == "speedup_matched_concurrency" and row.get("baseline", "ar") == "ar"
                and _same_model(model, row.get("model")) and isinstance(row.get("value"), int | float)):  # fmt: skip
            out.setdefault(str(row["method"]), []).append(float(row["value"]))
    return {m: statistics.fmean(v) for m, v in out.items()}


def method_rates(model: str, methods: list[Method], assume: tuple[float, float] | None) -> Rates | None:
    """The rates to plan ``methods`` of ``model`` at; ``None`` where neither a published band nor ``assume`` gives
    one (the dry run then says how to give one)."""
    names = [m.value for m in methods]
    if assume is not None:
        return Rates({m: assume for m in names}, 0.0, ("given by --assume-user-tok-per-s, for every method and load",))
    from dflashbench.plan.published import published_user_rate

    found = published_user_rate(model)
    if found is None:
        return None
    lo, hi, where = found
    speedups = published_speedups(model)
    base = speedups.get(Method.DFLASH.value)
    sources = [f"DFlash at c=1: the interactivity band of a published figure: {where}"]
    assumed = []
    if base is None:
        assumed.append("every method at DFlash's rate (no published speedup over AR at matched concurrency)")
        ratio = {m: 1.0 for m in names}
    else:
        ratio = {Method.AR.value: 1.0 / base, Method.DFLASH.value: 1.0}
        shown = ", ".join(f"{m} {s:.2f}x" for m, s in speedups.items())
        sources.append(f"the others from the published speedups over AR at matched concurrency ({shown}; "
                       "suites/published/nvidia-speed-bench-interactivity.toml, mean over its categories)")  # fmt: skip
        for m in names:
            if m in ratio:
                continue
            if m in speedups:
                ratio[m] = speedups[m] / base
            else:
                ratio[m] = 1.0 / base
                assumed.append(f"{m} at AR's rate (no published speedup)")
    at_c1 = {m: (lo * ratio[m], hi * ratio[m]) for m in names}
    return Rates(at_c1, LOAD_EXPONENT, tuple(sources), tuple(assumed))


def server_start_s(backend: str) -> float:
    return SERVER_START_S.get(backend, SERVER_START_S["vllm"])
