"""What weakens a run, said before its verdict: trust flags read from the run directory alone.

A flag is one short sentence a reader needs before believing the answer: the run did not complete, planned
points are missing or the points file was cut short, points failed or were degraded, the run was resumed, the
code had uncommitted changes, the lossless check rests on token counts (no stored text), some points' per-token
latency was not observable, or a server's token counts disagreed with what it streamed. ``report``, ``compare``
and the end of ``sweep`` print them before the verdict, the HTML and Markdown reports show them above it, and
``report --strict`` exits 1 when any is raised (for CI).
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from dflashbench.measure.analysis import planned_not_measured
from dflashbench.run.store import POINTS, Run, requests_problem
from dflashbench.types import format_cpu_list

# A GPU busy less than this share of a point's window mostly waited: its power is largely idle draw, so energy per
# token there is idle power / throughput, not the cost of decoding (the GPU example's AR c=1: 14 % at 121 W).
IDLE_GPU_UTIL_PCT = 50.0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def trust_flags(run: Run) -> list[str]:
    """The run's trust flags, most serious first; ``[]`` for a run that can be taken as measured."""
    m, points = run.manifest, run.repeat_points if run.repeat_points is not None else run.points
    flags: list[str] = []
    status = m.get("status")
    if status is not None and status != "complete":  # None: a manifest that does not say (hand-made)
        reason = f" ({m['status_reason']})" if m.get("status_reason") else ""
        flags.append(f"not complete: the manifest says {status!r}{reason}")
    planned = {str(pid) for pid in m.get("grid") or []}
    missing = planned_not_measured(points, planned)
    if missing:
        flags.append(f"{len(missing)} of {len(planned)} planned points are not in {POINTS} "
                     f"(e.g. {missing[0]}): the readings rest on part of the grid")  # fmt: skip
    raw = run.run_dir / POINTS
    if raw.is_file() and raw.stat().st_size and not raw.read_bytes().endswith(b"\n"):
        flags.append(f"{POINTS} ends in a line cut short (a crash mid-write): that point is not read")
    if (lost := requests_problem(run)) is not None:
        flags.append(lost)
    if not points.empty and "status" in points.columns:
        alls = points[points["category"] == "all"] if "category" in points.columns else points
        bad = alls[alls["status"].astype(str) != "ok"]
        for kind in ("failed", "degraded"):
            rows = bad[bad["status"] == kind]
            if len(rows):
                reasons = rows["failure_reason"].dropna().astype(str) if "failure_reason" in rows.columns else []
                unstarted = sum(r.startswith(("server did not start", "not run")) for r in reasons)
                fix = ("fix what kept the server from starting (its log is in the run directory), then dflashbench "
                       "sweep --resume measures them" if unstarted == len(rows)
                       else "dflashbench sweep --resume redoes them")  # fmt: skip
                named = "; ".join(f"{u['method']} {u['load']}: {u['what']}" for u in (
                    _unmeasured_row(r) for r in rows.to_dict("records")))  # fmt: skip
                flags.append(f"{_plural(len(rows), 'point')} {kind} ({fix}): {named}")
    resumes = m.get("resumes") or []
    flags += [f for f in (resumed_flag(m, resumes) if resumes else None, interference_flag(m)) if f]
    if m.get("git_dirty"):
        flags.append(f"made from a tree with uncommitted changes (git {str(m.get('git_sha') or '')[:12]}+dirty): "
                     "the code it measured is not in any commit")  # fmt: skip
    if (text := text_flag(run, len(planned))) is not None:
        flags.append(text)
    if "latency_not_measured_reason" in points.columns:
        blind = points[points["latency_not_measured_reason"].notna()]
        if "category" in blind.columns:
            blind = blind[blind["category"] == "all"]
        if not blind.empty:
            flags.append(f"per-token latency not observable at {_plural(len(blind), 'point')}: TPOT, ITL and "
                         "per-user rate not measured there")  # fmt: skip
    alls = points[points["category"] == "all"] if not points.empty and "category" in points.columns else points
    flags += [f for f in (usage_flag(alls), *usage_unchecked_flags(alls), idle_gpu_flag(alls), client_record_flag(alls),
                          shared_cores_flag(m, alls), tau_below_one_flag(alls)) if f]  # fmt: skip
    if (slowed := slowdown_flag(alls)) is not None:
        flags.append(slowed)
    flags += timing_noise_flags(alls)
    return flags


