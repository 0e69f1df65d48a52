"""TensorRT-LLM: ``trtllm-serve serve MODEL --backend pytorch --config <yaml>``; tau from iteration stats.

The method lives in a generated YAML of LLM-API options (``LaunchPlan.files``, written before launch to
an absolute path in the temp directory, so it resolves whatever directory the server runs in):

- every method: ``enable_iter_perf_stats: true`` so ``GET /metrics`` carries per-iteration stats;
- DFlash: ``speculative_config: {decoding_type: DFlash, max_draft_len: B-1, speculative_model: DRAFTER}``, B the
  drafter's block size. With B unknown (no registry value, no local checkpoint, no num_speculative_tokens) the key is
  left out: ``max_draft_len`` is optional in DFlashDecodingConfig ("max_draft_len: ... | None = None", the 1.3.0rc27
  API reference) and the DFlash worker resolves the block from the drafter it loads (``_resolved_block_size``,
  tensorrt_llm/_torch/speculative/dflash.py); so AR and EAGLE-3 plans never depend on it;
- EAGLE-3: ``speculative_config: {decoding_type: Eagle3, max_draft_len: k, speculative_model: HEAD}``;
- MTP: ``{decoding_type: MTP, num_nextn_predict_layers: k}`` (the target's own layers; no model);
- n-gram: ``{decoding_type: NGram, max_draft_len: k, max_matching_ngram_size: n}`` (the method record's defaults);
- a draft-length schedule (``ServerSpec.draft_schedule``): ``draft_len_schedule`` in the speculative config, each
  range's last batch size -> its K (:func:`draft_len_schedule`), ``max_draft_len`` the first (longest) K;
- ``ServerSpec.engine_config`` merged in last (nested mappings key by key), e.g. ``enable_attention_dp: true``;
  the keys that carry the method above are dflashbench's and cannot be overridden there.

Served name: ``--served_model_name`` (recent trtllm-serve). Parallelism: ``--tp_size`` and ``--ep_size``.
trtllm-serve has no data-parallel replicas (attention data parallelism runs over the tp GPUs and is the
LLM-API key ``enable_attention_dp``, not a flag), so ``dp`` must be 1. Running requests: ``--max_batch_size N``
("Maximum number of requests that the engine can schedule", tensorrt_llm/commands/serve.py) when
``ServerSpec.max_running_requests`` is set; a ``max_batch_size`` in the YAML wins over it, since the YAML
"overwrites the parameters specified by trtllm-serve" (same file). The user's extra arguments come last.

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

from dflashbench.backends._engine import (
    BLOCK_DRAFTERS,
    check_parallelism,
    dflash_block_size,
    engine_default,
    explicit_speculative_tokens,
    get_json,
    last_int_flag,
    max_running_requests,
    num_speculative_tokens,
    require_draft,
    single_node,
)
from dflashbench.backends.base import LaunchPlan, ServerSpec, api_key_argv_note
from dflashbench.backends.counters import trtllm_counters_from_iteration_stats
from dflashbench.errors import UserError
from dflashbench.methods import record
from dflashbench.types import AcceptCounters, Method

POLL_INTERVAL_S = 1.0  # the stats queue holds 1000 iterations, i.e. several seconds of decoding
# What the generated YAML must keep for the method and tau to be measured: the field that sets each instead.
OWNED_KEYS = {
    ("enable_iter_perf_stats",): "nothing (tau is read from the iteration stats it turns on)",
    ("speculative_config", "decoding_type"): "the method",
    ("speculative_config", "speculative_model"): "--draft",
    ("speculative_config", "max_draft_len"): "num_speculative_tokens",
    ("speculative_config", "draft_len_schedule"): "a schedule (suite schedules, sweep --schedule)",
}
# DecodingBaseConfig.draft_len_schedule (NVIDIA/TensorRT-LLM@fcd3f31682808ae56118ae43c1d7864a3a945e6f,
# tensorrt_llm/llmapi/llm_args.py, validate_draft_len_schedule_and_sort): a dict of batch size -> draft length where each
# key is the LAST batch size of its tier ("{4:4, 8:2, 32:1}: batch sizes 1-4 use 4, 5-8 use 2, 9-32 use 1, 33+ use 0,
# implicit, speculation disabled"); keys >= 1, lengths >= 0, the smallest key's length must equal max_draft_len and none
# may exceed it. Which decoding modes honour it: SpeculativeDecodingMode.support_dynamic_draft_len
# (NVIDIA/TensorRT-LLM@00b6d5a25c30b4382d24fbdf52956d601b3ffd24, tensorrt_llm/_torch/speculative/interface.py: MTP
# one-model, Eagle3 one-model, PARD, DFlash, draft-target one-model, SA). Older releases read the keys as the FIRST
# batch size of each tier ("{1: 4, 4: 2, 8: 0}: batch_size >= 4 uses 2"): this form is for the releases above.


def config_path(spec: ServerSpec) -> str:
    """Where the YAML goes: an absolute path (the server may run in any directory), one per server address."""
    return str(Path(tempfile.gettempdir()) / "dflashbench" / f"trtllm-{spec.method.value}-{spec.port}.yaml")


def max_draft_len(spec: ServerSpec) -> int | None:
    """Draft tokens per step; DFlash's is the drafter's block size - 1, and ``None`` when the block is not known here
    (TensorRT-LLM then reads it from the drafter's checkpoint)."""
    if spec.method not in BLOCK_DRAFTERS or explicit_speculative_tokens(spec) is not None:
        explicit = explicit_speculative_tokens(spec)
        return explicit if explicit is not None or spec.method is Method.EAGLE3 and spec.draft else (
            engine_default(spec, "num_speculative_tokens", "trtllm") or num_speculative_tokens(spec))
    block = dflash_block_size(spec)
    return None if block is None else block - 1


def draft_len_schedule(spec: ServerSpec) -> dict[int, int] | None:
    """``spec.draft_schedule`` as TensorRT-LLM's ``draft_len_schedule`` (see :data:`OWNED_KEYS`' note): each range's
    last batch size -> its K, the last range held to the server's running-request cap so its K does not fall to 0
    past the range as TensorRT-LLM's implicit tier would. ``None`` without a schedule; a :class:`UserError` where
    TensorRT-LLM's rule (the smallest batch size drafts the longest) does not hold."""
    schedule = spec.draft_schedule
    if schedule is None:
        return None
    first = schedule.ranges[0][2]
    if first != schedule.max_k:
        raise UserError(f"TensorRT-LLM requires the smallest batch size to draft the longest K (draft_len_schedule's "
                        f"first entry equals max_draft_len): {schedule.describe()} drafts {schedule.max_k} past batch "
                        f"size 1; give it a schedule whose K only falls with the batch (tune --objective picks one)")  # fmt: skip
    out = {hi: k for _, hi, k in schedule.ranges}
    top = max(out)
    cap = max_running_requests(spec)
    if cap is not None and cap > top:
        out[cap] = out.pop(top)
    return out


def llm_api_options(spec: ServerSpec) -> dict:
    """The LLM-API options (the YAML given to ``--config``) for ``spec.method``, ``engine_config`` merged in."""
    options: dict = {"enable_iter_perf_stats": True}
    if spec.method is not Method.AR:
        rec = record(spec.method)
        decoding_type = rec.on("trtllm").name
        draft = require_draft(spec, "trtllm") if rec.needs_draft else None  # first: a missing draft is the problem
        length = max_draft_len(spec)
        tiers = draft_len_schedule(spec)
        if tiers is not None:
            length = spec.draft_schedule.max_k  # the smallest batch size's K: TensorRT-LLM's max_draft_len
        if spec.method is Method.MTP:
            config: dict = {"decoding_type": decoding_type, "num_nextn_predict_layers": length}
        else:
            config = {"decoding_type": decoding_type, **({"max_draft_len": length} if length is not None else {})}
        if tiers is not None:
            config["draft_len_schedule"] = tiers
        if spec.method is Method.NGRAM:
            config["max_matching_ngram_size"] = engine_default(spec, "max_matching_ngram_size", "trtllm")
        if draft is not None:
            config["speculative_model"] = draft
        options["speculative_config"] = config
    return merged(options, spec.engine_config)


def merged(ours: dict, theirs: dict, path: tuple[str, ...] = ()) -> dict:
    """``ours`` updated with ``theirs``, nested mappings key by key; a key in :data:`OWNED_KEYS` may not change."""
    out = dict(ours)
    for key, value in theirs.items():
        where = (*path, key)
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value, where)
            continue
        if where in OWNED_KEYS and out.get(key) != value:
            raise UserError(
                f"engine_config cannot set {'.'.join(where)}: dflashbench writes it (use {OWNED_KEYS[where]})"
            )
        out[key] = value
    return out


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
        single_node(spec, "trtllm-serve", "across nodes it runs under MPI (mpirun or srun --mpi), one rank per GPU")
        if spec.dp > 1:
            raise UserError(
                "trtllm-serve has no data-parallel replicas (--dp); for attention data parallelism over the "
                "tp GPUs keep --dp 1 and set engine_config = { enable_attention_dp = true } in the suite"
            )
        config = config_path(spec)
        argv = ["trtllm-serve", "serve", spec.model, "--backend", "pytorch"]
        argv += ["--host", spec.host, "--port", str(spec.port)]
        if spec.served_model_name:
            argv += ["--served_model_name", spec.served_model_name]
        argv += ["--tp_size", str(spec.tp)]
        if spec.ep > 1:
            argv += ["--ep_size", str(spec.ep)]
        cap = max_running_requests(spec)
        if cap is not None:
            argv += ["--max_batch_size", str(cap)]
        argv += ["--config", config]
        argv += spec.extra_args
        notes: tuple[str, ...] = ()
        if spec.method is Method.DFLASH and max_draft_len(spec) is None:
            notes = ("DFlash block size not known here: max_draft_len left out of the YAML, so TensorRT-LLM reads the "
                     "block from the drafter's checkpoint (DFlashDecodingConfig.max_draft_len is optional)",)
        notes += tuple(n for n in (api_key_argv_note(spec.extra_args, "TensorRT-LLM"),) if n)
        return LaunchPlan(
            argv=tuple(argv), env=dict(spec.env), files={config: to_yaml(llm_api_options(spec))}, notes=notes
        )

    def health_path(self) -> str:
        return "/health"

    def concurrency_cap(self, spec: ServerSpec) -> int | None:
        """``max_batch_size``: the YAML's (engine_config), else the user's flag, else dflashbench's; ``None``
        when none is set (trtllm-serve's default, BuildConfig.max_batch_size, was not read from its source)."""
        configured = spec.engine_config.get("max_batch_size")
        if isinstance(configured, int):
            return configured
        flag = last_int_flag(spec.extra_args, "--max_batch_size")
        return flag if flag is not None else max_running_requests(spec)

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
