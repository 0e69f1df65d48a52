"""The one redaction function: every string that leaves the process passes :func:`redact_secrets` first.

Run files (manifest, points, requests, telemetry), server logs (the command line heading them and every line
the server prints), failure reasons, console lines, error messages and reports all go through it, so a secret
given anywhere (``--endpoint http://user:pass@host``, ``--model ...?token=...``, ``--api-key X`` in a suite's
``extra_args``, a key in an environment variable a plan sets) is written nowhere.

What counts as a secret:

- in a dict, the value under a secret-looking key (``api_key``, ``OPENAI_API_KEY``, ``Authorization``,
  ``hf_token``, ``password``...); keys naming the environment variable that *holds* a key (``api_key_env``)
  are kept, they are not secrets;
- in a list (an argv), the element after a secret-looking flag (``--api-key X``) or its ``=value``;
- in any string: URL userinfo (``scheme://user:pass@`` -> ``scheme://***@``), secret-looking query parameters
  (``?token=``, ``&key=``, ``&sig=``...), ``Bearer <x>``, ``sk-...`` / ``hf_...`` shaped keys, the value after a
  secret-looking flag in a command line (``--api-key X``), and ``NAME=value`` / ``'name': 'value'`` pairs whose
  name looks like a secret (``HF_TOKEN=...``, vLLM's ``'api_key': [...]`` in its argument dump).

Imports only :mod:`re`: the server-log supervisor runs it in its own small process.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"

_SECRET_WORDS = r"api[_-]?key|apikey|token|secret|password|passwd|credential"
# Keys whose values are secrets wherever they appear (config dicts, env snapshots, headers).
_SECRET_KEY = re.compile(
    r"(api[_-]?key|apikey|(^|[_-])token$|secret|password|passwd|authorization|credential)", re.IGNORECASE
)
# argv flags whose next element (or "=value") is a secret.
_SECRET_FLAG = re.compile(rf"^--?[\w-]*({_SECRET_WORDS})$", re.IGNORECASE)
# Query parameters whose value is a secret (whole name, or its last part after _ . -).
_QUERY_NAMES = r"token|key|apikey|api[_-]?key|sig|signature|secret|password|passwd|pwd|auth|credential"

_KV_WORDS = r"api[_-]?key|apikey|secret|password|passwd|credential"
_KV_VALUE = r"('[^']*'|\"[^\"]*\"|[^\s'\",\]})&#;]+)"

# Secrets inside free text, applied in this order.
_SECRET_TEXT: tuple[tuple[re.Pattern[str], str], ...] = (
    # URL userinfo: the whole of it (a token is often the user part alone: https://TOKEN@host).
    (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@'\"<>]+@"), r"\1" + REDACTED + "@"),
    (re.compile(rf"([?&;](?:[\w.-]*[_.-])?(?:{_QUERY_NAMES})=)[^&#\s'\"<>]+", re.IGNORECASE), r"\1" + REDACTED),
    (re.compile(r"(Bearer\s+)\S+", re.IGNORECASE), r"\1" + REDACTED),
    # the value after a secret-looking flag in a command line (quoted by shlex.join, or bare)
    (re.compile(rf"((?<![\w-])--?[\w-]*(?:{_SECRET_WORDS})(?:=|\s+))('[^']*'|\"[^\"]*\"|[^\s'\"]+)", re.IGNORECASE),
     r"\1" + REDACTED),
    # NAME=value, name: 'value', 'name': ['value'] (environment lines, argument dumps in engine logs); a bare
    # "token" only quoted or with "=", so that prose such as "energy per token: 0.5 J" stays as it is
    (re.compile(rf"(\b(?:[\w.-]*(?:{_KV_WORDS})|[\w.-]*[_.-]token)['\"]?\s*[:=]\s*\[?\s*){_KV_VALUE}", re.IGNORECASE),
     r"\1" + REDACTED),
    (re.compile(rf"(\btoken(?:['\"]\s*[:=]|\s*=)\s*\[?\s*){_KV_VALUE}", re.IGNORECASE), r"\1" + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), REDACTED),
)
# Cheap pre-check: text without any of these cannot match a pattern above (most strings, e.g. request ids).
_MAYBE_SECRET = re.compile(rf"://|[?&;=:]|bearer|sk-|hf_|{_SECRET_WORDS}", re.IGNORECASE)


def redact_text(text: str) -> str:
    """``text`` with every secret in it replaced by ``***`` (see the module docstring)."""
    if not _MAYBE_SECRET.search(text):
        return text
    for pattern, repl in _SECRET_TEXT:
        text = pattern.sub(repl, text)
    return text


def redact_secrets(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples, strings; anything else as is) with every secret replaced by
    ``***``. The input is not modified."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            name = str(key)
            secret_key = _SECRET_KEY.search(name) and not name.lower().endswith(("_env", "_env_var"))
            if secret_key and value and isinstance(value, str | int | float):
                out[key] = REDACTED
            else:
                out[key] = redact_secrets(value)
        return out
    if isinstance(obj, list | tuple):
        return _redact_sequence(obj)
    return obj


_PLAIN = frozenset({int, float, bool, type(None)})


def _redact_sequence(obj: list | tuple) -> list | tuple:
    if set(map(type, obj)) <= _PLAIN:  # a request's chunk timestamps: thousands of numbers, no secret
        return tuple(obj) if isinstance(obj, tuple) else list(obj)
    items = [redact_secrets(v) if isinstance(v, (str, dict, list, tuple)) else v for v in obj]  # noqa: UP038
    for i, item in enumerate(obj):
        if not isinstance(item, str):
            continue
        flag, eq, _value = item.partition("=")
        if _SECRET_FLAG.match(flag):
            if eq:
                items[i] = f"{flag}={REDACTED}"
            elif i + 1 < len(items):
                items[i + 1] = REDACTED
    return tuple(items) if isinstance(obj, tuple) else items
