"""The regression gate: compare two runs point by point against thresholds.

Points are aligned by (backend, method, workload, category, load): the load is the concurrency, or for an
open-loop point (``sweep --request-rate``) its arrival rate ("20/s", with its cap "20/s ≤8"). A threshold is
``METRIC=AMOUNT`` with ``AMOUNT`` either relative (``5%``) or absolute (``0.2``, in the metric's own unit):
``--max-drop throughput=5%`` fails when NEW's throughput is more than 5 % below BASE's, ``--max-rise
ttft_s_p99=10%`` when NEW's p99 TTFT is more than 10 % above. With no threshold named the default gates
apply (:data:`DEFAULT_GATES`, printed in the output): each point's throughput and pooled per-user rate, and
each method's **speedup** over another at the same load within a run (:mod:`dflashbench.gate.speedups`: DFlash
over AR, EAGLE-3 over AR, DFlash over EAGLE-3), tau, and p99 TTFT. A threshold the user names replaces the
default for its metric, and ``--no-default-gates`` turns the defaults off. A gate CI can trust fails on what it
cannot judge: a point that finished in BASE but failed in NEW, or is missing from NEW (a method left out, a
truncated ``points.jsonl``), is a regression too.

Every gated move is tested against the noise the rule of docs/metrics.md measures (the requests' own noise and
the machine's drift, :mod:`dflashbench.gate.compare_noise`), and every gated figure says the smallest move its
test could have seen (``detectable``). Where the two runs' speed probes say the machine itself changed speed
(:func:`dflashbench.measure.drift.machine_change`), a failing absolute speed figure that the change explains is
"cannot judge", not a regression (``--correct-for-probe`` divides the change out instead); a speedup, measured
within one run, is never excused.

Exit codes: 0 no regression, 1 regression, 2 unusable input (unreadable run, bad threshold, runs of different
suites with no point in common; with ``--strict``, runs that differ in setting), 3 cannot judge (every failure is
an absolute speed figure the machine's change explains, or a **weak pass**: no failure, but a gated figure that
could not have seen a drop of twice its threshold, so the pass is no evidence; ``--accept-weak`` makes a weak pass
exit 0, its trust line kept). Nothing reads the environment (no ``CI`` variable): the flags decide.

Where both runs carry repeat intervals (``<metric>_ci_lo`` / ``<metric>_ci_hi``, from ``--repeats``), a move
whose intervals overlap is noise, not a regression (:func:`within_noise`).

Task accuracy (``accuracy``, a share between 0 and 1, for workloads with reference answers) gates like any
metric: ``--max-drop accuracy=0.02`` allows 2 percentage points, ``--max-drop accuracy=5%`` 5 % of BASE's
accuracy. Beside the gate, every point whose accuracy fell beyond noise (a two-proportion z-test on correct /
graded, two-sided, 95 %) is named in a warning, gated or not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from dflashbench.errors import UserError
from dflashbench.gate.thresholds import (  # the gate's vocabulary; re-exported: callers read it from here
    ALIASES,
    CANNOT_JUDGE,
    DEFAULT_GATES,
    DEFAULT_SHOWN,
    EXIT_CANNOT_JUDGE,
    KEY,
    NA,
    NOISE,
    OK,
    REGRESSION,
    SHOWN,
    TOO_FEW,
    WEAK_FACTOR,
    Comparison,
    Row,
    Threshold,
    _index,
    default_gates,
    effective_thresholds,
    key_order,
    parse_threshold,
    value_of,
    verdict_of,
    within_noise,
)
from dflashbench.measure import noise_model

__all__ = ["ALIASES", "CANNOT_JUDGE", "DEFAULT_GATES", "DEFAULT_SHOWN", "EXIT_CANNOT_JUDGE", "KEY", "NA", "NOISE", "OK",
           "REGRESSION", "SHOWN", "TOO_FEW", "WEAK_FACTOR", "Comparison", "Row", "Threshold", "_index", "compare_points",
           "compare_runs", "default_gates", "effective_thresholds", "format_amount", "key_order", "model_identity",
           "parse_threshold", "value_of", "verdict_of", "weak_gate_flag", "within_noise"]  # fmt: skip

def compare_points(base: pd.DataFrame, new: pd.DataFrame, thresholds: Sequence[Threshold],
                   requests: tuple[pd.DataFrame, pd.DataFrame] | None = None, all_categories: bool = False,
                   probes: tuple[Sequence, Sequence] = ((), ()), correct_for_probe: bool = False,
                   launches: tuple = (None, None), run_terms: tuple = (None, None)) -> Comparison:  # fmt: skip
    """Align two runs' points and judge each threshold on each point both runs finished, and the speedup gate on
    each speedup both runs measured. ``thresholds`` are used as given (:func:`effective_thresholds` adds the
    default gates). With both runs' ``requests``, a move past a gate fails only when it is beyond noise
    (:mod:`dflashbench.gate.compare_noise`), the machine's drift read from the runs' ``probes`` (their speed
    probe's readings; none: read from the points' own moves) and ``launches``, each run's launch noise it did not
    measure (:func:`dflashbench.measure.launch_noise.for_run`). ``run_terms``: each run's run-to-run term
    (:class:`dflashbench.measure.noise_model.RunToRun`); with it, and both runs' requests carrying their prompt
    digest, every speed figure and speedup is tested on the requests both runs sent (paired across runs), else on
    each run's own. Only category ``all`` is gated unless ``all_categories``: the per-category points are its
    subsets, shown."""
    from dflashbench.gate.compare_judge import Judge

    b_all, n_all = _index(base, "BASE"), _index(new, "NEW")
    ok = lambda r: str(r.get("status") or "ok") == "ok"  # noqa: E731
    b_ok = {k: r for k, r in b_all.items() if ok(r)}
    n_ok = {k: r for k, r in n_all.items() if ok(r)}
    common = [k for k in b_ok if k in n_ok]
    failed = [(k, str(n_all[k].get("failure_reason") or "failed")) for k in b_ok if k in n_all and not ok(n_all[k])]
    if not common and not failed and (n_ok or not b_ok):
        raise UserError(
            "BASE and NEW have no finished point in common (aligned by backend, method, workload, category, "
            "concurrency or arrival rate); compare runs of the same suite"
        )
    comparison = Comparison(rows=[], thresholds=list(thresholds), common=len(common), failed_in_new=failed)
    comparison.only_in_base = [k for k in b_ok if k not in n_all]
    comparison.only_in_new = [k for k in n_ok if k not in b_all]
    judge = Judge(comparison, b_ok, n_ok, common, requests, probes, all_categories, correct_for_probe, launches,
                  run_terms)  # fmt: skip
    judge.judge()
    _add_warnings(comparison, b_ok, n_ok, common)
    return comparison


def model_identity(model: object) -> str:
    """A model as one name however it was given: the embedded pair by its folder name (``embedded/target``,
    whichever checkout or absolute path held it), a registry alias or HF id by the HF id, any other local
    folder by its last two path parts (a machine's own prefix is no part of a model's identity)."""
    from dflashbench.plan import models

    text = str(model or "")
    parts = [p for p in text.replace("\\", "/").split("/") if p not in ("", ".")]
    if len(parts) >= 2 and parts[-2] == "embedded":
        return "/".join(parts[-2:])
    entry = models.lookup(text)
    if entry is not None:
        return entry.hf_id
    if text.startswith(("/", ".", "~")) and len(parts) >= 2:
        return "/".join(parts[-2:])
    return text


def _add_warnings(comparison: Comparison, b_ok: dict[tuple, pd.Series], n_ok: dict[tuple, pd.Series],
                  common: Sequence[tuple]) -> None:  # fmt: skip
    """What the reader must know beside the table: other models, accuracy drops, noise, missing points."""
    thresholds = comparison.thresholds
    models = ({model_identity(r.get("model")) for r in b_ok.values()},
              {model_identity(r.get("model")) for r in n_ok.values()})  # fmt: skip
    if n_ok and models[0] != models[1]:
        comparison.warnings.append(f"the runs measured different models: BASE {sorted(models[0])}, NEW {sorted(models[1])}")
    comparison.warnings += _accuracy_warnings(common, b_ok, n_ok)
    if not thresholds:
        comparison.warnings.append("--no-default-gates and no --max-drop / --max-rise: no metric is gated, only "
                                   "missing and failed points")  # fmt: skip
    if any(r.verdict == NOISE for r in comparison.rows):
        n = sum(r.verdict == NOISE for r in comparison.rows)
        comparison.warnings.append(f"{n} move(s) past a gate are within noise (the repeats' 95% intervals, or the "
                                   "test on the requests after the family's correction): not regressions")  # fmt: skip
    if comparison.only_in_base:
        methods = sorted({k[1] for k in comparison.only_in_base} - {k[1] for k in n_ok})
        gone = f" (method(s) {', '.join(methods)} entirely)" if methods else ""
        comparison.warnings.insert(0, f"{len(comparison.only_in_base)} of {len(b_ok)} point(s) of BASE are missing "
                                   f"from NEW{gone}: a missing or truncated run is a regression")  # fmt: skip
    if comparison.only_in_new:
        comparison.warnings.append(f"{len(comparison.only_in_new)} point(s) of NEW have no counterpart in BASE")
    comparison.warnings += _machine_warnings(comparison)


def _machine_warnings(comparison: Comparison) -> list[str]:
    """What the machine's own change between the runs does to the verdict (docs/metrics.md, the noise rule)."""
    m = comparison.machine
    if m is None or not m.changed:
        return []
    if comparison.corrected:
        return [f"the machine changed speed: {m.text}; --correct-for-probe: NEW's speed figures are divided by "
                f"its speed ratio {m.speed_ratio:.3f} before they are judged (speedups, within one run, are not)"]
    if comparison.cannot_judge:
        return [f"the machine changed speed: {m.text}. {len(comparison.cannot_judge)} failing speed figure(s) "
                f"are 'cannot judge' (exit {EXIT_CANNOT_JUDGE}), not regressions of the code: the machine alone "
                "could have moved them; the speedups, measured within one run, are judged as usual. Rerun on a "
                "quiet machine, or pass --correct-for-probe to divide the change out"]  # fmt: skip
    way = "a regression of that size could hide behind it" if m.speed_ratio > 1 else "the figures were judged as measured"
    return [f"the machine changed speed: {m.text}; {way} (--correct-for-probe divides it out)"]


