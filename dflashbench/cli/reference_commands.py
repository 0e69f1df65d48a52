"""The reference decoder's commands: ``serve`` (an OpenAI-compatible server) and ``generate`` (one
generation). Each builds its config; the checks live with the config (:mod:`dflashbench.reference.serving.config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflashbench.cli.common import INT, STR, at_least, embedded_or, method_of
from dflashbench.errors import UserError
from dflashbench.reference.serving.config import API_KEY_ENV
from dflashbench.types import Method


def serve(
    model: Annotated[
        str | None,
        typer.Option(help="Target model directory (Hugging Face format), or random:SHAPE (random weights in a "
                     "released model's shape, e.g. random:qwen3-8b). Default: the embedded target."),
    ] = None,
    draft: Annotated[
        str | None,
        typer.Option(help="Drafter directory (DFlash drafter or EAGLE-3 head), or random:SHAPE with a random "
                     "target. Default: the embedded one for --method."),
    ] = None,
    method: Annotated[
        Method,
        typer.Option(parser=method_of("serve", (Method.AR, Method.DFLASH, Method.EAGLE3, Method.NGRAM)), metavar=STR,
                     help="Decoding method: ar, dflash, eagle3 or ngram (prompt lookup, no draft)."),
    ] = Method.DFLASH,
    num_speculative_tokens: Annotated[
        int | None,
        typer.Option(help="Draft tokens verified per step, K. dflash: at most the block size - 1 (the first K of the "
                     "block's proposals are verified); eagle3: the chain length; ngram: tokens copied. Default: the "
                     "drafter's own (dflash block - 1, the EAGLE-3 head's, ngram 5, vLLM's documented default)."),
    ] = None,
    num_speculative_tokens_per_batch_size: Annotated[
        str | None,
        typer.Option(help="K by batch size, as vLLM's key of this name: JSON [[lo,hi,K],...], inclusive ranges from "
                     "1 (e.g. '[[1,1,7],[2,4,3],[5,64,1]]'); a batch size past the last range takes its K. With "
                     "--num-speculative-tokens, every K is capped at it."),
    ] = None,
    prompt_lookup_min: Annotated[int, typer.Option(help="ngram: the shortest n-gram matched (default 4).")] = 4,
    prompt_lookup_max: Annotated[int, typer.Option(help="ngram: the longest n-gram matched (default 4).")] = 4,
    host: Annotated[str, typer.Option(help="Address to bind; loopback by default.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1, ...")] = "cpu",
    dtype: Annotated[str | None, typer.Option(help="float32, bfloat16, float16 (default: as stored).")] = None,
    max_batch_size: Annotated[int, typer.Option(help="Requests decoded together; more wait in a queue.")] = 8,
    max_kv_tokens: Annotated[
        int | None,
        typer.Option(help="KV budget: running requests' prompt + max_tokens + block stay within it; more wait."),
    ] = None,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model name clients send (default: the model directory's name).")
    ] = None,
    threads: Annotated[
        int,
        typer.Option(
            help="torch CPU threads for decoding (default 1: on a CPU shared with the load generator, more "
            "threads make torch's workers spin against it and slow small models down)."
        ),
    ] = 1,
    pin_cpu: Annotated[
        bool,
        typer.Option(
            help="Give the decode thread a CPU core of its own, the HTTP loop the others (CPU, --threads 1, "
            "2+ cores), so a load generator on the same machine cannot preempt it mid-step."
        ),
    ] = True,
    api_key_file: Annotated[
        Path | None,
        typer.Option(help=f"Require this API key (the file's first line) on /v1/ requests (Authorization: Bearer "
                     f"KEY). Or set {API_KEY_ENV}. There is no --api-key: a key in the command line shows in ps."),
    ] = None,
    test_fault: Annotated[
        str | None,
        typer.Option(hidden=True, help="Tests only: plant a decoding bug (accept-extra-draft), so the output is "
                     "deliberately not lossless."),
    ] = None,
    test_step_delay_ms: Annotated[
        float, typer.Option(hidden=True, help="Tests only: sleep this long after every decode step (a slower "
                            "server, for the regression gate's tests).")
    ] = 0.0,
    test_step_delay_per_request_ms: Annotated[
        float, typer.Option(hidden=True, help="Tests only: after every decode step, sleep this long per request in "
                            "the step's batch (a step that costs more with load: the crossover's tests).")
    ] = 0.0,
    test_step_stretch: Annotated[
        float, typer.Option(hidden=True, help="Tests only: every prefill and decode step takes this many times its own "
                            "time (every method slowed alike: a run-level shift, for compare's tests).")
    ] = 1.0,
    test_near_tie_nats: Annotated[
        float, typer.Option(hidden=True, help="Tests only: in the verify pass, commit the target's runner-up wherever "
                            "its top-1 leads it by less than this many nats (a planted near-tie flip).")
    ] = 0.0,
    test_loose_verify_topk: Annotated[
        int, typer.Option(hidden=True, help="Tests only: accept a draft token whenever it is among the target's top K "
                          "(a planted lossy verifier).")
    ] = 0,
) -> None:
    """OpenAI-compatible server over the reference decoder (/v1/completions, /v1/chat/completions, /metrics)."""
    from dflashbench.embedded import name_of
    from dflashbench.reference.serving.config import ServeConfig

    # the embedded drafters pair only with the embedded target: no draft is filled in for a given --model
    needs_draft = method not in (Method.AR, Method.NGRAM)
    model, drafts = embedded_or(model, {method: draft} if model is None and needs_draft else None)
    draft = drafts.get(method, draft) if needs_draft else None
    cfg = ServeConfig(
        model=model, draft=draft, method=method, host=host, port=port, device=device, dtype=dtype,
        max_batch_size=max_batch_size, max_kv_tokens=max_kv_tokens, served_model_name=served_model_name,
        threads=threads, pin_decode_cpu=pin_cpu, fault=test_fault,
        step_delay_s=test_step_delay_ms / 1e3, step_delay_per_request_s=test_step_delay_per_request_ms / 1e3,
        step_stretch=test_step_stretch,
        model_label=name_of(model), draft_label=name_of(draft) if draft and method is not Method.AR else None,
        num_speculative_tokens=num_speculative_tokens, prompt_lookup_min=prompt_lookup_min,
        num_speculative_tokens_per_batch_size=num_speculative_tokens_per_batch_size,
        prompt_lookup_max=prompt_lookup_max, api_key=serve_api_key(api_key_file),
        test_near_tie_nats=test_near_tie_nats, test_loose_verify_topk=test_loose_verify_topk,
    )  # fmt: skip
    from dflashbench.reference.serving.launch import serve as run_server

    run_server(cfg)


def serve_api_key(path: Path | None) -> str | None:
    """The key ``dflashbench serve`` requires: ``--api-key-file``'s first line, else :data:`API_KEY_ENV`, else none.
    Never an argument: the command line of every process is readable by every user (``ps``); the reference backend
    passes a suite's ``--api-key`` in the environment (:mod:`dflashbench.backends.reference`)."""
    import os

    if path is not None:
        try:
            key = path.read_text(encoding="utf-8").splitlines()[0].strip() if path.stat().st_size else ""
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"--api-key-file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
        if not key:
            raise UserError(f"--api-key-file {path}: the file is empty; write the key on its first line")
        return key
    return os.environ.get(API_KEY_ENV) or None


