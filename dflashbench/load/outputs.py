"""What a request's output leaves in its record: the grade, and with ``store_text`` the text (capped), its full
length and SHA-256, the token ids (capped) and the answer found. The load generator calls it once per request, on
the full output; the lossless check and task accuracy (:mod:`dflashbench.measure.quality`) read what it kept."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

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