def weak_gate_flag(comparison: Comparison) -> str | None:
    """The trust flag of a pass that could not have seen much: gated figures whose detectable drop is more than
    :data:`WEAK_FACTOR` times their threshold, by metric, with the range of their detectable moves."""
    weak = comparison.weak
    if not weak:
        return None
    tested = [r for r in comparison.rows if r.detectable is not None and r.verdict in (OK, NOISE)]
    parts = []
    for metric in dict.fromkeys(r.metric for r in weak):
        rows = [r for r in weak if r.metric == metric]
        sizes = sorted(r.detectable for r in rows)
        parts.append(f"{metric} {len(rows)} of {sum(r.metric == metric for r in tested)} "
                     f"(detectable {format_amount(rows[0].threshold, sizes[0])}–"
                     f"{format_amount(rows[0].threshold, sizes[-1])})")  # fmt: skip
    hint = "" if comparison.rounds_tested or not any(r.is_speedup for r in weak) else (
        "; sweeping both runs with --repeats 3 tests each speedup on its paired rounds, a sharper test here "
        "(docs/metrics.md, the compare gate)")  # fmt: skip
    return (f"weak gate: {len(weak)} gated figure(s) passed that could not have failed on a move of "
            f"{WEAK_FACTOR:g}x their threshold (at this noise): " + "; ".join(parts) + hint
            + (" (accepted: --accept-weak)" if comparison.accept_weak else
               f" (a pass this weak exits {EXIT_CANNOT_JUDGE}; --accept-weak accepts it)"))


