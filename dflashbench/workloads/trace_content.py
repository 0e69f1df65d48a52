"""Real prompts for a trace's requests: content chosen so that speculative acceptance stays real.

A public trace says when each request arrived and how many tokens it read and wrote, never what it said
(:mod:`dflashbench.workloads.traces`). Peer tools send random tokens of those lengths; a drafter accepts almost
nothing of a random prompt's answer, so that measures a DFlash that does not exist. Here every trace request gets
a real prompt from the suite's workloads (the *pool*: e.g. HumanEval and SPEED-Bench coding for code traffic):

- **lengths**: the trace's input length times ``input_scale`` (small models have small contexts: the embedded
  target holds 2,048 tokens, Azure's code contexts run to 7,437) is the *target*; the pool prompt whose own length
  (counted with the target's tokenizer and chat template) is nearest is chosen, at random among the
  :data:`NEAREST` nearest (seeded per trace row, so a row gets the same prompt whatever the window). Its
  ``max_tokens`` is the trace's output length times ``output_scale``, sent with ``ignore_eos`` where the engine
  takes it (:mod:`dflashbench.run.trace_point`), so the output is as long as the trace says.
- **fill** ``"context"``: a prompt shorter than its target gets real text in front of it (a system message made of
  blocks cut from the pool's own prompts) up to the target length. Blocks are keyed like Mooncake's ``hash_ids``:
  the same id gives the same block, so requests that shared a prefix in the trace share it here too (its prefix
  cache behaviour is kept, up to the block boundary). ``"none"``: the prompt alone (the length match is reported).
- **context**: a request whose input and output do not fit the model's context (``context_tokens``) is clipped
  (``"clip"``: the input target first, then the output) or left out (``"skip"``); both are counted.
- **random** content: the same requests with every text replaced by random tokens of the same token count, as
  the peer tools send; beside the real content it shows what content does to acceptance.

Pure functions over requests and a tokenizer; the sweep plans this once (:mod:`dflashbench.plan.trace_plan`).
"""

from __future__ import annotations

import bisect
import dataclasses
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dflashbench.errors import UserError
from dflashbench.types import Request
from dflashbench.workloads.traces import Trace, TraceRow

CONTENTS = ("workloads", "random")
FILLS = ("none", "context")
OVER_CONTEXT = ("clip", "skip")
NEAREST = 4  # a row's prompt is drawn among this many pool prompts nearest its target length
CHARS_PER_TOKEN = 4  # the estimate where no tokenizer can be read (said so in the plan)
DEFAULT_BLOCK_TOKENS = 512  # fill blocks of a trace without its own (Azure): Mooncake's size


@dataclass(frozen=True)
class ContentSettings:
    """How a trace's requests get their content (suite keys ``trace_*``)."""

    content: str = "workloads"
    input_scale: float = 1.0
    output_scale: float = 1.0
    context_tokens: int | None = None  # the model's context length; None: unknown, nothing clipped
    over_context: str = "clip"
    fill: str = "none"
    seed: int = 0


class Tokens(Protocol):
    """What content planning needs of a tokenizer."""

    exact: bool  # False: counts are estimated from characters

    def count(self, messages: Sequence[dict], chat_template_kwargs: dict | None = None) -> int: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def random_ids(self, n: int, rng: random.Random) -> list[int]: ...


class HfTokens:
    """A Hugging Face tokenizer: its chat template counts the prompt as the server will (generation prompt
    included); a tokenizer without one counts the text of the messages."""

    exact = True

    def __init__(self, tokenizer: Any, name: str = "") -> None:
        self.tok = tokenizer
        self.name = name
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self._ordinary = [i for i in range(len(tokenizer)) if i not in special]

    def count(self, messages: Sequence[dict], chat_template_kwargs: dict | None = None) -> int:
        if getattr(self.tok, "chat_template", None):
            ids = self.tok.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True,
                                               **(chat_template_kwargs or {}))  # fmt: skip
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids
            return len(ids)
        return sum(len(self.encode(m.get("content") or "")) for m in messages)

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def random_ids(self, n: int, rng: random.Random) -> list[int]:
        return [rng.choice(self._ordinary) for _ in range(n)]