# A point's failure reason (dflashbench.run.point) in the few words the answer's line names it with: its start ->
# the words. Others: their first clause.
FAILURE_WORDS = (("the server exited during the point", "server crashed"),
                 ("server did not start", "server did not start"),
                 ("not run: the server had exited", "not run: its server had exited at an earlier point"),
                 ("every request failed", "every request failed"),
                 ("the client process", "client process stopped"))  # fmt: skip
WORDS_MAX = 60


def failure_words(status: object, reason: object) -> str:
    """What happened to a point the verdict cannot read, in a few words: ``failed (server crashed)``,
    ``degraded (3 of 32 requests failed)``."""
    text = str(reason or "").strip()
    said = next((w for start, w in FAILURE_WORDS if text.startswith(start)), None)
    if said is None and status == "degraded" and " requests failed" in text:
        said = text.split(" (")[0]
    if said is None:
        said = text.split("; ")[0].split("\n")[0]
        said = said if len(said) <= WORDS_MAX else said[:WORDS_MAX - 1].rstrip() + "…"
    return f"{status} ({said})" if said else str(status)


def _load_words(concurrency: object, extra: object, point_id: str) -> str:
    from dflashbench.measure.analysis import request_rate
    from dflashbench.types import PointKey

    key = PointKey.parse(point_id)
    trace = (extra.get("trace") or {}) if isinstance(extra, dict) else {}
    if trace.get("speed") is not None:
        where = f"{trace.get('trace')} {float(trace['speed']):g}×"
    elif (rate := request_rate(extra)) is not None:
        where = f"{rate:g}/s"
    elif key is not None and key.streams is None:
        where = key.load
    else:
        where = f"c={int(concurrency) if concurrency is not None and concurrency == concurrency else key.streams}"
    return where + (f" (round {key.round + 1})" if key is not None and key.round is not None else "")


def _unmeasured_row(rec: dict, what: str | None = None) -> dict:
    from dflashbench.measure.analysis import method_label

    return {"run_id": str(rec.get("run_id")), "method": method_label(str(rec.get("method"))),
            "workload": str(rec.get("workload")), "model": rec.get("model"),
            "concurrency": rec.get("concurrency"), "trace": isinstance(rec.get("extra"), dict)
            and bool((rec["extra"]).get("trace")), "point_id": str(rec.get("point_id")),
            "load": _load_words(rec.get("concurrency"), rec.get("extra"), str(rec.get("point_id"))),
            "what": what or failure_words(rec.get("status"), rec.get("failure_reason"))}  # fmt: skip


def unmeasured_points(run: Run) -> list[dict]:
    """Every point of ``run`` the verdict cannot read (:func:`dflashbench.measure.analysis.unmeasured`), each named
    with what happened (issue #65): failed or degraded (its status and reason, :func:`failure_words`), empty, or
    dropped. Each a dict: run_id, method (as labelled), workload, model, concurrency, trace (a trace point),
    point_id, load and what (in words)."""
    from dflashbench.measure.analysis import unmeasured

    points = run.repeat_points if run.repeat_points is not None else run.points
    out = []
    for rec, why in unmeasured(points, run.requests, run.manifest.get("grid") or [], run.run_id):
        n = rec.get("num_requests")
        held = f" of its {int(n)}" if isinstance(n, int | float) and n == n and n else ""
        what = {"empty": f"empty (requests.jsonl holds none{held})", "dropped": "dropped (planned, not in points.jsonl)"}
        row = _unmeasured_row(rec, what.get(why))
        out.append({**row, "trace": rec["dropped_trace"]} if why == "dropped" else row)
    return out


