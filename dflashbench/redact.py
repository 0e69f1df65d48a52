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
- in any string: URL userinfo (``scheme://user:pass@`` -> ``scheme://***@``, a password with an unencoded
  ``@``, ``/``, ``?`` or ``#`` included; :func:`redact_url` for a URL shown on its own, whatever its shape), secret-looking query parameters
  (``?token=``, ``&key=``, ``&sig=``...), ``Bearer <x>``, ``sk-...`` / ``hf_...`` shaped keys, the value after a
  secret-looking flag in a command line (``--api-key X``), and ``NAME=value`` / ``'name': 'value'`` pairs whose
  name looks like a secret (``HF_TOKEN=...``, vLLM's ``'api_key': [...]`` in its argument dump), and userinfo
  written without a scheme (``admin:pw@host:8000``);
- literally: the values dflashbench itself sends (:func:`remember_secret`, :func:`remember_url`): the API key, and
  a URL's password with the ``Authorization: Basic`` value derived from it. A server may echo them in any shape
  (``401 Incorrect API key provided: <key>``), so no pattern could catch them all. A value that looks like a key
  (:data:`WORD_CHARS` characters or more, not letters alone) goes wherever it appears. A value that is a common
  word (``none``, ``auto``, ``EMPTY``, ``true``, ``synthetic``; see :func:`is_word`) is also what dflashbench's own
  settings, names and paths say, so it goes only where it stands as a word of free text (a log line, a command
  line, an error message): never inside a path (``keys/none/x``) or an id (``reference:ar:synthetic:c1``), never
  as the value of a flag that is not a secret's (``--trace-fill none``), never in a string of a record that holds
  no space (an enumerated setting such as ``"trace_fill": "none"``, a name, a path, an argv element), and not in
  a rendered report (:func:`redact_text` with ``words=False``: it is built from run files redacted as written).

Imports only the standard library: the server-log supervisor runs it in its own small process, and gets the
literal values through :data:`LITERALS_ENV` (:func:`literals_env`, :func:`adopt_literals_env`).
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any
from urllib.parse import quote, unquote, urlsplit

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
    # URL userinfo: the whole of it, up to its last "@" (a token is often the user part alone: https://TOKEN@host;
    # a password may hold an "@" of its own)
    (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s'\"<>]+@"), r"\1" + REDACTED + "@"),
    # user:password whose password holds a "/", "?" or "#" a URL needs percent-encoded (http://u:pa/ss@host):
    # a parser reads the host as ending there, so no other pattern sees the "@" as the userinfo's end
    (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@'\"<>:]*:[^\s'\"<>]*@"), r"\1" + REDACTED + "@"),
    # userinfo without a scheme (``--endpoint admin:pw@host:8000``, refused, but echoed in the refusal)
    (re.compile(r"(?<![\w.~%+-])[\w.~%+-]+:[^\s/@'\"<>:]+@(?=[\w.-]+(?::\d+)?(?![\w.-]))"), REDACTED + "@"),
    (re.compile(rf"([?&;](?:[\w.-]*[_.-])?(?:{_QUERY_NAMES})=)[^&#\s'\"<>]+", re.IGNORECASE), r"\1" + REDACTED),
    (re.compile(r"(Bearer\s+)\S+", re.IGNORECASE), r"\1" + REDACTED),
    # the value after a secret-looking flag in a command line (quoted by shlex.join, or bare)
    (re.compile(rf"((?<![\w-])--?[\w-]*(?:{_SECRET_WORDS})(?:=|\s+))('[^']*'|\"[^\"]*\"|[^\s'\"]+)", re.IGNORECASE),
     r"\1" + REDACTED),
    # NAME=value, name: 'value', 'name': ['value'] (environment lines, argument dumps in engine logs); a bare
    # "token" only quoted or with "=", so that prose such as "energy per token: 0.5 J" stays as it is; a name
    # is a whole word, never the end of a path ("/etc/passwd: not valid TOML" is prose, not a password)
    (re.compile(rf"((?<![\w./\\-])(?:[\w.-]*(?:{_KV_WORDS})|[\w.-]*[_.-]token)['\"]?\s*[:=]\s*\[?\s*){_KV_VALUE}", re.IGNORECASE),
     r"\1" + REDACTED),
    (re.compile(rf"(\btoken(?:['\"]\s*[:=]|\s*=)\s*\[?\s*){_KV_VALUE}", re.IGNORECASE), r"\1" + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), REDACTED),
)
# Cheap pre-check: text without any of these cannot match a pattern above (most strings, e.g. request ids).
_MAYBE_SECRET = re.compile(rf"://|[?&;=:]|bearer|sk-|hf_|{_SECRET_WORDS}", re.IGNORECASE)


