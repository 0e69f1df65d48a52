"""The TTFT overhead of ``dflashbench sweep`` itself, as a user runs it, against the pace-exact stand-in; A/B
between code trees, alternated within one command so the machine's drift hits every tree alike.

    python tools/sweep_overhead.py --tree before=/tmp/base --tree after=. [--concurrency 64,256] [--repeats 3]
        [--tty] [--json FILE] [-- EXTRA SWEEP OPTIONS]

A tree given as ``NAME=bench:DIR`` runs that tree's benchmark cell instead of a sweep
(``dflashbench.bench.overhead.measure_cell`` with ``--client-processes auto``, in a fresh process, against the
same stand-in), to set the path the benchmark measured beside the one users run; ``NAME=floor:DIR`` runs the
floor (``dflashbench.bench.floor_client``: raw sockets, no parsing, as many processes as ``auto``), what any client
pays here. ``NAME=DIR@PROCS`` sets that tree's ``client_processes``.

One stand-in (``python -m dflashbench.bench.standin serve --pace-ms 10 --ttft-ms 50 --keepalive``, issue #44's;
``--no-keepalive`` leaves the keep-alive lines out, ``--standin-arg=--token-ids`` adds one of its options) serves
every run. Each run is ``python -m dflashbench sweep --suite S --endpoint URL -o TMP --no-report`` in a fresh process
whose ``PYTHONPATH`` puts the tree's ``dflashbench`` first (the suite: the endpoint read as vLLM, ``ar``, the
synthetic workload, one concurrency, 4 requests per stream, 128 tokens, no warm-up). ``--tty`` gives the sweep a
pseudo-terminal as stderr, so it draws its progress bar as it does for a user at a terminal.

Per run: the client TTFT mean over its measured requests (``requests.jsonl``) minus the stand-in's own TTFT mean
over the same window (its ``/metrics`` histograms read before and after: the request count is checked to match),
the client's mean ITL against the stand-in's own, and the client's loop lag and busy share from ``points.jsonl``.
Printed: every run, then per tree and concurrency the median [min-max] over repeats, and each other tree's paired
difference from the first tree, repeat by repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from dflashbench.bench.overhead import ServerWindow
from dflashbench.bench.standin import run_standin
from dflashbench.measure import metrics
from dflashbench.types import RequestResult

SUITE = """name = "sweep-overhead"
version = 1
backend = "vllm"
methods = ["ar"]
model = "standin"
concurrency = [{c}]
num_prompts = {c}
warmup_requests = 0
max_tokens = 128
requests_per_stream = {per_stream}
timeout_s = 300
client_processes = {procs}

[[workloads]]
name = "synthetic"
"""


def _drain(fd: int) -> None:
    """Read (and drop) what the sweep draws on its pseudo-terminal, so it never blocks on a full one."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass


def run_sweep(tree: Path, base_url: str, c: int, per_stream: int, procs: str, tty: bool, extra: list[str],
              work: Path) -> Path:  # fmt: skip
    label = procs.strip('"')  # '"auto"' (a TOML string) or a number: one suite file per setting
    suite = work / f"c{c}-{label}.toml"
    suite.write_text(SUITE.format(c=c, per_stream=per_stream, procs=procs))
    out = Path(tempfile.mkdtemp(dir=work))
    argv = [sys.executable, "-m", "dflashbench", "sweep", "--suite", str(suite), "--endpoint", base_url, "-o",
            str(out), "--no-report", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    if tty:
        master, slave = os.openpty()
        reader = threading.Thread(target=_drain, args=(master,), daemon=True)
        reader.start()
        try:
            proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=slave, check=False)
        finally:
            os.close(slave)
            reader.join(5)
            os.close(master)
    else:
        proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"sweep exited {proc.returncode} ({tree}, c={c}): {getattr(proc, 'stderr', b'')!r}"[:2000])
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def read_run(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]
    results = [RequestResult.from_dict(r) for r in rows]
    ok = [r for r in results if r.ok and not r.warmup]
    ttfts = np.asarray([t for r in ok if (t := metrics.ttft_s(r)) is not None])
    itls = np.asarray([g for r in ok for g in metrics.itl_s(r)])
    point = json.loads((run_dir / "points.jsonl").read_text().splitlines()[0])
    by_sent = sorted(ok, key=lambda r: r.sent_ns)
    c = point["concurrency"]  # the point's streams (a result records its client process's share)
    rounds = [by_sent[i : i + c] for i in range(0, len(by_sent), c)]  # a closed loop's rounds, as sent
    client = (point.get("extra") or {}).get("client") or {}
    return {"requests": len(results), "errors": len(results) - len(ok),
            "client_ttft_ms_mean": float(ttfts.mean()) * 1e3 if ttfts.size else None,
            "client_itl_ms_mean": float(itls.mean()) * 1e3 if itls.size else None,
            "client_ttft_ms_by_round": [round(float(np.mean([metrics.ttft_s(r) for r in rnd])) * 1e3, 1)
                                        for rnd in rounds],
            "processes": client.get("processes"), "busy_share_max": client.get("busy_share_max"),
            "loop_lag_ms_p99": client.get("loop_lag_ms_p99")}  # fmt: skip


