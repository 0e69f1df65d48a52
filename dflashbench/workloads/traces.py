"""Public request traces: when production requests arrived and how long they were, read in their own formats.

The traces carry token counts and arrival times, never text (the providers' privacy rules); the text sent for
them is chosen by :mod:`dflashbench.workloads.trace_content`. Two published formats are read, as their
publishers describe them (tests/workloads/test_traces.py checks the shipped slices against these schemas):

- **Azure LLM inference traces** (github.com/Azure/AzurePublicDataset, ``AzureLLMInferenceDataset2023.md`` and
  ``AzureLLMInferenceDataset2024.md``, CC BY 4.0): CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens``;
  ``TIMESTAMP`` is the invocation's wall-clock time (``2023-11-16 18:17:03.9799600``), the others token counts.
  A request's arrival is its time since the file's first request.
- **Mooncake traces** (github.com/kvcache-ai/Mooncake, ``FAST25-release/README.md``, Apache-2.0): JSON Lines, one
  request per line: ``timestamp`` (milliseconds from the trace's start), ``input_length``, ``output_length`` and
  ``hash_ids``, the request's prefix blocks of 512 tokens (equal ids: a prefix shared with an earlier request).

Slices of three traces ship in ``dflashbench/data/traces/`` (sources, licences and changes in its ``NOTICE.md``)
under the names of :data:`SHIPPED`; any file in either format is read from its path. Pure reading; no I/O beyond
the file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from dflashbench.errors import UserError

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "traces"
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")  # hash_ids: read where present
MOONCAKE_BLOCK_TOKENS = 512  # FAST25-release/README.md: "The block size is 512 tokens"
FORMATS = ("azure", "mooncake")
# A window is read from the file's start, not the whole file (a 10-million-row trace took 3.3 GB for a 2 s window):
# reading stops at the first row this far past the window's end, so a row out of arrival order by less than this is
# still found (the published traces are in arrival order; rows out of order are counted, Trace.reordered).
REORDER_SLACK_S = 60.0
CHUNK_ROWS = 65_536  # rows of a CSV parsed at a time
# At most this many requests are read from a trace, whatever the window: each row and the request planned from it take
# about 1 KB (0.9 KB measured on a 20,000-row Mooncake file; more where trace_fill = "context" gives each its own
# text), and a window that covered a 10-million-row file held it all (168 s, then MemoryError). Reading stops at the
# next row, and the refusal names the window that fits. 200,000 requests are 11 hours of the Azure 2023
# conversation slice at its rate of about 5 a second (2,867 in its first 10 minutes).
MAX_ROWS = 200_000
# A token count above this is not a count (a float no longer holds it exactly); the context clips far below it.
MAX_TOKENS = 2**53


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: its place in the file, when it arrived and its token counts."""

    index: int  # 0-based row in the file (after the header)
    arrival_s: float  # seconds since the trace's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()  # Mooncake's prefix blocks; () where the format has none


@dataclass(frozen=True)
class ShippedTrace:
    """A trace slice shipped with dflashbench: its file, format, kind of traffic and where it came from."""

    name: str
    file: str  # in DATA_DIR
    format: str
    kind: str  # "code" or "conversation": which content suits it (trace_content)
    length_s: float  # the slice's length: a window beyond it needs the full file
    description: str
    source: str  # repository, file and licence, as the report states them


SHIPPED: dict[str, ShippedTrace] = {t.name: t for t in (
    ShippedTrace("azure-code", "AzureLLMInferenceTrace_code.first10m.csv", "azure", "code", 600.0,
                 "Azure LLM inference trace 2023, code service: first 10 minutes (1,482 requests)",
                 "Azure/AzurePublicDataset data/AzureLLMInferenceTrace_code.csv (CC BY 4.0; Patel et al., "
                 "Splitwise, ISCA 2024)"),
    ShippedTrace("azure-conv", "AzureLLMInferenceTrace_conv.first10m.csv", "azure", "conversation", 600.0,
                 "Azure LLM inference trace 2023, conversation service: first 10 minutes (2,867 requests)",
                 "Azure/AzurePublicDataset data/AzureLLMInferenceTrace_conv.csv (CC BY 4.0; Patel et al., "
                 "Splitwise, ISCA 2024)"),
    ShippedTrace("mooncake-conv", "mooncake_conversation_trace.first2m.jsonl", "mooncake", "conversation", 120.0,
                 "Mooncake FAST'25 conversation trace: first 2 minutes (339 requests, prefix blocks kept)",
                 "kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl (Apache-2.0; Qin et al., "
                 "FAST 2025)"),
)}  # fmt: skip


