"""Plant a condition in a copy of a committed run and print what `dflashbench report` says of it.

    .venv/bin/python docs/measurements/2026-11-29-verdict-review/probes.py /tmp/verdict-probes [NAME ...]

Each probe copies a run folder of results/examples/ to OUT/<name>/, edits points.jsonl, requests.jsonl, manifest.json
or ties.jsonl there (never the committed files), runs `dflashbench report` on it (-o OUT/<name>.md) and writes the
terminal's verdict to OUT/<name>.txt. The README beside this file says what each planted and what came back.
"""

from __future__ import annotations

import copy as cp
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EX = ROOT / "results" / "examples"
DEFAULT, METHODS, TRACE = "demo-20261127-075225-b7da", "demo-20261127-053618-7ae2", "trace-demo-20261125-182837-c938"
OLD, VLLM = "demo-20261123-120110-e69c", "demo-20261125-024540-6b40"
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/verdict-probes")


def rows(p: Path) -> list[dict]:
    return [json.loads(s) for s in p.read_text().splitlines() if s.strip()]


def write(p: Path, rs: list[dict]) -> None:
    p.write_text("".join(json.dumps(r) + "\n" for r in rs))


def edit(run: Path, name: str, fn) -> None:
    out = []
    for r in rows(run / name):
        x = fn(r)
        if x is not None:
            out.append(x)
    write(run / name, out)


def manifest(run: Path, fn) -> None:
    m = json.loads((run / "manifest.json").read_text())
    fn(m)
    (run / "manifest.json").write_text(json.dumps(m, indent=1))


def copy(src: str, name: str) -> Path:
    dst = OUT / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(EX / src, dst)
    return dst


