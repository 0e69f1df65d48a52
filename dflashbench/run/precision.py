"""A closed-loop point that stops once its figures are precise enough (``precision``, docs/metrics.md "Sizing a
point"): :class:`PointWatch` is fed each result in the thread that collects them (off every client's loop), looks
at the point's precision at the checks :func:`dflashbench.measure.sequential.next_check` spaces, and sets the
point's "send no new requests" signal when :func:`dflashbench.measure.sequential.check` says stop. Requests in
flight then finish and count.

The key figures, each a ratio of sums over the point's requests (:class:`dflashbench.measure.sequential.Terms`,
one cluster per round of the closed loop):

- ``per_user``: tokens after the first over decode time (the pooled per-user rate);
- ``throughput``: output tokens over time in flight (a closed loop's throughput up to its constant concurrency);
- ``tau``: tokens committed per verification step (speculative methods whose server reports per-request stats);
- ``vs_<method>``: the per-user rate over each earlier point's of the same load (workload, concurrency, round),
  on the same prompts, paired by prompt.

A load's points stop together (docs/metrics.md, "Sizing a point"): its first point, which cannot wait for points
not yet measured, stops once its own figures are precise and it has sent what every pair of the load is planned to
need (:func:`dflashbench.plan.precision_plan.baseline_floors`); every later point of the load sends exactly the
prompts the first one sent, the same prefix of the one seeded order, so every ratio of the load is read on the same
prompts. What each later point's figures and ratios reached is recorded (:meth:`PointWatch.summary`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from dflashbench.measure import request_terms
from dflashbench.measure import sequential as seq
from dflashbench.types import Request, RequestResult

PER_USER, THROUGHPUT, TAU = "per_user", "throughput", "tau"
VS = "vs_"  # a ratio over an earlier point of the load: "vs_ar", "vs_eagle3"


def terms(results: Sequence[RequestResult], term: Callable, round_of: dict[str, int]) -> seq.Terms:
    """One figure's :class:`~dflashbench.measure.sequential.Terms` over ``results`` (``round_of``: a request id's
    round of the closed loop)."""
    rows = [(t, round_of.get(r.request_id, 0), r.request_id) for r in results if (t := term(r)) is not None]
    return seq.Terms(num=[t[0] for t, _, _ in rows], den=[t[1] for t, _, _ in rows],
                     cluster=[c for _, c, _ in rows], key=[k for _, _, k in rows])  # fmt: skip


def rounds(requests: Sequence[Request], concurrency: int) -> dict[str, int]:
    """Request id -> its round: the closed loop deals its requests to the streams in order, ``concurrency`` at a time."""
    c = max(concurrency, 1)
    return {r.id: i // c for i, r in enumerate(requests)}


@dataclass
class PointWatch:
    """The stopping rule of one point (module docstring). ``stop``: what makes the point send no more; ``earlier``:
    method -> the results of each earlier point of the same workload, load and round."""

    precision: float
    concurrency: int
    requests: Sequence[Request]
    floors: seq.Floors
    stop: Callable[[], None]
    earlier: Mapping[str, Sequence[RequestResult]] = field(default_factory=dict)
    # the load's other points run beside this one (side by side, in turn): ``earlier`` is their live mapping (this
    # point's own method, ``own``, left out), read again at each check
    live: bool = False
    own: str | None = None
    speculative: bool = False
    drift_sd_log: float = 0.0
    on_check: Callable[[seq.Check], None] | None = None
    results: list[RequestResult] = field(default_factory=list)
    last: seq.Check | None = None
    stopped: bool = False

    def __post_init__(self) -> None:
        self._round_of = rounds(self.requests, self.concurrency)
        self._category = {r.id: r.category for r in self.requests}
        self._due = self.floors.min_requests
        self._lock = threading.Lock()
        # the earlier points are finished: their terms are read once, not at every check (live: at each check)
        self._earlier = {m: terms([r for r in rs if r.ok], request_terms.per_user, self._round_of)
                         for m, rs in self.earlier.items() if m != self.own}  # fmt: skip

    def _read_live(self) -> None:
        """The other points' terms as they are now (they are still running beside this one)."""
        self._earlier = {m: terms([r for r in list(rs) if r.ok], request_terms.per_user, self._round_of)
                         for m, rs in list(self.earlier.items()) if m != self.own and rs}  # fmt: skip

    def add(self, r: RequestResult) -> None:
        """One finished result (a warm-up is not counted); checks when one is due."""
        if r.warmup:
            return
        with self._lock:
            self.results.append(r)
            if self.stopped or len(self.results) < self._due:
                return
            self._due = seq.next_check(len(self.results), self.concurrency)
            self.last = self.look()
            if self.on_check is not None:
                self.on_check(self.last)
            if self.last.stop:
                self.stopped = True
                self.stop()

    def figures(self) -> dict[str, seq.Figure | None]:
        if self.live:
            self._read_live()
        ok = [r for r in self.results if r.ok]
        n = len(ok)
        per_user = terms(ok, request_terms.per_user, self._round_of)
        out: dict[str, seq.Figure | None] = {
            PER_USER: seq.Figure.of(seq.ratio_log_var(per_user), n),
            THROUGHPUT: seq.Figure.of(seq.ratio_log_var(terms(ok, request_terms.throughput, self._round_of)), n)}  # fmt: skip
        tau = terms(ok, request_terms.tau, self._round_of) if self.speculative else None
        if tau is not None and len(tau.num):  # none reported: tau is read from the server's counters, unchecked
            out[TAU] = seq.Figure.of(seq.ratio_log_var(tau), n)
        for method, theirs in self._earlier.items():
            out[VS + method] = seq.Figure.of(seq.paired_log_var(per_user, theirs), n, self.drift_sd_log)
        return out

    def look(self, figures: dict[str, seq.Figure | None] | None = None) -> seq.Check:
        """The check at the results so far (``figures``: :meth:`figures`, where the caller already has them)."""
        counts: dict[str, int] = {}
        for r in self.results:
            key = self._category.get(r.request_id, r.category)
            counts[key] = counts.get(key, 0) + 1
        held = dict(self.figures() if figures is None else figures)
        return seq.check(len(self.results), held, self.precision, self.floors, counts)

    def summary(self) -> dict:
        """What the point's row keeps (``extra["precision"]``): the asked half-width, why it stopped, how many
        requests, each figure's half-width at the last check."""
        every = self.figures() if self.results else {}
        last = self.look(every) if self.results else None
        reason = (last.reason if last and last.stop else seq.CEILING) if last else "no request finished"
        figures = {k: f for k, f in every.items() if f is not None}
        return {"asked": self.precision, "reason": reason, "requests": len(self.results),
                "ceiling": self.floors.ceiling, "min_requests": self.floors.min_requests,
                "half_width": {k: round(f.half_width, 5) for k, f in figures.items()},
                "drift_limited": list(last.drift_limited) if last else []}  # fmt: skip


def line(summary: dict) -> str:
    """The point's console words on its precision: ``±2.8 % in 96 of 256 requests`` or why it could not."""
    widths = summary.get("half_width") or {}
    worst = max(widths.values()) if widths else None
    reached = f"±{worst:.1%}" if worst is not None else "no interval"
    n, ceiling, asked = summary["requests"], summary["ceiling"], summary["asked"]
    if summary["reason"] == seq.PRECISE or (worst is not None and worst <= asked):  # a floor may have held it longer
        return f"precise to {reached} in {n} of {ceiling} requests"
    if summary["reason"] == seq.UNREACHABLE:
        return (f"stopped at {n} requests: ±{asked:.0%} is below the machine's drift "
                f"({', '.join(summary['drift_limited'])}); reached {reached}")  # fmt: skip
    return f"{reached} after all {n} requests (asked ±{asked:.0%}: the prompts ran out first)"
