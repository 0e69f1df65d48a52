"""``dflashbench serve``'s work: check the port, load the engine (a model directory or a ``random:`` pair), pin
the decode thread, and run the HTTP server (:mod:`~dflashbench.reference.serving.server`) until stopped."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from aiohttp import web

from dflashbench.errors import UserError
from dflashbench.reference.serving.config import NGRAM_K, NGRAM_MAX_N, NGRAM_MIN_N, ServeConfig
from dflashbench.reference.serving.server import ReferenceServer
from dflashbench.reference.threads import torch_threads


def model_limits(model_dir: str | Path) -> tuple[int | None, list[int]]:
    """(max context length, EOS token ids) from a Hugging Face model directory's config files."""
    model_dir = Path(model_dir)
    max_len = None
    eos: list[int] = []
    for name in ("config.json", "generation_config.json"):
        try:
            cfg = json.loads((model_dir / name).read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if name == "config.json":
            max_len = cfg.get("max_position_embeddings")
        value = cfg.get("eos_token_id")
        eos += value if isinstance(value, list) else [] if value is None else [value]
    return max_len, eos


def serve(cfg: ServeConfig) -> None:
    """Run ``dflashbench serve`` as ``cfg`` says (checked when it was made), decoding on ``cfg.threads`` torch
    threads."""
    with torch_threads(cfg.threads):
        serve_pair(
            cfg.model, cfg.draft, cfg.method, host=cfg.host, port=cfg.port, device=cfg.device, dtype=cfg.dtype,
            max_batch_size=cfg.max_batch_size, max_kv_tokens=cfg.max_kv_tokens,
            served_model_name=cfg.served_model_name, pin_decode_cpu=cfg.pin_decode_cpu, fault=cfg.fault,
            step_delay_s=cfg.step_delay_s, step_delay_per_request_s=cfg.step_delay_per_request_s,
            step_stretch=cfg.step_stretch,
            labels=(cfg.model_label, cfg.draft_label),
            ngram=(cfg.num_speculative_tokens or NGRAM_K, cfg.prompt_lookup_min, cfg.prompt_lookup_max),
            api_key=cfg.api_key, planted=cfg.planted, draft_schedule=cfg.draft_schedule(),
        )  # fmt: skip


def serve_pair(
    model: str | Path,
    draft: str | Path | None,
    method: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    device: str = "cpu",
    dtype: str | None = None,
    max_batch_size: int = 8,
    max_kv_tokens: int | None = None,
    served_model_name: str | None = None,
    pin_decode_cpu: bool = True,
    fault: str | None = None,
    step_delay_s: float = 0.0,
    step_delay_per_request_s: float = 0.0,
    step_stretch: float = 1.0,
    labels: tuple[str | None, str | None] = (None, None),
    ngram: tuple[int, int, int] = (NGRAM_K, NGRAM_MIN_N, NGRAM_MAX_N),
    api_key: str | None = None,
    planted=None,
    draft_schedule=None,
) -> None:
    """Load the engine, then serve until SIGINT / SIGTERM (the listener opens only once it is loaded). ``labels``:
    what the load line calls the model and the draft, where a name says more than a path (the embedded pair).

    With ``pin_decode_cpu`` (and CPU decoding on one torch thread, see
    :func:`~dflashbench.reference.serving.engine.pick_decode_cpu`) the decode thread gets a core of its own and this
    thread, the HTTP loop, keeps to the others."""
    import torch

    from dflashbench.reference.serving.engine import ReferenceEngine, pick_decode_cpu

    check_port_free(host, port)  # before the slow load, so a busy port fails at once
    started = time.monotonic()
    shown_model, shown_draft = labels[0] or model, labels[1] or draft
    print(f"dflashbench serve: loading {shown_model} (method {method}, draft {shown_draft}) on {device}", flush=True)
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    decode_cpu = pick_decode_cpu(device, torch.get_num_threads(), allowed) if pin_decode_cpu else None
    target, drafter = _random_pair(str(model), draft, method, device, dtype)
    if method == "ngram":
        from dflashbench.reference.ngram import NgramDrafter

        k = max(draft_schedule.max_k, 1) if draft_schedule is not None else ngram[0]  # a schedule's longest K
        drafter = NgramDrafter(k, *ngram[1:])
    engine = ReferenceEngine(
        str(model), str(draft) if draft is not None else None, method,
        device=device, dtype=dtype, max_batch_size=max_batch_size, max_kv_tokens=max_kv_tokens,
        decode_cpu=decode_cpu, target=target, drafter=drafter, fault=fault, step_delay_s=step_delay_s,
        step_delay_per_request_s=step_delay_per_request_s, planted=planted, draft_schedule=draft_schedule,
        step_stretch=step_stretch,
    )  # fmt: skip
    if planted is not None:
        print(f"dflashbench serve: TEST {planted.describe()}: output is deliberately not the target's", flush=True)
    if draft_schedule is not None:
        print(f"dflashbench serve: draft length {draft_schedule.describe()} (of at most {engine.block_size - 1})",
              flush=True)
    if fault is not None:
        print(f"dflashbench serve: TEST FAULT {fault!r} planted: output is deliberately not lossless", flush=True)
    if step_delay_s:
        print(f"dflashbench serve: TEST slowdown: {step_delay_s * 1e3:g} ms after every decode step", flush=True)
    if step_stretch != 1.0:
        print(f"dflashbench serve: TEST slowdown: every prefill and decode step takes {step_stretch:g}x its own time",
              flush=True)
    if step_delay_per_request_s:
        print(f"dflashbench serve: TEST slowdown: {step_delay_per_request_s * 1e3:g} ms per request in the batch after "
              "every decode step", flush=True)
    if decode_cpu is not None:
        os.sched_setaffinity(0, allowed - {decode_cpu})  # after the decode thread started with the full set
        print(f"dflashbench serve: decode thread pinned to CPU {decode_cpu}; HTTP on CPUs "
              f"{','.join(map(str, sorted(allowed - {decode_cpu})))}", flush=True)
    max_len, eos = model_limits(model)
    tok_eos = getattr(engine.tokenizer, "eos_token_id", None)
    eos = ([tok_eos] if tok_eos is not None else []) + eos
    eos = list(getattr(engine, "default_stop_ids", None) or eos)  # the decoder's own end-of-sequence ids
    server = ReferenceServer(
        engine,
        method=method,
        served_model_name=served_model_name,
        model_aliases=(str(model),),
        max_model_len=max_len,
        eos_token_ids=eos,
        api_key=api_key,
    )
    if api_key:
        print("dflashbench serve: requests to /v1/ need the API key (Authorization: Bearer ...)", flush=True)
    print(
        f"dflashbench serve: {server.model_name} loaded in {time.monotonic() - started:.1f}s; "
        f"listening on http://{host}:{port} (/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics)",
        flush=True,
    )
    try:
        web.run_app(server.app(), host=host, port=port, print=None, access_log=None, shutdown_timeout=5.0)
    except OSError as exc:  # lost a race for the port after the early check
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    # Stopped (SIGINT/SIGTERM) and the engine is closed. Skip the interpreter's teardown of torch and
    # transformers, which takes seconds on a busy machine and would hold up every sweep's method switch.
    print("dflashbench serve: stopped", flush=True)
    sys.stderr.flush()
    os._exit(0)


def _random_pair(model: str, draft, method: str, device: str, dtype: str | None):
    """``(target, drafter)`` made on the spot for ``random:SHAPE`` specs (see :mod:`random_pair`); ``(None,
    None)`` for directories, which the engine loads itself."""
    from dflashbench.reference import random_pair
    from dflashbench.reference.weights import parse_dtype

    if not random_pair.is_random(model):
        return None, None
    target = random_pair.random_target(model, device=device, dtype=parse_dtype(dtype))
    drafter = random_pair.random_drafter(str(draft), method, target) if method not in ("ar", "ngram") else None
    return target, drafter


def check_port_free(host: str, port: int) -> None:
    """Raise a one-line :class:`UserError` if ``host:port`` cannot be bound right now."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UserError(f"cannot resolve --host {host}: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            raise UserError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another server running there? "
                "pick another --port)"
            ) from None
