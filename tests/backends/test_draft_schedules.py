"""A tuned draft-length schedule in each engine's own form: vLLM's num_speculative_tokens_per_batch_size, TensorRT-LLM's
draft_len_schedule, SGLang's fixed K per load range (it has no schedule). Each engine's parser takes them in
`nox -s engines` (tests/engines/check_argv.py); here, what dflashbench builds."""

from __future__ import annotations

import json

import pytest
import yaml

from dflashbench.backends import get_backend
from dflashbench.backends.base import ServerSpec
from dflashbench.backends.sglang import schedule_ranges
from dflashbench.backends.trtllm import draft_len_schedule, llm_api_options
from dflashbench.backends.vllm import VllmBackend, speculative_config
from dflashbench.errors import UserError
from dflashbench.reference.draft_length import DraftSchedule
from dflashbench.types import Method

FALLING = DraftSchedule.parse("[[1,1,7],[2,8,3],[9,64,1]]")


def spec(method=Method.DFLASH, **kw) -> ServerSpec:
    draft = {Method.DFLASH: "z-lab/Qwen3-8B-DFlash-b16", Method.EAGLE3: "RedHatAI/Qwen3-8B-speculator.eagle3"}
    return ServerSpec(method=method, model="Qwen/Qwen3-8B", draft=draft.get(method), draft_block_size=16, **kw)


def test_vllm_takes_the_schedule_in_its_speculative_config_with_its_longest_k():
    config = speculative_config(spec(draft_schedule=FALLING), "0.32.0")
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 1, 7], [2, 8, 3], [9, 64, 1]]
    assert config["num_speculative_tokens"] == 7  # vLLM caps every K at it: the schedule's longest
    capped = speculative_config(spec(draft_schedule=FALLING, num_speculative_tokens=5), "0.32.0")
    assert capped["num_speculative_tokens"] == 5  # a K given as well caps the schedule, as vLLM does
    plan = VllmBackend(version="0.24.0").launch_plan(spec(Method.EAGLE3, draft_schedule=FALLING))
    sent = json.loads(plan.argv[plan.argv.index("--speculative-config") + 1])
    assert sent["method"] == "eagle3" and sent["num_speculative_tokens_per_batch_size"][0] == [1, 1, 7]
    with pytest.raises(UserError, match="vllm 0.23.0 has no num_speculative_tokens_per_batch_size .* arrived in vllm 0.24.0"):
        speculative_config(spec(draft_schedule=FALLING), "0.23.0")
    with pytest.raises(UserError, match="drafts nothing at any batch size"):
        speculative_config(spec(draft_schedule=DraftSchedule.parse("[[1,64,0]]")), "0.32.0")
    assert "num_speculative_tokens_per_batch_size" not in speculative_config(spec(), "0.32.0")


def test_trtllm_takes_each_ranges_last_batch_size_and_holds_the_last_k_to_the_cap():
    assert draft_len_schedule(spec(draft_schedule=FALLING)) == {1: 7, 8: 3, 64: 1}
    # without the cap's key, TensorRT-LLM's implicit tier would draft nothing past batch 64
    assert draft_len_schedule(spec(draft_schedule=FALLING, max_running_requests=512)) == {1: 7, 8: 3, 512: 1}
    options = llm_api_options(spec(draft_schedule=FALLING, max_running_requests=512))
    assert options["speculative_config"] == {"decoding_type": "DFlash", "max_draft_len": 7,
                                             "draft_len_schedule": {1: 7, 8: 3, 512: 1},
                                             "speculative_model": "z-lab/Qwen3-8B-DFlash-b16"}  # fmt: skip
    plan = get_backend("trtllm").launch_plan(spec(draft_schedule=FALLING))
    written = yaml.safe_load(next(iter(plan.files.values())))
    assert written["speculative_config"]["draft_len_schedule"] == {1: 7, 8: 3, 64: 1}
    rising = DraftSchedule.parse("[[1,1,3],[2,64,5]]")
    with pytest.raises(UserError, match="smallest batch size to draft the longest K"):
        draft_len_schedule(spec(draft_schedule=rising))
    assert draft_len_schedule(spec()) is None


def test_sglang_has_no_schedule_so_its_form_is_a_fixed_k_per_load_range():
    with pytest.raises(UserError, match="SGLang takes no draft length by batch size .* --speculative-adaptive"):
        get_backend("sglang").launch_plan(spec(Method.EAGLE3, draft_schedule=FALLING))
    ranges = schedule_ranges(spec(Method.EAGLE3, draft_schedule=FALLING))
    assert [(lo, hi) for lo, hi, _ in ranges] == [(1, 1), (2, 8), (9, 64)]
    first = ranges[0][2]
    assert first[first.index("--speculative-num-steps") + 1] == "7"
    assert ranges[2][2][ranges[2][2].index("--speculative-num-draft-tokens") + 1] == "2"
    dflash = schedule_ranges(spec(draft_schedule=FALLING))
    assert dflash[1][2][dflash[1][2].index("--speculative-num-draft-tokens") + 1] == "4"  # DFlash: the block, K + 1


def test_the_tuned_gpt_oss_120b_schedule_as_a_dry_run_prints_it(tmp_path):
    """Issue #66: the vLLM argv of a tuned schedule for gpt-oss-120b in a dry run (its DFlash block is 10)."""
    from typer.testing import CliRunner

    from dflashbench.cli import app

    path = tmp_path / "schedule.json"
    path.write_text(json.dumps({"method": "dflash", "num_speculative_tokens_per_batch_size": [[1, 1, 9], [2, 8, 5],
                                                                                               [9, 512, 3]]}))  # fmt: skip
    out = CliRunner().invoke(app, ["sweep", "--backend", "vllm", "--model", "gpt-oss-120b", "--method", "dflash",
                                   "--schedule", str(path), "--gpu", "8xH200", "--dry-run", "--show-commands"])  # fmt: skip
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if ln.startswith("server for dflash-tuned:"))
    assert ('\'{"method":"dflash","model":"z-lab/gpt-oss-120b-DFlash","num_speculative_tokens":9,'
            '"num_speculative_tokens_per_batch_size":[[1,1,9],[2,8,5],[9,512,3]],"attention_backend":"FLASH_ATTN"}\'') in line
    fixed = next(ln for ln in out.output.splitlines() if ln.startswith("server for dflash:"))
    assert "per_batch_size" not in fixed
