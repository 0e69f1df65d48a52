"""OpenAI request bodies for the reference server: parsed and validated into plain dataclasses.

Every problem a client can fix becomes a :class:`RequestError` naming the parameter, which the server turns
into an OpenAI-shaped error body (``{"error": {"message", "type", "param", "code"}}``) with status 400 (404
for an unknown model, as OpenAI and vLLM answer). Sampling options the reference decoder does not implement
(``top_p``, penalties, ``n > 1``, logprobs, ...) are refused when set to anything but their neutral value
rather than silently ignored; unknown keys are ignored, as OpenAI-compatible servers do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_STOP_SEQUENCES = 4


class RequestError(ValueError):
    """A bad request body: ``message`` says what is wrong, ``param`` which field."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status

    def body(self) -> dict[str, Any]:
        kind = "NotFoundError" if self.status == 404 else "BadRequestError"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True, slots=True)
class Sampling:
    """What both endpoints share: how many tokens, how to sample, when to stop, how to stream."""

    max_tokens: int | None  # None = up to the model's context length
    temperature: float
    seed: int | None
    stop: tuple[str, ...]
    stop_token_ids: tuple[int, ...]
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage_stats: bool
    return_token_ids: bool = False  # vLLM's: every streamed choice carries the token ids it adds


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str | None
    prompt: str | tuple[int, ...]  # text, or token ids
    sampling: Sampling


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str | None
    messages: tuple[dict[str, str], ...]
    sampling: Sampling
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    add_generation_prompt: bool = True


# Options the reference decoder does not implement: accepted only absent, null or at a neutral value.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "best_of": (1,),
    "echo": (False,),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "top_p": (1,),
    "top_k": (-1, 0),
    "min_p": (0,),
    "presence_penalty": (0,),
    "frequency_penalty": (0,),
    "repetition_penalty": (1,),
    "logit_bias": ({},),
    "tools": ([],),
    "suffix": ("",),
}


def _is_neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    if value is None:
        return True
    for ok in neutral:
        if isinstance(ok, bool) or isinstance(value, bool):
            if value is ok:
                return True
        elif type(value) in (int, float) and type(ok) in (int, float) or type(value) is type(ok):
            if value == ok:
                return True
    return False


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError(f"request body must be a JSON object, got {_type_name(body)}")
    return body


