"""A real engine's run, checked: ``python tests/engines/check_vllm_cpu.py VLLM_OUT REFERENCE_OUT``.

Run by the ``vllm-cpu`` nox session (part of the default ``nox`` run, so CI runs it) after dflashbench launched
vLLM's CPU build on the embedded pair (AR, EAGLE-3, DFlash and n-gram at c=1, 2, 4, the demo prompts) and the
reference backend on the same prompts at c=1. Each folder holds the one run directory its sweep wrote. It prints what it
compared, and exits 1 when:

- a planned point is missing or not ``ok``;
- a speculative method's tau from vLLM's own counters differs from the reference decoder's on the same prompts
  by more than 5% (both greedy; vLLM computes in bf16 on the CPU, the reference in the checkpoints' dtypes);
- its per-position acceptance is not recorded;
- (issue #56) n-gram: a request whose output is token for token the reference's drafted a different number of times or
  had a different number of drafts accepted: both follow vLLM's matching rule (vllm-project/vllm@v0.32.0:
  vllm/v1/spec_decode/ngram_proposer.py#L210-L295, dflashbench/reference/ngram.py) and count a draft only where
  tokens were proposed (vllm/v1/core/sched/scheduler.py#L2113-L2135), so on the same tokens their counts are equal;
  requests whose outputs differ (vLLM computes in bf16) are reported, not judged;
- (issue #61) an output differs from AR's at the same concurrency other than by a near-tie: greedy speculative decoding
  is lossless, but vLLM's verify pass and AR's one-token decode take different kernel paths, and where the target's top
  two are within dflashbench.measure.lossless.NEAR_TIE_NATS of each other (read on the AR server at the divergence,
  ties.jsonl) a floating-point difference may flip them. Every divergence is printed with its margin; a real
  difference, one whose margin was not read, or more near-ties than rounding explains (the ceiling) fails;
- the report does not render with its verdict, or ``compare`` of the run against itself does not exit 3 as a weak
  pass (nothing moved, but a few requests a point cannot see a drop of twice the 5 % gates: the committed vLLM CPU
  run, results/examples/demo-20261125-024540-6b40, answers so too) and 0 with ``--accept-weak``;
- (issue #42) the decomposition speedup = tau / step-cost ratio (vLLM's own step time) is off the measured
  matched-concurrency speedup by more than 6% at a point not flagged as bursty;
- the crossover reading disagrees with the measured ratios (found between the two concurrencies where DFlash's
  per-user ratio over AR changes side of 1, or "no crossover in the range swept" where it does not), or the report's
  verdict does not say why (tau over step cost) and where it stops paying;
- vLLM >= 0.29.0 (which dflashbench asks for per-request acceptance) left a speculative request without it, or its
  pooled tau differs from the counters' by more than 2%, or tau by category was not read from it;
- (issue #54) a server's own KV report was not read from its log and kept in the manifest: the CPU build's KV
  memory (what ``VLLM_CPU_KVCACHE_SPACE`` gave it), its token figure and the capacity in requests counted from it
  (at least the top concurrency), the model runner it says it used, and, for a speculative server, the method and
  draft its engine config line names. Its KV comes from ``VLLM_CPU_KVCACHE_SPACE``, so this proves the parsing and
  the recording, not the memory plan's budget;
- (issue #52) a measured request of the vLLM run or of the reference run was not checked against what it streamed
  by its token ids, or was flagged: the server's usage.completion_tokens disagreeing with its stream
  (dflashbench.load.usage_check). A real server's count must agree with its own stream: 0 flagged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from dflashbench.backends._engine import at_least
from dflashbench.backends.vllm import PER_REQUEST_SPEC_METRICS_SINCE
from dflashbench.measure import acceptance, crossover, decomposition, lossless, slices
from dflashbench.measure.analysis import usable_points
from dflashbench.methods import record
from dflashbench.run.store import load_run
from dflashbench.types import RequestResult

TAU_TOLERANCE = 0.05
IDENTITY_TOLERANCE = 0.06  # tau counts tokens accepted past a stop (~2.5%), the engine's clock is not the client's
PER_REQUEST_TOLERANCE = 0.02
METHODS = ("ar", "dflash", "eagle3", "ngram")
CONCURRENCY = (1, 2, 4)


def only_run(out: Path) -> Path:
    runs = [p for p in out.iterdir() if (p / "manifest.json").exists()]
    if len(runs) != 1:
        raise SystemExit(f"{out}: expected one run directory, found {len(runs)}")
    return runs[0]


def all_rows(points: pd.DataFrame) -> pd.DataFrame:
    return points[points["category"] == "all"]


def check(vllm_dir: Path, ref_dir: Path) -> list[str]:
    """The failures, as lines (empty: every check passed); prints what it compared as it goes."""
    failures: list[str] = []
    run, ref = load_run(vllm_dir), load_run(ref_dir)
    engine = run.manifest.get("engine") or {}
    print(f"engine: {engine.get('distribution')} {engine.get('version')} ({engine.get('build')} build); "
          f"cpus: {(run.manifest.get('cpus') or {}).get('engine')} engine, {(run.manifest.get('cpus') or {}).get('client')} client")  # fmt: skip
    if engine.get("build") != "CPU":
        failures.append(f"the run was not served by vLLM's CPU build: manifest engine {engine}")

    points = all_rows(run.points)
    planned = {(m, c) for m in METHODS for c in CONCURRENCY}
    seen = {(str(p.method), int(p.concurrency)): p for p in points.itertuples()}
    for key in sorted(planned):
        p = seen.get(key)
        if p is None:
            failures.append(f"point {key[0]} c={key[1]} is missing")
        elif p.status != "ok":
            failures.append(f"point {key[0]} c={key[1]} is {p.status}: {p.failure_reason}")

    ref_points = all_rows(ref.points)
    print(f"{'method':8} {'tau vLLM c=1':>13} {'tau reference':>14} {'diff':>7}  per-position acceptance (vLLM)")
    for method in METHODS[1:]:
        mine = points[(points["method"] == method) & (points["concurrency"] == 1)]
        theirs = ref_points[(ref_points["method"] == method) & (ref_points["concurrency"] == 1)]
        if mine.empty or theirs.empty or pd.isna(mine["tau"].iloc[0]) or pd.isna(theirs["tau"].iloc[0]):
            failures.append(f"{method}: no tau to compare (vLLM {mine['tau'].tolist()}, reference {theirs['tau'].tolist()})")
            continue
        tau, ref_tau = float(mine["tau"].iloc[0]), float(theirs["tau"].iloc[0])
        per_pos = list(mine["accepted_per_pos_rate"].iloc[0] or ())
        diff = tau / ref_tau - 1
        print(f"{method:8} {tau:13.2f} {ref_tau:14.2f} {diff:+7.1%}  {' '.join(f'{a:.2f}' for a in per_pos)}")
        if abs(diff) > TAU_TOLERANCE:
            failures.append(f"{method}: tau {tau:.2f} from vLLM's counters vs {ref_tau:.2f} from the reference "
                            f"decoder on the same prompts ({diff:+.1%}, tolerance {TAU_TOLERANCE:.0%})")  # fmt: skip
        if not per_pos:
            failures.append(f"{method}: no per-position acceptance recorded")
        for c in CONCURRENCY[1:]:
            row = points[(points["method"] == method) & (points["concurrency"] == c)]
            if row.empty or not list(row["accepted_per_pos_rate"].iloc[0] or ()):
                failures.append(f"{method} c={c}: no per-position acceptance recorded")

    failures += check_lossless(run)
    failures += check_ngram_requests(run, ref)
    failures += check_why_it_pays(run, engine)
    failures += check_kv_reports(run)
    failures += check_usage("vLLM", run) + check_usage("reference", ref)
    failures += check_report_and_compare(vllm_dir)
    return failures


def check_lossless(run) -> list[str]:
    """Issue #61: each speculative method's outputs against AR's, identical, near-tie (with its margin) or different;
    each divergence printed; anything but identical or a near-tie within the ceiling fails."""
    cpu = run.manifest.get("cpu") or {}
    print(f"CPU: {cpu.get('model')} ({cpu.get('vendor')} family {cpu.get('family')} model {cpu.get('model_number')}); "
          f"ISA: {' '.join(cpu.get('isa') or []) or 'not read'}"
          + (f"; caps {cpu['isa_env']}" if cpu.get("isa_env") else ""))  # fmt: skip
    judged = lossless.judge(lossless.compared_pairs(usable_points(run.points), run.requests), run.ties)
    failures = []
    print(f"outputs against AR's (greedy; near-tie: the target's margin within {lossless.NEAR_TIE_NATS} nats, read on "
          "the AR server):")  # fmt: skip
    for check in lossless.summarize(judged):
        for load in check.loads:
            at = [j for j in judged if j.pair.method == check.method and j.pair.concurrency == load.concurrency]
            kinds = [j.kind for j in at]
            print(f"  {check.method:7} c={load.concurrency}: identical {kinds.count(lossless.IDENTICAL)}/{len(at)}, "
                  f"near-tie {kinds.count(lossless.NEAR_TIE)}, different {kinds.count(lossless.DIFFERENT)}"
                  f" ({load.near_ties} near-tie(s) in {load.tokens} tokens compared, ceiling "
                  f"{load.ceiling * 1000:g} per 1,000)")  # fmt: skip
            for j in at:
                if j.kind == lossless.IDENTICAL:
                    continue
                p = j.pair
                margin = f"margin {j.margin:.4f} nats" if j.margin is not None else (j.why or "no margin")
                print(f"    {p.request_id} turn {p.turn}: first differs at token {p.position} (AR {p.ar_token}, "
                      f"{check.method} {p.method_token}): {j.kind}, {margin}")  # fmt: skip
            if load.exceeded:
                failures.append(f"{check.method} c={load.concurrency}: {load.near_ties} near-tie divergences in "
                                f"{load.tokens} tokens, beyond the ceiling of {load.ceiling * 1000:g} per 1,000: more "
                                "than rounding explains, suspect a loose verifier")  # fmt: skip
            if not at:
                failures.append(f"{check.method} c={load.concurrency}: no output compared with AR's")
        if check.different:
            failures.append(f"{check.method}: {check.different} of {check.compared} outputs differ from AR's other than "
                            f"by a near-tie ({check.unreadable} with no margin read)")  # fmt: skip
    seen = {j.pair.method for j in judged}
    if seen != set(METHODS[1:]):
        failures.append(f"outputs compared with AR's for {sorted(seen)} only")
    return failures


def launched_draft(argv: list[str]) -> str | None:
    """The draft's folder name in a server's ``--speculative-config`` (paths differ between log and manifest)."""
    if "--speculative-config" not in argv:
        return None
    model = json.loads(argv[argv.index("--speculative-config") + 1]).get("model")  # n-gram: no draft
    return Path(model).name if model else None


def check_kv_reports(run) -> list[str]:
    """Each server's own KV report, as the sweep read it at launch and kept in the manifest (dflashbench.run.capacity),
    against what the sweep gave that server (its VLLM_CPU_KVCACHE_SPACE, its draft)."""
    failures = []
    servers = run.manifest.get("servers") or {}
    print("KV reports read at launch (engine figures, as kept in the manifest):")
    for method in METHODS:
        server = servers.get(method) or {}
        kv = server.get("kv") or {}
        got = kv.get("engine") or {}
        print(f"  {method:7} {got}; capacity {kv.get('capacity_requests')} ({kv.get('counted')})")
        if not got:
            failures.append(f"{method}: no KV report read from the server's log into the manifest")
            continue
        space = (server.get("env") or {}).get("VLLM_CPU_KVCACHE_SPACE")
        if space is None or got.get("kv_gib") != float(space):
            failures.append(f"{method}: KV memory {got.get('kv_gib')} GiB reported, VLLM_CPU_KVCACHE_SPACE was {space}")
        if not got.get("kv_tokens") or got.get("pool") != "CPU":
            failures.append(f"{method}: no 'CPU KV cache size: N tokens' figure read ({got})")
        if (kv.get("capacity_requests") or 0) < max(CONCURRENCY):
            failures.append(f"{method}: capacity {kv.get('capacity_requests')} requests < c={max(CONCURRENCY)}")
        if got.get("runner") not in ("V1", "V2") or not got.get("runner_line"):
            failures.append(f"{method}: the model runner was not read ({got.get('runner')}, {got.get('runner_line')})")
        argv = server.get("argv") or []
        if method == "ar":
            if got.get("spec_method") is not None:
                failures.append(f"ar: the engine reports a speculative method {got.get('spec_method')}")
        elif got.get("spec_method") != method or (Path(str(got["spec_model"])).name if got.get("spec_model")
                                                   else None) != launched_draft(argv):  # fmt: skip
            failures.append(f"{method}: the engine reports method {got.get('spec_method')!r} with draft "
                            f"{got.get('spec_model')!r}, not the one launched")  # fmt: skip
    capacity = run.manifest.get("capacity") or {}
    if capacity.get("common") is None or capacity.get("first") not in METHODS:
        failures.append(f"the run's common capacity was not recorded ({capacity})")
    return failures


def check_usage(name: str, run) -> list[str]:
    """Every measured request's server count checked against its stream by token ids, and none flagged."""
    measured = [r for r in run.request_records() if r.ok and not r.warmup]
    by_ids = [r for r in measured if r.streamed_tokens_source == "token_ids"]
    flagged = [r for r in measured if r.usage_mismatch]
    points_flagged = int(pd.to_numeric(all_rows(run.points)["usage_mismatch_requests"], errors="coerce").fillna(0).sum())
    print(f"{name}: usage.completion_tokens checked by token ids on {len(by_ids)}/{len(measured)} requests, "
          f"{len(flagged)} flagged (points: {points_flagged})")  # fmt: skip
    failures = []
    if not measured or len(by_ids) != len(measured):
        failures.append(f"{name}: {len(measured) - len(by_ids)} of {len(measured)} requests not checked by their "
                        "token ids against the server's count")  # fmt: skip
    if flagged or points_flagged:
        failures.append(f"{name}: {len(flagged)} requests flagged (server count against streamed), e.g. "
                        f"{flagged[0].server_output_tokens} against {flagged[0].streamed_tokens}" if flagged
                        else f"{name}: points count {points_flagged} flagged requests")  # fmt: skip
    return failures


