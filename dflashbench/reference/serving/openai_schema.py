"""OpenAI request bodies for the reference server: validated by pydantic models, handed on as plain dataclasses.

The wire schema (:class:`CompletionBody`, :class:`ChatBody`) mirrors OpenAI's JSON, strictly typed (``"10"`` is
not an integer, ``true`` not a number); unknown keys are ignored, as OpenAI-compatible servers do. Every problem a
client can fix becomes a :class:`RequestError` naming the parameter, which the server turns into an OpenAI-shaped
error body (``{"error": {"message", "type", "param", "code"}}``) with status 400 (404 for an unknown model, as
OpenAI and vLLM answer). Sampling options the reference decoder does not implement (``top_p``, penalties,
``n > 1``, ...) are refused when set to anything but their neutral value rather than silently ignored.

``logprobs`` (an integer k, as OpenAI's completions API and vLLM take it) is served on non-streamed
``/v1/completions`` only, with ``return_tokens_as_token_ids`` (vLLM's: each token named ``token_id:N``, so a token
that is not valid text cannot be ambiguous); the chat endpoint refuses it, and says where it is served.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

MAX_STOP_SEQUENCES = 4
# vLLM's default --max-logprobs (vllm-project/vllm@v0.32.0: vllm/config/model.py#L282, max_logprobs = 20)
MAX_LOGPROBS = 20
ROLES = ("system", "developer", "user", "assistant")


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
    logprobs: int | None = None  # completions: the top-k log-probabilities at every output token
    return_tokens_as_token_ids: bool = False  # vLLM's: logprobs name tokens as "token_id:N"


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


# --- the wire schema -----------------------------------------------------------------------------------------

TokenId = Annotated[int, Field(ge=0)]
PositiveInt = Annotated[int, Field(gt=0)]


def _refuse(message: str) -> PydanticCustomError:
    """A rule of ours, worded in full (``{param}`` is filled in with the field's path)."""
    return PydanticCustomError("request", message)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class _Body(_Strict):
    model: str | None = None
    temperature: Annotated[float, Field(ge=0)] | None = None
    seed: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    return_token_ids: bool | None = None
    max_tokens: PositiveInt | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("stop")
    @classmethod
    def _stop_rules(cls, stop: list[str] | None) -> list[str] | None:
        if stop is not None and len(stop) > MAX_STOP_SEQUENCES:
            raise _refuse(f"'{{param}}' takes at most {MAX_STOP_SEQUENCES} sequences, got {len(stop)}")
        if stop is not None and "" in stop:
            raise _refuse("'{param}' sequences must not be empty")
        return stop

    def sampling(self, max_tokens: int | None, logprobs: int | None = None,
                 as_token_ids: bool = False) -> Sampling:  # fmt: skip
        options = self.stream_options or StreamOptions()
        return Sampling(
            max_tokens=max_tokens,
            temperature=1.0 if self.temperature is None else float(self.temperature),  # the OpenAI default
            seed=self.seed,
            stop=tuple(self.stop or ()),
            stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=bool(self.ignore_eos),
            stream=bool(self.stream),
            include_usage=options.include_usage,
            continuous_usage_stats=options.continuous_usage_stats,
            return_token_ids=bool(self.return_token_ids),
            logprobs=logprobs,
            return_tokens_as_token_ids=as_token_ids,
        )


class CompletionBody(_Body):
    """``POST /v1/completions``: one prompt, text or token ids (a batch of one is unwrapped)."""

    prompt: str | tuple[TokenId, ...]
    logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    return_tokens_as_token_ids: bool | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, prompt: Any) -> Any:
        if prompt is None:
            raise _refuse("'{param}' is required")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if prompt == "":
            raise _refuse("'{param}' must not be empty")
        if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str | list) for p in prompt):
            raise _refuse("the reference server takes one prompt per request, got a batch")
        if isinstance(prompt, list) and prompt and all(type(t) is int and t >= 0 for t in prompt):
            return tuple(prompt)
        if not isinstance(prompt, str):
            raise _refuse("'{param}' must be a string or a non-empty array of token ids")
        return prompt


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | None = Field(default=None, validate_default=True)

    @field_validator("content", mode="before")
    @classmethod
    def _text(cls, content: Any, info: ValidationInfo) -> Any:
        if isinstance(content, list):  # content parts: only text is understood
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise _refuse("'{param}' parts must be {'type': 'text', 'text': ...}; the reference server is "
                              "text-only")
            return "".join(p["text"] for p in content)
        if content is None:
            if info.data.get("role") == "assistant":
                return ""  # an assistant turn may carry only tool calls; the template wants a string
            raise _refuse("'{param}' must be a string, got null")
        return content


class ChatBody(_Body):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: PositiveInt | None = None  # the newer name; wins over max_tokens
    chat_template_kwargs: dict[str, Any] | None = None
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

