"""An already-running OpenAI-compatible server: dflashbench launches nothing and stops nothing.

Its acceptance counters are read the way the engine behind it exposes them, chosen by a *flavour* (the
name of an engine backend: ``vllm``, ``sglang``, ``trtllm``, ``reference``); the flavour's own backend does
the reading (one parser per engine, in :mod:`dflashbench.backends.counters`). Without a flavour
(``None`` / ``"openai"``) no counters are read: tau is then 1.0 for AR and unknown otherwise.
"""

from __future__ import annotations

from dflashbench.backends.base import LaunchPlan, ServerSpec
from dflashbench.errors import UserError
from dflashbench.types import AcceptCounters

NO_FLAVOUR = (None, "", "none", "openai", "endpoint")


class EndpointBackend:
    """A server someone else runs, at a URL given with ``--endpoint``."""

    name = "endpoint"

    def __init__(self, flavour: str | None = None) -> None:
        self.flavour = None if flavour in NO_FLAVOUR else flavour
        self._inner = None
        if self.flavour is not None:
            from dflashbench.backends import get_backend

            self._inner = get_backend(self.flavour)

    def launch_plan(self, spec: ServerSpec) -> LaunchPlan:
        raise UserError("the endpoint backend benchmarks a server that is already running; it launches nothing")

    def concurrency_cap(self, spec: ServerSpec) -> int | None:
        """Unknown: someone else started the server with their own settings."""
        return None

    def health_path(self) -> str:
        """``/v1/models``: every OpenAI-compatible server answers it (``/health`` is not universal)."""
        return "/v1/models"

    async def read_counters(self, session, base_url: str) -> AcceptCounters | None:
        if self._inner is None:
            return None
        return await self._inner.read_counters(session, base_url)

    async def reset_cache(self, session, base_url: str) -> None:
        """The flavour's cache reset where the server allows it; a server that refuses it is left as is."""
        if self._inner is None:
            return
        try:
            await self._inner.reset_cache(session, base_url)
        except Exception:  # noqa: BLE001 - someone else's server: its admin endpoints may be off
            return
