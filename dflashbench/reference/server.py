"""OpenAI-compatible HTTP server over the reference decoder (``dflashbench serve``).

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (SSE streaming with
``stream_options.include_usage`` and ``continuous_usage_stats``, or one JSON response), ``GET /v1/models``,
``GET /health`` and ``GET /metrics`` (Prometheus text with vLLM's metric names, so the very parser that reads
vLLM reads this server).

Streaming: one SSE chunk per verification step of the decoder, carrying the tokens that step committed
(DFlash commits several tokens per step; AR one). Text is decoded incrementally, so a multi-byte character
split across steps is sent once it is complete. With ``continuous_usage_stats`` every chunk carries the
cumulative ``usage`` (a client derives how many tokens each chunk carried from it); with
``include_usage`` a last chunk with empty ``choices`` carries the final ``usage`` and the request's
speculative-decoding stats (``spec_decode``). ``completion_tokens`` counts every committed token, the EOS
token included, as vLLM does. With ``return_token_ids`` (vLLM's request field) each streamed choice also
carries ``token_ids``, the ids its step committed (the EOS id included), and a non-streamed choice all of them.

The engine is anything with the :class:`Engine` shape (the reference decoder's
:class:`~dflashbench.reference.engine.ReferenceEngine`); the server only does HTTP, validation,
tokenization, detokenization, stop strings and metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from dflashbench.errors import UserError
from dflashbench.reference.openai_schema import (
    ChatRequest,
    CompletionRequest,
    RequestError,
    Sampling,
    parse_chat,
    parse_completion,
)

QUEUE_TIME_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Engine(Protocol):
    """What the server needs from a decoder (``ReferenceEngine`` has this shape)."""

    tokenizer: Any
    model_name: str

    def generate(
        self,
        prompt_ids: list[int],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        stop_token_ids: list[int] | None = None,
        seed: int | None = None,
    ) -> AsyncIterator[Any]:  # yields steps with .token_ids, .drafted, .accepted, .queue_s
        ...

    def counters(self) -> Any:  # .num_drafts, .num_draft_tokens, .num_accepted_tokens, .accepted_per_pos
        ...

    async def close(self) -> None: ...


# --- incremental detokenization and stop strings -----------------------------------------------------


class IncrementalDetokenizer:
    """Turns token ids, a step at a time, into text deltas that are never half a character.

    Decodes a small window of recent ids (``prefix`` ids already shown, for context, then the unread ones)
    and emits what the unread ids added, holding it back while it ends in an incomplete UTF-8 sequence
    (decoded as U+FFFD).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def push(self, new_ids: Sequence[int]) -> str:
        self.ids.extend(new_ids)
        shown = self._decode(self.ids[self.prefix_offset : self.read_offset])
        text = self._decode(self.ids[self.prefix_offset :])
        if len(text) > len(shown) and not text.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return text[len(shown) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (at the end of generation), replacement characters and all."""
        shown = self._decode(self.ids[self.prefix_offset : self.read_offset])
        text = self._decode(self.ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.ids)
        return text[len(shown) :]


class StopStringFilter:
    """Cuts the text before the first stop string, holding back text that could still start one."""

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = tuple(stop)
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.sent = ""
        self.pending = ""

    def feed(self, delta: str, *, final: bool = False) -> tuple[str, bool]:
        """Add ``delta``; return (text safe to send now, whether a stop string was hit)."""
        self.pending += delta
        if self.stop:
            window_start = max(0, len(self.sent) - self.hold)
            window = self.sent[window_start:] + self.pending
            hits = [i for i in (window.find(s) for s in self.stop) if i >= 0]
            if hits:
                cut = window_start + min(hits) - len(self.sent)  # index into pending
                out, self.pending = self.pending[: max(cut, 0)], ""
                self.sent += out
                return out, True
        keep = 0 if final or not self.stop else self.hold
        out = self.pending[: len(self.pending) - keep] if keep else self.pending
        self.pending = self.pending[len(out) :]
        self.sent += out
        return out, False


class TextAssembler:
    """Token ids in, text deltas out: incremental detokenization, then stop strings."""

    def __init__(self, tokenizer: Any, stop: Sequence[str]) -> None:
        self.detok = IncrementalDetokenizer(tokenizer)
        self.stops = StopStringFilter(stop)

    def push(self, token_ids: Sequence[int], *, final: bool) -> tuple[str, bool]:
        """Text safe to send after these tokens, and whether a stop string ended it."""
        delta = self.detok.push(token_ids)
        if final:
            delta += self.detok.flush()
        return self.stops.feed(delta, final=final)


# --- metrics ------------------------------------------------------------------------------------------


@dataclass
class ServerMetrics:
    """Request-level counters and gauges the server keeps itself (spec-decode counters come from the engine)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    errors: int = 0
    running: int = 0
    waiting: int = 0
    queue_buckets: list[int] = field(default_factory=lambda: [0] * len(QUEUE_TIME_BUCKETS))
    queue_sum: float = 0.0
    queue_count: int = 0
    # when this server's counters began (a restart changes it): exposed as prometheus_client does, as
    # process_start_time_seconds and the spec-decode counters' _created samples
    created: float = field(default_factory=time.time)

    def observe_queue(self, seconds: float) -> None:
        self.queue_sum += seconds
        self.queue_count += 1
        for i, bound in enumerate(QUEUE_TIME_BUCKETS):
            if seconds <= bound:
                self.queue_buckets[i] += 1


def _prom_labels(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


def render_metrics(
    model_name: str, metrics: ServerMetrics, spec: Any | None, *, engine_index: str = "0"
) -> str:
    """Prometheus text exposition in vLLM's names (counters: ``# TYPE name counter`` + ``name_total``)."""
    base = {"engine": engine_index, "model_name": model_name}
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, dict[str, str], float]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for suffix, labels, value in samples:
            out.append(f"{name}{suffix}{_prom_labels({**base, **labels})} {float(value)!r}")

    out += ["# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
            "# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {metrics.created!r}"]
    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           [("", {}, metrics.running)])
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           [("", {}, metrics.waiting)])
    metric("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.",
           [("_total", {}, metrics.prompt_tokens)])
    metric("vllm:generation_tokens", "counter", "Number of generation tokens processed.",
           [("_total", {}, metrics.generation_tokens)])
    metric("vllm:request_success", "counter", "Count of successfully processed requests.",
           [("_total", {"finished_reason": r}, n) for r, n in metrics.finished.items()])
    metric("dflashbench:request_errors", "counter", "Requests that failed inside the engine (HTTP 500).",
           [("_total", {}, metrics.errors)])
    cumulative = [("_bucket", {"le": repr(float(b))}, n) for b, n in zip(QUEUE_TIME_BUCKETS, metrics.queue_buckets, strict=True)]
    metric("vllm:request_queue_time_seconds", "histogram", "Histogram of time spent in WAITING phase for request.",
           [*cumulative, ("_bucket", {"le": "+Inf"}, metrics.queue_count),
            ("_count", {}, metrics.queue_count), ("_sum", {}, metrics.queue_sum)])
    if spec is not None:
        metric("vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts.",
               [("_total", {}, spec.num_drafts), ("_created", {}, metrics.created)])
        metric("vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.",
               [("_total", {}, spec.num_draft_tokens)])
        metric("vllm:spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.",
               [("_total", {}, spec.num_accepted_tokens)])
        metric("vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
               "Accepted tokens per draft position.",
               [("_total", {"position": str(i)}, n) for i, n in enumerate(spec.accepted_per_pos)])
    return "\n".join(out) + "\n"  # fmt: skip


