"""The public traces as published (schemas read off the shipped slices, which are the real files' first rows), their
attribution and licences, and reading a user's own file in either format."""

from __future__ import annotations

import json
import math
import re

import pytest

from dflashbench.errors import UserError
from dflashbench.workloads.traces import (
    AZURE_COLUMNS,
    DATA_DIR,
    MOONCAKE_BLOCK_TOKENS,
    SHIPPED,
    fmt_duration,
    load_trace,
    parse_duration,
)

# AzureLLMInferenceDataset2023.md: "TIMESTAMP | Invocation time", written with 7 fractional digits in the files.
AZURE_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{7}")


@pytest.mark.parametrize("name", [n for n, t in SHIPPED.items() if t.format == "azure"])
def test_azure_slices_keep_the_published_schema_byte_for_byte(name):
    raw = (DATA_DIR / SHIPPED[name].file).read_bytes()
    lines = raw.split(b"\r\n")
    assert lines[0].decode() == ",".join(AZURE_COLUMNS)  # the header as published, CRLF line ends kept
    assert lines[-1] == b""  # the file ends with a line end
    for line in lines[1:-1]:
        stamp, context, generated = line.decode().split(",")
        assert AZURE_TIME.fullmatch(stamp), stamp
        assert int(context) >= 0 and int(generated) >= 1, line
    trace = load_trace(name)
    assert len(trace.rows) == len(lines) - 2 and trace.reordered == 0  # published in arrival order
    assert trace.rows[-1].arrival_s < SHIPPED[name].length_s <= trace.rows[-1].arrival_s + 60


def test_mooncake_slice_keeps_the_published_schema():
    shipped = SHIPPED["mooncake-conv"]
    lines = (DATA_DIR / shipped.file).read_text().splitlines()
    for line in lines:
        row = json.loads(line)
        assert list(row) == ["timestamp", "input_length", "output_length", "hash_ids"]
        assert all(type(row[k]) is int for k in ("timestamp", "input_length", "output_length"))
        # FAST25-release/README.md: hash_ids are the prefix blocks of 512 tokens
        assert len(row["hash_ids"]) == math.ceil(row["input_length"] / MOONCAKE_BLOCK_TOKENS)
    trace = load_trace("mooncake-conv")
    assert len(trace.rows) == len(lines) == 339
    assert trace.rows[1].hash_ids[:1] == trace.rows[0].hash_ids[:1] == (0,)  # a shared first block, as published
    assert trace.block_tokens == 512


def test_every_shipped_slice_is_attributed_with_its_licence():
    notice = (DATA_DIR / "NOTICE.md").read_text()
    for t in SHIPPED.values():
        assert t.file in notice
    assert f"first {len(load_trace('azure-code').rows):,} rows" in notice
    assert f"first {len(load_trace('azure-conv').rows):,} rows" in notice
    assert f"first {len(load_trace('mooncake-conv').rows):,} lines" in notice
    assert "CC BY 4.0" in notice and "Apache License, Version 2.0" in notice
    assert (DATA_DIR / "LICENSE-CC-BY-4.0.txt").read_text(encoding="utf-8-sig").startswith("Attribution 4.0 International")
    assert "Apache License" in (DATA_DIR / "LICENSE-APACHE-2.0.txt").read_text()[:200]


def test_arrivals_start_at_zero_in_order_and_a_window_keeps_its_first_stretch():
    trace = load_trace("azure-code")
    assert trace.rows[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(trace.rows, trace.rows[1:], strict=False))
    first = trace.window(30)
    assert first.window_s == 30 and all(r.arrival_s < 30 for r in first.rows)
    assert first.rows == trace.rows[: len(first.rows)] and len(first.rows) < len(trace.rows)
    with pytest.raises(UserError, match=r"holds only its first 10 min.*--trace PATH"):
        trace.window(parse_duration("11m"))