def _measured_c1(run, method: str) -> dict[str, RequestResult]:
    """The measured (not warm-up) requests of ``method``'s c=1 point, by request id (the same prompt order in both
    runs: one stream, the workload's order)."""
    rows = run.requests[run.requests["point_id"].str.contains(f":{method}:", regex=False)
                        & (run.requests["concurrency"] == 1) & ~run.requests["warmup"].fillna(False).astype(bool)]  # fmt: skip
    return {r["request_id"]: RequestResult.from_dict(r) for r in rows.to_dict("records")}


def check_ngram_requests(run, ref) -> list[str]:
    """n-gram drafting on the same tokens drafts alike: per request, vLLM's drafts and accepted tokens against the
    reference decoder's, wherever both produced the same output."""
    mine, theirs = _measured_c1(run, "ngram"), _measured_c1(ref, "ngram")
    same, differ, unequal = 0, 0, []
    for rid, r in sorted(mine.items()):
        other = theirs.get(rid)
        if other is None or r.output_sha256 is None or r.output_sha256 != other.output_sha256:
            differ += 1
            continue
        same += 1
        counts, ref_counts = (r.spec_verify_steps, r.spec_accepted_tokens), (other.spec_verify_steps,
                                                                            other.spec_accepted_tokens)
        if counts != ref_counts:
            unequal.append(f"{rid}: vLLM {counts[0]} drafts, {counts[1]} accepted; reference {ref_counts[0]}, "
                           f"{ref_counts[1]}")  # fmt: skip
    print(f"n-gram per request (c=1): {same} with the reference's output, drafts and accepted tokens equal in "
          f"{same - len(unequal)}; {differ} with another output (not judged)")  # fmt: skip
    for line in unequal:
        print(f"  {line}")
    failures = [f"ngram {line} on the same output" for line in unequal]
    if not same:
        failures.append("ngram: no request at c=1 produced the reference's output, so no drafting was compared")
    return failures


