"""Issue #63, item 7 (the issue's item 9): what the dry run puts on a screen. In-process dry runs, no GPU."""

from __future__ import annotations

import re
import shlex

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app

HEADLINE = ("--backend", "vllm", "--model", "gpt-oss-120b", "--gpu", "8xh100")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def dry(*args: str) -> str:
    result = CliRunner().invoke(app, ["sweep", "--dry-run", *args])
    assert result.exit_code == 0, result.output
    return result.output


def screen_lines(text: str, width: int = 100) -> int:
    return sum(max(1, -(-len(line) // width)) for line in text.splitlines())


def test_the_headline_fits_45_lines_at_100_columns_and_show_commands_prints_each_command_whole():
    out = dry(*HEADLINE)
    assert screen_lines(out) <= 45, out
    wrapped = [ln for ln in out.splitlines() if ln.startswith("    --")]
    assert wrapped and all(not ln.startswith("server for") for ln in wrapped)  # argv wraps under its server
    full = dry(*HEADLINE, "--show-commands")
    line = next(ln for ln in full.splitlines() if ln.startswith("server for eagle3: "))
    argv = shlex.split(line.split(": ", 1)[1])
    assert argv[0] == "VLLM_SERVER_DEV_MODE=1" and "vllm" in argv and "--speculative-config" in argv
    assert "  VLLM_SERVER_DEV_MODE: vLLM serves /reset_prefix_cache only in its development mode" in full


def test_two_dry_runs_print_the_same_lines():
    assert dry(*HEADLINE) == dry(*HEADLINE)
    assert "--port <port>" in dry(*HEADLINE)


def test_capped_servers_say_what_they_are_capped_to():
    line = next(ln for ln in dry(*HEADLINE).splitlines() if ln.startswith("plan: memory"))
    assert line.endswith("; ar, eagle3 capped to dflash's") and "c=128" in line


def test_the_planned_requests_header_sits_over_its_values():
    out = dry("--num-prompts", "8", "--concurrency", "1,2").splitlines()
    header = next(ln for ln in out if ln.startswith("  planned requests"))
    row = out[out.index(header) + 1]
    for label, value in zip(re.finditer(r"c=\d+", header), re.finditer(r"\d+\s*$|\d+(?=\s)", row[34:]),
                            strict=False):  # fmt: skip
        assert label.end() == 34 + value.end()


def test_a_plan_that_sends_every_prompt_does_not_set_it_against_itself():
    out = dry("--num-prompts", "8", "--concurrency", "1")
    assert "against every prompt" not in out


def test_a_trace_suite_grid_names_only_its_trace_points():
    out = dry("--suite", "trace-demo")
    assert "0 concurrencies" not in out and "c=0" not in out and "concurrency \n" not in out
    assert re.search(r"grid: 2 methods × 1 workload × \d+ trace points = \d+ points", out), out


def test_the_embedded_drafters_block_size_is_read_from_its_config():
    out = dry("--num-prompts", "8", "--concurrency", "1")
    assert "plan: DFlash block 16 (15 draft tokens a step), from the drafter's config.json " \
           "(dflashbench/embedded/dflash/config.json)" in out  # fmt: skip
