"""dflashbench's load generator beside its peers on one server: ``dflashbench bench peers`` (``nox -s peers``).

Every tool drives the same pace-exact stand-in (:mod:`dflashbench.bench.standin`: 50 ms before the first chunk,
10 ms per token, 128 tokens) at the same streams and request count (two per stream); dflashbench as
``dflashbench sweep --endpoint`` runs a point, by the sweep's own code with everything it keeps on
(:mod:`dflashbench.bench.sweep_point`). For each run the stand-in's
own counters are read before and after (:class:`dflashbench.bench.overhead.ServerWindow`), so each tool's TTFT
overhead is its client TTFT mean minus the server's own TTFT mean over exactly the requests it sent, and the
server's lag under that tool's load is reported beside it. The tools take turns within a repeat, in an order that
rotates from one repeat to the next, and each repeat's ratio dflashbench / peer is paired: the table gives medians
and ranges over the repeats.

The floor (:mod:`dflashbench.bench.floor_client`: raw keep-alive sockets that only find the first token's bytes)
runs beside them, from as many processes as dflashbench uses: its overhead is what any client pays on this machine
and server before doing a benchmark's work. Each tool's overhead over the floor (paired, repeat by repeat) is its
own part, and the ratio of those parts (dflashbench's over the peer's) is set beside the raw one.

A peer's client is run as its own command (an argv list) and read back from the files it writes; what is read
where is recorded beside each reader.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dflashbench.bench.common import num, with_range
from dflashbench.bench.overhead import (
    MAX_TOKENS,
    PACE_MS,
    TTFT_MS,
    ServerWindow,
    itl_error_pct,
    measure_cell,
    overhead_ms,
    overhead_words,
)
from dflashbench.bench.standin import run_standin
from dflashbench.errors import UserError
from dflashbench.load.loadgen_procs import choose_processes

# The goals issues #29 and #44 set: dflashbench's TTFT overhead at most this share of AIPerf's, per streams; its mean
# ITL within this many percent of the server's own (what the stand-in's /metrics says it kept: the client's part).
GOAL_SHARE_OF_AIPERF = {64: 0.5, 256: 0.25}
GOAL_ITL_ERR_PCT = 1.0
PEER_TIMEOUT_S = 600
FLOOR = "floor"  # the least a client can do (dflashbench.bench.floor_client): every tool's overhead is set against it


@dataclass
class PeerRun:
    tool: str
    concurrency: int
    repeat: int
    requests: int  # completed, as the tool counts them
    errors: int
    server_requests: int  # what the stand-in answered over the run (a probe or warm-up would show here)
    client_ttft_ms_mean: float | None
    server_ttft_ms_mean: float | None
    ttft_overhead_ms: float | None
    itl_ms_mean: float | None
    itl_err_pct: float | None
    itl_err_vs_server_pct: float | None  # against the stand-in's own mean ITL over the run: the tool's part
    server_late_ms_mean: float | None
    wall_s: float
    note: str = ""


def aiperf_argv(exe: str, base_url: str, concurrency: int, requests: int, max_tokens: int, tokenizer: str,
                out_dir: Path) -> list[str]:  # fmt: skip
    """AIPerf's command for one run. Flags as ``aiperf profile --help`` of aiperf 0.13.0 lists them: a chat
    endpoint streamed, ``--concurrency`` streams, ``--request-count`` in all, ``--output-tokens-mean`` tokens asked
    for (it sends them as ``max_completion_tokens``), token counts from the server's usage
    (``--use-server-token-count``: the stand-in's "tok " chunks are one token each by its count, not by a
    tokenizer's), no live UI, its files in ``out_dir``. ``tokenizer`` is a local directory: nothing is downloaded."""
    return [exe, "profile", "--model", "standin", "--tokenizer", tokenizer, "--endpoint-type", "chat", "--streaming",
            "--url", base_url, "--concurrency", str(concurrency), "--request-count", str(requests),
            "--output-tokens-mean", str(max_tokens), "--use-server-token-count", "--ui-type", "none",
            "--artifact-dir", str(out_dir)]  # fmt: skip


def read_aiperf(out_dir: Path) -> dict:
    """TTFT and ITL means (ms), completed requests and errors from AIPerf's summary export,
    ``profile_export_aiperf.json``: each metric an object with ``unit`` and ``avg`` (read off aiperf 0.13.0's own
    export), ``error_summary`` a list of ``{"error_details": ..., "count": n}`` (its ``ErrorDetailsCount``,
    aiperf/common/models/error_models.py)."""
    data = _load_json(out_dir / "profile_export_aiperf.json", "aiperf")

    def avg_ms(name: str) -> float | None:
        metric = data.get(name) or {}
        if metric.get("avg") is None:
            return None
        scale = {"ms": 1.0, "s": 1e3, "ns": 1e-6, "us": 1e-3}[metric.get("unit", "ms")]
        return float(metric["avg"]) * scale

    errors = sum(int(e.get("count", 0)) for e in data.get("error_summary") or [])
    return {"ttft_ms": avg_ms("time_to_first_token"), "itl_ms": avg_ms("inter_token_latency"),
            "requests": int((data.get("request_count") or {}).get("avg") or 0), "errors": errors}  # fmt: skip


def guidellm_argv(exe: str, base_url: str, concurrency: int, requests: int, max_tokens: int, tokenizer: str,
                  out_dir: Path) -> list[str]:  # fmt: skip
    """GuideLLM's command for one run, in the ``kind=...,field=value`` form of ``guidellm run --help`` (guidellm
    0.8.1; the field names from its schemas: ``ConcurrentProfile.streams``, the ``max_requests`` constraint's
    ``count``, ``openai_http``'s ``target`` and ``model``, the ``huggingface_auto`` tokenizer's ``model``,
    ``synthetic_text``'s ``prompt_tokens`` / ``output_tokens``, the ``json`` output's ``path``). It streams chat
    completions by default; the tokenizer is a local directory (it builds its synthetic prompts with it)."""
    return [exe, "run", "--backend", f"kind=openai_http,target={base_url},model=standin",
            "--profile", f"kind=concurrent,streams={concurrency}", "--constraint", f"kind=max_requests,count={requests}",
            "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
            "--data", f"kind=synthetic_text,prompt_tokens=32,output_tokens={max_tokens}",
            "--output", f"kind=json,path={out_dir / 'guidellm.json'}", "--disable-console-interactive"]  # fmt: skip


def read_guidellm(out_dir: Path) -> dict:
    """TTFT and ITL means (ms) of the successful requests, and the request totals, from GuideLLM's JSON output:
    ``benchmarks[0].metrics.{time_to_first_token_ms, inter_token_latency_ms}.successful.mean`` and
    ``metrics.request_totals`` (read off guidellm 0.8.1's own output)."""
    data = _load_json(out_dir / "guidellm.json", "guidellm")
    bench = (data.get("benchmarks") or [{}])[0]
    m = bench.get("metrics") or {}

    def mean(name: str) -> float | None:
        value = ((m.get(name) or {}).get("successful") or {}).get("mean")
        return float(value) if value is not None else None

    totals = m.get("request_totals") or {}
    return {"ttft_ms": mean("time_to_first_token_ms"), "itl_ms": mean("inter_token_latency_ms"),
            "requests": int(totals.get("successful") or 0),
            "errors": int(totals.get("errored") or 0) + int(totals.get("incomplete") or 0)}  # fmt: skip


def floor_argv(exe: str, base_url: str, concurrency: int, requests: int, max_tokens: int, tokenizer: str,
               out_dir: Path) -> list[str]:  # fmt: skip
    """The floor's command (:mod:`dflashbench.bench.floor_client`, ``exe`` the Python that runs it): the same load,
    from as many processes as dflashbench's ``--client-processes auto`` gives these streams. It sends one fixed
    prompt, so it needs no tokenizer."""
    return [exe, "-m", "dflashbench.bench.floor_client", base_url, "--concurrency", str(concurrency),
            "--rounds", str(requests // concurrency), "--processes", str(choose_processes("auto", concurrency)),
            "--max-tokens", str(max_tokens), "--out", str(out_dir / "floor.json")]  # fmt: skip


def read_floor(out_dir: Path) -> dict:
    """The floor's TTFT mean and request count, as its ``--out`` writes them. It reads no events, so it has no
    ITL of its own; a failed worker fails the whole command."""
    data = _load_json(out_dir / "floor.json", FLOOR)
    return {"ttft_ms": data["ttft_ms_mean"], "itl_ms": None, "requests": int(data["requests"]), "errors": 0,
            "note": f"raw sockets, no parsing, {data['processes']} process(es)"}  # fmt: skip


def _load_json(path: Path, tool: str) -> dict:
    if not path.exists():
        raise RuntimeError(f"{tool} wrote no {path.name} in {path.parent} (its output: {path.parent}.log)")
    return json.loads(path.read_text())


@dataclass(frozen=True)
class Peer:
    """A peer harness: how to run it once (an argv list) and where its results are read back."""

    name: str
    argv: Callable[..., list[str]]
    read: Callable[[Path], dict]


PEERS = {"aiperf": Peer("aiperf", aiperf_argv, read_aiperf), "guidellm": Peer("guidellm", guidellm_argv, read_guidellm)}
FLOOR_PEER = Peer(FLOOR, floor_argv, read_floor)  # run by this Python, always: not looked up on PATH as the peers are


def run_peer(peer: Peer, exe: str, base_url: str, concurrency: int, repeat: int, *, requests: int, max_tokens: int,
             tokenizer: str, log_dir: Path) -> PeerRun:  # fmt: skip
    out_dir = log_dir / f"{peer.name}-c{concurrency}-r{repeat}"
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = peer.argv(exe, base_url, concurrency, requests, max_tokens, tokenizer, out_dir)
    log_path = out_dir.with_suffix(".log")
    window = ServerWindow(base_url)
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        # no HF_HUB_OFFLINE: aiperf 0.13.0 then refuses a local tokenizer directory (HFValidationError); both are
        # given one, so neither looks anything up online
        proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=PEER_TIMEOUT_S, check=False)
    wall = time.perf_counter() - t0
    server = window.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{peer.name} exited {proc.returncode}; its output: {log_path}")
    got = peer.read(out_dir)
    return PeerRun(tool=peer.name, concurrency=concurrency, repeat=repeat, requests=got["requests"],
                   errors=got["errors"], server_requests=server.requests, client_ttft_ms_mean=got["ttft_ms"],
                   server_ttft_ms_mean=server.ttft_ms_mean, ttft_overhead_ms=overhead_ms(got["ttft_ms"], server.ttft_ms_mean),
                   itl_ms_mean=got["itl_ms"],
                   itl_err_pct=itl_error_pct(got["itl_ms"], PACE_MS),
                   itl_err_vs_server_pct=itl_error_pct(got["itl_ms"], server.itl_ms_mean),
                   server_late_ms_mean=server.late_ms_mean, wall_s=wall, note=got.get("note", ""))  # fmt: skip


def run_dflashbench(base_url: str, concurrency: int, repeat: int, *, rounds: int, max_tokens: int) -> PeerRun:
    """dflashbench as ``dflashbench sweep --endpoint`` runs a point, by the sweep's own code (store, progress bar,
    scrapes, telemetry: :mod:`dflashbench.bench.sweep_point`), with ``--client-processes auto``."""
    cell = measure_cell(base_url, "auto", concurrency, max_tokens=max_tokens, rounds=rounds, true_itl_s=PACE_MS / 1e3,
                        repeat=repeat)  # fmt: skip
    return PeerRun(tool="dflashbench", concurrency=concurrency, repeat=repeat, requests=cell.requests - cell.errors,
                   errors=cell.errors, server_requests=cell.server_requests, client_ttft_ms_mean=cell.client_ttft_ms_mean,
                   server_ttft_ms_mean=cell.server_ttft_ms_mean, ttft_overhead_ms=cell.ttft_overhead_ms,
                   itl_ms_mean=cell.itl_ms_mean, itl_err_pct=cell.itl_err_pct,
                   itl_err_vs_server_pct=cell.itl_err_vs_server_pct, server_late_ms_mean=cell.server_late_ms_mean,
                   wall_s=cell.wall_s, note=f"a sweep's point, {cell.processes} client process(es)")  # fmt: skip


def find_peers(given: dict[str, str | None]) -> dict[str, str]:
    """Each peer's executable: the path given, else its name on PATH. A path given that is not there is an error;
    a peer neither given nor on PATH is left out. At least one must be found."""
    found = {}
    for name in PEERS:
        path = given.get(name)
        if path is not None and not Path(path).is_file():
            raise UserError(f"--{name} {path}: no such file; give the path of its executable (pip install {name})")
        exe = path or shutil.which(name)
        if exe:
            found[name] = exe
    if not found:
        raise UserError(f"none of {', '.join(PEERS)} found on PATH: install them (pip install {' '.join(PEERS)}), pass "
                        f"--aiperf / --guidellm, or run `nox -s peers`, which installs both")  # fmt: skip
    return found


def rotation(tools: list[str], repeat: int) -> list[str]:
    """The tools' order in ``repeat``: rotated by one each repeat, so none always runs first on a warm server."""
    k = repeat % len(tools)
    return tools[k:] + tools[:k]


def run_peers(*, concurrencies=(64, 256), repeats: int = 3, executables: dict[str, str | None] | None = None,
              tokenizer: str | None = None, rounds: int = 2, on_run=None, log_dir: Path | None = None) -> dict:  # fmt: skip
    """dflashbench and every peer found at every streams count, ``repeats`` times, against one stand-in; the
    runs and the paired table."""
    from dflashbench.embedded import default_paths

    exes = find_peers(executables or {})
    tokenizer = tokenizer or str(default_paths().target)  # the embedded target's tokenizer: on disk, offline
    tools = ["dflashbench", *exes, FLOOR]
    runs: list[PeerRun] = []
    with tempfile.TemporaryDirectory(prefix="dflashbench-peers-") as tmp:
        logs = log_dir or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        with run_standin("--pace-ms", str(PACE_MS), "--ttft-ms", str(TTFT_MS)) as base_url:
            for repeat in range(repeats):
                for conc in concurrencies:
                    for tool in rotation(tools, repeat):
                        if tool == "dflashbench":
                            run = run_dflashbench(base_url, conc, repeat, rounds=rounds, max_tokens=MAX_TOKENS)
                        else:
                            peer, exe = (FLOOR_PEER, sys.executable) if tool == FLOOR else (PEERS[tool], exes[tool])
                            run = run_peer(peer, exe, base_url, conc, repeat, requests=conc * rounds,
                                           max_tokens=MAX_TOKENS, tokenizer=tokenizer, log_dir=logs)  # fmt: skip
                        runs.append(run)
                        if on_run:
                            on_run(run)
    config = {"concurrencies": list(concurrencies), "repeats": repeats, "rounds": rounds, "ttft_ms": TTFT_MS,
              "pace_ms": PACE_MS, "max_tokens": MAX_TOKENS, "tools": tools,
              "versions": {name: _version(name, exe) for name, exe in exes.items()}}  # fmt: skip
    return {"config": config, "runs": [asdict(r) for r in runs], "table": summarize(runs)}


def _version(dist: str, exe: str) -> str | None:
    """A peer's version, read by the interpreter beside its executable (its own venv): what ran, not what this
    venv may hold."""
    python = Path(exe).parent / "python"
    if not python.exists():
        return None
    probe = f"import importlib.metadata as m; print(m.version({dist!r}))"
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    return out.stdout.strip() or None if out.returncode == 0 else None


def _median_range(values: list[float]) -> dict | None:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


def over_floor(overhead_ms: float | None, floor_ms: float | None) -> float | None:
    """A tool's TTFT overhead above the floor's in the same repeat: its own part."""
    return None if overhead_ms is None or floor_ms is None else overhead_ms - floor_ms


def summarize(runs: list[PeerRun]) -> list[dict]:
    """Per streams count and tool: the TTFT overhead, ITL error and server lag (median, range over repeats), and
    for a peer the paired ratio dflashbench / peer of each repeat's overheads (median, range), with the goal
    where one is set. With the floor in the runs, also each tool's overhead over the floor's in the same repeat,
    for a peer the paired ratio of those (dflashbench's part / the peer's, where the peer's is above 0), and the
    floor's own ratio to the peer (``floor_ratio``: the least any client's ratio could be here)."""
    rows = []
    tools = list(dict.fromkeys(r.tool for r in runs))
    for conc in sorted({r.concurrency for r in runs}):
        ours = {r.repeat: r.ttft_overhead_ms for r in runs if r.concurrency == conc and r.tool == "dflashbench"}
        floor = {r.repeat: r.ttft_overhead_ms for r in runs if r.concurrency == conc and r.tool == FLOOR}
        ours_over = {k: over_floor(v, floor.get(k)) for k, v in ours.items()}
        for tool in tools:
            mine = [r for r in runs if r.concurrency == conc and r.tool == tool]
            row: dict = {"concurrency": conc, "tool": tool, "repeats": len(mine), "errors": sum(r.errors for r in mine)}
            for name in ("ttft_overhead_ms", "itl_err_pct", "itl_err_vs_server_pct", "server_late_ms_mean"):
                row[name] = _median_range([getattr(r, name) for r in mine if getattr(r, name) is not None])
            ratios = [ours[r.repeat] / r.ttft_overhead_ms for r in mine if tool != "dflashbench"
                      and ours.get(r.repeat) is not None and r.ttft_overhead_ms is not None and r.ttft_overhead_ms > 0]  # fmt: skip
            row["ratio"] = _median_range(ratios)
            row["goal"] = GOAL_SHARE_OF_AIPERF.get(conc) if tool == "aiperf" else None
            above = {r.repeat: over_floor(r.ttft_overhead_ms, floor.get(r.repeat)) for r in mine} if floor else {}
            row["over_floor_ms"] = _median_range([v for v in above.values() if v is not None]) if tool != FLOOR else None
            row["ratio_over_floor"] = _median_range([
                ours_over[k] / v for k, v in above.items()
                if tool not in ("dflashbench", FLOOR) and v is not None and v > 0 and ours_over.get(k) is not None])
            # the floor's own ratio to this peer: a goal below it is one no client reaches on this machine
            row["floor_ratio"] = _median_range([
                floor[r.repeat] / r.ttft_overhead_ms for r in mine if tool not in ("dflashbench", FLOOR)
                and floor.get(r.repeat) is not None and r.ttft_overhead_ms is not None and r.ttft_overhead_ms > 0])
            rows.append(row)
    return rows


def format_run(r: PeerRun) -> str:
    f = num
    return (f"repeat {r.repeat + 1}: {r.tool:<11} {r.concurrency:>4} streams: "
            f"{overhead_words(r.ttft_overhead_ms, r.client_ttft_ms_mean, r.server_ttft_ms_mean)}, ITL {f(r.itl_ms_mean, 2)} ms "
            f"(error {f(r.itl_err_pct, 2)}%, vs the server's own {f(r.itl_err_vs_server_pct, 2)}%), server late {f(r.server_late_ms_mean, 2)} ms, {r.requests} requests "
            f"(server saw {r.server_requests}), {r.errors} errors, {r.wall_s:.1f} s{f'; {r.note}' if r.note else ''}")  # fmt: skip


def format_table(rows: list[dict]) -> str:
    """The peers table: medians [min-max] over the repeats, the paired ratio and whether it meets the goal."""
    def mr(v, d=1):
        return "-" if v is None else with_range(v["median"], (v["min"], v["max"]), d)

    head = ("streams", "tool", "TTFT overhead ms", "dflashbench / tool (paired)", "goal", "over the floor ms",
            "dflashbench / tool, over the floor", "ITL error %", "ITL error vs server %", "server late ms", "errors")
    lines = [" | ".join(head)]
    for r in rows:
        ratio, goal = r["ratio"], r["goal"]
        verdict = "-" if goal is None or ratio is None else (f"<= {goal:g}: " + ("met" if ratio["median"] <= goal else "NOT met"))
        if goal is not None and r.get("floor_ratio"):  # what a client doing nothing at all got against this peer
            verdict += f" (the floor: {r['floor_ratio']['median']:.2f})"
        itl = mr(r["itl_err_vs_server_pct"], 2)
        if r["itl_err_vs_server_pct"] is not None and r["tool"] == "dflashbench":  # the client's own part of the error
            itl += " (goal <= 1: " + ("met)" if r["itl_err_vs_server_pct"]["median"] <= GOAL_ITL_ERR_PCT else "NOT met)")
        lines.append(" | ".join((str(r["concurrency"]), r["tool"], mr(r["ttft_overhead_ms"]), mr(ratio, 2), verdict,
                                 mr(r.get("over_floor_ms")), mr(r.get("ratio_over_floor"), 2), mr(r["itl_err_pct"], 2),
                                 itl, mr(r["server_late_ms_mean"], 2), str(r["errors"]))))  # fmt: skip
    return "\n".join(lines)