# --- one generation -----------------------------------------------------------------------------------


@dataclass
class RequestState:
    """The running state of one request's generation, for both endpoints."""

    prompt_tokens: int
    completion_tokens: int = 0
    text: str = ""
    finish_reason: str | None = None
    token_ids: list[int] = field(default_factory=list)  # every committed token
    step_token_ids: list[int] = field(default_factory=list)  # those of the last step
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def record(self, step: Any) -> list[int]:
        """Count one engine step (its committed tokens and, for a speculative step, its acceptance)."""
        tokens = list(step.token_ids)
        self.completion_tokens += len(tokens)
        self.step_token_ids = tokens
        self.token_ids += tokens
        if step.drafted:
            self.num_drafts += 1
            self.num_draft_tokens += step.drafted
            self.num_accepted_tokens += step.accepted
            if len(self.accepted_per_pos) < step.drafted:
                self.accepted_per_pos += [0] * (step.drafted - len(self.accepted_per_pos))
            for i in range(step.accepted):  # acceptance is a prefix of the draft
                self.accepted_per_pos[i] += 1
        return tokens

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    def spec_decode(self) -> dict[str, Any]:
        """This request's speculative-decoding stats (vLLM's counter names; tau = 1 + accepted / drafts)."""
        tau = 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_pos": self.accepted_per_pos,
            "acceptance_length": tau,
        }


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated request, tokenized, with everything decided: what the generation loop consumes."""

    prompt_ids: list[int]
    sampling: Sampling
    max_new_tokens: int
    stop_token_ids: tuple[int, ...]


class ReferenceServer:
    """The aiohttp application's state and handlers."""

    def __init__(
        self,
        engine: Engine,
        *,
        method: str,
        served_model_name: str | None = None,
        model_aliases: Sequence[str] = (),
        max_model_len: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
    ) -> None:
        self.engine = engine
        self.method = method
        self.model_name = served_model_name or engine.model_name
        self.accepted_names = {self.model_name, *model_aliases}
        self.tokenizer = engine.tokenizer
        self.max_model_len = max_model_len
        self.vocab_size = len(self.tokenizer)
        if eos_token_ids is None:
            eos = getattr(self.tokenizer, "eos_token_id", None)
            eos_token_ids = [] if eos is None else [eos]
        self.eos_token_ids = tuple(dict.fromkeys(eos_token_ids))
        self.metrics = ServerMetrics()
        self.created = int(time.time())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)

        async def close_engine(_app: web.Application) -> None:
            await self.engine.close()

        app.on_cleanup.append(close_engine)
        return app

    # --- simple endpoints ---

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(self, request: web.Request) -> web.Response:
        card = {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "dflashbench"}
        if self.max_model_len is not None:
            card["max_model_len"] = self.max_model_len
        return web.json_response({"object": "list", "data": [card]})

    async def prometheus(self, request: web.Request) -> web.Response:
        spec = self.engine.counters() if self.method != "ar" else None  # AR servers expose no spec counters
        text = render_metrics(self.model_name, self.metrics, spec)
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})  # fmt: skip

    # --- generation endpoints ---

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, chat=True)

    async def _handle(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise RequestError("request body is not valid JSON") from None
            parsed = parse_chat(body) if chat else parse_completion(body)
            prepared = self._prepare(parsed)
        except RequestError as exc:
            return web.json_response(exc.body(), status=exc.status)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        if prepared.sampling.stream:
            return await self._stream(request, rid, prepared, chat=chat)
        return await self._respond(rid, prepared, chat=chat)

    def _prepare(self, req: CompletionRequest | ChatRequest) -> Prepared:
        if req.model is not None and req.model not in self.accepted_names:
            raise RequestError(f"The model `{req.model}` does not exist.", "model", status=404)
        if isinstance(req, ChatRequest):
            prompt_ids = self._chat_prompt_ids(req)
        elif isinstance(req.prompt, str):
            prompt_ids = list(self.tokenizer(req.prompt)["input_ids"])
        else:
            prompt_ids = list(req.prompt)
            bad = [t for t in prompt_ids if t >= self.vocab_size]
            if bad:
                raise RequestError(f"token id {bad[0]} is out of vocabulary (size {self.vocab_size})", "prompt")
        sampling = req.sampling
        room = None if self.max_model_len is None else self.max_model_len - len(prompt_ids)
        if room is not None and room < 1:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens; the prompt has "
                f"{len(prompt_ids)}.",
                "messages" if isinstance(req, ChatRequest) else "prompt",
            )
        max_new = sampling.max_tokens if sampling.max_tokens is not None else room
        if max_new is None:
            raise RequestError("'max_tokens' is required: the model's context length is unknown", "max_tokens")
        if room is not None and max_new > room:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{max_new} output tokens and your prompt contains {len(prompt_ids)} input tokens, for a total "
                f"of {max_new + len(prompt_ids)} tokens. Please reduce the length of the input or output.",
                "max_tokens",
            )
        stop_ids = (() if sampling.ignore_eos else self.eos_token_ids) + sampling.stop_token_ids
        return Prepared(prompt_ids, sampling, max_new, tuple(dict.fromkeys(stop_ids)))

    def _chat_prompt_ids(self, req: ChatRequest) -> list[int]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise RequestError(
                f"model {self.model_name} has no chat template; use /v1/completions with a plain prompt", "messages"
            )
        try:
            text = self.tokenizer.apply_chat_template(
                [dict(m) for m in req.messages],
                tokenize=False,
                add_generation_prompt=req.add_generation_prompt,
                **req.chat_template_kwargs,
            )
        except Exception as exc:  # the template itself raised (jinja2 errors, raise_exception(...))
            raise RequestError(f"the chat template could not render these messages: {exc}", "messages") from None
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    async def _steps(self, prepared: Prepared) -> AsyncIterator[tuple[RequestState, str]]:
        """Run the engine; yield (state, text delta) once per verification step, until finished.

        Sets ``state.finish_reason`` on the last yield: "stop" (EOS, a stop token or a stop string) or
        "length". Keeps the server metrics; closes the engine's iterator when it stops early (stop string,
        client gone), which ends that request inside the engine.
        """
        s = prepared.sampling
        state = RequestState(prompt_tokens=len(prepared.prompt_ids))
        text = TextAssembler(self.tokenizer, s.stop)
        stop_ids = set(prepared.stop_token_ids)
        m = self.metrics
        m.waiting += 1
        started = False
        steps = self.engine.generate(
            prepared.prompt_ids,
            max_new_tokens=prepared.max_new_tokens,
            temperature=s.temperature,
            stop_token_ids=list(prepared.stop_token_ids),
            seed=s.seed,
        )
        try:
            async for step in steps:
                if not started:
                    started = True
                    m.waiting, m.running = m.waiting - 1, m.running + 1
                    m.prompt_tokens += state.prompt_tokens
                    if getattr(step, "queue_s", None) is not None:
                        m.observe_queue(step.queue_s)
                tokens = state.record(step)
                m.generation_tokens += len(tokens)
                engine_finish = getattr(step, "finish_reason", None)
                eos_hit = engine_finish == "stop" or any(t in stop_ids for t in tokens)
                length_hit = engine_finish == "length" or state.completion_tokens >= prepared.max_new_tokens
                delta, stop_hit = text.push(tokens, final=eos_hit or length_hit)
                if stop_hit or eos_hit:
                    state.finish_reason = "stop"
                elif length_hit:
                    state.finish_reason = "length"
                state.text += delta
                yield state, delta
                if state.finish_reason:
                    break
            if state.finish_reason is None:  # the engine ended on its own (it knows best why): a stop
                state.finish_reason = "stop"
                state.step_token_ids = []  # no new tokens in this last chunk
                delta, _ = text.push([], final=True)
                state.text += delta
                yield state, delta
        finally:
            aclose = getattr(steps, "aclose", None)
            if aclose is not None:
                await aclose()
            if started:
                m.running -= 1
            else:
                m.waiting -= 1
            m.finished[state.finish_reason or "abort"] += 1

    # --- responses ---

    def _chunk(self, rid: str, chat: bool, text: str, finish: str | None, first: bool = False) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            kind = "text_completion"
        return {"id": rid, "object": kind, "created": int(time.time()), "model": self.model_name, "choices": [choice]}

    async def _stream(self, request: web.Request, rid: str, prepared: Prepared, *, chat: bool) -> web.StreamResponse:
        s = prepared.sampling
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)

        async def send(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
            await resp.write(f"data: {data}\n\n".encode())

        state = RequestState(prompt_tokens=len(prepared.prompt_ids))
        try:
            if chat:  # the role comes first, as OpenAI and vLLM send it
                chunk = self._chunk(rid, chat, "", None, first=True)
                if s.continuous_usage_stats:
                    chunk["usage"] = state.usage()
                await send(chunk)
            async with contextlib.aclosing(self._steps(prepared)) as steps:  # a client gone ends it at once
                async for state, text in steps:
                    chunk = self._chunk(rid, chat, text, state.finish_reason)
                    if s.return_token_ids:
                        chunk["choices"][0]["token_ids"] = state.step_token_ids
                    if s.continuous_usage_stats:
                        chunk["usage"] = state.usage()
                    await send(chunk)
            if s.include_usage:
                await send({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                            "created": int(time.time()), "model": self.model_name, "choices": [],
                            "usage": state.usage(), "spec_decode": state.spec_decode()})  # fmt: skip
        except ConnectionResetError:  # the client went away (a sweep stopped mid-point): closing _steps has
            return resp  # ended the request in the engine; nothing to answer, nothing to log as a server error
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - an engine error: report it in-band, keep serving
            self._engine_failed(exc)
            await send(_engine_error_body(exc))
        await send("[DONE]")
        await resp.write_eof()
        return resp

    async def _respond(self, rid: str, prepared: Prepared, *, chat: bool) -> web.Response:
        state = RequestState(prompt_tokens=len(prepared.prompt_ids))
        try:
            async with contextlib.aclosing(self._steps(prepared)) as steps:
                async for done, _text in steps:
                    state = done
        except Exception as exc:  # noqa: BLE001 - an engine error: 500, keep serving
            self._engine_failed(exc)
            return web.json_response(_engine_error_body(exc), status=500)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": state.text},
                      "logprobs": None, "finish_reason": state.finish_reason}  # fmt: skip
        else:
            choice = {"index": 0, "text": state.text, "logprobs": None, "finish_reason": state.finish_reason}
        if prepared.sampling.return_token_ids:
            choice["token_ids"] = state.token_ids
        return web.json_response({
            "id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": self.model_name, "choices": [choice], "usage": state.usage(),
            "spec_decode": state.spec_decode(),
        })  # fmt: skip

    def _engine_failed(self, exc: BaseException) -> None:
        self.metrics.errors += 1
        print(f"engine error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        traceback.print_exception(exc, file=sys.stderr)


def _engine_error_body(exc: BaseException) -> dict[str, Any]:
    message = f"the reference engine failed on this request: {type(exc).__name__}: {exc}"
    return {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}


# --- the command ----------------------------------------------------------------------------------------


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


def serve(
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
) -> None:
    """Load the engine, then serve until SIGINT / SIGTERM (the listener opens only once it is loaded).

    With ``pin_decode_cpu`` (and CPU decoding on one torch thread, see
    :func:`~dflashbench.reference.engine.pick_decode_cpu`) the decode thread gets a core of its own and this
    thread, the HTTP loop, keeps to the others."""
    import torch

    from dflashbench.reference.engine import ReferenceEngine, pick_decode_cpu

    check_port_free(host, port)  # before the slow load, so a busy port fails at once
    started = time.monotonic()
    print(f"dflashbench serve: loading {model} (method {method}, draft {draft}) on {device}", flush=True)
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    decode_cpu = pick_decode_cpu(device, torch.get_num_threads(), allowed) if pin_decode_cpu else None
    target, drafter = _random_pair(str(model), draft, method, device, dtype)
    engine = ReferenceEngine(
        str(model), str(draft) if draft is not None else None, method,
        device=device, dtype=dtype, max_batch_size=max_batch_size, max_kv_tokens=max_kv_tokens,
        decode_cpu=decode_cpu, target=target, drafter=drafter, fault=fault,
    )  # fmt: skip
    if fault is not None:
        print(f"dflashbench serve: TEST FAULT {fault!r} planted: output is deliberately not lossless", flush=True)
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
    )
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
    drafter = random_pair.random_drafter(str(draft), method, target) if method != "ar" else None
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
