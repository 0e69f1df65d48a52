"""The GPU workflow calls dflashbench as it is: every command and flag it uses exists, its gate parses."""

import re
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.gate.compare import parse_threshold

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "gpu-bench.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def dflashbench_calls(workflow: dict) -> list[list[str]]:
    calls = []
    for step in workflow["jobs"]["bench"]["steps"]:
        for line in step.get("run", "").splitlines():
            line = line.strip()
            if line.startswith("dflashbench "):
                calls.append(shlex.split(line.split(" >>")[0].split(" |")[0]))
    return calls


def test_every_command_and_flag_exists(workflow):
    calls = dflashbench_calls(workflow)
    assert {c[1] for c in calls} == {"doctor", "sweep", "report", "compare"}
    runner = CliRunner()
    for call in calls:
        help_text = runner.invoke(app, [call[1], "--help"], terminal_width=200).output
        for flag in (t for t in call[2:] if t.startswith("-") and not t.startswith("$")):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), (call[1], flag)


def test_gate_thresholds_parse(workflow):
    tokens = shlex.split(workflow["env"]["GATE"])
    pairs = list(zip(tokens[::2], tokens[1::2], strict=True))
    assert pairs and all(flag in ("--max-drop", "--max-rise") for flag, _ in pairs)
    for flag, text in pairs:
        parse_threshold(text, flag.removeprefix("--max-"))


def test_runs_on_a_self_hosted_gpu_runner_and_never_on_pull_requests(workflow):
    assert workflow["jobs"]["bench"]["runs-on"] == ["self-hosted", "linux", "gpu"]
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert "pull_request" not in triggers and "pull_request_target" not in triggers
    steps = workflow["jobs"]["bench"]["steps"]
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and "reports/gpu-bench.html" in uploads[0]["with"]["path"]
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") for s in steps)
