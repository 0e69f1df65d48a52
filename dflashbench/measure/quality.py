"""Output quality per method: is the speedup still lossless on this engine?

Speculative decoding (DFlash, EAGLE-3) is lossless by construction - greedy output is the target's greedy
output - but an engine integration can break that (a wrong attention backend, a cache bug, a sampler mismatch)
while the speed figures look fine, or better. This module answers from the outputs the sweep stored:

- **agreement with AR** (greedy runs only): for each method x workload x category x concurrency, the share of
  requests whose output equals AR's at the same concurrency exactly (full text, compared by SHA-256, so past
  the stored cap too), and for the rest where they first differ, in characters and, where the server streamed
  token ids, in tokens. Engines are not bitwise batch-invariant, so AR is compared with itself too: AR at each
  concurrency against AR at its lowest, the **noise floor**.
- **task accuracy** (workloads with reference answers; :mod:`dflashbench.workloads.grading`): per point, correct /
  graded, from the grade the load generator stored for every request; AR beside each method, with a
  two-proportion z-test (two-sided, 95 %) to tell a real drop from noise.
- sampled runs (temperature > 0): exact agreement means nothing there, so only accuracy is reported.

Requests are paired by ``(request_id, turn)`` (the k-th occurrence with the k-th, where a point sends a prompt
more than once). Pure functions: what comes in is the points and requests of loaded runs, what goes out are
DataFrames and warning lines for the report and ``compare``.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dflashbench.measure.analysis import finite_number as _number
from dflashbench.measure.analysis import method_sort_key

if TYPE_CHECKING:
    import pandas as pd

BASELINE = "ar"
ALPHA = 0.05  # two-sided significance of the two-proportion tests (95 %)


def first_divergence(a: Sequence, b: Sequence) -> int | None:
    """The first index where ``a`` and ``b`` differ; the shorter length when one is a prefix of the other;
    ``None`` when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):  # noqa: B905 - unequal lengths are the point
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True, slots=True)
class Output:
    """What was stored of one output."""

    text: str
    chars: int
    sha256: str | None
    token_ids: tuple[int, ...] | None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Output | None:
        """From a request record (a ``requests.jsonl`` row); ``None`` when no text was stored."""
        text = record.get("output_text")
        if not isinstance(text, str):
            return None
        chars = record.get("output_chars")
        ids = record.get("output_token_ids")
        sha = record.get("output_sha256")
        return cls(text, int(chars) if _number(chars) is not None else len(text), sha if isinstance(sha, str) else None,
                   tuple(int(t) for t in ids) if isinstance(ids, list | tuple) else None)  # fmt: skip

    @property
    def truncated(self) -> bool:
        return self.chars > len(self.text)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One output against its reference: equal, or where they first differ (``None``: past what was stored)."""

    same: bool
    chars: int | None = None
    tokens: int | None = None


def compare_outputs(ref: Output, other: Output) -> Comparison:
    """Exact equality of the full texts (by hash where both have one), else the first divergence."""
    if ref.sha256 and other.sha256:
        same = ref.sha256 == other.sha256
    else:  # an output stored without its hash: equal only if both are whole and equal
        same = not ref.truncated and not other.truncated and ref.text == other.text
    if same:
        return Comparison(True)
    chars = first_divergence(ref.text, other.text)
    if chars is not None and chars >= min(len(ref.text), len(other.text)):
        # one stored text is a prefix of the other: a real end of output, or only the end of what was kept
        ended = (chars == len(ref.text) and not ref.truncated) or (chars == len(other.text) and not other.truncated)
        chars = chars if ended else None
    tokens = None
    if ref.token_ids is not None and other.token_ids is not None:
        tokens = first_divergence(ref.token_ids, other.token_ids)
        if tokens is not None and tokens >= min(len(ref.token_ids), len(other.token_ids)) and chars is None:
            tokens = None  # both cut at the cap
    return Comparison(False, chars, tokens)


@dataclass(frozen=True, slots=True)
class Agreement:
    """Outputs of one point against their references."""

    compared: int
    exact: int
    div_chars: tuple[int, ...]  # first divergence of each differing pair, where known
    div_tokens: tuple[int, ...]
    div_unknown: int  # differing pairs whose divergence lies past the stored text

    @property
    def share(self) -> float | None:
        return self.exact / self.compared if self.compared else None

    @property
    def diverged(self) -> int:
        return self.compared - self.exact


def agreement(pairs: Iterable[tuple[Output, Output]]) -> Agreement:
    """Count exact matches and collect first-divergence positions over ``(reference, output)`` pairs."""
    compared = exact = unknown = 0
    chars: list[int] = []
    tokens: list[int] = []
    for ref, other in pairs:
        compared += 1
        c = compare_outputs(ref, other)
        if c.same:
            exact += 1
            continue
        if c.chars is None:
            unknown += 1
        else:
            chars.append(c.chars)
        if c.tokens is not None:
            tokens.append(c.tokens)
    return Agreement(compared, exact, tuple(chars), tuple(tokens), unknown)


def request_key(record: Mapping[str, Any]) -> tuple[str, int]:
    """``(request_id, turn)`` of a stored request."""
    return str(record.get("request_id")), int(_number(record.get("turn")) or 0)


def keyed_pairs(reference: Iterable[Mapping[str, Any]], others: Iterable[Mapping[str, Any]]
                ) -> list[tuple[tuple, Output, Output]]:  # fmt: skip
    """``(key, reference output, output)`` of the same request: ``key`` is ``(request_id, turn, round, occurrence)``
    (``round``: the repeat round of its record; the k-th occurrence of a request in a round pairs with the k-th).
    Requests without stored text on either side are left out, and so is every later turn of a conversation whose
    output already differed at an earlier turn: its prompt holds that turn's own answer, so it is no longer AR's
    prompt ("identical" covers the whole output; after a divergence nothing is compared further)."""

    def keyed(records: Iterable[Mapping[str, Any]]) -> dict[tuple, Output]:
        seen: dict[tuple, int] = {}
        out: dict[tuple, Output] = {}
        for r in records:
            key = (*request_key(r), int(_number(r.get("repeat")) or 0))
            n = seen[key] = seen.get(key, -1) + 1
            found = Output.of(r)
            if found is not None:
                out[(*key, n)] = found
        return out

    ref, mine = keyed(reference), keyed(others)
    found = sorted((k for k in mine if k in ref), key=lambda k: (k[0], k[2], k[3], k[1]))  # each conversation's turns
    diverged: set[tuple] = set()
    out = []
    for k in found:
        conversation = (k[0], k[2], k[3])
        if conversation in diverged:
            continue
        out.append((k, ref[k], mine[k]))
        if not compare_outputs(ref[k], mine[k]).same:
            diverged.add(conversation)
    return out


def pair_outputs(reference: Iterable[Mapping[str, Any]], others: Iterable[Mapping[str, Any]]
                 ) -> list[tuple[Output, Output]]:  # fmt: skip
    """Pairs of stored outputs of the same request (:func:`keyed_pairs`, without their keys)."""
    return [(r, m) for _, r, m in keyed_pairs(reference, others)]


# --- statistics --------------------------------------------------------------------------------------------------


def two_proportion_test(k1: int, n1: int, k2: int, n2: int) -> tuple[float | None, float | None]:
    """(z, two-sided p) of the pooled two-proportion z-test of H0: k1/n1 == k2/n2.

    ``z = (p1 - p2) / sqrt(p (1 - p) (1/n1 + 1/n2))`` with ``p = (k1 + k2) / (n1 + n2)``; ``p-value =
    erfc(|z| / sqrt 2)``. ``(None, None)`` when a side is empty; ``(0, 1)`` when the pooled share is 0 or 1
    (the two are the same). The samples are treated as independent, which is conservative for the paired
    case here (the same prompts on both sides).
    """
    if n1 <= 0 or n2 <= 0:
        return None, None
    p1, p2, pooled = k1 / n1, k2 / n2, (k1 + k2) / (n1 + n2)
    var = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if var <= 0:
        return 0.0, 1.0
    z = (p1 - p2) / math.sqrt(var)
    return z, math.erfc(abs(z) / math.sqrt(2))


def significant_drop(k_method: int, n_method: int, k_base: int, n_base: int, alpha: float = ALPHA) -> bool:
    """True when ``k_method / n_method`` lies below ``k_base / n_base`` beyond noise (two-sided test at
    ``alpha``)."""
    z, p = two_proportion_test(k_method, n_method, k_base, n_base)
    return z is not None and p is not None and z < 0 and p < alpha


# --- tables over loaded runs --------------------------------------------------------------------------------------

SETTING = ("backend", "model", "workload", "category")
AGREEMENT_COLUMNS = (*SETTING, "method", "concurrency", "reference", "compared", "exact", "agreement", "diverged",
                     "div_chars_median", "div_chars_min", "div_tokens_median", "div_tokens_min", "div_unknown",
                     "floor", "note")  # fmt: skip
ACCURACY_COLUMNS = (*SETTING, "method", "concurrency", "num_graded", "num_correct", "accuracy", "ar_accuracy",
                    "delta", "z", "p_value", "significant_drop", "sampled")  # fmt: skip


def outputs_by_point(points: pd.DataFrame, requests: pd.DataFrame) -> dict[tuple[str, str], list[dict]]:
    """Measured, successful request records per ``(run_id, point_id)``, in the order they finished; a record read
    twice (the same run given twice) is kept once."""
    if requests.empty or "point_id" not in requests.columns:
        return {}
    out: dict[tuple[str, str], list[dict]] = {}
    seen: set[tuple] = set()
    for r in requests.to_dict("records"):
        if r.get("warmup") is True or r.get("ok") is not True:
            continue
        once = (str(r.get("run_id")), str(r.get("point_id")), *request_key(r), r.get("sent_ns"))
        if once in seen:
            continue
        seen.add(once)
        out.setdefault(once[:2], []).append(r)
    return out


def point_ids(point: Mapping[str, Any]) -> list[str]:
    """The ids of a point's rounds: ``repeat_point_ids`` of a row collapsed over repeats, else its own id."""
    ids = point.get("repeat_point_ids")
    if isinstance(ids, list | tuple) and ids:
        return [str(i) for i in ids]
    return [str(point.get("point_id"))]


