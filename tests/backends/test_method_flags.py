"""Each method's engine flags, built from its record (dflashbench/data/methods.toml), and the checks before launch."""

from __future__ import annotations

import json

import pytest

from dflashbench.backends import gates
from dflashbench.backends.base import ServerSpec
from dflashbench.backends.sglang import SglangBackend
from dflashbench.backends.trtllm import llm_api_options
from dflashbench.backends.vllm import VllmBackend, dflash2_runner_check, speculative_config
from dflashbench.errors import UserError
from dflashbench.methods import record, records
from dflashbench.types import Method

TARGET = "Qwen/Qwen3.5-27B"


def spec(method: Method, **kw) -> ServerSpec:
    return ServerSpec(method=method, model=TARGET, **kw)


def test_every_method_has_one_record_and_every_record_is_a_method():
    assert list(records()) == list(Method)
    assert {m.value for m in Method} >= {"ar", "eagle3", "dflash", "dflash2", "mtp", "ngram", "suffix"}
    for rec in records().values():
        for engine, how in rec.engines.items():
            assert how.source, (rec.name, engine)


def test_vllm_mtp_drafts_with_the_target_itself():
    assert speculative_config(spec(Method.MTP), "0.33.0") == {"method": "mtp", "num_speculative_tokens": 1}


def test_vllm_ngram_takes_the_documented_defaults():
    config = speculative_config(spec(Method.NGRAM), "0.33.0")
    assert config == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 4, "prompt_lookup_max": 4}
    assert speculative_config(spec(Method.NGRAM, num_speculative_tokens=3), "0.33.0")["num_speculative_tokens"] == 3


def test_vllm_dflash2_is_dflash_with_its_drafter_and_block():
    config = speculative_config(spec(Method.DFLASH2, draft="z-lab/Qwen3.8-27B-DFlash2", draft_block_size=8), "0.33.0")
    assert config == {"method": "dflash", "model": "z-lab/Qwen3.8-27B-DFlash2", "num_speculative_tokens": 7,
                      "attention_backend": "FLASH_ATTN"}


def test_vllm_suffix_leaves_the_length_to_vllm_and_says_what_it_needs():
    plan = VllmBackend(version="0.33.0", install=None).launch_plan(spec(Method.SUFFIX))
    config = json.loads(plan.argv[plan.argv.index("--speculative-config") + 1])
    assert config == {"method": "suffix"}
    assert any("arctic-inference" in n for n in plan.notes)


def test_a_drafter_method_without_a_draft_names_the_fix():
    with pytest.raises(UserError, match="vllm dflash2 needs a DFlash2 drafter: pass --draft"):
        speculative_config(spec(Method.DFLASH2), "0.33.0")


def test_sglang_mtp_is_nextn_without_a_draft_path():
    argv = SglangBackend(version="0.5.23").launch_plan(spec(Method.MTP)).argv
    assert "--speculative-draft-model-path" not in argv
    i = argv.index("--speculative-algorithm")
    assert argv[i:i + 8] == ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1",
                             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2")


def test_sglang_ngram_and_dflash2():
    argv = SglangBackend(version="0.5.23").launch_plan(spec(Method.NGRAM)).argv
    assert argv[argv.index("--speculative-algorithm") + 1] == "NGRAM"
    assert "--speculative-num-draft-tokens" not in argv  # SGLang's own default
    argv = SglangBackend(version="0.5.23").launch_plan(spec(Method.DFLASH2, draft="d", draft_block_size=8)).argv
    i = argv.index("--speculative-algorithm")
    assert argv[i:i + 6] == ("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d",
                             "--speculative-num-draft-tokens", "8")


def test_sglang_requests_ask_for_per_request_acceptance_on_speculative_servers():
    backend = SglangBackend(version="0.5.23")
    assert backend.request_fields(Method.DFLASH) == {"return_spec_tokens_details": True}
    assert backend.request_fields(Method.AR) == {}


def test_sglang_has_no_suffix_decoding_and_says_where_it_runs():
    with pytest.raises(UserError, match="sglang has no suffix .*it runs on vllm"):
        SglangBackend(version="0.5.23").launch_plan(spec(Method.SUFFIX))


def test_trtllm_mtp_and_ngram_configs():
    mtp = llm_api_options(spec(Method.MTP))["speculative_config"]
    assert mtp == {"decoding_type": "MTP", "num_nextn_predict_layers": 1}
    ngram = llm_api_options(spec(Method.NGRAM))["speculative_config"]
    assert ngram == {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2}


def test_gates_come_from_the_records():
    dflash2 = {g.engine: g.since for g in gates.GATES if g.short == "dflash2"}
    assert dflash2 == {"vllm": "0.28.0", "sglang": "0.5.19"}
    with pytest.raises(UserError, match=r"DFlash2 \(dflash\) needs vllm 0.28.0"):
        gates.check("vllm", {Method.DFLASH2: spec(Method.DFLASH2, draft="d")}, version="0.27.1")
    assert gates.check("vllm", {Method.DFLASH2: spec(Method.DFLASH2, draft="d")}, version="0.28.0") is None
    with pytest.raises(UserError, match=r"DFlash2 \(DFLASH\) needs sglang 0.5.19"):
        gates.check("sglang", {Method.DFLASH2: spec(Method.DFLASH2, draft="d")}, version="0.5.18")


def test_a_dflash2_drafter_forced_onto_vllms_v1_runner_is_an_error_naming_the_variable():
    forced = spec(Method.DFLASH2, draft="d", env={"VLLM_USE_V2_MODEL_RUNNER": "0"})
    with pytest.raises(UserError, match="runs it on its V1|plain DFlash.*unset VLLM_USE_V2_MODEL_RUNNER or set "
                                        "VLLM_USE_V2_MODEL_RUNNER=1"):
        dflash2_runner_check(forced, "0.28.0", {})
    with pytest.raises(UserError, match="VLLM_USE_V2_MODEL_RUNNER=1"):  # from the user's environment too
        dflash2_runner_check(spec(Method.DFLASH2, draft="d"), "0.28.0", {"VLLM_USE_V2_MODEL_RUNNER": "false"})
    with pytest.raises(UserError, match="refuses a DFlash2 drafter on its V1"):
        dflash2_runner_check(forced, "0.33.0", {})
    assert "V2 model runner" in dflash2_runner_check(spec(Method.DFLASH2, draft="d"), "0.28.0", {})
    unknown = dflash2_runner_check(spec(Method.DFLASH2, draft="d"), None, {})
    assert "cannot be told" in unknown  # a dry run without vLLM: a flag, not an error
    assert dflash2_runner_check(spec(Method.DFLASH, draft="d", env={"VLLM_USE_V2_MODEL_RUNNER": "0"}), "0.28.0", {}) \
        is None


def test_method_labels():
    assert record(Method.NGRAM).label == "n-gram" and record("DFlash2").label == "DFlash2"
