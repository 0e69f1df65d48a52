"""The floor: the least any client can do against the stand-in, to set the other tools' TTFT overhead against.

    python -m dflashbench.bench.floor_client URL --concurrency 256 --rounds 2 --processes 2 --out FILE

Each stream holds one keep-alive HTTP/1.1 connection (asyncio streams on the client's loop,
:mod:`dflashbench.load.eventloop`), sends one fixed streaming chat request after another, and reads the chunked
response without parsing a single event: the first chunk whose bytes hold ``"content"`` is the first token (the
stand-in's first event carries it), the zero-size chunk is the end. No JSON, no records, no store, no progress: what
remains is the kernel, the loop and the server. Its TTFT minus the stand-in's own (the same
:class:`dflashbench.bench.overhead.ServerWindow` reading as every tool's) is what a client pays on this machine
before doing anything a benchmark needs: on two cores shared with the stand-in, the stand-in's own queueing of a
burst of requests before its clock starts is part of it. ``bench peers`` runs it beside dflashbench and the peers,
from as many processes as dflashbench's ``--client-processes auto`` uses, and reports every tool's overhead over it.

It only reads a server that answers as the stand-in does (chunked transfer encoding, 200): anything else is an
error that names what came.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from dflashbench.load import eventloop
from dflashbench.load.loadgen_procs import split_even

FIRST_TOKEN_MARK = b'"content"'  # in the stand-in's first event (dflashbench.bench.standin: delta.content)


def request_bytes(host: str, port: int, max_tokens: int) -> bytes:
    """The one request every stream sends, built once: a streaming chat completion the stand-in answers."""
    body = json.dumps({"model": "standin", "max_tokens": max_tokens, "stream": True,
                       "messages": [{"role": "user", "content": "floor"}]}).encode()  # fmt: skip
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip
    return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int | None:
    """Read one chunked response to its end; the ``perf_counter_ns`` of the first chunk holding a token."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status + b" " or b"chunked" not in head.lower():
        raise RuntimeError(f"the floor client reads only a 200 chunked response (the stand-in's); got {status!r}")
    first_ns = None
    while True:
        size = int((await reader.readline()).split(b";", 1)[0], 16)
        data = await reader.readexactly(size + 2)  # the chunk and its CRLF
        if size == 0:
            return first_ns
        if first_ns is None and FIRST_TOKEN_MARK in data:
            first_ns = time.perf_counter_ns()


async def _stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, rounds: int,
                  ttfts_s: list[float]) -> None:  # fmt: skip
    try:
        for _ in range(rounds):
            sent_ns = time.perf_counter_ns()
            writer.write(request)
            first_ns = await _read_response(reader)
            if first_ns is None:
                raise RuntimeError("a response carried no chunk holding a token")
            ttfts_s.append((first_ns - sent_ns) / 1e9)
    finally:
        writer.close()


async def run_streams(base_url: str, streams: int, rounds: int, max_tokens: int) -> list[float]:
    """``streams`` connections, ``rounds`` requests each, all at once; every request's TTFT in seconds. The
    connections are opened before the first request, as dflashbench's are (:func:`dflashbench.load.loadgen.open_connections`)."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    request = request_bytes(host, port, max_tokens)
    ttfts_s: list[float] = []
    conns = await asyncio.gather(*(asyncio.open_connection(host, port) for _ in range(streams)))
    await asyncio.gather(*(_stream(reader, writer, request, rounds, ttfts_s) for reader, writer in conns))
    return ttfts_s


def run_floor(base_url: str, concurrency: int, *, rounds: int, processes: int, max_tokens: int) -> list[float]:
    """Every request's TTFT (s) from ``processes`` worker processes sharing ``concurrency`` streams (argv lists,
    each worker printing its TTFTs as JSON)."""
    shares = split_even(concurrency, processes)
    workers = [subprocess.Popen([sys.executable, "-m", "dflashbench.bench.floor_client", base_url, "--worker",
                                 "--concurrency", str(n), "--rounds", str(rounds), "--max-tokens", str(max_tokens)],
                                stdout=subprocess.PIPE, text=True) for n in shares if n > 0]  # fmt: skip
    ttfts: list[float] = []
    for w in workers:
        out, _ = w.communicate(timeout=600)
        if w.returncode != 0:
            raise RuntimeError(f"a floor client worker exited {w.returncode}")
        ttfts += json.loads(out)
    return ttfts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--concurrency", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, help="write {requests, ttft_ms_mean, processes} here as JSON (else stdout)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(eventloop.run(run_streams(args.url, args.concurrency, args.rounds, args.max_tokens))))
        return
    ttfts = run_floor(args.url, args.concurrency, rounds=args.rounds, processes=args.processes,
                      max_tokens=args.max_tokens)  # fmt: skip
    summary = json.dumps({"requests": len(ttfts), "ttft_ms_mean": sum(ttfts) / len(ttfts) * 1e3 if ttfts else None,
                          "processes": args.processes})  # fmt: skip
    if args.out:
        args.out.write_text(summary + "\n")
    else:
        print(summary)


if __name__ == "__main__":
    main()