class EstimatedTokens:
    """No tokenizer at hand (a dry run of a model not downloaded): lengths estimated at
    :data:`CHARS_PER_TOKEN` characters a token, and said to be estimates."""

    exact = False

    def count(self, messages: Sequence[dict], chat_template_kwargs: dict | None = None) -> int:
        return sum(max(1, round(len(m.get("content") or "") / CHARS_PER_TOKEN)) for m in messages)

    def encode(self, text: str) -> list[int]:  # "tokens" are character chunks, as ids into the text itself
        return list(range(0, len(text), CHARS_PER_TOKEN))

    def decode(self, ids: Sequence[int]) -> str:
        raise UserError("filling trace prompts to length needs the target's tokenizer; none could be read")

    def random_ids(self, n: int, rng: random.Random) -> list[int]:
        raise UserError("random-token content needs the target's tokenizer; none could be read")


@dataclass
class TracePlan:
    """A trace window's requests with their content, and how well they match the trace."""

    trace: Trace
    settings: ContentSettings
    requests: list[Request]
    skipped: int = 0  # rows left out: over the model's context (over_context = "skip")
    clipped_input: int = 0  # rows whose input target was cut to fit the context
    clipped_output: int = 0  # rows whose output was cut to fit the context
    pool: dict[str, int] = field(default_factory=dict)  # pool prompts by workload label
    categories: dict[str, int] = field(default_factory=dict)  # chosen prompts by category
    counted: str = ""  # how lengths were counted (the tokenizer, or an estimate)
    shared_blocks: int = 0  # fill blocks reused from an earlier request (the trace's prefix sharing)
    blocks: int = 0  # fill blocks sent

    def facts(self) -> dict[str, Any]:
        """What the run records about this content plan (the manifest's ``trace``; the report states it)."""
        s = self.settings
        return {"trace": self.trace.name, "source": self.trace.source, "format": self.trace.format,
                "kind": self.trace.kind, "window_s": self.trace.window_s, "rows": len(self.trace.rows),
                "sent": len(self.requests), "skipped": self.skipped, "clipped_input": self.clipped_input,
                "clipped_output": self.clipped_output, "content": s.content, "input_scale": s.input_scale,
                "output_scale": s.output_scale, "context_tokens": s.context_tokens, "over_context": s.over_context,
                "fill": s.fill, "seed": s.seed, "pool": dict(self.pool), "categories": dict(self.categories),
                "counted": self.counted, "reordered": self.trace.reordered,
                "prefix_blocks": {"sent": self.blocks, "shared": self.shared_blocks,
                                  "block_tokens": block_tokens(self.trace, s)} if s.fill == "context" else None}  # fmt: skip


def block_tokens(trace: Trace, settings: ContentSettings) -> int:
    """Tokens of one fill block: the trace's block (Mooncake's 512) at the input scale, at least 1."""
    return max(1, round((trace.block_tokens or DEFAULT_BLOCK_TOKENS) * settings.input_scale))


def scaled(n: int, scale: float) -> int:
    """A trace length at a scale: at least 1 token where the trace had any."""
    return max(1, round(n * scale)) if n > 0 else 0


@dataclass(frozen=True)
class _Candidate:
    length: int
    request: Request


