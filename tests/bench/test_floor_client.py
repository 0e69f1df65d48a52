"""The floor client (:mod:`dflashbench.bench.floor_client`) against the real stand-in on loopback."""

import asyncio

import pytest

from dflashbench.bench.floor_client import _read_response, main, run_floor
from dflashbench.bench.overhead import ServerWindow
from dflashbench.bench.standin import run_standin


def test_the_floor_reads_every_response_and_its_ttft_is_the_servers_plus_a_little():
    with run_standin("--pace-ms", "2", "--ttft-ms", "30") as url:
        window = ServerWindow(url)
        ttfts_s = run_floor(url, 8, rounds=2, processes=2, max_tokens=16)
        server = window.close()
    assert len(ttfts_s) == 16 and server.requests == 16
    # the stand-in waits 30 ms before the first chunk: no TTFT can be shorter, and on loopback it is not much longer
    assert min(ttfts_s) >= 0.030
    assert sum(ttfts_s) / len(ttfts_s) * 1e3 == pytest.approx(server.ttft_ms_mean, abs=25)


def test_a_response_other_than_the_stand_ins_is_named():
    async def read(raw: bytes):
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        return await _read_response(reader)

    with pytest.raises(RuntimeError, match="404 Not Found"):
        asyncio.run(read(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    event = b'data: {"choices": [{"delta": {"content": "tok "}}]}\n\n'
    assert asyncio.run(read(chunked + b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))) is not None
    assert asyncio.run(read(chunked + b"0\r\n\r\n")) is None  # no token: the caller names it


def test_a_failed_worker_is_an_error_not_a_short_result(tmp_path):
    with run_standin("--pace-ms", "1", "--ttft-ms", "1") as url:
        closed = url.rsplit(":", 1)[0] + ":1"  # nothing listens on port 1
        with pytest.raises(RuntimeError, match="floor client worker exited"):
            run_floor(closed, 1, rounds=1, processes=1, max_tokens=4)
        out = tmp_path / "floor.json"
        main([url, "--concurrency", "2", "--rounds", "1", "--max-tokens", "4", "--out", str(out)])
    assert '"requests": 2' in out.read_text()


def test_bench_peers_runs_the_floor_as_a_peer_command(tmp_path):
    import sys

    from dflashbench.bench.peers import FLOOR_PEER, run_peer

    with run_standin("--pace-ms", "2", "--ttft-ms", "30") as url:
        got = run_peer(FLOOR_PEER, sys.executable, url, 8, 0, requests=16, max_tokens=16, tokenizer="", log_dir=tmp_path)
    assert got.tool == "floor" and got.requests == got.server_requests == 16 and got.errors == 0
    assert got.itl_ms_mean is None and got.ttft_overhead_ms is not None and got.ttft_overhead_ms > -5
    assert got.note == "raw sockets, no parsing, 1 process(es)"  # 8 streams: auto gives one process