# -- the values dflashbench sends, redacted literally -----------------------------------------------------------
LITERALS_ENV = "DFLASHBENCH_SECRET_VALUES"  # a JSON list, for the supervisor of a launched server's log
MIN_LITERAL_CHARS = 4  # shorter values would eat ordinary text; the patterns above still apply to them
# A remembered value shorter than this, or letters alone, is treated as a word (is_word): a random key of 8 or more
# characters from letters and digits has a digit with probability 1 - (52/62)^8 = 75 %, so a long letters-only key
# is taken for a word too, which costs it only the places a word is spared (the module docstring).
WORD_CHARS = 8
_LITERALS: list[str] = []  # longest first, so that a value containing another goes as a whole
_WORD = re.compile(r"[^\W\d_]+(?:[-_.][^\W\d_]+)*")  # letters, joined by - _ or . (speed-bench, trace.fill)
# Where a word of free text starts and ends: after a space, a quote, an opening bracket, "=" or ","; before a space,
# a quote, a closing bracket or punctuation (a "." or ":" only where a space or the end follows: not "none.txt",
# "synthetic:c1"). A "/", "\\", "_", "-", ":" or a letter beside it makes it part of a path, an id or another word.
_WORD_BEFORE = r"(?:(?<=^)|(?<=[\s'\"`(\[{<=,]))"
_WORD_AFTER = r"(?=$|[\s'\"`)\]}>,;!?]|[.:](?:\s|$))"
# The value of a command-line flag (``--trace-fill none``, ``--kv-cache-dtype=auto``): a setting, unless the flag's
# name says secret, whose value the patterns above redact anyway.
_FLAG_BEFORE = re.compile(r"(?:^|\s)--?[A-Za-z][\w.-]*(?:=|\s+)$")
_WORD_PATTERNS: dict[str, re.Pattern[str]] = {}


def is_word(value: str) -> bool:
    """Whether a remembered value reads as a word (shorter than :data:`WORD_CHARS`, or letters alone): redacted only
    where it stands as a word of free text."""
    return len(value) < WORD_CHARS or _WORD.fullmatch(value) is not None


def _word_pattern(value: str) -> re.Pattern[str]:
    pattern = _WORD_PATTERNS.get(value)
    if pattern is None:
        pattern = _WORD_PATTERNS[value] = re.compile(_WORD_BEFORE + re.escape(value) + _WORD_AFTER)
    return pattern


def _replace_word(text: str, value: str) -> str:
    """``text`` with ``value`` replaced where it stands as a word, and is not a (non-secret) flag's value."""

    def one(match: re.Match[str]) -> str:
        return match.group(0) if _FLAG_BEFORE.search(text, 0, match.start()) else REDACTED

    return _word_pattern(value).sub(one, text)


def _add_literal(value: str) -> None:
    if len(value) >= MIN_LITERAL_CHARS and value not in _LITERALS:
        _LITERALS.append(value)
        _LITERALS.sort(key=len, reverse=True)


