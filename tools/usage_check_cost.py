"""What the check of a server's token count against its stream (dflashbench.load.usage_check) costs the sweep's
collecting thread per request, beside what that thread already did for it (outputs.finish: grade, hash, cap):

    python tools/usage_check_cost.py [--tokens 128] [--repeats 7]

A request of ``--tokens`` tokens in as many chunks, as a client process leaves it (raw text and token ids); each
figure is the median over ``--repeats`` timings of a loop, in microseconds per request. The token-id and bounds
paths are what every vLLM / reference-server sweep and every stand-in sweep pay; the tokenizer path (the embedded
target's tokenizer) is what a sweep of a server without token ids pays, where this machine has the target's tokenizer.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from dflashbench.load import outputs
from dflashbench.load.usage_check import usage_fields
from dflashbench.run.target_tokens import TargetTokenizer
from dflashbench.types import RequestResult


def per_call_us(fn, loops: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        times.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    n = args.tokens
    raw = RequestResult(run_id="r", point_id="p", request_id="q", category="c", concurrency=64, ok=True, error=None,
                        queued_ns=0, sent_ns=0, first_token_ns=1, last_token_ns=n, output_tokens=n,
                        output_tokens_source="server", chunk_ns=tuple(range(1, n + 1)), chunk_tokens=(1,) * n,
                        output_text=" the" * n, output_token_ids=(7,) * n)  # fmt: skip
    no_ids = dataclasses.replace(raw, output_token_ids=None)
    tokenizer = TargetTokenizer("embedded")
    tokenizer.ready()
    rows = [
        ("outputs.finish alone (before the check)", lambda: outputs.finish(raw, None, store_text=True), 3000),
        ("finish + check by token ids", lambda: outputs.finish(raw, None, store_text=True, more=usage_fields(raw)), 3000),
        ("finish + check by chunks and bytes", lambda: outputs.finish(no_ids, None, store_text=True,
                                                                      more=usage_fields(no_ids)), 3000),
        ("finish + check by the embedded tokenizer", lambda: outputs.finish(no_ids, None, store_text=True,
                                                                            more=usage_fields(no_ids, tokenizer)), 300),
    ]  # fmt: skip
    print(f"per request of {n} tokens, median of {args.repeats} timings (us):")
    for label, fn, loops in rows:
        print(f"  {label:45} {per_call_us(fn, loops, args.repeats):8.1f}")


if __name__ == "__main__":
    main()
