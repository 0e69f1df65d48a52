"""The report's "Draft length" section: a method measured at several K (``dflash-k3`` arms, ``dflashbench tune``) read
as fits, the best K per load and the schedule it makes, the hold-out check, tau three ways, and a tuned schedule's
measured gain over the fixed K. The readings are :mod:`dflashbench.measure.tune_readings`'; this only renders them."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure as MplFigure

from dflashbench.measure import tune_readings as tr
from dflashbench.report.figures import Figure, _png, literal_text, method_color
from dflashbench.report.tables import Section, Table, fmt_num, fmt_tau

INTRO = ("Each K is the method at that draft length (an arm, e.g. dflash-k3, on its own server). Acceptance per draft "
         "position is pooled over loads; the step cost is fitted as c0 + c1·B + c2·B·K + c3·K; the lines are what they "
         "predict, with 95 % intervals from the fits (docs/tune.md).")  # fmt: skip


def _ci(ci) -> str:
    return "" if not ci else f" [{ci[0]:.3g}, {ci[1]:.3g}]"


def _ratio(v, ci) -> str:
    return "—" if v is None else f"{v:.3f}{_ci(ci)}"


def sections(points: pd.DataFrame, requests: pd.DataFrame, with_figures: bool = True) -> list[Section]:
    """The section (none without a method measured at two Ks or more, or a tuned arm beside its method)."""
    cells, gains = tr.cells_of(points, requests), tr.gains(points, requests)
    readings = [tr.tune_reading(c, requests) for c in cells.values() if len({x.k for x in c}) >= 2]
    if not readings and not gains:
        return []
    tables, lines, figs = [], [], []
    for r in readings:
        if r.schedule is None:
            lines.append(f"{r.method}: not fitted: {r.why_not}")
            continue
        lines.append(f"{r.method}: step cost {r.cost.describe()} (relative rms {r.cost.rel_rmse:.1%}); tau at K "
                     + ", ".join(f"{k}: {r.acceptance.tau(k):.2f}" for k in r.measured_ks)
                     + f"; recommended schedule {r.schedule.describe()} = {r.schedule.to_json()}")  # fmt: skip
        tables.append(Table(f"{r.method}: the best K per load (per user)", "Predicted per-user tok/s at the K that "
                            "maximises it, with its 95 % interval; a load past those measured is an extrapolation.",
                            ["concurrency", "K", "per user (predicted)", "next best K"],
                            [[str(c.concurrency), str(c.k), f"{c.value:.4g}{_ci(c.ci)}", str(c.runner_up or "—")]
                             for c in r.choices if c.concurrency in r.measured_loads]))  # fmt: skip
        tables.append(Table(f"{r.method}: prediction against points it did not fit", "Each measured (K, load) "
                            "predicted by fits that left it out.", ["K", "concurrency", "measured", "predicted", "error"],
                            [[str(h.k), str(h.concurrency), fmt_num(h.measured), f"{h.predicted:.4g}{_ci(h.ci)}",
                              f"{h.error:+.1%}"] for h in r.held]))  # fmt: skip
        if with_figures and (fig := curves_figure(r)) is not None:
            figs.append(fig)
    ways = tr.tau_ways(points, requests)
    if ways:
        tables.append(Table("tau three ways", "Per request, pooled per step (what dflashbench reports), weighted by "
                            "tokens; the counters' tau beside 1 + their per-position rates, which must agree.",
                            ["method", "concurrency", "per request", "pooled", "token-weighted", "1 + Σ per position",
                             "counters agree"],
                            [[w["method"], str(w["concurrency"]), fmt_tau(w["tau"].per_request), fmt_tau(w["tau"].pooled),
                              fmt_tau(w["tau"].token_weighted), fmt_tau(w["tau"].from_positions),
                              "no: per-position counters under-count" if w["tau"].broken else "yes"] for w in ways]))  # fmt: skip
    if gains:
        tables.append(Table("Tuned schedule over the fixed K, measured side by side", "The tuned arm's rate over the "
                            "method's at each load, paired by prompt (95 % interval from the requests).",
                            ["concurrency", "tuned", "fixed", "per user", "throughput", "reading"],
                            [[str(g.concurrency), g.tuned, g.fixed, _ratio(g.per_user, g.per_user_ci),
                              _ratio(g.throughput, g.throughput_ci), "slower beyond its interval" if g.slower else "ok"]
                             for g in gains]))  # fmt: skip
    return [Section("draft-length", "Draft length", INTRO, figures=figs, tables=tables, lines=lines)]


@literal_text
def curves_figure(r: tr.TuneReading) -> Figure | None:
    """Per-user rate against K at each measured load, measured (points, with intervals) and predicted (lines and
    bands); and the recommended K against load."""
    if not r.predictions:
        return None
    fig = MplFigure(figsize=(11, 4.6))
    ax1, ax2 = fig.subplots(1, 2)
    colors = ["#1f5fbf", "#e07b00", "#2a9d55", "#b8336a", "#6b6b6b", "#8c564b"]
    for i, load in enumerate(r.measured_loads):
        color = colors[i % len(colors)]
        pred = sorted((p for p in r.predictions if p.concurrency == load), key=lambda p: p.k)
        ax1.plot([p.k for p in pred], [p.per_user for p in pred], color=color, label=f"c={load} predicted")
        ax1.fill_between([p.k for p in pred], [p.per_user_ci[0] for p in pred], [p.per_user_ci[1] for p in pred],
                         color=color, alpha=0.15)  # fmt: skip
        cells = sorted((c for c in r.cells if c.concurrency == load and c.per_user), key=lambda c: c.k)
        lo = [max(c.per_user - c.per_user_ci[0], 0.0) if c.per_user_ci else 0.0 for c in cells]  # the point's rate
        hi = [max(c.per_user_ci[1] - c.per_user, 0.0) if c.per_user_ci else 0.0 for c in cells]  # may sit past its requests
        ax1.errorbar([c.k for c in cells], [c.per_user for c in cells], yerr=[lo, hi], fmt="o", color=color,
                     label=f"c={load} measured")  # fmt: skip
    ax1.set_xlabel("draft length K")
    ax1.set_ylabel("per-user tok/s")
    ax1.set_title("per-user rate by K")
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=7)
    loads = [c.concurrency for c in r.choices]
    ax2.step(loads, [c.k for c in r.choices], where="post", color=method_color(r.method))
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("concurrency (batch size)")
    ax2.set_ylabel("recommended K")
    ax2.set_title("the schedule: K by load")
    ax2.grid(True, alpha=0.3)
    fig.suptitle(f"Draft length — {r.method}")
    return _png(fig, f"draft length — {r.method}", f"Per-user rate against draft length at each load, measured and "
                f"predicted, and the recommended draft length by load for {r.method}")


def insert(all_sections: list[Section], points: pd.DataFrame, requests: pd.DataFrame,
           with_figures: bool) -> list[Section]:  # fmt: skip
    """``all_sections`` with this one placed after "Why it pays" (last where there is none): what
    ``report.model.build`` calls."""
    at = next((i + 1 for i, s in enumerate(all_sections) if s.id == "why"), len(all_sections))
    return [*all_sections[:at], *sections(points, requests, with_figures), *all_sections[at:]]
