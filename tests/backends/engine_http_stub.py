"""A tiny HTTP server on loopback that answers fixed bodies per (method, path) and records every call.

Used by the engine backend tests to exercise the backends' real HTTP reads (counters, cache resets).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from aiohttp import web


@contextlib.asynccontextmanager
async def http_stub(routes: dict[tuple[str, str], str | Callable[[], str]]):
    """Yield ``(base_url, calls)``; an unknown route answers 404. A callable body is called per request."""
    calls: list[tuple[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        calls.append((request.method, request.path))
        body = routes.get((request.method, request.path))
        if body is None:
            return web.Response(status=404, text="not found")
        return web.Response(text=body() if callable(body) else body)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", calls
    finally:
        await runner.cleanup()