def _point_rows(points: pd.DataFrame) -> list[dict]:
    from dflashbench.measure.analysis import usable_points

    usable = usable_points(points)
    if usable.empty:
        return []
    return usable.to_dict("records")


def _by_setting(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Rows by setting, each point once (a run given twice is counted once)."""
    out: dict[tuple, list[dict]] = {}
    seen: set[tuple] = set()
    for r in rows:
        once = (str(r.get("run_id")), str(r.get("point_id")), r.get("category"))
        if once in seen:
            continue
        seen.add(once)
        out.setdefault(tuple(r.get(k) for k in SETTING), []).append(r)
    return out


def agreement_table(points: pd.DataFrame, requests: pd.DataFrame,
                    temperature: Callable[[str], float] = lambda run_id: 0.0) -> pd.DataFrame:  # fmt: skip
    """Agreement with AR per setting x method x concurrency (greedy runs only), AR-vs-AR rows beside them.

    Each method at concurrency c is compared with AR at c (AR at its lowest concurrency where c has no AR
    point, said in ``note``); AR at each concurrency but the lowest is compared with AR at the lowest: the
    noise floor. ``floor`` on a method's row is the setting's pooled AR-vs-AR share (None: AR was measured at
    one concurrency only). A category row uses the requests of that category within the same points.
    Settings any of whose points come from a sampled run (``temperature(run_id) > 0``) are left out.
    """
    import pandas as pd

    outputs = outputs_by_point(points, requests)
    rows: list[dict] = []
    for setting, group in _by_setting(_point_rows(points)).items():
        if any(temperature(str(p.get("run_id"))) > 0 for p in group):
            continue
        records = functools.partial(_records, outputs, setting[3])

        ar = {int(p["concurrency"]): p for p in group if p.get("method") == BASELINE}
        if not ar:
            continue
        base_c = min(ar)
        setting_rows: list[dict] = []
        floor_k = floor_n = 0
        for c in sorted(ar):
            if c == base_c:
                continue
            found = agreement(pair_outputs(records(ar[base_c]), records(ar[c])))
            floor_k, floor_n = floor_k + found.exact, floor_n + found.compared
            setting_rows.append(_agreement_row(setting, BASELINE, c, f"AR c={base_c}", found, None))
        floor = floor_k / floor_n if floor_n else None
        from dflashbench.measure.analysis import method_sort_key

        others = sorted((p for p in group if p.get("method") != BASELINE),
                        key=lambda p: (method_sort_key(str(p["method"])), int(p["concurrency"])))  # fmt: skip
        for p in others:
            c = int(p["concurrency"])
            ref_c = c if c in ar else base_c
            note = None if ref_c == c else f"no AR point at c={c}: compared with AR at c={ref_c}"
            found = agreement(pair_outputs(records(ar[ref_c]), records(p)))
            setting_rows.append(_agreement_row(setting, str(p["method"]), c, f"AR c={ref_c}", found, note,
                                               floor=floor, floor_counts=(floor_k, floor_n)))  # fmt: skip
        rows += setting_rows
    return pd.DataFrame(rows, columns=[*AGREEMENT_COLUMNS, "floor_exact", "floor_compared"])


def _records(outputs: dict[tuple[str, str], list[dict]], category: str, point: dict) -> list[dict]:
    """The stored request records of ``point`` (every repeat round of it), of ``category`` only unless it is
    "all"."""
    found = [r for pid in point_ids(point) for r in outputs.get((str(point.get("run_id")), pid), [])]
    return found if category == "all" else [r for r in found if r.get("category") == category]


def _agreement_row(setting: tuple, method: str, c: int, reference: str, found: Agreement, note: str | None,
                   floor: float | None = None, floor_counts: tuple[int, int] = (0, 0)) -> dict:  # fmt: skip
    if not found.compared:
        note = "; ".join(x for x in (note, "no stored output to compare (--no-store-text, or a run from before "
                                     "outputs were stored)") if x)  # fmt: skip
    return {**dict(zip(SETTING, setting, strict=True)), "method": method, "concurrency": c, "reference": reference,
            "compared": found.compared, "exact": found.exact, "agreement": found.share, "diverged": found.diverged,
            "div_chars_median": _median(found.div_chars), "div_chars_min": min(found.div_chars, default=None),
            "div_tokens_median": _median(found.div_tokens), "div_tokens_min": min(found.div_tokens, default=None),
            "div_unknown": found.div_unknown, "floor": floor, "note": note,
            "floor_exact": floor_counts[0], "floor_compared": floor_counts[1]}  # fmt: skip


def accuracy_table(points: pd.DataFrame, temperature: Callable[[str], float] = lambda run_id: 0.0,
                   requests: pd.DataFrame | None = None) -> pd.DataFrame:  # fmt: skip
    """Task accuracy per setting x method x concurrency (points with graded requests), AR's beside it with the
    two-proportion test.

    With ``requests``, a method and AR are counted on the prompts both graded (paired by request id and turn, as
    agreement is): a point sized by precision stops at a prefix of the prompts, and a share over other prompts
    is no comparison. Without, each point's own counts. No row pools the concurrencies: a sweep sends the same
    prompts at every concurrency, so summing them counts each prompt once per concurrency in a test that assumes
    independent requests (11 prompts at 3 concurrencies are not 33 draws). And where one category holds every
    graded request of the workload, its rows are the workload's: the "all" rows, the same figures again, are left
    out."""
    import pandas as pd

    from dflashbench.measure.analysis import method_sort_key

    rows: list[dict] = []
    outputs = outputs_by_point(points, requests) if requests is not None else {}
    graded = [p for p in _point_rows(points) if (_number(p.get("num_graded")) or 0) > 0]
    for setting, group in _by_setting(graded).items():
        sampled = any(temperature(str(p.get("run_id"))) > 0 for p in group)
        ar = {int(p["concurrency"]): p for p in group if p.get("method") == BASELINE}
        for method in sorted({str(p["method"]) for p in group}, key=method_sort_key):
            for p in sorted((p for p in group if p.get("method") == method), key=lambda p: int(p["concurrency"])):
                base = ar.get(int(p["concurrency"])) if method != BASELINE else None
                mine, theirs = _counts([p]), _counts([base]) if base is not None else None
                paired = _paired_counts(_records(outputs, setting[3], p), _records(outputs, setting[3], base)) \
                    if base is not None and outputs else None  # fmt: skip
                if paired is not None and paired[0][1]:  # the requests carry their grades: read on the same prompts
                    mine, theirs = paired
                rows.append(_accuracy_row(setting, method, int(p["concurrency"]), mine, theirs, sampled))
    return pd.DataFrame(_without_repeated_all(rows), columns=list(ACCURACY_COLUMNS))


def _paired_counts(mine: Sequence[Mapping], theirs: Sequence[Mapping]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(correct, graded) of each side over the requests both graded."""
    def graded(records: Sequence[Mapping]) -> dict[tuple, bool]:
        return {(str(r.get("request_id")), int(_number(r.get("turn")) or 0)): bool(r["correct"]) for r in records
                if r.get("correct") is not None and r.get("correct") == r.get("correct")}  # fmt: skip

    a, b = graded(mine), graded(theirs)
    common = [k for k in a if k in b]
    return (sum(a[k] for k in common), len(common)), (sum(b[k] for k in common), len(common))


def _without_repeated_all(rows: list[dict]) -> list[dict]:
    """``rows`` less the "all" rows of a workload whose graded requests all belong to one category (the same
    counts at every method and concurrency)."""
    counts: dict[tuple, dict[str, set]] = {}
    for r in rows:
        where = (r["backend"], r["model"], r["workload"])
        counts.setdefault(where, {}).setdefault(r["category"], set()).add(
            (r["method"], r["concurrency"], r["num_correct"], r["num_graded"]))
    repeated = {w for w, by_cat in counts.items()
                if "all" in by_cat and any(c != "all" and v == by_cat["all"] for c, v in by_cat.items())}  # fmt: skip
    return [r for r in rows if not (r["category"] == "all" and (r["backend"], r["model"], r["workload"]) in repeated)]


def _counts(points: Sequence[dict | None]) -> tuple[int, int]:
    k = sum(int(_number(p.get("num_correct")) or 0) for p in points if p is not None)
    n = sum(int(_number(p.get("num_graded")) or 0) for p in points if p is not None)
    return k, n


def _accuracy_row(setting: tuple, method: str, c: int | None, mine: tuple[int, int], base: tuple[int, int] | None,
                  sampled: bool) -> dict:  # fmt: skip
    k, n = mine
    acc = k / n if n else None
    z = p_value = base_acc = delta = None
    drop = False
    if base is not None and base[1]:
        base_acc = base[0] / base[1]
        delta = acc - base_acc if acc is not None else None
        z, p_value = two_proportion_test(k, n, *base)
        drop = significant_drop(k, n, *base)
    return {**dict(zip(SETTING, setting, strict=True)), "method": method, "concurrency": c, "num_graded": n,
            "num_correct": k, "accuracy": acc, "ar_accuracy": base_acc, "delta": delta, "z": z, "p_value": p_value,
            "significant_drop": drop, "sampled": sampled}  # fmt: skip


def warnings(agreement_rows: pd.DataFrame, accuracy_rows: pd.DataFrame) -> list[str]:
    """What a reader must not miss:

    - a speculative method whose accuracy falls below AR's beyond noise (two-proportion test, 95 %), per
      concurrency and pooled over concurrencies;
    - a speculative method whose agreement with AR lies below the AR-vs-AR noise floor beyond noise (the same
      test), or below 100 % where AR agreed with itself on every request or was measured at one concurrency
      only (no noise floor: a lossless method should match AR exactly). Divergences the lossless check read as
      near-ties (the rows' ``near_tie``, :func:`dflashbench.measure.lossless.with_near_ties`) count as agreement.

    Agreement is warned about on whole workloads (category "all"); accuracy also per category, unless the
    category holds every graded request of the workload (then it is the same figure).
    """
    from dflashbench.measure.analysis import method_label

    out: list[str] = []
    acc = accuracy_rows.to_dict("records") if not accuracy_rows.empty else []
    whole = {_same_as(r) for r in acc if r["category"] == "all"}
    for r in acc:
        if r["method"] == BASELINE or not r["significant_drop"]:
            continue
        if r["category"] != "all" and _same_as(r) in whole:  # the category is the whole workload's graded part
            continue
        where = f"c={int(r['concurrency'])}" if _number(r["concurrency"]) is not None else "all concurrencies pooled"
        out.append(
            f"{method_label(r['method'])} accuracy falls below AR's beyond noise on {_where(r)}, {where}: "
            f"{_pct(r['accuracy'])} ({int(r['num_correct'])}/{int(r['num_graded'])}) vs AR {_pct(r['ar_accuracy'])} "
            f"(two-proportion test, p = {r['p_value']:.3g})"
        )
    for r in agreement_rows.to_dict("records") if not agreement_rows.empty else []:
        near = int(_number(r.get("near_tie")) or 0)  # near-ties (dflashbench.measure.lossless): not a difference
        if r["method"] == BASELINE or r["category"] != "all" or not r["compared"] or r["exact"] + near >= r["compared"]:
            continue
        floor, fk, fn = r["floor"], int(r["floor_exact"]), int(r["floor_compared"])
        if fn and fk < fn:
            if not significant_drop(int(r["exact"]) + near, int(r["compared"]), fk, fn):
                continue
            why = f"below AR's own agreement across concurrencies ({_pct(floor)}, {fk}/{fn}) beyond noise"
        elif fn:
            why = f"while AR agreed with itself across concurrencies on every request ({fk}/{fn})"
        else:
            why = "with no AR-vs-AR noise floor to explain it (AR was measured at one concurrency)"
        first = _number(r["div_chars_min"])
        where_div = f"; first divergence at character {int(first)}" if first is not None else ""
        ties = f" (and on {near} by a near-tie)" if near else ""
        out.append(
            f"{method_label(r['method'])} output differs from AR on {int(r['diverged']) - near} of {int(r['compared'])} "
            f"requests{ties} on "
            f"{_where(r)}, c={int(r['concurrency'])} (agreement {_pct(r['agreement'])}), {why}{where_div}: "
            "greedy speculative decoding should reproduce AR's output"
        )
    return out


def _same_as(r: Mapping[str, Any]) -> tuple:
    return (r["backend"], r["model"], r["workload"], r["method"], r["concurrency"], r["num_correct"], r["num_graded"])


def _where(r: Mapping[str, Any]) -> str:
    cat = "" if r.get("category") == "all" else f" [{r.get('category')}]"
    return f"{r.get('workload')}{cat} ({r.get('backend')})"


def _pct(v) -> str:
    return "—" if _number(v) is None else f"{100 * float(v):.1f}%"


def _median(values: Sequence[int]) -> float | None:
    return float(statistics.median(values)) if values else None


def token_count_agreement(points: pd.DataFrame, requests: pd.DataFrame) -> list[tuple[str, int, int]]:
    """``(method, equal, compared)`` per speculative method: how many of its requests produced as many output tokens
    as AR's on the same request id at the same concurrency. The lossless check where no text was stored: equal
    counts are necessary, not sufficient."""
    if "point_id" not in points.columns or "point_id" not in requests.columns:
        return []
    where = points[points["category"] == "all"].drop_duplicates(["run_id", "point_id"])[
        ["run_id", "point_id", "method", "concurrency"]]  # the point's streams (older rows: a process's share)
    reqs = requests[(requests.get("ok") == True) & (requests.get("warmup") != True)]  # noqa: E712
    merged = reqs.drop(columns=["concurrency"], errors="ignore").merge(where, on=["run_id", "point_id"], how="inner")
    ar = {(c, r): n for c, r, n in zip(*(merged.loc[merged["method"] == BASELINE, col]
                                         for col in ("concurrency", "request_id", "output_tokens")), strict=True)}  # fmt: skip
    out = []
    for method in sorted(set(merged["method"]) - {BASELINE}, key=method_sort_key):
        mine = merged[merged["method"] == method]
        pairs = [(ar[(c, r)], n) for c, r, n in zip(mine["concurrency"], mine["request_id"], mine["output_tokens"],
                                                   strict=True) if (c, r) in ar]  # fmt: skip
        if pairs:
            out.append((method, sum(a == b for a, b in pairs), len(pairs)))
    return out