def plan_content(trace: Trace, pool: Sequence[Request], tokens: Tokens, settings: ContentSettings,
                 labels: dict[str, int] | None = None) -> TracePlan:  # fmt: skip
    """Every row of ``trace`` (a window already taken) as a request with content from ``pool``: see the module
    docstring. ``labels``: the pool's prompts by workload label, for the report."""
    _check(settings)
    if not pool:
        raise UserError("the trace's content pool is empty: the suite's workloads yield no prompts")
    candidates = sorted((_Candidate(tokens.count(r.messages, _kwargs(r)), r) for r in pool),
                        key=lambda c: (c.length, c.request.id))  # fmt: skip
    lengths = [c.length for c in candidates]
    plan = TracePlan(trace, settings, [], pool=dict(labels or {}), counted=_counted(tokens))
    filler = _Filler(pool, tokens, trace, settings) if settings.fill == "context" else None
    for row in trace.rows:
        target_in, out = scaled(row.input_tokens, settings.input_scale), scaled(row.output_tokens, settings.output_scale)
        out = max(out, 1)  # a request asks for at least one token
        ctx = settings.context_tokens
        if ctx is not None and target_in + out > ctx:
            target_in = max(ctx - out, lengths[0])  # the input target gives way first: keep the trace's output
        rng = random.Random(f"dflashbench/trace/{settings.seed}/{trace.name}/{row.index}")
        chosen = _nearest(candidates, lengths, target_in, rng)
        messages, planned = list(chosen.request.messages), chosen.length
        if filler is not None and planned < target_in:
            messages, planned = filler.fill(row, messages, target_in, _kwargs(chosen.request))
        if ctx is not None and planned + out > ctx:
            if settings.over_context == "skip" or planned >= ctx:
                plan.skipped += 1
                continue
            plan.clipped_output += 1
            out = ctx - planned
        if target_in < scaled(row.input_tokens, settings.input_scale):
            plan.clipped_input += 1
        plan.requests.append(_request(trace, row, chosen.request, messages, out, target_in, planned))
    if settings.content == "random":
        plan.requests = [randomized(r, tokens, settings.seed) for r in plan.requests]
    plan.categories = dict(Counter(r.category for r in plan.requests))
    if filler is not None:
        plan.blocks, plan.shared_blocks = filler.sent, filler.shared
    return plan


def _check(s: ContentSettings) -> None:
    for value, allowed, key in ((s.content, CONTENTS, "trace_content"), (s.fill, FILLS, "trace_fill"),
                                (s.over_context, OVER_CONTEXT, "trace_over_context")):  # fmt: skip
        if value not in allowed:
            raise UserError(f"{key} {value!r}: choose one of {', '.join(allowed)}")
    if not (s.input_scale > 0 and s.output_scale > 0):
        raise UserError("trace length scales must be above 0")


def _counted(tokens: Tokens) -> str:
    if tokens.exact:
        return f"with the target's tokenizer and chat template{f' ({tokens.name})' if getattr(tokens, 'name', '') else ''}"
    return f"estimated at {CHARS_PER_TOKEN} characters a token (no tokenizer for the target could be read)"


def _kwargs(r: Request) -> dict | None:
    return r.metadata.get("chat_template_kwargs")


def _nearest(candidates: list[_Candidate], lengths: list[int], target: int, rng: random.Random) -> _Candidate:
    """One of the :data:`NEAREST` candidates nearest ``target`` in length, drawn with ``rng``."""
    i = bisect.bisect_left(lengths, target)
    lo, hi = i, i  # widen [lo, hi) towards whichever side is nearer, NEAREST times
    while hi - lo < min(NEAREST, len(candidates)):
        if lo > 0 and (hi >= len(candidates) or target - lengths[lo - 1] <= lengths[hi] - target):
            lo -= 1
        else:
            hi += 1
    return candidates[rng.randrange(lo, hi)]


def _request(trace: Trace, row: TraceRow, source: Request, messages: list[dict], out: int, target_in: int,
             planned: int) -> Request:  # fmt: skip
    meta = {k: v for k, v in source.metadata.items() if k in ("chat_template_kwargs", "answer", "grader")}
    meta["trace"] = {"trace": trace.name, "index": row.index, "arrival_s": row.arrival_s,
                     "input_tokens": row.input_tokens, "output_tokens": row.output_tokens,
                     "target_input_tokens": target_in, "planned_input_tokens": planned, "source": source.id,
                     "source_workload": source.workload}  # fmt: skip
    return Request(id=f"{trace.name}#{row.index}", workload=source.workload, category=source.category,
                   messages=tuple(messages), max_tokens=out, metadata=meta)  # fmt: skip


