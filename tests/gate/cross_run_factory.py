"""Edited copies of a committed example run for the cross-run pairing tests (issue #62).

The committed example ``demo-20261127-075225-b7da`` (the embedded default, in turn, 3 methods at c=1, 2, 4, 32
prompts, a speed probe) predates the prompt digest. A copy gets each request's digest from the real workload its
manifest names (the demo suite's synthetic workload, seed 0, regenerated, :func:`dflashbench.types.prompt_digest`),
and optionally its requests' times edited: a method's every timestamp after the send scaled (``scale``: that method
slower by the factor), each request's own jitter (``jitter_sd``, log), the probe kept. The points' speed figures are
multiplied by the same change their requests' recomputed figures show, so rows and requests agree."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np

from dflashbench.measure import metrics
from dflashbench.types import RequestResult, prompt_digest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "results" / "examples" / "demo-20261127-075225-b7da"
SPEED = ("throughput_tok_per_s", "throughput_tok_per_s_per_gpu", "per_user_tok_per_s_pooled", "per_user_tok_per_s_mean",
         "per_user_tok_per_s_p50", "per_user_tok_per_s_p10")  # fmt: skip
TIMES = ("ttft_s_p50", "ttft_s_p99", "ttft_s_mean", "tpot_s_p50", "tpot_s_p99", "itl_s_p50", "itl_s_p99", "e2e_s_p50",
         "e2e_s_p99")  # fmt: skip


def digests(run: Path) -> dict[str, str]:
    """prompt id -> its digest, from the workload the run's manifest names, regenerated."""
    from dflashbench.plan.suites import load_suite
    from dflashbench.workloads import load_requests

    manifest = json.loads((run / "manifest.json").read_text())
    config = manifest["suite_config"]
    suite = load_suite(str(manifest["suite"]["name"]))
    spec = suite.workloads[0]
    requests = load_requests(spec, num_prompts=config["num_prompts"], seed=int(config["seed"]))
    return {r.id: prompt_digest(r, float(config["temperature"])) for r in requests}


def _scaled(rec: dict, f: float) -> dict:
    sent = rec["sent_ns"]
    at = lambda t: None if t is None else sent + int(round((t - sent) * f))  # noqa: E731
    return {**rec, "first_token_ns": at(rec["first_token_ns"]), "last_token_ns": at(rec["last_token_ns"]),
            "chunk_ns": [at(t) for t in rec["chunk_ns"]]}  # fmt: skip


def edited_copy(dst: Path, *, scale: dict[str, float] | None = None, jitter_sd: float = 0.0, seed: int = 0,
                digest: bool = True, src: Path = EXAMPLE, prompts: dict[str, str] | None = None,
                quiet_probe: bool = False, probe_scale: float = 1.0) -> Path:  # fmt: skip
    """A copy of ``src`` at ``dst`` with its requests' digests (``digest``) and times edited (module docstring);
    ``quiet_probe``: every probe reading set to the run's median (a quiet machine: no drift to widen a figure), times
    ``probe_scale`` (below 1: the probe read this run's machine faster)."""
    shutil.copytree(src, dst)
    if quiet_probe:
        rows = [json.loads(line) for line in (src / "probes.jsonl").read_text().splitlines()]
        median = float(np.median([r["seconds"] for r in rows])) * probe_scale
        (dst / "probes.jsonl").write_text("".join(json.dumps({**r, "seconds": median, "trials_s": [median] * len(
            r["trials_s"])}) + "\n" for r in rows))  # fmt: skip
    table = prompts if prompts is not None else digests(src) if digest else {}
    rng = np.random.default_rng(seed)
    scale = scale or {}
    by_point_before: dict[str, list[RequestResult]] = {}
    by_point_after: dict[str, list[RequestResult]] = {}
    out = []
    for line in (src / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        method = rec["point_id"].split(":")[1]
        before = RequestResult.from_dict(rec)
        f = scale.get(method, 1.0) * (math.exp(rng.normal(0.0, jitter_sd)) if jitter_sd else 1.0)
        rec = _scaled(rec, f) if f != 1.0 else rec
        base_id = str(rec["request_id"]).rpartition("~")[0] or str(rec["request_id"])
        if digest and not rec.get("warmup"):
            rec["prompt_sha256"] = table[base_id]
        out.append(json.dumps(rec))
        if not rec.get("warmup"):
            by_point_before.setdefault(rec["point_id"], []).append(before)
            by_point_after.setdefault(rec["point_id"], []).append(RequestResult.from_dict(rec))
    (dst / "requests.jsonl").write_text("\n".join(out) + "\n")
    points = []
    for line in (src / "points.jsonl").read_text().splitlines():
        row = json.loads(line)
        reqs = [(b, a) for b, a in zip(by_point_before.get(row["point_id"], []), by_point_after.get(row["point_id"], []),
                                       strict=True) if row["category"] == "all" or b.category == row["category"]]  # fmt: skip
        if reqs:
            before = metrics.per_user_tok_per_s_pooled([b for b, _ in reqs])
            after = metrics.per_user_tok_per_s_pooled([a for _, a in reqs])
            if before and after:
                speed = after / before  # the requests' own change: every speed figure x it, every time / it
                row.update({k: row[k] * speed for k in SPEED if row.get(k) is not None})
                row.update({k: row[k] / speed for k in TIMES if row.get(k) is not None})
        points.append(json.dumps(row))
    (dst / "points.jsonl").write_text("\n".join(points) + "\n")
    return dst


def write_profile(path: Path, *, speedup: float = 0.01, absolute: float = 0.03, point: float | None = None,
                  run_level: float | None = None, absolute_df: int = 26) -> Path:  # fmt: skip
    """A noise profile such as ``dflashbench calibrate`` writes, for the reference backend, with these terms."""
    from dflashbench.measure import noise_model as nm

    # the degrees of freedom calibrate's 4 launches of the demo's 9 points gave: a speedup's 27 = (4 - 1) x 9 (since
    # issue #62's fourth session it counts 2 free speedups a load, 18; 27 keeps these tests' sizes as measured), the
    # absolute term's 26 from its run-level part (3 df) and the point part (24) by Welch-Satterthwaite
    terms = {nm.SPEEDUP: nm.Term(speedup, 27, 4, 9), nm.ABSOLUTE: nm.Term(absolute, absolute_df, 4, 9)}
    if point is not None:
        terms[nm.POINT] = nm.Term(point, 24, 4, 9)
    if run_level is not None:
        terms[nm.RUN_LEVEL] = nm.Term(run_level, 3, 4, 9)
    nm.write_profile(path, [nm.RunToRun("reference", terms, nm.MEASURED, "a test's profile")], made_by="tests")
    return path
