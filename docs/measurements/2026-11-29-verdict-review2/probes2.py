"""Fresh verdict probes: plant one condition in a copy of the committed default run and print its verdict.

python probes2.py OUT   (needs dflashbench on PATH; writes OUT/<probe>/ and OUT/<probe>.txt, prints each verdict)
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

BASE = Path(__file__).resolve().parents[3] / "results/examples/demo-20261127-075225-b7da"


def rows(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def write(path, rs):
    path.write_text("".join(json.dumps(r) + "\n" for r in rs))


def edit(run, name, fn):
    p = run / name
    write(p, [r for r in (fn(r) for r in rows(p)) if r is not None])


def one_prompt_category(run):
    # One prompt (s0-24, every method and load) moved into a category of its own, "legal", and made 3x slower for AR
    def f(r):
        if r.get("request_id") == "s0-24":
            r["category"] = "legal"
            if ":ar:" in r["point_id"]:
                for k in ("first_token_ns", "last_token_ns"):
                    r[k] = r["sent_ns"] + 3 * (r[k] - r["sent_ns"])
                r["chunk_ns"] = [r["sent_ns"] + 3 * (c - r["sent_ns"]) for c in r["chunk_ns"]]
        return r
    edit(run, "requests.jsonl", f)


def unobservable_point(run):
    # Every request of DFlash c=2 marked timing-unobservable (its output in one burst)
    def f(r):
        if r.get("point_id") == "reference:dflash:synthetic:c2":
            r["timing_observable"] = False
            r["burst_tokens"] = r["output_tokens"]
        return r
    edit(run, "requests.jsonl", f)


def mismatched_model(run):
    # DFlash's points say they served another target model (points, requests untouched)
    def f(r):
        if ":dflash:" in r.get("point_id", ""):
            r["model"] = "Qwen/Qwen3-8B"
        return r
    edit(run, "points.jsonl", f)


def eagle_tau_below_one(run):
    # EAGLE-3's points report tau 0.6 (impossible: a step delivers at least one token); requests untouched
    def f(r):
        if ":eagle3:" in r.get("point_id", ""):
            r["tau"] = 0.6
        return r
    edit(run, "points.jsonl", f)


def only_ar(run):
    # Only AR's points and requests kept
    for name in ("points.jsonl", "requests.jsonl"):
        edit(run, name, lambda r: r if ":ar:" in r.get("point_id", "") else None)


def whitespace_outputs(run):
    # DFlash's outputs at c=1 differ from AR's only by a trailing space (text and sha256 changed; token ids kept)
    def f(r):
        if r.get("point_id") == "reference:dflash:synthetic:c1" and r.get("output_text") is not None:
            r["output_text"] = r["output_text"] + " "
            r["output_sha256"] = hashlib.sha256(r["output_text"].encode()).hexdigest()
            r["output_chars"] = len(r["output_text"])
        return r
    edit(run, "requests.jsonl", f)


def concurrency_gap(run):
    # The c=2 points of every method removed: loads 1 and 4 only
    for name in ("points.jsonl", "requests.jsonl"):
        edit(run, name, lambda r: None if r.get("point_id", "").endswith(":c2") else r)


def dflash_reverses_at_c4(run):
    # DFlash's requests at c=4 made 4x as long (every timestamp after sending): it should lose to AR there
    def f(r):
        if r.get("point_id") == "reference:dflash:synthetic:c4":
            for k in ("first_token_ns", "last_token_ns"):
                r[k] = r["sent_ns"] + 4 * (r[k] - r["sent_ns"])
            r["chunk_ns"] = [r["sent_ns"] + 4 * (c - r["sent_ns"]) for c in r["chunk_ns"]]
        return r
    edit(run, "requests.jsonl", f)

    def g(r):
        if r.get("point_id") == "reference:dflash:synthetic:c4":
            r["duration_s"] *= 4
            for k in ("throughput_tok_per_s", "throughput_tok_per_s_per_gpu", "steady_throughput_tok_per_s"):
                if r.get(k):
                    r[k] /= 4
        return r
    edit(run, "points.jsonl", g)


PROBES = [one_prompt_category, unobservable_point, mismatched_model, eagle_tau_below_one, only_ar,
          whitespace_outputs, concurrency_gap, dflash_reverses_at_c4]


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, COLUMNS="100")
    for probe in PROBES:
        run = out / probe.__name__
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(BASE, run)
        probe(run)
        res = subprocess.run(["dflashbench", "report", str(run), "-o", str(out / f"{probe.__name__}.md")],
                             capture_output=True, text=True, env=env)
        text = res.stdout + res.stderr
        (out / f"{probe.__name__}.txt").write_text(text)
        print(f"===== {probe.__name__} (exit {res.returncode})\n{text}")


if __name__ == "__main__":
    main(sys.argv[1])