def format_amount(t: Threshold | None, amount: float | None) -> str:
    """A move in its threshold's unit: ``12%`` for a relative threshold, ``0.31`` for an absolute one."""
    if amount is None or t is None:
        return "—"
    if not math.isfinite(amount):
        return "∞"
    return f"{amount * 100:.0f}%" if t.relative else f"{amount:.3g}"


def _accuracy_warnings(common: Sequence[tuple], base: dict[tuple, pd.Series], new: dict[tuple, pd.Series]) -> list[str]:
    """Points whose accuracy fell beyond noise from BASE to NEW (two-proportion test, 95 %)."""
    from dflashbench.measure.quality import significant_drop, two_proportion_test

    out = []
    for key in common:
        b, n = base[key], new[key]
        kb, nb, kn, nn = (int(value_of(r, f) or 0) for r, f in ((b, "num_correct"), (b, "num_graded"),
                                                               (n, "num_correct"), (n, "num_graded")))  # fmt: skip
        if nb and nn and significant_drop(kn, nn, kb, nb):
            _, p = two_proportion_test(kn, nn, kb, nb)
            where = " / ".join(map(str, key))
            out.append(f"accuracy of {where} fell beyond noise: {kb}/{nb} ({kb / nb:.1%}) -> {kn}/{nn} ({kn / nn:.1%}), "
                       f"two-proportion test p = {p:.3g}")  # fmt: skip
    return out


