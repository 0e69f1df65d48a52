"""The lossless check: each greedy output of a speculative method against AR's on the same request, one of

- **identical**: the whole output equals AR's (full text, by SHA-256, so past the stored cap too);
- **near-tie**: the outputs first differ at a token where the target itself hardly prefers AR's token: AR's
  log-probability of its own token minus that of the method's token, read from the AR server at that position (the
  *margin*, in nats; :mod:`dflashbench.run.tie_probe` reads it), is within :data:`NEAR_TIE_NATS`. A floating-point
  difference between AR's one-token decode and the multi-token verify pass flips such a tie; the method is not lossy;
- **different**: anything else, including a divergence whose margin could not be read (an engine that serves no
  log-probabilities, no token ids streamed, no probe run): a plain difference, named so.

After a divergence nothing is compared further (a later turn of the conversation included). One (request, round)
pair counts once, whatever the number of times its run is given to ``report``, and every repeat round counts.

A verifier that accepts tokens close to the top without being the top also diverges at small margins, so a margin
test alone would call it a near-tie. Rounding flips a near-tie only where the two kernel paths' numerical difference
exceeds the margin, which is rare; such a verifier flips a near-tie wherever its drafter proposes the runner-up. So
near-ties are also bounded per method and load: more near-tie divergences per compared token than
:data:`NEAR_TIE_CEILING` beyond noise (the one-sided 95 % Poisson lower bound above it) is more than rounding
explains, and the check fails with "suspect a loose verifier". The reasoning and the numbers are in docs/metrics.md.

Pure functions: stored points and requests and the probe's rows in, classified pairs and per-method counts out.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dflashbench.measure.analysis import finite_number as _number
from dflashbench.measure.analysis import method_sort_key
from dflashbench.measure.quality import BASELINE, compare_outputs, keyed_pairs, outputs_by_point, point_ids
from dflashbench.types import PointKey

if TYPE_CHECKING:
    import pandas as pd

# One unit in the last place of a bfloat16 logit of magnitude 16 to 32 (8 significant bits: 2**(4 - 7)): rounding the
# two logits to bf16 alone can move their gap by up to this much, and a gap of log-probabilities is a gap of logits.
NEAR_TIE_NATS = 0.125
# Near-tie divergences per compared token, per method and load, that rounding explains at most (docs/metrics.md).
NEAR_TIE_CEILING = 0.005
CEILING_CONFIDENCE = 0.95

IDENTICAL, NEAR_TIE, DIFFERENT = "identical", "near-tie", "different"


@dataclass(frozen=True, slots=True)
class Pair:
    """One (request, round) of a method's point against AR's output for the same request."""

    run_id: str
    point_id: str  # the method's point, its round in its id
    ar_point_id: str
    method: str
    concurrency: int | None
    round: int
    request_id: str
    turn: int
    occurrence: int  # the k-th time the request was sent in that point and round
    same: bool
    position: int | None = None  # the first output token that differs, where both streamed token ids
    ar_token: int | None = None
    method_token: int | None = None
    compared_tokens: int = 0  # AR's tokens compared: all of them when identical, up to the divergence else
    setting: tuple = ()  # the points' (backend, model, workload)

    @property
    def key(self) -> tuple:
        return (self.run_id, self.point_id, self.request_id, self.turn, self.occurrence)


def probe_row(pair: Pair, rows: Mapping[tuple, Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The probe's row for ``pair`` (``rows`` by :func:`tie_key`), if it names the same position and tokens (a row
    of an earlier sitting whose outputs were measured again does not apply). Its token fields end in ``_id``: the
    redaction function takes a field named ``..._token`` for a secret."""
    row = rows.get(pair.key)
    if row is None or (row.get("position"), row.get("ar_token_id"), row.get("method_token_id")) != (
            pair.position, pair.ar_token, pair.method_token):  # fmt: skip
        return None
    return row


def tie_key(row: Mapping[str, Any]) -> tuple:
    """A probe row's (``ties.jsonl``) :attr:`Pair.key`."""
    return (str(row.get("run_id")), str(row.get("point_id")), str(row.get("request_id")),
            int(_number(row.get("turn")) or 0), int(_number(row.get("occurrence")) or 0))  # fmt: skip