def check_why_it_pays(run, engine: dict) -> list[str]:
    """Issue #42 on a real engine: the decomposition's identity at every point, DFlash's crossover inside the sweep,
    and per-request acceptance where this vLLM reports it."""
    failures = []
    d = decomposition.decompose(run.points, run.requests)
    print(f"{'method':8} {'c':>3} {'tau':>6} {'cost':>6} {'tau/cost':>9} {'measured':>9} {'error':>7}  step time from")
    for r in d.to_dict("records"):
        if isinstance(r["left_out"], str):
            print(f"{r['method']:8} {r['concurrency']:>3}  {r['left_out']}")
            continue
        print(f"{r['method']:8} {r['concurrency']:>3} {r['tau']:6.2f} {r['cost_ratio']:6.2f} {r['predicted']:9.3f} "
              f"{r['measured']:9.3f} {r['error']:+7.1%}  {r['step_source']}")  # fmt: skip
        if r["step_source"] != decomposition.ENGINE:
            failures.append(f"{r['method']} c={r['concurrency']}: no step time from vLLM's own histogram")
        if abs(r["error"]) > IDENTITY_TOLERANCE:
            failures.append(f"{r['method']} c={r['concurrency']}: tau / step-cost ratio {r['predicted']:.3f} vs measured "
                            f"{r['measured']:.3f} ({r['error']:+.1%}, tolerance {IDENTITY_TOLERANCE:.0%})")  # fmt: skip
    failures += check_crossover(d[d["method"] == "dflash"].sort_values("concurrency"))
    version = str(engine.get("version") or "")
    if version and at_least(version, PER_REQUEST_SPEC_METRICS_SINCE):
        failures += check_per_request(run)
    else:
        print(f"vLLM {version}: no per-request acceptance (it arrived in {PER_REQUEST_SPEC_METRICS_SINCE})")
    return failures