def compare_runs(base_dir, new_dir, thresholds: Sequence[Threshold], all_categories: bool = False,
                 strict: bool = False, correct_for_probe: bool = False,
                 accept_weak: bool = False, noise_profile=None) -> Comparison:  # fmt: skip
    """:func:`compare_points` on two run directories; ``noise_profile``: a noise profile file (``dflashbench
    calibrate``, ``history --noise-profile-out``) whose run-to-run terms replace the project's default."""
    from dflashbench.gate.compare_drafts import draft_length_differences
    from dflashbench.gate.draft_identity import keyed_by_draft_length
    from dflashbench.run.store import load_run

    profile = noise_model.read_profile(noise_profile) if noise_profile is not None else None
    base, new = (load_run(_a_run(d, side)) for d, side in ((base_dir, "BASE"), (new_dir, "NEW")))
    context = context_differences(base.manifest, new.manifest)
    context += draft_length_differences(base.manifest, new.manifest)  # gate/compare_drafts.py (issue #63)
    try:
        comparison = compare_points(*(keyed_by_draft_length(r.points, r.manifest) for r in (base, new)), thresholds,
                                    requests=(base.requests, new.requests),
                                    all_categories=all_categories, probes=(base.probes, new.probes),
                                    correct_for_probe=correct_for_probe,
                                    launches=(run_launch_noise(base.manifest), run_launch_noise(new.manifest)),
                                    run_terms=tuple(noise_model.resolve(_field(run.manifest, "backend"), profile)
                                                    for run in (base, new)))  # fmt: skip
    except UserError as exc:
        if context and "no finished point in common" in str(exc):  # name the difference, not only its symptom
            raise UserError(f"BASE and NEW have no finished point in common: they differ in {'; '.join(context)}. "
                            "Points align by backend, method, workload, category and load, so runs of different "
                            "backends never share one: compare two runs of the same setting, or read them side by "
                            "side with dflashbench report BASE NEW") from None  # fmt: skip
        raise
    comparison.context, comparison.strict, comparison.accept_weak = context, strict, accept_weak
    from dflashbench.report.trust import trust_flags

    comparison.trust = [f"{side}: {f}" for side, run in (("BASE", base), ("NEW", new)) for f in trust_flags(run)]
    if (weak := weak_gate_flag(comparison)) is not None:
        comparison.trust.append(weak)
    status = new.meta.status or ""
    if status and status != "complete" and comparison.only_in_base:
        comparison.warnings.insert(1, f"NEW's manifest says the run is {status!r}: it did not finish")
    return comparison


def run_launch_noise(manifest: dict):
    """The launch noise a run did not measure: one launch per method of the servers dflashbench started
    (:mod:`dflashbench.measure.launch_noise`)."""
    from dflashbench.measure import launch_noise

    repeats = _field(manifest, "suite_config", "repeats")
    return launch_noise.for_run(_field(manifest, "backend"), repeats if isinstance(repeats, int) else None,
                                launched=not _field(manifest, "endpoint"))  # fmt: skip


def _a_run(run_dir, side: str):
    """``run_dir`` if it is a run directory with points, else a clear error (exit 2)."""
    from pathlib import Path

    from dflashbench.run.store import POINTS

    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"{side} {path} is not a directory; give a run directory (results/<run-id>)")
    points = path / POINTS
    if not points.is_file():
        raise UserError(f"{side} {path} is not a run directory: it has no {POINTS}; give results/<run-id>")
    if not points.read_text(encoding="utf-8", errors="replace").strip():
        raise UserError(f"{side} {path}: {POINTS} is empty (the run measured no point): nothing to compare")
    return path


def _field(manifest: dict, *path: str):
    value = manifest
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


# What must match for two runs to be comparable: (label, path into manifest.json).
CONTEXT = (("hardware", ("gpu", "gpu")), ("GPU count", ("gpu", "gpu_count")), ("CPUs", ("host", "cpu_count")),
           ("suite", ("suite", "name")), ("suite version", ("suite", "version")), ("backend", ("backend",)),
           ("engine", ("engine", "build")), ("engine version", ("engine", "version")),
           ("dflashbench version", ("dflashbench_version",)))  # fmt: skip


def context_differences(base: dict, new: dict) -> list[str]:
    """How the two runs' setting differs (hardware, suite, backend, engine and dflashbench versions): each a
    reason the comparison may measure the change of setting, not of the code."""
    out = []
    for label, path in CONTEXT:
        b, n = _field(base, *path), _field(new, *path)
        if b != n and not (b is None and n is None):
            out.append(f"{label}: BASE {b if b is not None else '-'}, NEW {n if n is not None else '-'}")
    return out
