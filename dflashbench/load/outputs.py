"""What a request's output leaves in its record: the grade, and with ``store_text`` the text (capped), its full
length and SHA-256, the token ids (capped) and the answer found. The load generator calls it once per request, on
the full output; the lossless check and task accuracy (:mod:`dflashbench.measure.quality`) read what it kept.

A client process does not: it leaves the output raw in the result (:func:`raw_output`: the full text and token ids)
and the parent that collects the results finishes it (:func:`finish`), off the client's event loop (a GSM8K grade
alone costs about 60 us, at the moment a closed loop's streams all end together)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from dflashbench.types import Request, RequestResult
from dflashbench.workloads import grading

TEXT_CAP_CHARS = 32_768  # characters of each output kept in requests.jsonl (the hash covers the full text)
TOKEN_CAP = 8_192  # token ids of each output kept


def output_fields(text: str, token_ids: Sequence[int] | None, *, store_text: bool, grader: str | None = None,
                  reference: object = None) -> dict[str, Any]:  # fmt: skip
    """The quality fields of one :class:`~dflashbench.types.RequestResult` from its full output.

    The grade (``correct``) is taken on the full text whatever is stored; with ``store_text`` the text is kept
    up to :data:`TEXT_CAP_CHARS` (its full length and SHA-256 beside it), the token ids up to
    :data:`TOKEN_CAP`, and the answer found. Without it nothing derived from the text is kept but ``correct``.
    """
    fields: dict[str, Any] = {}
    if grader and reference is not None and str(reference).strip():
        found = grading.grade(grader, text, reference)
        fields["correct"] = found.correct
        if store_text:
            fields["answer"] = None if found.answer is None else _utf8(found.answer)
    if store_text:
        fields["output_text"] = _utf8(text[:TEXT_CAP_CHARS])
        fields["output_chars"] = len(text)
        fields["output_sha256"] = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        fields["output_token_ids"] = tuple(token_ids[:TOKEN_CAP]) if token_ids is not None else None
    return fields


def _utf8(text: str) -> str:
    """``text`` writable as UTF-8: a lone surrogate (half an escaped emoji from a careless server's JSON) becomes
    U+FFFD characters."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def grader_for(request: Request | None, *, turn: int, ok: bool, warmup: bool) -> str | None:
    """The grader of a result: its request's, for the first turn of a request that succeeded (not a warm-up)."""
    if request is None or turn != 0 or not ok or warmup:
        return None
    return request.metadata.get("grader")


def raw_output(text: str, token_ids: Sequence[int] | None) -> dict[str, Any]:
    """The output as a client process leaves it for :func:`finish`: the full text and token ids, nothing derived."""
    return {"output_text": text, "output_token_ids": tuple(token_ids) if token_ids is not None else None}


def finish(result: RequestResult, request: Request | None, *, store_text: bool, more: dict | None = None) -> RequestResult:
    """``result`` with the output fields :func:`output_fields` gives, from the raw output :func:`raw_output` left
    (``request``: the one it answered, for its grader and reference answer), and ``more`` fields (the usage check's),
    made in one copy."""
    fields = output_fields(result.output_text or "", result.output_token_ids,
                           store_text=store_text and not result.warmup,
                           grader=grader_for(request, turn=result.turn, ok=result.ok, warmup=result.warmup),
                           reference=request.metadata.get("answer") if request is not None else None)  # fmt: skip
    return dataclasses.replace(result, **{"output_text": None, "output_token_ids": None, **fields, **(more or {})})
