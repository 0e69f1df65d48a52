"""The client's event loop: uvloop where it is installed (a dependency on Linux), asyncio's own on request."""

import asyncio

import pytest

from dflashbench.load import eventloop


def test_the_client_runs_on_uvloop_unless_told_otherwise(monkeypatch):
    uvloop = pytest.importorskip("uvloop")
    monkeypatch.delenv(eventloop.ENV, raising=False)

    async def which() -> type:
        return type(asyncio.get_running_loop())

    assert eventloop.loop_factory() is uvloop.new_event_loop
    assert eventloop.run(which()) is uvloop.Loop
    monkeypatch.setenv(eventloop.ENV, "asyncio")
    assert eventloop.loop_factory() is None
    assert not issubclass(eventloop.run(which()), uvloop.Loop)
