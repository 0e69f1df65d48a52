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
carries ``token_ids``, the ids its step committed (the EOS id included), and a non-streamed choice all of them,
with the prompt's own ids beside them as vLLM places them (``prompt_token_ids``: on the choice of a completion, at the
top of a chat completion; vllm-project/vllm@v0.32.0: vllm/entrypoints/openai/completion/protocol.py#L669,
chat_completion/protocol.py#L146), so a client learns exactly the ids the server's chat template gave.
With ``logprobs: k`` (non-streamed ``/v1/completions``) each choice carries OpenAI's completion ``logprobs`` object as
vLLM builds it (``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``;
vllm/entrypoints/openai/completion/serving.py#L654-L729): at every output token the log-probability of the token
generated and the top ``k`` (the generated token too where it is not among them), tokens named ``token_id:N`` with
``return_tokens_as_token_ids`` (vllm/entrypoints/generate/base/serving.py#L326). They come from one teacher-forced
pass of the target over the prompt and the output (:meth:`ReferenceEngine.top_logprobs`), in float32.
With ``ignore_eos`` (vLLM's and SGLang's request field: decode on past the end-of-sequence token, to the
``max_tokens`` a trace asks for) ``spec_decode`` also says where the output would have ended: ``eos`` holds the
0-based index of the first end-of-sequence token among the completion tokens (``token_index``, null when none
came) and the speculative counts up to and including the step that committed it (all of them when none came), so
a client can tell the acceptance of the real answer from that of the text generated past its end.

The engine is anything with the :class:`Engine` shape (the reference decoder's
:class:`~dflashbench.reference.serving.engine.ReferenceEngine`); the server only does HTTP, validation
(:mod:`.openai_schema`), tokenization, detokenization and stop strings (:mod:`.text`) and metrics
(:mod:`.metrics`). Starting it from the command line is :mod:`.launch`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import sys
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from dflashbench.reference.serving.metrics import ServerMetrics, render_metrics
from dflashbench.reference.serving.openai_schema import (
    ChatRequest,
    CompletionRequest,
    RequestError,
    Sampling,
    parse_chat,
    parse_completion,
)
from dflashbench.reference.serving.text import TextAssembler


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

    # optional: ``async top_logprobs(token_ids, first, k)`` -> per position .token_id, .logprob, .top ((id, lp), ...)

    async def close(self) -> None: ...


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
    eos_index: int | None = None  # ignore_eos: where the first end-of-sequence token came among the completion tokens
    eos_counts: tuple[int, int] | None = None  # (drafts, accepted) through the step that committed it

    def note_eos(self, tokens: list[int], eos_ids: Sequence[int]) -> None:
        """Where the first end-of-sequence token of ``tokens`` (the step just recorded) falls, once."""
        if self.eos_index is not None:
            return
        for j, token in enumerate(tokens):
            if token in eos_ids:
                self.eos_index = self.completion_tokens - len(tokens) + j
                self.eos_counts = (self.num_drafts, self.num_accepted_tokens)
                return

    def record(self, step: Any, eos_ids: Sequence[int] = ()) -> list[int]:
        """Count one engine step (its committed tokens and, for a speculative step, its acceptance); ``eos_ids``
        (an ``ignore_eos`` request's): note where the first of them came."""
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
        if eos_ids:
            self.note_eos(tokens, eos_ids)
        return tokens

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    def spec_decode(self, ignore_eos: bool = False) -> dict[str, Any]:
        """This request's speculative-decoding stats (vLLM's counter names; tau = 1 + accepted / drafts); with
        ``ignore_eos``, where the output would have ended (see the module docstring)."""
        tau = 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None
        out = {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_pos": self.accepted_per_pos,
            "acceptance_length": tau,
        }
        if ignore_eos:
            drafts, accepted = self.eos_counts or (self.num_drafts, self.num_accepted_tokens)
            out["eos"] = {"token_index": self.eos_index, "num_drafts": drafts, "num_accepted_tokens": accepted}
        return out


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
        api_key: str | None = None,
    ) -> None:
        self.engine = engine
        self._api_key = api_key
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
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._authorize] if self._api_key else [])
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)

        async def close_engine(_app: web.Application) -> None:
            await self.engine.close()

        app.on_cleanup.append(close_engine)
        return app

    @web.middleware
    async def _authorize(self, request: web.Request, handler):
        """With an API key, a request to ``/v1/...`` must carry ``Authorization: Bearer <key>`` (401 otherwise), as
        vLLM's server checks it; ``/health`` and ``/metrics`` stay open. The key is never echoed."""
        if request.path.startswith("/v1") and not hmac.compare_digest(
                request.headers.get("Authorization", "").encode(), f"Bearer {self._api_key}".encode()):  # fmt: skip
            return web.json_response({"error": {"message": "missing or wrong API key", "type": "invalid_request_error",
                                                "code": "invalid_api_key"}}, status=401)  # fmt: skip
        return await handler(request)

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
        if req.sampling.logprobs is not None and not hasattr(self.engine, "top_logprobs"):
            raise RequestError("this server's engine computes no log-probabilities", "logprobs")
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
        arrived, timing = time.monotonic(), []  # (when, tokens) of each step, for the latency histograms
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
                tokens = state.record(step, self.eos_token_ids if s.ignore_eos else ())
                timing.append((time.monotonic(), len(tokens)))
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
            if state.finish_reason:
                m.observe_request(arrived, timing)

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
                            "usage": state.usage(), "spec_decode": state.spec_decode(s.ignore_eos)})  # fmt: skip
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
        if prepared.sampling.logprobs is not None and state.token_ids:
            try:
                choice["logprobs"] = await self._logprobs(prepared, state.token_ids)
            except Exception as exc:  # noqa: BLE001 - an engine error: 500, keep serving
                self._engine_failed(exc)
                return web.json_response(_engine_error_body(exc), status=500)
        body = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                "model": self.model_name, "choices": [choice], "usage": state.usage(),
                "spec_decode": state.spec_decode(prepared.sampling.ignore_eos)}  # fmt: skip
        if prepared.sampling.return_token_ids:
            choice["token_ids"] = state.token_ids
            (body if chat else choice)["prompt_token_ids"] = list(prepared.prompt_ids)  # where vLLM puts them
        return web.json_response(body)

    async def _logprobs(self, prepared: Prepared, output_ids: list[int]) -> dict[str, Any]:
        """OpenAI's completion ``logprobs`` object for ``output_ids``, as vLLM builds it (module docstring)."""
        k = prepared.sampling.logprobs or 0
        scored = await self.engine.top_logprobs([*prepared.prompt_ids, *output_ids], len(prepared.prompt_ids), k)
        as_ids = prepared.sampling.return_tokens_as_token_ids

        def name(token: int) -> str:
            return f"token_id:{token}" if as_ids else self.tokenizer.decode([token])

        out: dict[str, list] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        offset = 0
        for at in scored:
            token = name(at.token_id)
            out["text_offset"].append(offset)
            offset += len(self.tokenizer.decode([at.token_id]))
            out["tokens"].append(token)
            out["token_logprobs"].append(max(at.logprob, -9999.0))  # -inf as vLLM writes it in JSON
            top = {token: max(at.logprob, -9999.0)}
            top.update({name(t): max(lp, -9999.0) for t, lp in at.top})
            out["top_logprobs"].append(top)
        return out

    def _engine_failed(self, exc: BaseException) -> None:
        self.metrics.errors += 1
        print(f"engine error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        traceback.print_exception(exc, file=sys.stderr)


def _engine_error_body(exc: BaseException) -> dict[str, Any]:
    message = f"the reference engine failed on this request: {type(exc).__name__}: {exc}"
    return {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}