def check_crossover(mine) -> list[str]:
    """The crossover reading agrees with the measured ratios: where DFlash's per-user ratio over AR changes side of
    1 between two swept concurrencies (the committed example's CPU build did, between c=2 and c=4), the crossover is
    found between those two; where it does not, it is reported as no crossover in the range swept. Whether the
    CPU build crosses depends on the machine's load (on a shared 2-core machine it did in one run and not in
    another), so the reading is checked, not the engine's behaviour."""
    cs, xs = list(mine["concurrency"]), list(mine["measured"])
    found = crossover.crossover(cs, xs)
    sides = [(a, b) for a, b, x, y in zip(cs, cs[1:], xs, xs[1:], strict=False) if (x - 1) * (y - 1) < 0]
    print(f"DFlash vs AR per user: {', '.join(f'{x:.2f}x at c={c}' for c, x in zip(cs, xs, strict=True))} -> "
          + (f"crosses 1 at c~{found.at:.1f} between c={found.between[0]} and c={found.between[1]}"
             if found is not None and found.kind == crossover.CROSSES else f"no crossover in c={cs[0]}-{cs[-1]}"))  # fmt: skip
    if found is None:
        return ["DFlash vs AR: no crossover reading"]
    if sides and (found.kind != crossover.CROSSES or found.between != sides[0] or not sides[0][0] <= found.at <= sides[0][1]):
        return [f"DFlash's ratio changes side between c={sides[0][0]} and c={sides[0][1]}, but the crossover read is {found}"]
    if not sides and found.kind != crossover.NONE:
        return [f"DFlash's ratio stays on one side of 1, but the crossover read is {found}"]
    return []