def _model(body: dict[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(f"'model' must be a string, got {_type_name(model)}", "model")
    return model


def _sampling(body: dict[str, Any], *, default_max_tokens: int | None, max_tokens_keys: tuple[str, ...]) -> Sampling:
    for key, neutral in _NEUTRAL.items():
        if not _is_neutral(body.get(key), neutral):
            raise RequestError(
                f"'{key}' = {body[key]!r} is not supported by the reference server (only {neutral[0]!r}); "
                "it decodes greedily, or samples from the full distribution at 'temperature'",
                key,
            )
    stream = _bool(body, "stream")
    include_usage, continuous_usage_stats = _stream_options(body, stream)
    return Sampling(
        max_tokens=_max_tokens(body, default_max_tokens, max_tokens_keys),
        temperature=_temperature(body),
        seed=_optional_int(body, "seed"),
        stop=_stop(body),
        stop_token_ids=_token_ids(body, "stop_token_ids"),
        ignore_eos=_bool(body, "ignore_eos"),
        stream=stream,
        include_usage=include_usage,
        continuous_usage_stats=continuous_usage_stats,
        return_token_ids=_bool(body, "return_token_ids"),
    )


def _bool(body: dict[str, Any], key: str, default: bool = False) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"'{key}' must be a boolean, got {_type_name(value)}", key)
    return value


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is not None and not _is_int(value):
        raise RequestError(f"'{key}' must be an integer, got {value!r}", key)
    return value


def _max_tokens(body: dict[str, Any], default: int | None, keys: tuple[str, ...]) -> int | None:
    for key in keys:  # the first one present wins (chat: max_completion_tokens, then the older max_tokens)
        value = body.get(key)
        if value is None:
            continue
        if not _is_int(value) or value < 1:
            raise RequestError(f"'{key}' must be a positive integer, got {value!r}", key)
        return value
    return default


def _temperature(body: dict[str, Any]) -> float:
    value = body.get("temperature")
    if value is None:
        return 1.0  # the OpenAI default
    if not _is_number(value):
        raise RequestError(f"'temperature' must be a number, got {_type_name(value)}", "temperature")
    if value < 0:
        raise RequestError(f"'temperature' must be >= 0, got {value}", "temperature")
    return float(value)


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise RequestError("'stop' must be a string or an array of strings", "stop")
    if len(stop) > MAX_STOP_SEQUENCES:
        raise RequestError(f"'stop' takes at most {MAX_STOP_SEQUENCES} sequences, got {len(stop)}", "stop")
    if "" in stop:
        raise RequestError("'stop' sequences must not be empty", "stop")
    return tuple(stop)


def _token_ids(body: dict[str, Any], key: str) -> tuple[int, ...]:
    ids = body.get(key)
    if ids is None:
        return ()
    if not isinstance(ids, list) or not all(_is_int(t) and t >= 0 for t in ids):
        raise RequestError(f"'{key}' must be an array of token ids (non-negative integers)", key)
    return tuple(ids)


def _stream_options(body: dict[str, Any], stream: bool) -> tuple[bool, bool]:
    options = body.get("stream_options")
    if options is None:
        return False, False
    if not isinstance(options, dict):
        raise RequestError(f"'stream_options' must be an object, got {_type_name(options)}", "stream_options")
    if not stream:
        raise RequestError("'stream_options' is only allowed when 'stream' is true", "stream_options")
    flags = []
    for key in ("include_usage", "continuous_usage_stats"):
        value = options.get(key, False)
        if not isinstance(value, bool):
            raise RequestError(f"'stream_options.{key}' must be a boolean", f"stream_options.{key}")
        flags.append(value)
    return flags[0], flags[1]


def parse_completion(body: Any) -> CompletionRequest:
    """Validate a ``POST /v1/completions`` body."""
    body = _require_object(body)
    if "prompt" not in body or body["prompt"] is None:
        raise RequestError("'prompt' is required", "prompt")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        parsed: str | tuple[int, ...] = prompt
    elif isinstance(prompt, list) and prompt and all(_is_int(t) and t >= 0 for t in prompt):
        parsed = tuple(prompt)
    elif isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str | list) for p in prompt):
        raise RequestError("the reference server takes one prompt per request, got a batch", "prompt")
    else:
        raise RequestError("'prompt' must be a string or a non-empty array of token ids", "prompt")
    if parsed == "":
        raise RequestError("'prompt' must not be empty", "prompt")
    sampling = _sampling(body, default_max_tokens=16, max_tokens_keys=("max_tokens",))
    return CompletionRequest(model=_model(body), prompt=parsed, sampling=sampling)


def _message(i: int, message: Any) -> dict[str, str]:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise RequestError(f"'{where}' must be an object with 'role' and 'content'", where)
    role = message.get("role")
    if not isinstance(role, str) or role not in ("system", "developer", "user", "assistant"):
        raise RequestError(
            f"'{where}.role' must be one of system, developer, user, assistant; got {role!r}", f"{where}.role"
        )
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text is understood
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(
                    f"'{where}.content' parts must be {{'type': 'text', 'text': ...}}; the reference server "
                    "is text-only",
                    f"{where}.content",
                )
            texts.append(part["text"])
        content = "".join(texts)
    if content is None and role == "assistant":
        content = ""
    if not isinstance(content, str):
        raise RequestError(f"'{where}.content' must be a string, got {_type_name(content)}", f"{where}.content")
    return {"role": role, "content": content}


def parse_chat(body: Any) -> ChatRequest:
    """Validate a ``POST /v1/chat/completions`` body."""
    body = _require_object(body)
    messages = body.get("messages")
    if messages is None:
        raise RequestError("'messages' is required", "messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array of {role, content} objects", "messages")
    parsed = tuple(_message(i, m) for i, m in enumerate(messages))
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise RequestError("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    add_generation_prompt = _bool(body, "add_generation_prompt", default=True)
    sampling = _sampling(body, default_max_tokens=None, max_tokens_keys=("max_completion_tokens", "max_tokens"))
    return ChatRequest(
        model=_model(body),
        messages=parsed,
        sampling=sampling,
        chat_template_kwargs=dict(kwargs),
        add_generation_prompt=add_generation_prompt,
    )