@dataclass(frozen=True)
class Trace:
    """A trace read from its file (or a window of one): rows in arrival order."""

    name: str  # the shipped name, or the file's stem
    format: str
    kind: str  # "code", "conversation" or "unknown" (a user's file)
    path: Path
    rows: tuple[TraceRow, ...]
    source: str
    window_s: float | None = None  # the window taken from the start (None: the whole file)
    reordered: int = 0  # rows that were out of arrival order in the file (sorted here, stably)

    @property
    def block_tokens(self) -> int | None:
        """Tokens per prefix block (Mooncake's hash_ids), ``None`` for a format without blocks."""
        return MOONCAKE_BLOCK_TOKENS if self.format == "mooncake" else None

    @property
    def span_s(self) -> float:
        """Seconds from the first arrival to the last."""
        return self.rows[-1].arrival_s - self.rows[0].arrival_s if self.rows else 0.0

    def window(self, length_s: float | None) -> Trace:
        """The requests that arrived in the first ``length_s`` seconds (``None``: all of them)."""
        if length_s is None:
            return self
        _check_slice(self.name, self.path, length_s)
        rows = tuple(r for r in self.rows if r.arrival_s < length_s)
        if not rows:
            raise UserError(f"--trace-window {fmt_duration(length_s)}: no request of {self.name} arrived in it")
        return replace(self, rows=rows, window_s=length_s)


def _check_slice(name: str, path: Path, length_s: float) -> None:
    """A window longer than the shipped slice it is taken from is an error naming the full file."""
    shipped = SHIPPED.get(name)
    if shipped is not None and path.name == shipped.file and length_s > shipped.length_s + 1e-9:
        raise UserError(f"--trace-window {fmt_duration(length_s)}: the shipped {name} slice holds only its "
                        f"first {fmt_duration(shipped.length_s)}; take a shorter window, or give the full trace "
                        f"file with --trace PATH (from {shipped.source})")  # fmt: skip


# --- reading ---------------------------------------------------------------------------------------------------


def load_trace(name_or_path: str, window_s: float | None = None) -> Trace:
    """A shipped trace by name (:data:`SHIPPED`), or a user's file in either format (by its suffix: ``.csv`` is
    Azure's, ``.jsonl``/``.json`` Mooncake's). ``window_s``: only the requests of its first that many seconds,
    read from the file's start and no further (:data:`REORDER_SLACK_S`): a huge trace costs its window."""
    if name_or_path in SHIPPED:
        t = SHIPPED[name_or_path]
        return _read(DATA_DIR / t.file, t.format, t.name, t.kind, t.source, window_s)
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise UserError(f"--trace {name_or_path}: neither a shipped trace ({', '.join(SHIPPED)}) nor a file; give "
                        "one of those names, or the path of an Azure CSV or a Mooncake JSONL trace")  # fmt: skip
    fmt = {".csv": "azure", ".jsonl": "mooncake", ".json": "mooncake"}.get(path.suffix.lower())
    if fmt is None:
        raise UserError(f"--trace {path}: unknown format {path.suffix or '(no suffix)'}; an Azure LLM inference trace "
                        "is a .csv, a Mooncake trace a .jsonl")  # fmt: skip
    return _read(path, fmt, safe_name(path.stem), "unknown", f"{path.name} ({fmt} format)", window_s)


