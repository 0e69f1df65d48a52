"""A server whose ``usage.completion_tokens`` disagrees with what it streamed is not believed (issue #52 item 2),
with real stand-in servers over loopback: one that streams 16 tokens and reports 999 is flagged on every request,
by the chunks' token ids where it sends them, by the target's tokenizer on the streamed text (reasoning included)
where it sends none, and by its chunks and bytes where there is no tokenizer either; the point's throughput uses
the streamed count and says so on its line, in the trust flags of the sweep's end, of both reports and of
``compare``. The same stand-in reporting honestly flags nothing."""

from __future__ import annotations

import html
import json

from test_reliability import only_run_dir, standin_backend, sweep, write_suite  # noqa: F401 - an autouse fixture
from typer.testing import CliRunner

from dflashbench.bench.standin import run_standin
from dflashbench.cli import app
from dflashbench.embedded import default_paths
from dflashbench.measure import metrics
from dflashbench.run.store import load_run

STREAMED = 16
NOTE = "the server's usage.completion_tokens disagreed with what it streamed on 3 of 3 requests (e.g. 999 reported " \
       "against 16 streamed, counted by "  # fmt: skip
TRUST = "the server's token counts disagreed with its stream: usage.completion_tokens on 3 of 3 requests at " \
        "1 point (AR c=1: 999 reported against 16 streamed, counted by "  # fmt: skip
TRUST_SHORT = "the server's token counts disagreed with its stream"  # the verdict's line; the whole flag in the report


def endpoint_sweep(tmp_path, name: str, *standin_args: str):
    """``sweep --endpoint`` (read as vLLM, which streams token ids when asked) against a stand-in started with
    ``standin_args``; the result and the run directory."""
    out = tmp_path / name
    with run_standin("--pace-ms", "2", "--model", "standin-model", "--token-ids", *standin_args) as url:
        result = sweep("--suite", write_suite(tmp_path, max_tokens=STREAMED, name=name), "--endpoint", url,
                       "--backend", "vllm", "-o", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    return result, only_run_dir(out)


def assert_every_request_flagged(result, run_dir, counted_by: str) -> None:
    run = load_run(run_dir)
    (point,) = run.points.to_dict("records")
    measured = [r for r in run.request_records() if not r.warmup]
    # throughput from the streamed count: 16 tokens a request over the point's window, not 999
    assert point["output_tokens"] == STREAMED * len(measured) == STREAMED * 3
    assert point["throughput_tok_per_s"] == metrics.throughput_tok_per_s(measured)
    assert point["output_tokens_source"] == "streamed"
    assert (point["usage_checked_requests"], point["usage_mismatch_requests"]) == (3, 3)
    for r in measured:
        assert (r.streamed_tokens, r.streamed_tokens_source, r.server_output_tokens) == (STREAMED, counted_by, 999)
        assert r.output_tokens == STREAMED and sum(r.chunk_tokens) == STREAMED and r.chunk_tokens_estimated
    line = next(x for x in result.output.splitlines() if "ar gsm8k c=1:" in x)
    assert NOTE in line and "throughput, TPOT and per-user rates use the streamed count" in line
    # the verdict's "Read with care" item, its wrapped lines (indented four) joined back
    items = " ".join(x.strip() if x.startswith("    ") else "\n" + x for x in result.output.splitlines()).split("\n")
    read_with_care = next(x for x in items if "Read with care:" in x)
    assert TRUST_SHORT in read_with_care


def test_a_server_reporting_999_for_16_streamed_tokens_is_flagged_on_every_request(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lying, lying_dir = endpoint_sweep(tmp_path, "lying", "--usage-tokens", "999")
    assert_every_request_flagged(lying, lying_dir, "token_ids")
    report = html.unescape((tmp_path / "lying" / "reports" / f"{lying_dir.name}.html").read_text())
    assert TRUST in report
    md = CliRunner().invoke(app, ["report", str(lying_dir), "-o", str(tmp_path / "lying.md")])
    assert md.exit_code == 0 and TRUST in (tmp_path / "lying.md").read_text().replace("\\_", "_")  # Markdown escapes

    honest, honest_dir = endpoint_sweep(tmp_path, "honest")
    run = load_run(honest_dir)
    (point,) = run.points.to_dict("records")
    assert (point["usage_checked_requests"], point["usage_mismatch_requests"]) == (3, 0)
    assert point["output_tokens"] == STREAMED * 3 and point["output_tokens_source"] == "server"
    rows = [json.loads(x) for x in (honest_dir / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in rows if not r["warmup"]]
    assert [(r["streamed_tokens"], r["streamed_tokens_source"], r["server_output_tokens"]) for r in measured] == \
        [(STREAMED, "token_ids", None)] * 3  # fmt: skip
    assert "disagreed" not in honest.output

    gate = CliRunner().invoke(app, ["compare", str(honest_dir), str(lying_dir)])
    assert f"NEW: {TRUST}" in gate.output, gate.output


def test_without_token_ids_the_chunks_and_bytes_flag_it_too(tmp_path):
    """A launched stand-in (the standin backend asks for no token ids) and no tokenizer of its model here: 16
    chunks of "tok " (64 bytes) cannot hold 999 tokens."""
    extra = '[extra_args]\nar = ["--usage-tokens", "999"]\n'
    out = tmp_path / "results"
    result = sweep("--suite", write_suite(tmp_path, max_tokens=STREAMED, extra=extra), "-o", out, "--no-report")
    assert result.exit_code == 0, result.output
    assert_every_request_flagged(result, only_run_dir(out), "chunks")


def test_without_token_ids_the_targets_tokenizer_counts_answer_and_reasoning(tmp_path):
    """A launched stand-in serving the embedded target's name, streaming " the" (one token of its tokenizer) with
    the first 5 tokens as reasoning_content: the tokenizer, loaded before the point, counts all 16 (reasoning
    included, or it would be 11 and flagged); the same server reporting 999 is flagged by it."""
    target = default_paths().target
    for name, args, flagged in (("lying", ', "--usage-tokens", "999"', 3), ("honest", "", 0)):
        extra = f'[extra_args]\nar = ["--token-text", " the", "--reasoning-tokens", "5"{args}]\n'
        out = tmp_path / name
        result = sweep("--suite", write_suite(tmp_path, max_tokens=STREAMED, extra=extra, model=str(target), name=name),
                       "-o", out, "--no-report")  # fmt: skip
        assert result.exit_code == 0, result.output
        if flagged:
            assert_every_request_flagged(result, only_run_dir(out), "tokenizer")
            continue
        run = load_run(only_run_dir(out))
        measured = [r for r in run.request_records() if not r.warmup]
        assert [(r.streamed_tokens, r.streamed_tokens_source, r.usage_mismatch) for r in measured] == \
            [(STREAMED, "tokenizer", False)] * 3  # fmt: skip
        assert run.points["usage_mismatch_requests"].tolist() == [0]