def generate(
    prompt: Annotated[str, typer.Option(help="The user message (the model's chat template is applied if it has one).")],
    model: Annotated[str | None, typer.Option(help="Target model directory. Default: the embedded target.")] = None,
    draft: Annotated[str | None, typer.Option(help="DFlash drafter directory. Default: the embedded drafter.")] = None,
    method: Annotated[
        Method, typer.Option(parser=method_of("generate", (Method.AR, Method.DFLASH, Method.NGRAM)), metavar=STR,
                             help="ar, dflash or ngram (prompt lookup, no draft).")
    ] = Method.DFLASH,
    temperature: Annotated[float, typer.Option(help="0 = greedy; > 0 samples from the target.")] = 0.0,
    max_new_tokens: Annotated[int, typer.Option(help="Most tokens to generate.")] = 256,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1, ...")] = "cpu",
    dtype: Annotated[str | None, typer.Option(help="float32, bfloat16, float16 (default: as stored).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for sampling.")] = None,
    threads: Annotated[
        int | None,
        typer.Option(parser=at_least("--threads", 1), metavar=INT, help="torch CPU threads (default: torch's choice)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON record instead of text.")] = False,
) -> None:
    """One generation on the reference decoder: the text, tau (tokens per target step that drafted) and tokens/s."""
    import json

    from dflashbench.reference.serving.oneshot import generate_once
    from dflashbench.reference.threads import torch_threads

    model, drafts = embedded_or(model, {Method.DFLASH: draft} if method is Method.DFLASH else None)
    with torch_threads(threads):
        rec = generate_once(model, drafts.get(Method.DFLASH), prompt, method=method.value, temperature=temperature,
                            max_new_tokens=max_new_tokens, device=device, dtype=dtype, seed=seed)  # fmt: skip
    if as_json:
        keys = ("text", "token_ids", "tau", "num_steps", "num_drafts", "tokens_per_step", "tok_per_s", "model",
                "draft", "method", "finish_reason")  # fmt: skip
        typer.echo(json.dumps({k: rec.to_dict()[k] for k in keys}))
        return
    typer.echo(rec.text)
    tau = f"{rec.tau:.2f}" if rec.tau is not None else "n/a"
    # tau counts the steps that drafted (the server's /metrics, vLLM's rule); where some drafted nothing (n-gram
    # found no match) the tokens per step over every step are said beside it
    steps = (f"tau {tau} over {rec.num_steps} steps" if rec.num_drafts in (0, rec.num_steps) else
             f"tau {tau} over the {rec.num_drafts} of {rec.num_steps} steps that drafted, "
             f"{rec.tokens_per_step:.2f} tokens per step over all")  # fmt: skip
    typer.echo(f"[{method}] {len(rec.token_ids)} tokens in {rec.seconds:.2f} s = {rec.tok_per_s:.1f} tok/s | "
               f"{steps} | stop: {rec.finish_reason}", err=True)