def remember_secret(value: str | None) -> None:
    """Redact ``value`` (an API key) literally from now on, in the forms a server may echo it: as sent, and
    escaped for JSON and for a URL."""
    if not value:
        return
    for form in (value, json.dumps(value)[1:-1], quote(value, safe="")):
        _add_literal(form)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or config key of this name holds a secret (``VLLM_API_KEY``, ``HF_TOKEN``): a
    cluster launcher keeps such values out of the scripts and manifests it writes."""
    return bool(_SECRET_KEY.search(name))


def remember_env_secrets(env: dict[str, str]) -> None:
    """Redact literally, from now on, the values of ``env`` (the variables a launch plan sets) whose names look
    like secrets: an engine's API key passed in its environment (``VLLM_API_KEY``) rather than its command line."""
    for name, value in env.items():
        if _SECRET_KEY.search(name) and isinstance(value, str):
            remember_secret(value)


def remember_url(url: str | None) -> None:
    """Redact the credentials in ``url``'s userinfo literally from now on: the password (as written and
    percent-decoded; the user part when there is no password, a token then), ``user:password``, and the
    base64 of it that the ``Authorization: Basic`` header carries (aiohttp derives it from the URL)."""
    try:
        parts = urlsplit(url or "")
    except ValueError:
        return
    if parts.username is None:
        return
    user, password = parts.username, parts.password
    for raw in ([password] if password else [user]):
        remember_secret(raw)
        remember_secret(unquote(raw))
    pair = f"{unquote(user)}:{unquote(password or '')}"
    _add_literal(pair)
    for encoding in ("latin-1", "utf-8"):  # aiohttp's BasicAuth encodes latin-1 by default
        try:
            encoded = base64.b64encode(pair.encode(encoding)).decode("ascii")
        except UnicodeEncodeError:
            continue
        _add_literal(encoded)
        _add_literal(encoded.rstrip("="))


def literals_env() -> dict[str, str]:
    """The environment that hands the remembered values to a child that redacts (the log supervisor)."""
    return {LITERALS_ENV: json.dumps(_LITERALS)} if _LITERALS else {}


def adopt_literals_env() -> None:
    """In the child: take the values from :data:`LITERALS_ENV` and remove the variable, so that the processes
    it starts in turn (the server) do not inherit it."""
    raw = os.environ.pop(LITERALS_ENV, None)
    try:
        values = json.loads(raw) if raw else []
    except ValueError:
        return
    for value in values if isinstance(values, list) else []:
        if isinstance(value, str):
            _add_literal(value)


_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://")


def redact_url(url: str) -> str:
    """A URL the user gave, to be shown in a message about it (malformed, perhaps): everything between its
    scheme and its last ``@`` is taken for userinfo and shown as ``***``, whatever characters it holds
    (``http://user:pa/ss@host:1`` -> ``http://***@host:1``; ``admin:pw@host`` -> ``***@host``)."""
    scheme = _SCHEME.match(url)
    head = scheme.group(0) if scheme else ""
    rest = url[len(head):]
    if "@" not in rest:
        return redact_text(url)
    return redact_text(f"{head}{REDACTED}@{rest.rpartition('@')[2]}")


def forget_secrets() -> None:
    """Forget every remembered value (tests; a process that sweeps twice keeps them, which is harmless)."""
    _LITERALS.clear()


def redact_text(text: str, words: bool = True) -> str:
    """``text`` with every secret in it replaced by ``***`` (see the module docstring). ``words`` False: a remembered
    value that is a word (:func:`is_word`) is left alone (a string that is no free text, a rendered report)."""
    for value in _LITERALS:
        if value in text:
            if not is_word(value):
                text = text.replace(value, REDACTED)
            elif words:
                text = _replace_word(text, value)
    if not _MAYBE_SECRET.search(text):
        return text
    for pattern, repl in _SECRET_TEXT:
        text = pattern.sub(repl, text)
    return text


def redact_secrets(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples, strings; anything else as is) with every secret replaced by
    ``***``. The input is not modified."""
    if isinstance(obj, str):
        return redact_text(obj, words=_is_prose(obj))
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
_SPACE = re.compile(r"\s")


def _is_prose(text: str) -> bool:
    """A string of a record that is free text (it holds a space: a reason, a log line, a description), where a
    remembered word is redacted; one without (a setting, a name, an id, a path, an argv element) is not free text."""
    return _SPACE.search(text) is not None


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