def safe_name(stem: str) -> str:
    """A user's trace file name as it appears in point ids: letters, digits, ``.``, ``_`` and ``-``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-") or "trace"


def _read(path: Path, fmt: str, name: str, kind: str, source: str, window_s: float | None = None) -> Trace:
    if window_s is not None:
        _check_slice(name, path, window_s)  # before reading: a window the slice cannot hold
    rows = _at_most(_until_past(read_azure(path) if fmt == "azure" else read_mooncake(path), window_s), path,
                    window_s)  # fmt: skip
    if not rows:
        raise UserError(f"{path}: the trace has no requests")
    ordered = sorted(rows, key=lambda r: r.arrival_s)  # stable: equal times keep the file's order
    moved = sum(a is not b for a, b in zip(rows, ordered, strict=True))
    first = ordered[0].arrival_s
    rows = [replace(r, arrival_s=r.arrival_s - first) for r in ordered]
    trace = Trace(name=name, format=fmt, kind=kind, path=path, rows=tuple(rows), source=source, reordered=moved)
    return trace.window(window_s)


def _until_past(rows: Iterator[TraceRow], window_s: float | None) -> Iterator[TraceRow]:
    """The rows of the window as the file holds them, up to the first that arrived :data:`REORDER_SLACK_S` past the
    window's end (the window counted from the earliest arrival read so far); all of them without a window. A row
    past the window is left out as it is read: the earliest arrival only moves earlier, so it stays past."""
    first = math.inf
    for row in rows:
        first = min(first, row.arrival_s)
        if window_s is None or row.arrival_s - first < window_s:
            yield row
        elif row.arrival_s - first >= window_s + REORDER_SLACK_S:
            return


def _at_most(rows: Iterator[TraceRow], path: Path, window_s: float | None, limit: int | None = None) -> list[TraceRow]:
    """The first rows of ``rows``, :data:`MAX_ROWS` at most: one more is a :class:`UserError` naming the window that
    holds that many (reading stops there, so a huge file costs ``MAX_ROWS`` rows, never the whole of it)."""
    limit = MAX_ROWS if limit is None else limit
    out: list[TraceRow] = []
    for row in rows:
        if len(out) == limit:
            first = min(r.arrival_s for r in out)
            fits = max(r.arrival_s for r in out) - first
            given = f"--trace-window {fmt_duration(window_s)} of {path}" if window_s is not None else str(path)
            raise UserError(f"{given} holds more than {limit:,} requests (row {row.index + 1} arrives "
                            f"{row.arrival_s - first:,.1f} s after the first), more than a replay plans: take a "
                            f"window of {fmt_duration(_floor_s(fits))} or less (--trace-window)")  # fmt: skip
        out.append(row)
    return out


def _floor_s(seconds: float) -> float:
    """A window length to suggest: ``seconds`` rounded down to whole hours (from 2 h), minutes (from 2 min) or seconds
    (1 ms at least)."""
    for unit in (3600.0, 60.0, 1.0):
        if seconds >= 2 * unit or unit == 1.0 and seconds >= 1:
            return math.floor(seconds / unit) * unit
    return max(math.floor(seconds * 1000), 1) / 1000


def read_azure(path: Path) -> Iterator[TraceRow]:
    """Rows of an Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``), parsed
    :data:`CHUNK_ROWS` at a time as they are asked for; ``arrival_s`` the wall-clock time in seconds (the caller
    counts from the first request)."""
    import pandas as pd

    try:
        # as text, every cell as the file writes it: an error quotes "nan" or an empty cell, not numpy's repr
        chunks = pd.read_csv(path, encoding="utf-8-sig", skipinitialspace=True, dtype=str, keep_default_na=False,
                             chunksize=CHUNK_ROWS)  # fmt: skip
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable CSV file ({exc})") from None
    index = 0
    with chunks:
        while True:
            try:
                df = next(chunks)
            except StopIteration:
                return
            except (OSError, ValueError) as exc:
                raise UserError(f"{path}: not a readable CSV file ({exc})") from None
            df.columns = [str(c).strip() for c in df.columns]
            missing = [c for c in AZURE_COLUMNS if c not in df.columns]
            if missing:
                raise UserError(f"{path}: an Azure LLM inference trace has the columns {', '.join(AZURE_COLUMNS)}; "
                                f"this file lacks {', '.join(missing)} (its header: {', '.join(df.columns)})")  # fmt: skip
            seconds = _seconds(df["TIMESTAMP"], path, first_row=index + 2)
            inputs = _counts(df["ContextTokens"], path, "ContextTokens", first_row=index + 2)
            outputs = _counts(df["GeneratedTokens"], path, "GeneratedTokens", first_row=index + 2)
            for s, n_in, n_out in zip(seconds, inputs, outputs, strict=True):
                yield TraceRow(index, float(s), n_in, n_out)
                index += 1


def _seconds(column, path: Path, first_row: int):
    """A column of wall-clock times (the file's text) as seconds since 1970; an error naming the first line that is
    not a date and time (``NaT``, an empty cell, words) and quoting its cell as written: a row without its arrival
    cannot be replayed, and dropping it would replay another trace."""
    import pandas as pd

    try:
        times = pd.to_datetime(column, format="ISO8601", utc=True, errors="coerce")
    except (ValueError, TypeError) as exc:  # a column pandas cannot read as times at all
        raise UserError(f"{path}: TIMESTAMP must be a date and time like 2023-11-16 18:17:03.9799600 "
                        f"({exc})") from None  # fmt: skip
    bad = times.isna()
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise UserError(f"{path}:{i + first_row}: TIMESTAMP must be a date and time like 2023-11-16 "
                        f"18:17:03.9799600, got {_quoted(column.iloc[i])}: every row needs the time its request "
                        "arrived; fill it in or remove the row")  # fmt: skip
    return (times - pd.Timestamp(0, tz="UTC")).dt.total_seconds()


def _quoted(cell) -> str:
    cell = str(cell)
    return repr(cell if len(cell) <= 40 else cell[:37] + "...") if cell.strip() else "an empty cell"


def _counts(column, path: Path, name: str, first_row: int) -> list[int]:
    """A column of token counts (the file's text) as integers; an error naming the first line that is not a count
    >= 0 (at most :data:`MAX_TOKENS`) and quoting its cell as written."""
    import pandas as pd

    values = pd.to_numeric(column, errors="coerce")
    bad = values.isna() | (values < 0) | (values % 1 != 0) | (values > MAX_TOKENS)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise UserError(f"{path}:{i + first_row}: {name} must be a whole number of tokens >= 0, got "
                        f"{_quoted(column.iloc[i])}{_too_large(values.iloc[i])}")  # fmt: skip
    return [int(v) for v in values]


def _too_large(value) -> str:
    return f" (above {MAX_TOKENS:,}: not a count of tokens)" if math.isfinite(value) and value > MAX_TOKENS else ""


def _number(value) -> float | None:
    """A JSON number as a float, ``None`` where it is not one (a bool, a string, NaN, infinite, or an integer no
    float holds: ``1`` followed by 400 zeros)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _shown(value) -> str:
    """A JSON value as a message quotes it: a number of 400 digits by its first ones and its length."""
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"


def read_mooncake(path: Path) -> Iterator[TraceRow]:
    """Rows of a Mooncake trace (JSON Lines with ``timestamp`` in ms, ``input_length``, ``output_length``,
    ``hash_ids``), read line by line as they are asked for."""
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    index = 0
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{n}: not valid JSON Lines: {exc.msg}") from None
            if not isinstance(obj, dict) or any(k not in obj for k in MOONCAKE_FIELDS):
                raise UserError(f"{path}:{n}: a Mooncake trace line is an object with {', '.join(MOONCAKE_FIELDS)} "
                                f"(and hash_ids); got {line.rstrip()[:80]!r}")  # fmt: skip
            values = {k: _number(obj[k]) for k in MOONCAKE_FIELDS}
            if any(v is None or v < 0 for v in values.values()) or any(
                    values[k] % 1 or values[k] > MAX_TOKENS for k in ("input_length", "output_length")):  # type: ignore[operator]
                got = ", ".join(f"{k} {_shown(obj[k])}" for k in MOONCAKE_FIELDS)
                raise UserError(f"{path}:{n}: timestamp (ms), input_length and output_length must be numbers >= 0 "
                                f"(token counts whole, at most {MAX_TOKENS:,}), got {got}")  # fmt: skip
            hashes = obj.get("hash_ids") or []
            if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
                raise UserError(f"{path}:{n}: hash_ids must be a list of integers, got {str(hashes)[:80]}")
            yield TraceRow(index, values["timestamp"] / 1000.0, int(obj["input_length"]),  # type: ignore[operator]
                           int(obj["output_length"]), tuple(hashes))  # fmt: skip
            index += 1


# --- durations ------------------------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(h|min|ms|m|s)?", re.IGNORECASE)
_UNIT_S = {"h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "ms": 1e-3, None: 1.0}


def parse_duration(text: str | float | int, flag: str = "--trace-window") -> float:
    """``"10m"`` -> 600.0; ``"90s"``, ``"1h"``, ``"1m30s"``, ``"2.5m"``; a bare number is seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        s = str(text).strip().replace(" ", "")
        parts = list(_DURATION.finditer(s))
        if not s or not parts or "".join(p.group(0) for p in parts) != s:
            raise UserError(f"{flag} {text}: expected a duration like 10m, 90s, 1h or 1m30s (a bare number is seconds)")
        seconds = sum(float(p.group(1)) * _UNIT_S[(p.group(2) or "").lower() or None] for p in parts)
    if not seconds > 0 or not math.isfinite(seconds):
        raise UserError(f"{flag} {text}: a duration must be above 0")
    return seconds


def fmt_duration(seconds: float) -> str:
    """600 -> ``"10 min"``, 90 -> ``"90 s"``, 7200 -> ``"2 h"``: how the report names a window."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