def compared_pairs(points: pd.DataFrame, requests: pd.DataFrame,
                   load: Callable[[Mapping[str, Any]], Hashable] | None = None) -> list[Pair]:  # fmt: skip
    """Every greedy speculative output against AR's: for each of a setting's non-AR points (``points``: "all" rows;
    rows collapsed over repeats carry their rounds' ids), each round against AR's point of the same round at the
    same concurrency (at AR's lowest concurrency of that round where it has none). Points and requests read twice
    count once. The caller leaves sampled runs out. ``load``: what makes two points the same load where it is not
    the concurrency (a trace replay's speed and content); those points pair only at the same load, and their pairs
    carry no concurrency."""
    if points.empty or requests.empty or "point_id" not in requests.columns:
        return []
    outputs = outputs_by_point(points, requests)
    alls = points[points["category"] == "all"] if "category" in points.columns else points
    where: dict[tuple, dict[tuple[int | None, int], str]] = {}  # (run, backend, model, workload, method) -> ids
    for p in alls.to_dict("records"):
        setting = (str(p.get("run_id")), p.get("backend"), p.get("model"), p.get("workload"), str(p.get("method")))
        c = _number(p.get("concurrency"))
        at = load(p) if load is not None else (int(c) if c is not None else None)
        for pid in point_ids(p):
            where.setdefault(setting, {})[(at, PointKey.split_round(pid)[1] or 0)] = pid
    out: list[Pair] = []
    for setting, mine in where.items():
        if setting[-1] == BASELINE:
            continue
        ar = where.get((*setting[:-1], BASELINE), {})
        for (c, rnd), pid in sorted(mine.items(), key=lambda kv: (kv[0][1], kv[0][0] or 0)):
            same_round = {cc: ref for (cc, r), ref in ar.items() if r == rnd}
            ref_id = same_round.get(c) if load is not None else same_round.get(c) or (
                same_round[min(same_round, key=lambda x: x or 0)] if same_round else None)  # fmt: skip
            if ref_id is None:
                continue
            run_id = setting[0]
            found = keyed_pairs(outputs.get((run_id, ref_id), []), outputs.get((run_id, pid), []))
            out += [dataclasses.replace(_pair(run_id, pid, ref_id, setting[-1], c if load is None else None, rnd,
                                              key, ref, other),
                                        setting=setting[1:4]) for key, ref, other in found]  # fmt: skip
    return out


def _pair(run_id: str, pid: str, ref_id: str, method: str, c: int | None, rnd: int, key: tuple, ref, other) -> Pair:
    found = compare_outputs(ref, other)
    ar_ids, ids = ref.token_ids, other.token_ids
    if found.same:
        return Pair(run_id, pid, ref_id, method, c, rnd, key[0], key[1], key[3], True,
                    compared_tokens=len(ar_ids) if ar_ids is not None else 0)  # fmt: skip
    pos = found.tokens
    inside = pos is not None and ar_ids is not None and ids is not None and pos < min(len(ar_ids), len(ids))
    return Pair(run_id, pid, ref_id, method, c, rnd, key[0], key[1], key[3], False, pos,
                ar_ids[pos] if inside else None, ids[pos] if inside else None,
                pos + 1 if pos is not None else len(ar_ids or ()))  # fmt: skip


# -- the margin and the class ---------------------------------------------------------------------------------------
def margin_nats(ar_token: int, method_token: int, top: Mapping[int, float]) -> tuple[float | None, str | None]:
    """AR's log-probability of its own token minus that of the method's token, from the target's top
    log-probabilities at the divergence (``top``: token id -> log-probability, as the AR server answered), or
    ``(None, why)``: a method token outside the top-k returned lies below all of them (the margin is at least AR's
    minus the smallest), which is a plain difference."""
    if ar_token not in top:
        return None, f"AR's own token {ar_token} is not among the target's top {len(top)} at that position"
    if method_token not in top:
        floor = top[ar_token] - min(top.values())
        return None, f"the method's token {method_token} is outside the target's top {len(top)} (margin > {floor:.2f} nats)"
    return top[ar_token] - top[method_token], None