def check_per_request(run) -> list[str]:
    failures = []
    points = all_rows(usable_points(run.points))
    for method in METHODS[1:]:
        for p in points[points["method"] == method].to_dict("records"):
            rs = acceptance.point_results(run.requests, p["run_id"], p["point_id"])
            # a draft-free method may draft at no step of a request (n-gram found no match): 0 steps is an answer
            missing = [r.request_id for r in rs if (r.spec_verify_steps is None if record(method).draft_free
                                                    else not r.spec_verify_steps)]  # fmt: skip
            if missing:
                failures.append(f"{method} c={p['concurrency']}: {len(missing)} of {len(rs)} requests carry no "
                                "per-request acceptance (metrics.speculative_decoding)")  # fmt: skip
                continue
            tau = acceptance.engine_tau(rs)
            diff = tau / float(p["tau"]) - 1 if tau and p.get("tau") else float("nan")
            print(f"{method:8} c={p['concurrency']}: tau per request {tau:.3f} vs counters {float(p['tau']):.3f} ({diff:+.2%})")
            if not abs(diff) <= PER_REQUEST_TOLERANCE:
                failures.append(f"{method} c={p['concurrency']}: tau from the requests {tau:.3f} vs the counters "
                                f"{float(p['tau']):.3f} ({diff:+.1%}, tolerance {PER_REQUEST_TOLERANCE:.0%})")  # fmt: skip
        rs = [RequestResult.from_dict(r) for r in run.requests.to_dict("records") if f":{method}:" in r["point_id"]]
        cats, why = slices.by_category(rs)
        print(f"{method:8} tau by category: " + ", ".join(f"{s.label} {s.tau:.2f} [{s.lo:.2f}, {s.hi:.2f}]" for s in cats))
        if len(cats) < 2:
            failures.append(f"{method}: tau by category not read from per-request acceptance ({why})")
    return failures


