"""TensorRT-LLM: ``trtllm-serve serve MODEL --backend pytorch --config <yaml>``; tau from iteration stats.

The method lives in a generated YAML of LLM-API options (``LaunchPlan.files``, written before launch to
an absolute path in the temp directory, so it resolves whatever directory the server runs in):

- every method: ``enable_iter_perf_stats: true`` so ``GET /metrics`` carries per-iteration stats;
- DFlash: ``speculative_config: {decoding_type: DFlash, max_draft_len: B-1, speculative_model: DRAFTER}``;
- EAGLE-3: ``speculative_config: {decoding_type: Eagle3, max_draft_len: k, speculative_model: HEAD}``.

Served name: ``--served_model_name`` (recent trtllm-serve). Parallelism: ``--tp_size`` and ``--ep_size``. trtllm-serve has no data-parallel replicas (its attention data
parallelism runs over the tp GPUs: pass ``--enable_attention_dp`` or ``enable_attention_dp: true`` yourself),
so ``dp`` must be 1. The user's extra arguments come last, verbatim.

Counters: ``GET /metrics`` hands each iteration's stats out once (a bounded queue, drained on read), so this
backend accumulates them per server and polls in the background while a measurement window is open; the
totals restart when the server's iteration number goes backwards (a new server on the same address).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dflashbench.backends._engine import check_parallelism, get_json, num_speculative_tokens, require_draft
from dflashbench.backends.base import LaunchPlan, ServerSpec
from dflashbench.backends.counters import trtllm_counters_from_iteration_stats
from dflashbench.errors import UserError
from dflashbench.types import AcceptCounters, Method

DECODING_TYPE = {Method.DFLASH: "DFlash", Method.EAGLE3: "Eagle3"}
POLL_INTERVAL_S = 1.0  # the stats queue holds 1000 iterations, i.e. several seconds of decoding


def config_path(spec: ServerSpec) -> str:
    """Where the YAML goes: an absolute path (the server may run in any directory), one per server address."""
    return str(Path(tempfile.gettempdir()) / "dflashbench" / f"trtllm-{spec.method.value}-{spec.port}.yaml")


def llm_api_options(spec: ServerSpec) -> dict:
    """The LLM-API options (the YAML given to ``--config``) for ``spec.method``."""
    options: dict = {"enable_iter_perf_stats": True}
    if spec.method is not Method.AR:
        options["speculative_config"] = {
            "decoding_type": DECODING_TYPE[spec.method],
            "max_draft_len": num_speculative_tokens(spec),
            "speculative_model": require_draft(spec, "trtllm"),
        }
    return options


def to_yaml(options: dict) -> str:
    import yaml  # PyYAML comes with transformers

    return yaml.safe_dump(options, sort_keys=False, default_flow_style=False)


@dataclass
class _Accumulated:
    counters: AcceptCounters | None = None
    last_iter: int | None = None
    # per event loop: one drain at a time (responses handled out of order would look like a restart)
    loop: asyncio.AbstractEventLoop | None = None
    lock: asyncio.Lock | None = None
    poller: asyncio.Task | None = None


class TrtllmBackend:
    """TensorRT-LLM's ``trtllm-serve`` (PyTorch backend)."""

    name = "trtllm"

    def __init__(self) -> None:
        self._servers: dict[str, _Accumulated] = {}

    def launch_plan(self, spec: ServerSpec) -> LaunchPlan:
        check_parallelism(spec)
        if spec.dp > 1:
            raise UserError(
                "trtllm-serve has no data-parallel replicas (--dp); for attention data parallelism over the "
                "tp GPUs pass --enable_attention_dp as an extra argument and keep --dp 1"
            )
        config = config_path(spec)
        argv = ["trtllm-serve", "serve", spec.model, "--backend", "pytorch"]
        argv += ["--host", spec.host, "--port", str(spec.port)]
        if spec.served_model_name:
            argv += ["--served_model_name", spec.served_model_name]
        argv += ["--tp_size", str(spec.tp)]
        if spec.ep > 1:
            argv += ["--ep_size", str(spec.ep)]
        argv += ["--config", config]
        argv += spec.extra_args
        return LaunchPlan(
            argv=tuple(argv), env=dict(spec.env), files={config: to_yaml(llm_api_options(spec))}
        )

    def health_path(self) -> str:
        return "/health"

    async def read_counters(self, session, base_url: str) -> AcceptCounters | None:
        """Accumulated iteration stats of the server at ``base_url``; ``None`` when it reports none (AR)."""
        state = self._servers.setdefault(base_url, _Accumulated())
        loop = asyncio.get_running_loop()
        if state.loop is not loop:
            state.loop, state.lock, state.poller = loop, asyncio.Lock(), None
        async with state.lock:
            await self._drain(session, base_url, state)
        if state.poller is None or state.poller.done():
            state.poller = loop.create_task(self._poll(session, base_url, state))
        return state.counters

    async def _drain(self, session, base_url: str, state: _Accumulated) -> None:
        entries = await get_json(session, f"{base_url}/metrics")
        if not isinstance(entries, list) or not entries:
            return
        iters = [e["iter"] for e in entries if isinstance(e, dict) and isinstance(e.get("iter"), int)]
        if iters and state.last_iter is not None and min(iters) <= state.last_iter:
            state.counters = None  # a new server: its iterations started again
        if iters:
            state.last_iter = max(iters)
        new = trtllm_counters_from_iteration_stats(entries)
        if new is not None:
            old = state.counters or AcceptCounters()
            state.counters = AcceptCounters(
                drafts=old.drafts + new.drafts,
                draft_tokens=old.draft_tokens + new.draft_tokens,
                accepted_tokens=old.accepted_tokens + new.accepted_tokens,
            )

    async def _poll(self, session, base_url: str, state: _Accumulated) -> None:
        """Keep draining while the event loop runs, so no iteration falls out of the server's queue."""
        while not session.closed:
            await asyncio.sleep(POLL_INTERVAL_S)
            with contextlib.suppress(Exception):  # server gone or busy: the next read says so
                async with state.lock:
                    await self._drain(session, base_url, state)

    async def reset_cache(self, session, base_url: str) -> None:
        """trtllm-serve offers no cache reset over HTTP: a no-op."""