def test_a_users_azure_file_is_read_sorted_and_named(tmp_path):
    path = tmp_path / "my trace (2024).csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2024-05-10 00:00:02.500000+00:00,100,7\n"
                    "2024-05-10 00:00:00.000000+00:00,2000,30\n"
                    "2024-05-10 00:00:01.000000+00:00,5,1\n")  # fmt: skip
    trace = load_trace(str(path))
    assert trace.name == "my-trace-2024" and trace.format == "azure" and trace.kind == "unknown"
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in trace.rows] == [
        (0.0, 2000, 30), (1.0, 5, 1), (2.5, 100, 7)]  # fmt: skip
    assert trace.reordered == 3 and [r.index for r in trace.rows] == [1, 2, 0]


def test_a_users_mooncake_file_is_read(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n\n'
                    '{"timestamp": 1500, "input_length": 10, "output_length": 3}\n')  # fmt: skip
    trace = load_trace(str(path))
    assert [(r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids) for r in trace.rows] == [
        (0.0, 600, 5, (1, 2)), (1.5, 10, 3, ())]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "match"), [
    ("a.csv", "TIMESTAMP,Tokens\n2023-11-16 18:17:03.9799600,4\n", r"lacks ContextTokens, GeneratedTokens"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4,-2\n", r"a\.csv:2: GeneratedTokens"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,4,2\n", r"a\.csv:2: TIMESTAMP must be a date.*'yesterday'"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,4,2\nNaT,4,2\n", r"a\.csv:3: .*got 'NaT'"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n,4,2\n", r"a\.csv:2: .*got an empty cell: every row needs"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1e30,2\n", r"got '1e30' \(above 9,007,"),
    ("a.jsonl", '{"timestamp": 1e400, "input_length": 3, "output_length": 2}\n', r"a\.jsonl:1: .*got timestamp"),
    ("a.jsonl", '{"timestamp": 0, "input_length": 1%s, "output_length": 2}\n' % ("0" * 400), r"\(401 characters\)"),
    ("a.jsonl", '{"timestamp": 0, "input_length": 3}\n', r"a\.jsonl:1: .*timestamp, input_length, output_length"),
    ("a.jsonl", '{"timestamp": 0, "input_length": 3, "output_length": 2.5}\n', "whole"),
    ("a.jsonl", "not json\n", r"a\.jsonl:1: not valid JSON Lines"),
    ("a.txt", "x", "unknown format .txt"),
])  # fmt: skip
def test_a_bad_trace_file_gets_an_error_naming_the_line_and_the_fix(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UserError, match=match):
        load_trace(str(path))


@pytest.mark.parametrize(("cell", "said"), [("nan", "got 'nan'"), ("", "got an empty cell"), ("NaN", "got 'NaN'"),
                                          ("inf", "got 'inf'"), ("4.5", "got '4.5'"), ("many", "got 'many'")])
def test_a_count_that_is_not_a_number_is_quoted_as_the_file_writes_it(tmp_path, cell, said):
    """Issue #52: a NaN (or an empty cell) in a trace row printed ``got np.float64(nan)``, numpy's repr, not the file's
    text: the message quotes the cell as written."""
    path = tmp_path / "t.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4,2\n"
                    f"2023-11-16 18:17:04.0319600,{cell},8\n")  # fmt: skip
    with pytest.raises(UserError) as caught:
        load_trace(str(path))
    message = str(caught.value)
    assert message == f"{path}:3: ContextTokens must be a whole number of tokens >= 0, {said}", message
    assert "np." not in message and "float64" not in message


def test_an_unknown_trace_names_the_shipped_ones():
    with pytest.raises(UserError, match="azure-code, azure-conv, mooncake-conv"):
        load_trace("azure-cod")


@pytest.mark.parametrize(("text", "seconds"), [("10m", 600), ("90s", 90), ("1h", 3600), ("1m30s", 90),
                                               ("2.5m", 150), ("600", 600), (45, 45), ("10min", 600), ("500ms", 0.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "ten minutes", "10x", "0", "-5m", "5m-"])
def test_bad_durations_say_what_a_duration_looks_like(text):
    with pytest.raises(UserError, match="--trace-window"):
        parse_duration(text)


def test_durations_read_back():
    assert [fmt_duration(s) for s in (600, 90, 7200, 30.5)] == ["10 min", "90 s", "2 h", "30.5 s"]