def classify(margin: float | None, tolerance: float = NEAR_TIE_NATS) -> str:
    """:data:`NEAR_TIE` where ``|margin|`` is within ``tolerance`` (a negative margin: the probe's own pass prefers the
    method's token, a tie too); :data:`DIFFERENT` else, and where no margin was read."""
    if margin is None or not math.isfinite(margin):
        return DIFFERENT
    return NEAR_TIE if abs(margin) <= tolerance else DIFFERENT


@dataclass(frozen=True, slots=True)
class Judged:
    pair: Pair
    kind: str  # IDENTICAL, NEAR_TIE or DIFFERENT
    margin: float | None = None  # nats, where read
    why: str | None = None  # why no margin was read


def judge(pairs: Iterable[Pair], probes: Iterable[Mapping[str, Any]] = (), tolerance: float = NEAR_TIE_NATS
          ) -> list[Judged]:  # fmt: skip
    """Each pair classified: identical, else by the margin its probe row read (``ties.jsonl``, :func:`probe_row`)."""
    rows = {tie_key(r): r for r in probes}
    out = []
    for p in pairs:
        if p.same:
            out.append(Judged(p, IDENTICAL))
            continue
        if p.position is None or p.ar_token is None:
            why = "no token ids streamed" if p.position is None else "one output ended there"
            out.append(Judged(p, DIFFERENT, None, f"margin not readable: {why}"))
            continue
        row = probe_row(p, rows)
        if row is None:
            out.append(Judged(p, DIFFERENT, None, "margin not readable: not probed"))
            continue
        margin = _number(row.get("margin_nats"))
        why = None if margin is not None else f"margin not readable: {row.get('why') or 'no log-probabilities'}"
        out.append(Judged(p, classify(margin, tolerance), margin, why))
    return out


# -- the counts ------------------------------------------------------------------------------------------------------
def poisson_lower(k: int, confidence: float = CEILING_CONFIDENCE) -> float:
    """The one-sided lower confidence bound on a Poisson mean after ``k`` events: the mean under which ``k`` or more
    events have probability ``1 - confidence`` (0 for ``k`` = 0). Bisection on the Poisson tail."""
    if k <= 0:
        return 0.0

    def tail(mean: float) -> float:  # P(X >= k)
        term = total = math.exp(-mean)
        for i in range(1, k):
            term *= mean / i
            total += term
        return 1.0 - total

    lo, hi = 0.0, float(k)
    while tail(hi) < 1 - confidence:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) < 1 - confidence else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True, slots=True)
class Ceiling:
    """Near-tie divergences of one method at one load against the tokens compared there."""

    concurrency: int | None
    near_ties: int
    tokens: int
    lower: float  # the rate's one-sided lower bound (per token)
    ceiling: float = NEAR_TIE_CEILING

    @property
    def exceeded(self) -> bool:
        return self.tokens > 0 and self.lower > self.ceiling


@dataclass(frozen=True, slots=True)
class MethodCheck:
    """One method's outputs against AR's: N identical + M near-tie + K different distinct (request, round) pairs."""

    method: str
    identical: int
    near_tie: int
    different: int
    max_margin: float | None  # the largest |margin| among the near-ties
    unreadable: int  # of the different: no margin read
    loads: tuple[Ceiling, ...] = ()
    tolerance: float = NEAR_TIE_NATS
    different_at: tuple[int, ...] = ()  # the concurrencies where an output differed (a trace replay's: none)

    @property
    def compared(self) -> int:
        return self.identical + self.near_tie + self.different

    @property
    def over_ceiling(self) -> list[Ceiling]:
        return [c for c in self.loads if c.exceeded]

    @property
    def holds(self) -> bool:
        """Lossless as far as outputs tell: no real difference, and no more near-ties than rounding explains."""
        return self.different == 0 and not self.over_ceiling