def report(name: str, *runs: Path | str, extra: tuple[str, ...] = ()) -> str:
    cmd = [str(ROOT / ".venv/bin/dflashbench"), "report", *map(str, runs), "-o", str(OUT / f"{name}.md"), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"})
    text = "\n".join(s for s in p.stdout.splitlines() if not s.startswith("report written")) + p.stderr
    (OUT / f"{name}.txt").write_text(f"$ dflashbench report {' '.join(map(str, runs))} {' '.join(extra)}\n{text}")
    return text


def is_point(r: dict, pid: str) -> bool:
    return r["point_id"] == pid


def fail_point(pid: str, reason: str):
    def f(r):
        if is_point(r, pid):
            r.update(status="failed", failure_reason=reason, num_requests=0, output_tokens=0)
            for k in ("throughput_tok_per_s", "throughput_tok_per_s_per_gpu", "per_user_tok_per_s_pooled",
                      "per_user_tok_per_s_mean", "tau"):
                r[k] = None
        return r
    return f


def swap(a: str, b: str, points: bool = True):
    """Swap two points' labels (point_id, method, draft) in points.jsonl, or their point_id in requests.jsonl."""
    ids = {a: b, b: a}
    meth = {a: b.split(":")[1], b: a.split(":")[1]}

    def f(r):
        if r["point_id"] in ids:
            old = r["point_id"]
            r["point_id"] = ids[old]
            if points:
                r["method"] = meth[old]
                r["draft"] = None if meth[old] == "ar" else f"dflashbench/embedded/{meth[old]}"
        return r
    return f


def fail_requests(pid: str, k: int):
    n = {"k": 0}

    def f(r):
        if is_point(r, pid) and not r["warmup"] and n["k"] < k:
            n["k"] += 1
            r.update(ok=False, error="timeout after 300 s", last_token_ns=None, output_tokens=0, output_text=None,
                     output_sha256=None, chunk_ns=[], chunk_tokens=[], output_token_ids=None)
        return r
    return f


def repeats(name: str, factors: list[float], method: str = "dflash") -> Path:
    """Round 0 is the committed run; round k a copy of it with `method`'s request times (after sending) x factors[k-1]."""
    d = copy(DEFAULT, name)
    P, R = rows(d / "points.jsonl"), rows(d / "requests.jsonl")
    outP, outR = list(P), list(R)
    for k, f in enumerate(factors, start=1):
        off = 10**12 * k
        for p in P:
            q = cp.deepcopy(p)
            q["repeat"] = k
            if q["method"] == method:
                for key in ("throughput_tok_per_s", "throughput_tok_per_s_per_gpu", "per_user_tok_per_s_pooled",
                            "per_user_tok_per_s_mean", "steady_throughput_tok_per_s"):
                    q[key] = q[key] / f if q.get(key) else q.get(key)
                q["duration_s"] *= f
            outP.append(q)
        for r in R:
            q = cp.deepcopy(r)
            q["repeat"] = k
            s, sc = q["sent_ns"], f if q["point_id"].split(":")[1] == method else 1.0
            for key in ("first_token_ns", "last_token_ns"):
                q[key] = int(s + (q[key] - s) * sc) + off
            q["chunk_ns"] = [int(s + (c - s) * sc) + off for c in q["chunk_ns"]]
            q["sent_ns"] += off
            q["queued_ns"] += off
            outR.append(q)
    write(d / "points.jsonl", outP)
    write(d / "requests.jsonl", outR)
    manifest(d, lambda m: m["suite_config"].__setitem__("repeats", 1 + len(factors)))
    return d


def trace_late(name: str, points_too: bool) -> Path:
    """DFlash at 2x on the real prompts: every send moved later by 0.6 x its time since the first (achieved rate
    3.15/s -> 1.97/s; latencies unchanged); with points_too, its point row's achieved rate too."""
    d = copy(TRACE, name)
    pid = "reference:dflash:workloads:tazure-codex2.0"
    first = min(r["sent_ns"] for r in rows(d / "requests.jsonl") if is_point(r, pid) and not r["warmup"])

    def f(r):
        if is_point(r, pid) and not r["warmup"]:
            delta = int((r["sent_ns"] - first) * 0.6)
            for k in ("sent_ns", "first_token_ns", "last_token_ns"):
                r[k] += delta
            r["chunk_ns"] = [c + delta for c in r["chunk_ns"]]
        return r
    edit(d, "requests.jsonl", f)
    if points_too:
        edit(d, "points.jsonl", lambda r: (r["extra"]["load"].__setitem__("achieved_rate_per_s", 3.153 / 1.6), r)[1]
             if is_point(r, pid) else r)
    return d


def p01():
    d = copy(DEFAULT, "p01-failed-point")
    edit(d, "points.jsonl", fail_point("reference:dflash:synthetic:c4", "server crashed (exit code -9)"))
    edit(d, "requests.jsonl", lambda r: None if is_point(r, "reference:dflash:synthetic:c4") else r)
    return report("p01-failed-point", d)


def p02():
    d = copy(DEFAULT, "p02-ar-dflash-swapped")
    edit(d, "points.jsonl", swap("reference:ar:synthetic:c2", "reference:dflash:synthetic:c2"))
    edit(d, "requests.jsonl", swap("reference:ar:synthetic:c2", "reference:dflash:synthetic:c2", points=False))
    return report("p02-ar-dflash-swapped", d)


def p02b():
    d = copy(DEFAULT, "p02b-eagle3-dflash-swapped")
    edit(d, "points.jsonl", swap("reference:eagle3:synthetic:c2", "reference:dflash:synthetic:c2"))
    edit(d, "requests.jsonl", swap("reference:eagle3:synthetic:c2", "reference:dflash:synthetic:c2", points=False))
    return report("p02b-eagle3-dflash-swapped", d)


def p03():
    d = copy(DEFAULT, "p03-no-requests")
    edit(d, "requests.jsonl", lambda r: None if is_point(r, "reference:dflash:synthetic:c2") else r)
    return report("p03-no-requests", d)


def p03b():
    d = copy(DEFAULT, "p03b-12-of-32-requests")
    n = {"k": 0}

    def f(r):
        if is_point(r, "reference:dflash:synthetic:c2") and not r["warmup"]:
            n["k"] += 1
            return r if n["k"] <= 12 else None
        return r
    edit(d, "requests.jsonl", f)
    return report("p03b-12-of-32-requests", d)


def p04():
    d = copy(DEFAULT, "p04-slo")
    out = [report("p04a-slo-unreadable", d, extra=("--slo", "tpot_p90=6ms,ttft_p99=30ms")),
           report("p04b-slo-e2e", d, extra=("--slo", "e2e_p50=150ms")),
           report("p04c-slo-none-meets", d, extra=("--slo", "ttft_p50=1ms"))]
    manifest(d, lambda m: m["suite_config"].__setitem__("slo", "e2e_p50=150ms"))
    out.append(report("p04d-sweep-slo", d))
    return "\n".join(out)


def p05():
    return "\n".join([report("p05a-two-runs-same-host", EX / DEFAULT, EX / METHODS),
                      report("p05b-reference-and-vllm", EX / DEFAULT, EX / VLLM),
                      report("p05c-two-runs-two-days", EX / DEFAULT, EX / OLD)])


def p06():
    return report("p06-same-run-twice", EX / DEFAULT, EX / DEFAULT)


def p07():
    return "\n".join([report("p07a-repeats-2-rounds", repeats("p07a-repeats-2-rounds", [1.3])),
                      report("p07b-repeats-3-rounds", repeats("p07b-repeats-3-rounds", [1.3, 1.15])),
                      report("p07c-repeats-2-rounds-far", repeats("p07c-repeats-2-rounds-far", [2.5]))])


def p08():
    d = copy(DEFAULT, "p08-lossy")
    n = {"k": 0}

    def f(r):
        if is_point(r, "reference:dflash:synthetic:c1") and not r["warmup"] and n["k"] < 3:
            n["k"] += 1
            r["output_text"] = r["output_text"][:20] + " DIFFERENT " + r["output_text"][31:]
            r["output_sha256"] = "0" * 64
            r["output_token_ids"] = r["output_token_ids"][:5] + [999] + r["output_token_ids"][6:]
        return r
    edit(d, "requests.jsonl", f)
    return report("p08-lossy", d)


def p09():
    out = []
    pid = "reference:dflash:synthetic:c1"
    for name, k, degraded in (("p09a-3-timeouts-under-max-error-rate", 3, False), ("p09b-degraded-point", 5, True)):
        d = copy(DEFAULT, name)
        edit(d, "requests.jsonl", fail_requests(pid, k))

        def g(r, k=k, degraded=degraded):
            if is_point(r, pid):
                if r["category"] == "all":
                    r["num_errors"] = k
                if degraded:
                    r["status"] = "degraded"
                    r["failure_reason"] = f"{k} of 32 requests failed ({k / 32:.0%} > max_error_rate 10%)"
            return r
        edit(d, "points.jsonl", g)
        if degraded:
            manifest(d, lambda m: m.__setitem__("degraded_points", [pid]))
        out.append(report(name, d))
    return "\n".join(out)


def p10():
    return "\n".join([report("p10a-trace-not-kept", trace_late("p10a-trace-not-kept", True)),
                      report("p10b-trace-late-requests-only", trace_late("p10b-trace-late-requests-only", False))])


def p11():
    d = copy(DEFAULT, "p11-interrupted")
    gone = lambda pid: pid.endswith(":c4") and pid.split(":")[1] in ("dflash", "eagle3")  # noqa: E731
    edit(d, "points.jsonl", lambda r: None if gone(r["point_id"]) else r)
    edit(d, "requests.jsonl", lambda r: None if gone(r["point_id"]) else r)
    manifest(d, lambda m: m.update(status="interrupted", status_reason="KeyboardInterrupt", finished_at=None))
    return report("p11-interrupted", d)


def p12():
    d = copy(DEFAULT, "p12-no-probes")
    (d / "probes.jsonl").unlink()
    return report("p12-no-probes", d)


def p13():
    d = copy(DEFAULT, "p13-usage-mismatch")
    pid = "reference:dflash:synthetic:c1"
    n = {"k": 0}

    def f(r):
        if is_point(r, pid) and not r["warmup"] and n["k"] < 6:
            n["k"] += 1
            r["server_output_tokens"], r["output_tokens_source"] = r["output_tokens"] * 3, "streamed"
        return r
    edit(d, "requests.jsonl", f)
    edit(d, "points.jsonl", lambda r: (r.__setitem__("usage_mismatch_requests", 6), r)[1]
         if is_point(r, pid) and r["category"] == "all" else r)
    return report("p13-usage-mismatch", d)


def p14():
    d = copy(DEFAULT, "p14-bursts")
    pid = "reference:dflash:synthetic:c4"

    def h(r):
        if is_point(r, pid):
            r.update(timing_observed_share=0.5, timing_observed_requests=16,
                     latency_not_measured_reason="16 of 32 requests arrived mostly in bursts")
            for k in ("tpot_s_p50", "tpot_s_p99", "itl_s_p50", "itl_s_p99", "per_user_tok_per_s_pooled",
                      "per_user_tok_per_s_mean", "per_user_tok_per_s_p50", "per_user_tok_per_s_p10", "tpot_s_mean"):
                r[k] = None
        return r
    edit(d, "points.jsonl", h)
    n = {"k": 0}

    def h2(r):
        if is_point(r, pid) and not r["warmup"] and n["k"] < 16:
            n["k"] += 1
            r["timing_observable"], r["burst_tokens"] = False, r["output_tokens"] - 1
        return r
    edit(d, "requests.jsonl", h2)
    return report("p14-bursts", d)


def p15():
    d = copy(DEFAULT, "p15-two-methods")
    edit(d, "points.jsonl", lambda r: None if r["method"] == "eagle3" else r)
    edit(d, "requests.jsonl", lambda r: None if r["point_id"].split(":")[1] == "eagle3" else r)
    manifest(d, lambda m: (m.__setitem__("grid", [g for g in m["grid"] if ":eagle3:" not in g]),
                           m["suite_config"].__setitem__("methods", ["ar", "dflash"])))
    return report("p15-two-methods", d)


def p16():
    d = copy(DEFAULT, "p16-near-ties")
    picked: dict[str, tuple[int, int]] = {}

    def f(r):
        if is_point(r, "reference:dflash:synthetic:c1") and not r["warmup"] and len(picked) < 2:
            ids = r["output_token_ids"]
            picked[r["request_id"]] = (ids[10], ids[10] + 1)
            r["output_token_ids"] = ids[:10] + [ids[10] + 1] + ids[11:]
            r["output_sha256"] = "f" * 64
            r["output_text"] = r["output_text"][:30] + "X" + r["output_text"][31:]
        return r
    edit(d, "requests.jsonl", f)
    write(d / "ties.jsonl", [{"run_id": DEFAULT, "point_id": "reference:dflash:synthetic:c1",
                              "ar_point_id": "reference:ar:synthetic:c1", "method": "dflash", "concurrency": 1,
                              "round": 0, "request_id": rid, "turn": 0, "occurrence": 0, "position": 10,
                              "ar_token_id": a, "method_token_id": m, "ar_logprob": -0.69357,
                              "method_logprob": -0.69357, "margin_nats": 0.0, "class": "near-tie",
                              "tolerance_nats": 0.125, "top_logprobs": [[a, -0.69357], [m, -0.69357]],
                              "probe_top1": a, "prompt_tokens": [], "why": None, "server": "ar",
                              "at": "2026-11-27T07:53:00+00:00"} for rid, (a, m) in picked.items()])
    return report("p16-near-ties", d)


PROBES = {f.__name__: f for f in (p01, p02, p02b, p03, p03b, p04, p05, p06, p07, p08, p09, p10, p11, p12, p13, p14,
                                  p15, p16)}

if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or PROBES:
        print(f"##### {name}\n{PROBES[name]()}\n", flush=True)