def drive_bench(url: str, c: int, rounds: int) -> None:
    """The benchmark's cell from the tree on PYTHONPATH; its figures as JSON on stdout."""
    from dataclasses import asdict

    from dflashbench.bench.overhead import measure_cell
    from dflashbench.load.loadgen_procs import choose_processes

    cell = measure_cell(url, choose_processes("auto", c), c, max_tokens=128, rounds=rounds, true_itl_s=0.01)
    print(json.dumps(asdict(cell)))


def run_bench(tree: Path, base_url: str, c: int, rounds: int) -> dict:
    argv = [sys.executable, __file__, "--drive-bench", base_url, str(c), str(rounds)]
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    cell = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"requests": cell["requests"], "errors": cell["errors"], "client_ttft_ms_mean": cell["client_ttft_ms_mean"],
            "client_itl_ms_mean": cell["itl_ms_mean"], "processes": cell["processes"],
            "busy_share_max": cell["busy_share_max"], "loop_lag_ms_p99": cell["loop_lag_ms_p99"]}  # fmt: skip


def run_floor(tree: Path, base_url: str, c: int, rounds: int) -> dict:
    """The floor client (``dflashbench.bench.floor_client``) of the tree, from as many processes as ``auto`` gives."""
    from dflashbench.load.loadgen_procs import choose_processes

    procs = choose_processes("auto", c)
    argv = [sys.executable, "-m", "dflashbench.bench.floor_client", base_url, "--concurrency", str(c), "--rounds",
            str(rounds), "--processes", str(procs)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    got = json.loads(subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout)
    return {"requests": got["requests"], "errors": 0, "client_ttft_ms_mean": got["ttft_ms_mean"],
            "client_itl_ms_mean": None, "processes": procs, "busy_share_max": None, "loop_lag_ms_p99": None}  # fmt: skip


def measure(kind: str, tree: Path, base_url: str, c: int, args, work: Path, procs: str | None = None) -> dict:
    window = ServerWindow(base_url)
    if kind == "floor":
        got = run_floor(tree, base_url, c, args.requests_per_stream)
        server = window.close()
    elif kind == "bench":
        got = run_bench(tree, base_url, c, args.requests_per_stream)
        server = window.close()
    else:
        run_dir = run_sweep(tree, base_url, c, args.requests_per_stream, procs or args.client_processes, args.tty,
                            args.extra, work)  # fmt: skip
        server = window.close()
        got = read_run(run_dir)
    if server.requests != got["requests"]:
        raise RuntimeError(f"the stand-in answered {server.requests} requests, the sweep recorded {got['requests']}")
    got.update(server_ttft_ms_mean=server.ttft_ms_mean, server_itl_ms_mean=server.itl_ms_mean,
               server_late_ms_mean=server.late_ms_mean)  # fmt: skip
    got["ttft_overhead_ms"] = got["client_ttft_ms_mean"] - server.ttft_ms_mean
    itl = got["client_itl_ms_mean"]
    got["itl_err_vs_server_pct"] = abs(itl - server.itl_ms_mean) / server.itl_ms_mean * 100 if itl else float("nan")
    return got


def _mr(values: list[float], d: int = 1) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.{d}f} [{min(values):.{d}f}-{max(values):.{d}f}]"