def check_report_and_compare(run_dir: Path) -> list[str]:
    failures = []
    for fmt, marker in (("md", " with vllm-cpu "), ("html", 'class="answer"')):
        out = run_dir.parent / f"check-report.{fmt}"
        done = subprocess.run([sys.executable, "-m", "dflashbench", "report", str(run_dir), "-o", str(out)],
                              capture_output=True, text=True)  # fmt: skip
        text = out.read_text() if out.exists() else ""
        if done.returncode != 0 or "Verdict" not in text or marker not in text:
            failures.append(f"report --format {fmt} did not render with a verdict (exit {done.returncode}): "
                            f"{done.stderr.strip()[-300:]}")  # fmt: skip
        for said in ("Why, DFlash vs AR (step cost from ", "Serve "):
            if said not in text:
                failures.append(f"the {fmt} report's verdict lacks {said!r}")
    for extra, expected, verdict in (((), 3, "weak pass (exit 3): no regression over"),
                                     (("--accept-weak",), 0, "no regression over")):  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "dflashbench", "compare", str(run_dir), str(run_dir), *extra],
                              capture_output=True, text=True)  # fmt: skip
        print(f"compare RUN RUN {' '.join(extra)}: exit {done.returncode}")
        if done.returncode != expected or not done.stdout.startswith(verdict):
            failures.append(f"compare of the run against itself {' '.join(extra)} exited {done.returncode}, expected "
                            f"{expected} ({verdict!r}): {done.stdout[-500:]}")  # fmt: skip
    return failures


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    failures = check(only_run(Path(argv[0])), only_run(Path(argv[1])))
    for line in failures:
        print(f"FAIL: {line}")
    print("vLLM CPU run: " + ("all checks passed" if not failures else f"{len(failures)} check(s) failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