def text_flag(run: Run, planned: int) -> str | None:
    """Where the lossless check rests on token counts: no output text stored (``--no-store-text``), for the whole
    run or for the points a resume with it measured (the manifest's ``outputs.text_not_stored``)."""
    outputs = run.manifest.get("outputs") or {}
    stored = outputs.get("store_text")
    if stored is None and not run.requests.empty:  # a run from before the manifest said: look at the requests
        kept = [c for c in ("output_text", "output_sha256") if c in run.requests.columns]
        stored = bool(kept) and bool(run.requests[kept].notna().any().any())
    if stored is False:
        return "no output text stored (--no-store-text): lossless is judged by token counts, not proof"
    unstored = [str(p) for p in outputs.get("text_not_stored") or []]
    if not unstored:
        return None
    return (f"no output text stored at {_plural(len(unstored), 'point')} of {planned or '?'} (a resume with "
            f"--no-store-text, e.g. {unstored[0]}): lossless is judged by token counts there, not proof")


def _when(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def resumed_flag(manifest: dict, resumes: list) -> str:
    """Which points a later sitting measured and when, and what that does to the readings across them."""
    from dflashbench.measure.analysis import method_label
    from dflashbench.types import PointKey

    start = _when(manifest.get("started_at"))
    parts = []
    for resume in resumes:
        if not isinstance(resume, dict):
            continue
        names = []
        for pid in resume.get("points_to_run") or []:
            key = PointKey.parse(str(pid))
            where = key.load.replace("c", "c=", 1) + (f"/r{key.round}" if key and key.round is not None else "") \
                if key else ""  # fmt: skip
            names.append(f"{method_label(key.method)} {where}" if key else str(pid))
        at = _when(resume.get("at"))
        later = f", {(at - start).total_seconds() / 60:.0f} minutes after the run started" if at and start else ""
        parts.append(f"{', '.join(names) or 'no point'} in a sitting at {resume.get('at')}{later}")
    return (f"resumed {_plural(len(resumes), 'time')}: {'; '.join(parts)}. A reading that compares a point of a "
            "later sitting with one of the first (the method at a concurrency against AR there) crosses sittings: "
            "the verdict marks it, and its interval does not hold the machine's change between the sittings")


def usage_flag(points: pd.DataFrame) -> str | None:
    """Points where the server's ``usage.completion_tokens`` disagreed with what it streamed
    (:mod:`dflashbench.load.usage_check`): how many requests, where, an example, and what the figures use instead."""
    if points.empty or "usage_mismatch_requests" not in points.columns:
        return None
    flagged = pd.to_numeric(points["usage_mismatch_requests"], errors="coerce").fillna(0)
    rows = points[flagged > 0]
    if rows.empty:
        return None
    from dflashbench.measure.analysis import method_label

    checked = int(pd.to_numeric(rows["usage_checked_requests"], errors="coerce").fillna(0).sum())
    first = rows.iloc[0]
    example = ((first.get("extra") if isinstance(first.get("extra"), dict) else {}).get("usage_check") or {}).get(
        "first_mismatch")  # fmt: skip
    where = f"{method_label(str(first['method']))} c={int(first['concurrency'])}"
    # the first clause is the verdict's short flag (model.short_flag): it must say what disagreed with what
    return (f"the server's token counts disagreed with its stream: usage.completion_tokens on "
            f"{int(flagged.sum())} of {checked} requests at {_plural(len(rows), 'point')} "
            f"({where}{': ' + example if example else ''}); a server that miscounts its tokens: those requests' "
            "throughput, TPOT and per-user rates use the streamed count, not the server's")


def usage_unchecked_flags(points: pd.DataFrame) -> list[str]:
    """Points whose server's ``usage.completion_tokens`` was no integer (read as missing), or could be held only to
    bounds that do not confirm it (:func:`dflashbench.load.usage_check.unverified`): the figures rest on a count
    nobody checked, and the fix."""
    if points.empty or "extra" not in points.columns:
        return []
    from dflashbench.measure.analysis import method_label

    checks = [(rec, rec["extra"].get("usage_check")) for rec in points.to_dict("records")
              if isinstance(rec.get("extra"), dict) and isinstance(rec["extra"].get("usage_check"), dict)]  # fmt: skip
    out = []
    for key, words in (("invalid", "was no integer"), ("unverified", "could not be checked")):
        hit = [(rec, c) for rec, c in checks if c.get(key)]
        if not hit:
            continue
        n = sum(int(c[key]) for _, c in hit)
        rec, c = hit[0]
        where = f"{method_label(str(rec['method']))} c={int(rec['concurrency'])}: {c.get('first_' + key)}"
        head = (f"the server's token counts {'were no integers' if key == 'invalid' else 'could not be checked'}: "
                f"usage.completion_tokens {words} on {n} request(s) at {_plural(len(hit), 'point')} ({where})")
        if key == "invalid":
            out.append(head + "; read as missing: those requests' output tokens are counted from the stream")
        else:
            out.append(head + "; no token ids in the streams and no tokenizer of the target at hand, so only "
                       "bounds held it (output chunks below, bytes above), and it is above the chunks: throughput, "
                       "TPOT and per-user rates rest on the server's own count. Put the target's tokenizer on this "
                       "machine (its folder, or the Hugging Face cache) to check it")  # fmt: skip
    return out


def idle_gpu_flag(points: pd.DataFrame) -> str | None:
    """Points whose GPU was busy less than :data:`IDLE_GPU_UTIL_PCT` of the window, with their power."""
    if points.empty or "gpu_util_pct_mean" not in points.columns:
        return None
    util = pd.to_numeric(points["gpu_util_pct_mean"], errors="coerce")
    idle = points[util < IDLE_GPU_UTIL_PCT]
    if idle.empty:
        return None
    from dflashbench.measure.analysis import method_label

    u = pd.to_numeric(idle["gpu_util_pct_mean"], errors="coerce")
    w = pd.to_numeric(idle.get("mean_power_w"), errors="coerce").dropna()
    power = f" at {w.min():.0f}–{w.max():.0f} W" if not w.empty else ""
    names = ", ".join(f"{method_label(str(p['method']))} c={int(p['concurrency'])}" for p in idle.to_dict("records"))
    return (f"the GPU idled at {_plural(len(idle), 'point')} ({names}): {u.min():.0f}–{u.max():.0f}% mean "
            f"utilisation{power}, so energy per token there is mostly idle power ÷ throughput, not the cost of "
            "decoding (a tiny model leaves the GPU waiting on the host)")


def slowdown_flag(points: pd.DataFrame) -> str | None:
    """Points whose server decoded slower in their last third than in their first (:mod:`dflashbench.measure.trend`):
    their figures average a server that changed under them."""
    if points.empty or "extra" not in points.columns:
        return None
    from dflashbench.measure.trend import slowdown_line
    from dflashbench.report.load_shape import point_where

    slowed = [(rec, line) for rec in points.to_dict("records") if isinstance(rec.get("extra"), dict)
              and (line := slowdown_line(rec["extra"].get("trend")))]  # fmt: skip
    if not slowed:
        return None
    names = ", ".join(point_where(rec) for rec, _ in slowed)
    return (f"the server slowed down during {_plural(len(slowed), 'point')} ({names}); first: {slowed[0][1]}. Their "
            "figures describe neither its start nor its end: look for what changed (clocks, temperature, another "
            "tenant), then measure them again")  # fmt: skip


def interference_flag(m: dict) -> str | None:
    """A side-by-side run whose interference probe (dflashbench.run.interference) read its threshold exceeded."""
    probe = m.get("interference")
    if not isinstance(probe, dict) or not probe.get("flagged"):
        return None
    mode = (m.get("placement") or {}).get("mode")
    what = ("the methods then went in turn" if mode == "turns" else
            "the methods stayed side by side as asked, each slowed by the others")  # fmt: skip
    return (f"interference: {probe.get('server')} ran {float(probe.get('slowdown', 0)):.0%} slower per user with the "
            f"other servers busy (threshold {float(probe.get('threshold', 0)):.0%}): {what}")


TAU_FLOOR = 0.999  # a verification step commits at least one token (the target's own), so tau >= 1 always


def tau_below_one_flag(points: pd.DataFrame) -> str | None:
    """Points whose tau is below 1, which no engine can deliver (each verification step commits at least the
    target's own token): the speculative counters were misread or are broken (second verdict review, probe
    eagle_tau_below_one: EAGLE-3's points at tau 0.6, printed without a flag)."""
    from dflashbench.measure.analysis import finite_number, method_label

    if points.empty or "tau" not in points.columns:
        return None
    low = [(str(r["method"]), int(r["concurrency"]), tau) for r in points.to_dict("records")
           if (tau := finite_number(r.get("tau"))) is not None and tau < TAU_FLOOR]  # fmt: skip
    if not low:
        return None
    by_method: dict[str, list] = {}
    for method, c, tau in low:
        by_method.setdefault(method, []).append((c, tau))
    named = "; ".join(f"{method_label(m)} at c={', '.join(str(c) for c, _ in sorted(xs))} (τ {min(t for _, t in xs):.2f}"
                      f"{'' if len(xs) == 1 else ' at the lowest'})" for m, xs in sorted(by_method.items()))  # fmt: skip
    whose = " and ".join(f"{method_label(m)}'s" for m in sorted(by_method))
    return (f"{whose} τ below 1 at {_plural(len(low), 'point')}: {named}. Every verification step commits at least one "
            "token, so the engine's speculative counters were misread or are broken: its τ and acceptance are not to be "
            "trusted (request times and rates do not use them)")


def client_record_flag(points: pd.DataFrame) -> str | None:
    """A run whose points carry no client-load record (``extra["client"]``): the timing-noise check never ran."""
    if points.empty or "extra" not in points.columns:
        return None
    if any(isinstance(e, dict) and e.get("client") for e in points["extra"]):
        return None
    return ("no client-load record (a run from before dflashbench recorded the client's CPU share and event-loop "
            "lag): whether the client's own timing was noisy was never checked")


def shared_cores_flag(manifest: dict, points: pd.DataFrame) -> str | None:
    """A CPU engine whose client had no core of its own: the client's timestamps carry the engine's load."""
    gpus = pd.to_numeric(points.get("num_gpus"), errors="coerce") if not points.empty else None
    if gpus is None or gpus.empty or (gpus > 0).any():
        return None  # the engine computed on a GPU
    cpus = manifest.get("cpus") if isinstance(manifest.get("cpus"), dict) else {}
    engine, client = set(cpus.get("engine") or ()), set(cpus.get("client") or ())
    if engine and client and not engine & client:
        return None
    if cpus.get("servers") and engine & client:  # each engine its own cores, none left for the client
        return (f"the client shared CPU {format_cpu_list(engine & client)} with the engines (--engine-cpus "
                f"{cpus.get('setting')}: every core an engine's, as side by side on 2 cores must be), so the "
                "client's timestamps carry an engine's load")  # fmt: skip
    shared = f" (CPUs {sorted(engine & client)})" if engine & client else ""
    return (f"the client and the engine shared the same cores{shared}: the engine computed on the CPU and no "
            "split was recorded (sweep --engine-cpus), so the client's timestamps carry the engine's load")


def timing_noise_flags(points: pd.DataFrame) -> list[str]:
    """The client's own timing noise (a lagging event loop on a shared CPU), said before the verdict it weakens."""
    from dflashbench.report.load_shape import client_findings

    _, noted = client_findings(points)
    return [n[0].lower() + n[1:] for n in noted]