def main(argv: list[str]) -> None:
    if argv[:1] == ["--drive-bench"]:
        drive_bench(argv[1], int(argv[2]), int(argv[3]))
        return
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=DIR[@PROCS]",
                    help="a code tree to run dflashbench from (its dflashbench/ first on PYTHONPATH); @PROCS sets "
                         "this tree's client_processes (else --client-processes), to set process counts side by side")
    ap.add_argument("--concurrency", default="64,256")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests-per-stream", type=int, default=4)
    ap.add_argument("--client-processes", default='"auto"', help='the suite\'s client_processes ("auto" or N)')
    ap.add_argument("--tty", action="store_true", help="give the sweep a pseudo-terminal (its progress bar drawn)")
    ap.add_argument("--no-keepalive", dest="keepalive", action="store_false",
                    help="a stand-in without ': keep-alive' lines between chunks (half its writes)")
    ap.add_argument("--standin-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for the stand-in, e.g. --standin-arg=--token-ids (repeatable)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    args.extra = extra
    trees = []
    for spec in args.tree:
        name, _, path = spec.partition("=")
        kind, sep, rest = path.partition(":")
        kind, path = (kind, rest) if sep and kind in ("bench", "floor") else ("sweep", path)
        path, _, procs = path.partition("@")
        trees.append((name, (kind, Path(path), procs or None)))
    concurrencies = [int(x) for x in args.concurrency.split(",")]
    runs = []
    standin = ["--pace-ms", "10", "--ttft-ms", "50", *(["--keepalive"] if args.keepalive else []), *args.standin_arg]
    with tempfile.TemporaryDirectory(prefix="sweep-overhead-") as tmp, run_standin(*standin) as base_url:
        for repeat in range(args.repeats):
            for c in concurrencies:
                k = repeat % len(trees)  # the trees' order rotates: none always runs first
                for name, (kind, tree, procs) in trees[k:] + trees[:k]:
                    got = {"tree": name, "path": kind, "concurrency": c, "repeat": repeat,
                           **measure(kind, tree, base_url, c, args, Path(tmp), procs)}
                    runs.append(got)
                    print(f"repeat {repeat + 1} c={c} {name:>8}: TTFT overhead {got['ttft_overhead_ms']:.1f} ms "
                          f"(client {got['client_ttft_ms_mean']:.1f} - server {got['server_ttft_ms_mean']:.1f}), ITL "
                          f"vs server {got['itl_err_vs_server_pct']:.2f}%, loop lag p99 {got['loop_lag_ms_p99']} ms, "
                          f"busy {got['busy_share_max']}, {got['processes']} proc, {got['errors']} errors, "
                          f"client TTFT by round {got.get('client_ttft_ms_by_round')}",
                          flush=True)  # fmt: skip
    print(f"\nTTFT overhead = client TTFT mean - the stand-in's own, median [min-max] over {args.repeats} repeats; "
          f"paired: each tree minus {trees[0][0]}, repeat by repeat")
    print("streams | tree | TTFT overhead ms | paired difference ms | ITL err vs server % | loop lag p99 ms")
    for c in concurrencies:
        base = {r["repeat"]: r["ttft_overhead_ms"] for r in runs if r["concurrency"] == c and r["tree"] == trees[0][0]}
        for name, _ in trees:
            mine = [r for r in runs if r["concurrency"] == c and r["tree"] == name]
            diff = [r["ttft_overhead_ms"] - base[r["repeat"]] for r in mine] if name != trees[0][0] else []
            lags = [r["loop_lag_ms_p99"] for r in mine if r["loop_lag_ms_p99"] is not None]
            print(f"{c} | {name} | {_mr([r['ttft_overhead_ms'] for r in mine])} | {_mr(diff)} | "
                  f"{_mr([v for r in mine if (v := r['itl_err_vs_server_pct']) == v], 2)} | {_mr(lags)}")
    if args.json:
        args.json.write_text(json.dumps({"trees": {n: f"{k}:{p}" + (f"@{n_procs}" if n_procs else "")
                                                   for n, (k, p, n_procs) in trees}, "argv": sys.argv,
                                         "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
