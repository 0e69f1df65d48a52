"""Is the server's token count what it streamed? Each request's ``usage.completion_tokens`` checked against the
client's own count of the stream (issue #52: a server that streamed 16 tokens and reported 999 was believed, and its
throughput read 62 times too high).

The streamed count, best first (content and reasoning content alike: both are output the server generated):

- ``"token_ids"``: the token ids the chunks carried, where every output chunk carried them (vLLM's and the
  reference server's ``return_token_ids``). Exact, speculative decoding included: a chunk of a verification step
  carries every token the step committed.
- ``"tokenizer"``: the target's own tokenizer on the streamed text. Close, not exact: a token that leaves no text
  (an end-of-sequence token, which servers count) is not in it, and a model may emit a split of a word its
  tokenizer would not make. On the embedded pair's committed vLLM CPU and reference runs (288 requests each) it
  was the server's count minus one (the end-of-sequence token) on 279 requests and equal on the other 9.
- ``"chunks"``, where neither is at hand: the output chunks, a lower bound (a chunk of a speculative step carries
  several tokens), and the text's UTF-8 bytes as an upper one (every token but a special one leaves at least one
  byte of text). Only a count outside those bounds is flagged.

Bounds check a count, they cannot confirm one: a count within them but above the chunks (a server that says its
chunks held several tokens each, as a speculative one does, or one that doubles its count: its throughput doubled) is
**unverified** (:func:`unverified`): kept, since it may be true, and said, so that it is not trusted in silence; the
target's tokenizer on this machine, or token ids in the stream, check it.

A ``usage.completion_tokens`` that is no integer (``"abc"``, 12.5) is read as missing (the stream's own count is
the output, as for a server that sends no usage) and the request keeps what came (``server_usage_invalid``).

The tolerance is :func:`tolerance_tokens`: ``max(2 tokens, 2 % of the streamed count)``, the most issue #52 allows;
it covers the tokenizer's missing end-of-sequence token and a rare non-canonical split. A request past it is
flagged: its ``server_output_tokens`` keeps what the server said, and ``output_tokens`` becomes the streamed count
(``output_tokens_source`` ``"streamed"``), so throughput, TPOT and per-user rates use what was streamed; its chunks'
token counts, the server's too, are spread evenly over its chunks and marked estimated.

Where it runs: on a finished request, in the sweep's collecting thread (:func:`dflashbench.load.loadgen_procs.
run_sharded`), never on a client's event loop; the per-chunk path only gathers the ids and the text it always did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dflashbench.types import RequestResult

TOLERANCE_TOKENS = 2
TOLERANCE_SHARE = 0.02

CountText = Callable[[str], "int | None"]  # the target's tokenizer as a counter; None where it has none


def tolerance_tokens(streamed: int) -> float:
    """How far a server's count may be from the streamed count before the request is flagged."""
    return max(float(TOLERANCE_TOKENS), TOLERANCE_SHARE * streamed)


def streamed_count(text: str, token_ids, chunks: int, count_text: CountText | None) -> tuple[int, str]:
    """``(tokens, how they were counted)`` for one stream (module docstring): its token ids, else the tokenizer on
    its text, else its output chunks (a lower bound)."""
    if token_ids:
        return len(token_ids), "token_ids"
    if count_text is not None:
        counted = count_text(text)
        if counted is not None:
            return counted, "tokenizer"
    return chunks, "chunks"


def disagrees(server: int, streamed: int, source: str, text_bytes: int) -> bool:
    """Whether ``server`` tokens is past the tolerance from ``streamed`` (``source``: how it was counted); a chunk
    count bounds the tokens from below and the text's bytes from above."""
    if source == "chunks":
        return server < streamed - tolerance_tokens(streamed) or server > text_bytes + tolerance_tokens(text_bytes)
    return abs(server - streamed) > tolerance_tokens(streamed)


def usage_fields(r: RequestResult, count_text: CountText | None = None) -> dict:
    """The fields :func:`reconcile` changes, for a caller that makes the record once (``outputs.finish``): its
    streamed count, and where the server's disagrees, the flag and the streamed count in its place. ``r`` must still
    hold its raw output (:func:`dflashbench.load.outputs.raw_output`: the full text and token ids); a failed request
    or a warm-up gets none."""
    if not r.ok or r.warmup:
        return {}
    text = r.output_text or ""
    n, source = streamed_count(text, r.output_token_ids, len(r.chunk_ns), count_text)
    fields: dict = {"streamed_tokens": n, "streamed_tokens_source": source}
    if r.output_tokens_source == "server" and disagrees(r.output_tokens, n, source, len(text.encode("utf-8", "replace"))):
        fields.update(server_output_tokens=r.output_tokens, output_tokens=n, output_tokens_source="streamed",
                      chunk_tokens=even_split(n, len(r.chunk_tokens)), chunk_tokens_estimated=True)  # fmt: skip
    return fields


def reconcile(r: RequestResult, count_text: CountText | None = None) -> RequestResult:
    """``r`` with its streamed count, and flagged with the streamed count in place of the server's where they
    disagree (:func:`usage_fields`); a failed request or a warm-up is returned as it is."""
    fields = usage_fields(r, count_text)
    return dataclasses.replace(r, **fields) if fields else r


def unverified(r: RequestResult) -> bool:
    """Whether ``r``'s server count was kept on the bounds alone while they could not confirm it: counted by chunks
    (no token ids, no tokenizer), within the bytes, but above the chunks past the tolerance."""
    if r.streamed_tokens_source != "chunks" or r.output_tokens_source != "server" or r.streamed_tokens is None:
        return False
    return r.output_tokens > r.streamed_tokens + tolerance_tokens(r.streamed_tokens)


def unverified_words(r: RequestResult) -> str:
    """``32 reported for 16 output chunks of 64 characters``: what the bounds allowed."""
    chars = f" of {r.output_chars} characters" if r.output_chars is not None else ""
    return f"{r.output_tokens} reported for {r.streamed_tokens} output chunks{chars}"


def even_split(total: int, parts: int) -> tuple[int, ...]:
    """``total`` tokens over ``parts`` chunks, differing by at most one, larger first."""
    return tuple(total // parts + (1 if i < total % parts else 0) for i in range(parts)) if parts else ()


def mismatch_words(r: RequestResult) -> str:
    """One flagged request in words: ``999 reported against 16 streamed, counted by its token ids``."""
    how = {"token_ids": "its token ids", "tokenizer": "the target's tokenizer",
           "chunks": "output chunks, a lower bound"}.get(r.streamed_tokens_source or "", r.streamed_tokens_source)  # fmt: skip
    return f"{r.server_output_tokens} reported against {r.streamed_tokens} streamed, counted by {how}"
