"""Token ids to streamed text: incremental detokenization (never half a character) and OpenAI stop strings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


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