def summarize(judged: Sequence[Judged], tolerance: float = NEAR_TIE_NATS, ceiling: float = NEAR_TIE_CEILING
              ) -> list[MethodCheck]:  # fmt: skip
    """One :class:`MethodCheck` per method (the usual order), its near-ties bounded per load."""
    out = []
    for method in sorted({j.pair.method for j in judged}, key=method_sort_key):
        mine = [j for j in judged if j.pair.method == method]
        kinds = [j.kind for j in mine]
        ties = [abs(j.margin) for j in mine if j.kind == NEAR_TIE and j.margin is not None]
        loads = []
        for c in sorted({j.pair.concurrency for j in mine}, key=lambda x: (x is None, x or 0)):
            at = [j for j in mine if j.pair.concurrency == c]
            k = sum(j.kind == NEAR_TIE for j in at)
            tokens = sum(j.pair.compared_tokens for j in at)
            loads.append(Ceiling(c, k, tokens, poisson_lower(k) / tokens if tokens else 0.0, ceiling))
        out.append(MethodCheck(method, kinds.count(IDENTICAL), kinds.count(NEAR_TIE), kinds.count(DIFFERENT),
                               max(ties) if ties else None, sum(1 for j in mine if j.kind == DIFFERENT and j.why),
                               tuple(loads), tolerance, tuple(sorted({int(j.pair.concurrency) for j in mine
                                                                      if j.kind == DIFFERENT and j.pair.concurrency
                                                                      is not None}))))  # fmt: skip
    return out


def checks(points: pd.DataFrame, requests: pd.DataFrame, probes: Iterable[Mapping[str, Any]] = (),
           load: Callable[[Mapping[str, Any]], Hashable] | None = None) -> list[MethodCheck]:  # fmt: skip
    """:func:`summarize` of :func:`judge` of :func:`compared_pairs`: the lossless line's figures."""
    return summarize(judge(compared_pairs(points, requests, load), probes))


def with_near_ties(agree: pd.DataFrame, points: pd.DataFrame, requests: pd.DataFrame,
                   probes: Iterable[Mapping[str, Any]] = ()) -> pd.DataFrame:  # fmt: skip
    """The agreement table (:func:`dflashbench.measure.quality.agreement_table`) with ``near_tie`` (how many of a
    method's differing outputs are near-ties) and ``near_tie_margin`` (their largest margin) on each method's "all"
    row; ``None`` elsewhere (AR's rows, categories)."""
    if agree.empty:
        return agree.assign(near_tie=None, near_tie_margin=None)
    found: dict[tuple, list[float]] = {}
    for j in judge(compared_pairs(points, requests), probes):
        if j.kind == NEAR_TIE:
            key = (*j.pair.setting, j.pair.method, j.pair.concurrency)
            found.setdefault(key, []).append(abs(j.margin) if j.margin is not None else 0.0)
    ties, margins = [], []
    for r in agree.to_dict("records"):
        mine = r["method"] != BASELINE and r["category"] == "all"
        hit = found.get((r["backend"], r["model"], r["workload"], r["method"], int(r["concurrency"])), [])
        ties.append(len(hit) if mine else None)
        margins.append(max(hit) if mine and hit else None)
    return agree.assign(near_tie=ties, near_tie_margin=margins)


# -- the verdict's lossless line, per method ---------------------------------------------------------------
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
    different_at: tuple[int, ...] = ()  # the concurrencies where an output differed

    different = property(lambda self: self.compared - self.equal - self.near_tie)
    holds = property(lambda self: self.different == 0 and not self.over_ceiling and not self.not_by_design)


def lossless_checks(points: pd.DataFrame, requests: pd.DataFrame, ties: Sequence[Mapping] = (),
                    by_design: Mapping[str, str] | None = None, load=None) -> list[LosslessCheck]:  # fmt: skip
    """Where methods were greedy on the same prompts: each output against AR's, identical, near-tie or different
    (:func:`dflashbench.measure.lossless.checks`, with the probe's rows ``ties``); where no text was stored, equal
    token counts per request. ``by_design``: method -> the verifier its server ran where it is not lossless by
    design. ``load``: what pairs two points where it is not the concurrency (a trace replay's speed and content)."""
    from dflashbench.measure.analysis import method_label
    from dflashbench.measure.quality import token_count_agreement

    by_design = by_design or {}
    found = [LosslessCheck(method_label(m.method), m.identical, m.compared, "text", m.near_tie, m.max_margin,
                           m.unreadable, tuple(m.over_ceiling), by_design.get(m.method), m.different_at)
             for m in checks(points, requests, ties, load) if m.compared]  # fmt: skip
    if found or requests.empty or "output_tokens" not in requests.columns:
        return found
    return [LosslessCheck(method_label(m), k, n, "token count") for m, k, n in token_count_agreement(points, requests)]


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

