"""EndpointBackend: a running server, counters read the way its engine (the flavour) exposes them."""

import asyncio
import sys

import aiohttp
import pytest

from dflashbench.backends import get_backend
from dflashbench.backends.base import LaunchPlan, ServerSpec
from dflashbench.backends.endpoint import EndpointBackend
from dflashbench.backends.process import ServerProcess, free_port
from dflashbench.errors import UserError
from dflashbench.types import AcceptCounters, Method


async def counters(backend, url):
    async with aiohttp.ClientSession() as session:
        await backend.reset_cache(session, url)  # a server without the admin endpoint is left as is
        return await backend.read_counters(session, url)


def test_endpoint_reads_counters_through_its_flavour(tmp_path):
    port = free_port()
    argv = (sys.executable, "-m", "dflashbench.bench.standin", "serve", "--port", str(port), "--spec-tau", "3")
    with ServerProcess(LaunchPlan(argv=argv), tmp_path / "s.log", name="stand-in") as server:
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(url + "/health", timeout_s=60, progress=False)
        assert asyncio.run(counters(EndpointBackend("vllm"), url)) == AcceptCounters(0, 0, 0, ())
        assert asyncio.run(counters(EndpointBackend(None), url)) is None  # no flavour: no counters


def test_endpoint_launches_nothing():
    backend = get_backend("endpoint")
    assert isinstance(backend, EndpointBackend) and backend.flavour is None
    assert backend.health_path() == "/v1/models"
    with pytest.raises(UserError, match="launches nothing"):
        backend.launch_plan(ServerSpec(method=Method.AR, model="m"))
    with pytest.raises(UserError, match="unknown backend 'vlm'. Did you mean 'vllm'"):
        EndpointBackend("vlm")
