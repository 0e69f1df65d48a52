"""The target's tokenizer as a counter of streamed text, for the check of a server's token count against its stream
(:mod:`dflashbench.load.usage_check`) where the chunks carry no token ids (SGLang, TRT-LLM, an unknown
``--endpoint``).

Read from this machine only (the target's folder, or the Hugging Face cache): a sweep sends no request to the Hub
for it. Without one, the check falls back to its bounds (output chunks below, the text's bytes above). Loaded once
per target and sweep process, and never while a point runs, so importing ``transformers`` (seconds of CPU) never
competes with the clients: before the first point where the backend streams no token ids (:func:`prepare`), and
where ids were expected but a point's streams came without them, after that point, for the next ones (that point
keeps the bounds).
"""

from __future__ import annotations

import threading
from pathlib import Path

from dflashbench.model_files import read_json
from dflashbench.plan.suites import EMBEDDED, RANDOM_PREFIX


class TargetTokenizer:
    """``counter(text)`` = the target tokenizer's count of ``text`` (no special tokens added), or ``None`` where
    this machine has no tokenizer of the target (:attr:`missing` says why) or it is not loaded yet (:meth:`ready`
    loads it; a count never does)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._tok = None
        self._tried = False
        self._lock = threading.Lock()
        self.missing: str | None = None

    def ready(self) -> bool:
        """Load the tokenizer if not tried yet; whether there is one."""
        with self._lock:
            if not self._tried:
                self._tried = True
                self._tok, self.missing = _load(self.target)
        return self._tok is not None

    @property
    def tried(self) -> bool:
        return self._tried

    def __call__(self, text: str) -> int | None:
        tok = self._tok
        if tok is None:
            return None
        return len(tok(text, add_special_tokens=False)["input_ids"])


_BY_TARGET: dict[str, TargetTokenizer] = {}


def tokenizer_for(target: str) -> TargetTokenizer:
    """The one counter of ``target`` in this process (loaded at most once)."""
    return _BY_TARGET.setdefault(target, TargetTokenizer(target))


def prepare(target: str) -> TargetTokenizer:
    """:func:`tokenizer_for`, loaded now (before a point's measured window)."""
    counter = tokenizer_for(target)
    counter.ready()
    return counter


def _where(target: str) -> str | None:
    """Where the target's tokenizer files are on this machine, as ``from_pretrained`` takes it; ``None``: nowhere."""
    if target == EMBEDDED:
        from dflashbench.embedded import default_paths

        return str(default_paths().target)
    if target.startswith(RANDOM_PREFIX):
        return None
    if Path(target).expanduser().is_dir():
        return target if (Path(target).expanduser() / "tokenizer_config.json").is_file() else None
    try:  # a Hub id: only where the cache holds its tokenizer (no network)
        return target if read_json(target, "tokenizer_config.json", network=False) is not None else None
    except Exception:  # noqa: BLE001 - an unreadable cache entry is a missing tokenizer, not a failed sweep
        return None


def _load(target: str) -> tuple[object | None, str | None]:
    where = _where(target)
    if where is None:
        return None, f"no tokenizer of {target} on this machine (its folder or the Hugging Face cache)"
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(where, local_files_only=True), None
    except Exception as exc:  # noqa: BLE001 - a tokenizer that does not load: the check keeps its bounds
        return None, f"the tokenizer of {target} did not load ({type(exc).__name__}: {str(exc)[:120]})"