# What a field must be, where pydantic's own words would be vaguer (keyed by the field's name).
_MUST = {
    "logprobs": f"an integer from 0 to {MAX_LOGPROBS} (the top-k log-probabilities at each output token)",
    "max_tokens": "a positive integer",
    "max_completion_tokens": "a positive integer",
    "stop": "a string or an array of strings",
    "stop_token_ids": "an array of token ids (non-negative integers)",
    "messages": "a non-empty array of {role, content} objects",
    "chat_template_kwargs": "an object",
    "stream_options": "an object",
}
_KIND = {"bool_type": "a boolean", "int_type": "an integer", "float_type": "a number", "string_type": "a string",
         "dict_type": "an object", "model_type": "an object", "list_type": "an array", "tuple_type": "an array"}


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


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _param(loc: tuple[int | str, ...]) -> str:
    """``("messages", 0, "content")`` -> ``messages[0].content``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _request_error(exc: ValidationError) -> RequestError:
    """The first problem pydantic found, as one sentence naming the parameter."""
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    param = _param(loc)
    field_name = next((p for p in reversed(loc) if isinstance(p, str)), param)
    kind, got = err["type"], err.get("input")
    if kind == "request":
        message = err["msg"].replace("{param}", param)
    elif kind == "missing":
        message = f"'{param}' is required"
    elif kind == "literal_error" and field_name == "role":
        message = f"'{param}' must be one of {', '.join(ROLES)}; got {got!r}"
    elif kind == "model_type" and field_name == "messages":
        message = f"'{param}' must be an object with 'role' and 'content'"
    elif field_name in _MUST:  # the whole field is named, as a client reads its schema
        param = _param(loc[: loc.index(field_name) + 1])
        message = f"'{param}' must be {_MUST[field_name]}, got {got!r}"
    elif kind in ("greater_than_equal", "greater_than"):
        bound = err.get("ctx", {})
        limit = f">= {bound['ge']:g}" if "ge" in bound else f"> {bound['gt']:g}"
        message = f"'{param}' must be {limit}, got {got}"
    else:
        message = f"'{param}' must be {_KIND.get(kind, 'valid')}, got {_type_name(got)}"
    return RequestError(message, param or None)


def _validate(schema: type[_Body], body: Any, served: frozenset[str] = frozenset()) -> Any:
    """``body`` as ``schema``; ``served``: options of :data:`_NEUTRAL` this endpoint does implement."""
    if not isinstance(body, dict):
        raise RequestError(f"request body must be a JSON object, got {_type_name(body)}")
    if schema is ChatBody and not _is_neutral(body.get("logprobs"), _NEUTRAL["logprobs"]):
        raise RequestError("'logprobs' is served on /v1/completions only (non-streamed, the prompt as token ids or "
                           "text, logprobs: k), not on /v1/chat/completions", "logprobs")  # fmt: skip
    for key, neutral in _NEUTRAL.items():
        if key not in served and not _is_neutral(body.get(key), neutral):
            raise RequestError(
                f"'{key}' = {body[key]!r} is not supported by the reference server (only {neutral[0]!r}); "
                "it decodes greedily, or samples from the full distribution at 'temperature'",
                key,
            )
    try:
        parsed = schema.model_validate({k: v for k, v in body.items() if (v is not None or k in ("prompt",))
                                        and not (k in served and v is False)})  # false: not asked, as OpenAI reads it
    except ValidationError as exc:
        raise _request_error(exc) from None
    if parsed.stream_options is not None and not parsed.stream:
        raise RequestError("'stream_options' is only allowed when 'stream' is true", "stream_options")
    return parsed


def parse_completion(body: Any) -> CompletionRequest:
    """Validate a ``POST /v1/completions`` body."""
    parsed: CompletionBody = _validate(CompletionBody, body, served=frozenset({"logprobs"}))
    max_tokens = parsed.max_tokens if parsed.max_tokens is not None else 16  # the OpenAI default
    if parsed.logprobs is not None and parsed.stream:
        raise RequestError("'logprobs' is served on non-streamed requests only: set 'stream' to false", "logprobs")
    return CompletionRequest(model=parsed.model, prompt=parsed.prompt,
                             sampling=parsed.sampling(max_tokens, parsed.logprobs,
                                                      bool(parsed.return_tokens_as_token_ids)))  # fmt: skip


def parse_chat(body: Any) -> ChatRequest:
    """Validate a ``POST /v1/chat/completions`` body."""
    parsed: ChatBody = _validate(ChatBody, body)
    max_tokens = parsed.max_completion_tokens if parsed.max_completion_tokens is not None else parsed.max_tokens
    return ChatRequest(
        model=parsed.model,
        messages=tuple({"role": m.role, "content": m.content or ""} for m in parsed.messages),
        sampling=parsed.sampling(max_tokens),
        chat_template_kwargs=dict(parsed.chat_template_kwargs or {}),
        add_generation_prompt=parsed.add_generation_prompt,
    )