class _Filler:
    """Context blocks cut from the pool's own text, one per prefix-block id (the same id, the same text)."""

    def __init__(self, pool: Sequence[Request], tokens: Tokens, trace: Trace, settings: ContentSettings) -> None:
        texts = [m.get("content") or "" for r in sorted(pool, key=lambda r: r.id) for m in r.messages]
        self.stream = tokens.encode("\n\n".join(t for t in texts if t))
        if not self.stream:
            raise UserError("trace_fill = \"context\" needs text in the pool's prompts; they are empty")
        self.tokens, self.trace, self.settings = tokens, trace, settings
        self.block = block_tokens(trace, settings)
        self.seen: set = set()
        self.sent = self.shared = 0

    def _block(self, key) -> list[int]:
        start = random.Random(f"dflashbench/trace-block/{self.settings.seed}/{key}").randrange(len(self.stream))
        ids = self.stream[start:start + self.block]
        while len(ids) < self.block:  # wrap around the stream
            ids += self.stream[: self.block - len(ids)]
        return ids

    def fill(self, row: TraceRow, messages: list[dict], target: int, kwargs: dict | None) -> tuple[list[dict], int]:
        """``messages`` with a system message of context in front, at most ``target`` tokens in all."""
        bare = self.tokens.count(messages, kwargs)
        overhead = self.tokens.count([{"role": "system", "content": "x"}, *messages], kwargs) - bare - 1
        need = target - bare - max(overhead, 0)
        if need <= 0:
            return messages, bare
        keys = list(row.hash_ids) or [f"{self.trace.name}/{row.index}/{j}" for j in range(need // self.block + 1)]
        keys += [f"{self.trace.name}/{row.index}/+{j}" for j in range(max(0, need // self.block + 1 - len(keys)))]
        ids: list[int] = []
        for key in keys:
            if len(ids) >= need:
                break
            ids += self._block(key)
            self.sent += 1
            self.shared += key in self.seen
            self.seen.add(key)
        ids = ids[:need]
        for _ in range(3):  # decoding and encoding again can merge tokens at the joins: trim to the target
            filled = [{"role": "system", "content": self.tokens.decode(ids)}, *messages]
            n = self.tokens.count(filled, kwargs)
            if n <= target or not ids:
                return filled, n
            ids = ids[: max(len(ids) - (n - target), 0)]
        return filled, n


def randomized(r: Request, tokens: Tokens, seed: int) -> Request:
    """``r`` with every message's text replaced by random tokens of the same count (the peer tools' content),
    the rest (arrival, max_tokens, trace lengths) as it was."""
    rng = random.Random(f"dflashbench/trace-random/{seed}/{r.id}")
    messages = tuple({**m, "content": _random_text(tokens, len(tokens.encode(m.get("content") or "")), rng)}
                     for m in r.messages)  # fmt: skip
    meta = {k: v for k, v in r.metadata.items() if k not in ("answer", "grader")}  # nothing to grade
    meta["trace"] = {**meta["trace"], "source": "random",
                     "planned_input_tokens": tokens.count(messages, meta.get("chat_template_kwargs"))}
    return dataclasses.replace(r, category="random", messages=messages, metadata=meta)


def _random_text(tokens: Tokens, n: int, rng: random.Random) -> str:
    """Text of ``n`` random ordinary tokens: drawn and decoded; where encoding the text back merges or splits
    tokens, cut or drawn again (up to 3 times)."""
    ids = tokens.random_ids(n, rng)
    text = tokens.decode(ids)
    for _ in range(3):
        got = len(tokens.encode(text))
        if got == n or not ids:
            break
        ids = ids[: max(1, len(ids) - (got - n))] if got > n else ids + tokens.random_ids(n - got, rng)
        text = tokens.decode(ids)
    return text


