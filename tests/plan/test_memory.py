"""The memory plan's arithmetic against hand-computed cases: a dense, a sliding-window, an MoE and a hybrid
(Gated DeltaNet) target, each from a config.json in the schema its model publishes (the fields the engines read,
copied from the public copies the registry cites), on each engine's own memory rule."""

from __future__ import annotations

import math

import pytest

from dflashbench.model_files import kv_facts
from dflashbench.plan import memory
from dflashbench.plan.memory import GIB, MIB, ServerNeeds, Share, server_memory
from dflashbench.plan.models import KvFacts
from dflashbench.types import Method

H100_GIB = 79.6474609375  # NVML's total for an H100 80GB HBM3
H200_GIB = 143771 / 1024

# Qwen/Qwen3-8B (Qwen3ForCausalLM): dense, every layer full attention
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960}
# openai/gpt-oss-120b (GptOssForCausalLM): MoE, sliding-window (128) and full layers alternate
GPT_OSS_120B = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 36,
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 18, "num_local_experts": 128}
# Qwen/Qwen3-Coder-30B-A3B-Instruct (Qwen3MoeForCausalLM): MoE, 48 full layers, 4 KV heads
QWEN3_CODER_30B = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
                   "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                   "num_experts": 128, "num_experts_per_tok": 8}
# Qwen/Qwen3.6-35B-A3B (Qwen3_5MoeForConditionalGeneration): hybrid, full attention every 4th layer, Gated DeltaNet
QWEN36_35B = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
              "text_config": {"model_type": "qwen3_5_moe_text", "num_hidden_layers": 40, "full_attention_interval": 4,
                              "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "hidden_size": 2048,
                              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
                              "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32"}}
# moonshotai/Kimi-K2.5: DeepSeek-V3 multi-head latent attention
KIMI = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "num_attention_heads": 64,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64}
# google/gemma-4-31B-it: 5 sliding (16 KV heads of 256) then 1 full (4 KV heads of 512), window 1024
GEMMA4 = {"architectures": ["Gemma4ForConditionalGeneration"], "text_config": {
    "num_hidden_layers": 60, "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10, "head_dim": 256,
    "global_head_dim": 512, "num_key_value_heads": 16, "num_global_key_value_heads": 4, "sliding_window": 1024}}


def facts(config: dict) -> KvFacts:
    return KvFacts(**kv_facts(config), source="test")  # type: ignore[arg-type]


def test_configs_read_as_the_engines_read_them():
    assert kv_facts(QWEN3_8B) == {"full_layers": 36, "kv_heads": 8, "head_dim": 128}
    assert kv_facts(GPT_OSS_120B) == {"full_layers": 18, "kv_heads": 8, "head_dim": 64, "sliding_layers": 18,
                                      "sliding_window": 128}
    hybrid = kv_facts(QWEN36_35B)
    assert (hybrid["full_layers"], hybrid["linear_layers"], hybrid["kv_heads"], hybrid["linear_value_heads"]) == (10, 30, 2, 32)
    assert kv_facts(KIMI) == {"full_layers": 61, "kv_heads": 1, "head_dim": 576, "latent_dim": 576}
    gemma = kv_facts(GEMMA4)
    assert (gemma["full_layers"], gemma["kv_heads"], gemma["head_dim"]) == (10, 4, 512)
    assert (gemma["sliding_layers"], gemma["sliding_kv_heads"], gemma["sliding_head_dim"]) == (50, 16, 256)


def test_bytes_per_token_by_hand():
    # dense: 36 layers x K and V x 8 heads x 128 x 2 bytes
    assert memory.full_bytes_per_token(facts(QWEN3_8B), tp=1) == 36 * 2 * 8 * 128 * 2 == 147_456
    assert memory.full_bytes_per_token(facts(QWEN3_8B), tp=2) == 73_728  # heads split over tp
    assert memory.full_bytes_per_token(facts(QWEN3_8B), tp=16) == 36 * 2 * 1 * 128 * 2  # at least one head per GPU
    # MLA: one latent of 576 per layer, not split over tp
    assert memory.full_bytes_per_token(facts(KIMI), tp=8) == 61 * 576 * 2 == 70_272
    # sliding: 18 layers x 2 x 8 x 64 x 2 per token inside the window
    assert memory.sliding_bytes_per_token(facts(GPT_OSS_120B), tp=1) == 36_864
    # Gated DeltaNet state: conv (4-1) x (2x16x128 + 32x128) x 2 bytes + recurrent 32x128x128 x 4 bytes, 30 layers
    per_layer = 3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4
    assert per_layer == 2_146_304
    assert memory.linear_state_bytes(facts(QWEN36_35B), tp=1) == 30 * per_layer == 64_389_120


TORCH_H100 = 79.19  # what PyTorch sees of an H100 (the engines' total), not NVML's 79.65
SAMPLER_QWEN3 = 1024 * 151936 * 16 / GIB  # vLLM's sampler peak: 1,024 requests x the vocabulary x 16 B = 2.318 GiB


def test_dense_on_vllm_subtracts_every_term():
    """Qwen3-8B, 15.3 GiB of weights, one H100, vLLM's 0.92: KV = 0.92 x 79.19 - 15.3 - 2.318 (activation: the
    sampler's 1,024 x 151,936 x 16 B, larger than the forward's 8,192 x 0.77 GiB / 8,192) - 0.25 (outside PyTorch)
    - 1.0 (CUDA graphs) = 53.986 GiB; a request of 6,144 tokens (whole blocks of 16) holds 6,144 x 147,456 B =
    864 MiB; 53.986 GiB / 864 MiB = 63.98 -> 63 (the old weights-only rule said 68)."""
    needs = ServerNeeds(Method.AR, facts(QWEN3_8B), 15.3, vocab_size=151936)
    s = server_memory("vllm", needs, Share(0.92, "t"), H100_GIB, 1, 6144, 128)
    assert s.kv_gib == pytest.approx(0.92 * TORCH_H100 - 15.3 - SAMPLER_QWEN3 - 0.25 - 1.0)
    assert [t.name for t in s.budget.terms] == ["weights", "activation peak", "outside PyTorch", "CUDA graphs"]
    assert s.budget.estimates() == ["activation peak", "outside PyTorch", "CUDA graphs"]
    assert s.request_mib == pytest.approx(864.0)
    assert s.requests == 63
    # a request is held in whole blocks: 6,150 tokens take 6,160
    assert server_memory("vllm", needs, Share(0.92, "t"), H100_GIB, 1, 6150, 128).request_tokens == 6160


def test_sliding_window_on_sglang_and_on_vllm():
    """gpt-oss-120b (60.8 GiB on disk) on one H100 at --mem-fraction-static 0.8: SGLang's pool is 0.8 of what is free
    before loading (79.19 - 0.25 outside PyTorch) less the weights: 63.152 - 60.8 = 2.352 GiB. SGLang's SWA pool is
    0.8 of the full pool's tokens: 6,144 x 36,864 + 4,915.2 x 36,864 = 407,686,349 B a request, 6 of them. vLLM keeps
    the window alone in the sliding layers: 6,144 x 36,864 + 128 x 36,864 = 231,211,008 B."""
    needs = ServerNeeds(Method.AR, facts(GPT_OSS_120B), 60.8)
    sgl = server_memory("sglang", needs, Share(0.8, "t"), H100_GIB, 1, 6144, 128)
    assert sgl.kv_gib == pytest.approx(0.8 * (TORCH_H100 - 0.25) - 60.8)
    assert [t.name for t in sgl.budget.terms] == ["weights", "outside PyTorch"]  # SGLang subtracts no activations
    assert sgl.request_mib * MIB == pytest.approx(6144 * 36864 + 4915.2 * 36864, abs=1)
    assert sgl.requests == int((0.8 * (TORCH_H100 - 0.25) - 60.8) * GIB // 407_686_349) == 6
    vllm = server_memory("vllm", needs, Share(0.92, "t"), H100_GIB, 1, 6144, 128)
    assert vllm.request_mib * MIB == 6144 * 36864 + 128 * 36864 == 231_211_008


def test_moe_on_trtllm_takes_its_share_of_what_the_profiling_leaves():
    """Qwen3-Coder-30B-A3B (56.8 GiB) on one H200: TensorRT-LLM's 0.9 of what the profiling forward leaves: the total
    PyTorch sees (NVML's 140.40 GiB x 79.19 / 79.65 = 139.59, an estimate) less the weights, the forward's activation
    (8,192 tokens x 1.21 GiB / 8,192 for an MoE) and 0.25 outside PyTorch; 48 x 2 x 4 x 128 x 2 = 98,304 B a token,
    576 MiB a request (6,144 tokens, whole blocks of 32)."""
    needs = ServerNeeds(Method.AR, facts(QWEN3_CODER_30B), 56.8, moe=True)
    s = server_memory("trtllm", needs, Share(0.9, "t"), H200_GIB, 1, 6144, 128)
    total = H200_GIB * 79.19 / H100_GIB
    assert s.budget.total.gib == pytest.approx(total) and s.budget.total.estimate
    assert s.kv_gib == pytest.approx(0.9 * (total - 56.8 - 1.21 - 0.25), abs=1e-3)
    assert s.request_mib == pytest.approx(576.0)
    assert s.requests == int(s.kv_gib * 1024 // 576) == 130


def test_hybrid_on_vllm_keeps_a_state_per_request_and_per_draft_token():
    """Qwen3.6-35B-A3B (65.2 GiB) on one H100 at 0.92, vocabulary 151,936 taken: KV = 0.92 x 79.19 - 65.2 - 2.318 -
    0.25 - 1.0 = 4.087 GiB. AR: 6,144 x 10 x 2 x 2 x 256 x 2 = 125,829,120 B of KV + 64,389,120 B of state =
    190,218,240 B, 23 requests. DFlash drafting 15 keeps 1 + 15 states and its drafter's KV (6 layers, 5 of them
    sliding over 4,096, 8 heads of 128) over the 6,160 tokens with the block; the drafter's 0.72 GiB come off too."""
    kv = facts(QWEN36_35B)
    kv_gib = 0.92 * TORCH_H100 - 65.2 - SAMPLER_QWEN3 - 0.25 - 1.0
    ar = server_memory("vllm", ServerNeeds(Method.AR, kv, 65.2, vocab_size=151936, moe=True), Share(0.92, "t"),
                       H100_GIB, 1, 6144, 128)  # fmt: skip
    assert ar.request_mib * MIB == 125_829_120 + 64_389_120
    assert ar.requests == int(kv_gib * GIB // 190_218_240) == 23
    draft = KvFacts(full_layers=1, kv_heads=8, head_dim=128, sliding_layers=5, sliding_window=4096, source="t")
    dflash = server_memory("vllm", ServerNeeds(Method.DFLASH, kv, 65.2 + 0.72, draft, 16, 15, draft_gib=0.72,
                                               vocab_size=151936, moe=True),
                           Share(0.92, "t"), H100_GIB, 1, 6144, 128)  # fmt: skip
    target = 6160 * 20480
    drafter = 6160 * 1 * 2 * 8 * 128 * 2 + (4096 + 16) * 5 * 2 * 8 * 128 * 2
    assert dflash.request_mib * MIB == target + drafter + 16 * 64_389_120
    assert dflash.requests == int((kv_gib - 0.72) * GIB // (target + drafter + 16 * 64_389_120)) == 2


def test_hybrid_on_sglang_splits_states_and_kv():
    """SGLang gives the states 0.9/1.9 of the memory, 5 slots a request (3 + 2 extra-buffer tracking slots); the KV
    cache gets the rest. Qwen3.6-35B-A3B on one H200 at 0.75: rest = 0.75 x (139.59 - 0.25) - 65.2 = 39.31 GiB."""
    kv = facts(QWEN36_35B)
    s = server_memory("sglang", ServerNeeds(Method.AR, kv, 65.2), Share(0.75, "t"), H200_GIB, 1, 6144, 128)
    rest = (0.75 * (H200_GIB * 79.19 / H100_GIB - 0.25) - 65.2) * GIB
    state = 64_389_120
    slots = int(rest * 0.9 / 1.9 // state) - 1
    by_state = slots // 5
    by_kv = int((rest - (slots + 1) * state) // (6144 * 20480))
    assert s.requests == min(by_state, by_kv) == by_state
    assert s.limit.startswith("mamba state slots")


def test_sglangs_own_fraction_on_an_h100():
    """No --mem-fraction-static: SGLang 0.5.23 reserves 512 + 1.5 x 8192 + 1/8 x 1024 + 2 x 128 (decode graphs up to
    --max-running-requests 128) + 8 x 58 prefill graphs = 13,616 MB of the H100's 81,559 MB: 0.833."""
    assert memory.prefill_graph_sizes(8192) == 8 + 14 + 8 + 8 + 12 + 8 == 58
    reserved = 512 + 1.5 * 8192 + 1 / 8 * 1024 + 2 * 128 + 8 * 58
    assert memory.sglang_fraction(H100_GIB * 1024, 1, 128) == round((H100_GIB * 1024 - reserved) / (H100_GIB * 1024), 3)
    assert memory.prefill_graph_sizes(4096) == 50
    assert memory.sglang_fraction(24 * 1024, 1, None) == round((24 * 1024 - (512 + 1.5 * 4096 + 128 + 96 + 8 * 50))
                                                                / (24 * 1024), 3)  # fmt: skip


def test_every_method_gets_the_tightest_servers_capacity_in_kv_size():
    """AR holds more than DFlash (no draft); the plan caps AR to DFlash's capacity in the engine's unit of KV size:
    vLLM bytes per GPU (--kv-cache-memory-bytes), SGLang and TensorRT-LLM tokens of the pool in whole blocks, never a
    lower share (which would leave AR less room than planned by whatever the estimates miss)."""
    kv = facts(QWEN3_8B)
    draft = KvFacts(full_layers=5, kv_heads=8, head_dim=128, source="t")
    needs = {Method.AR: ServerNeeds(Method.AR, kv, 15.3, vocab_size=151936),
             Method.DFLASH: ServerNeeds(Method.DFLASH, kv, 15.3 + 1.95, draft, 16, 15, draft_gib=1.95,
                                        vocab_size=151936)}  # fmt: skip
    shares = {m: Share(0.75, "t") for m in needs}
    for engine in ("vllm", "sglang", "trtllm"):
        plan = memory.plan_servers(engine, needs, shares, "H100", H100_GIB, 1, 6144, "t", 64)
        ar, dflash = plan.servers[Method.AR], plan.servers[Method.DFLASH]
        assert ar.requests > dflash.requests == plan.capacity
        assert plan.tightest() is Method.DFLASH
        assert set(plan.caps) == {Method.AR}
        cap = plan.caps[Method.AR]
        if engine == "vllm":  # bytes: exactly the capacity's requests, to the MiB above
            assert cap == math.ceil(plan.capacity * ar.request_mib) * MIB
            assert cap // (ar.request_mib * MIB) == plan.capacity
        else:  # tokens of the target's pool: 6,144 tokens in blocks of 1 (SGLang) or 32 (TensorRT-LLM)
            assert cap == plan.capacity * 6144
        assert memory.cap_args(engine, cap) == {
            "vllm": (["--kv-cache-memory-bytes", str(cap)], [], {}),
            "sglang": (["--max-total-tokens", str(cap)], [], {}),
            "trtllm": ([], [], {"kv_cache_config": {"max_tokens": cap}})}[engine]
        assert plan.record()["servers"]["ar"]["cap"] == cap and plan.record()["tightest"] == "dflash"


def test_headroom_under_a_tenth_is_at_risk():
    """The tightest server must hold 1.1x the top concurrency; between 1x and 1.1x the plan says it is at risk."""
    needs = {Method.AR: ServerNeeds(Method.AR, facts(QWEN3_8B), 15.3, vocab_size=151936)}
    shares = {Method.AR: Share(0.92, "t")}
    held = memory.plan_servers("vllm", needs, shares, "H100", H100_GIB, 1, 6144, "t", 60).capacity
    assert held == 63
    assert memory.plan_servers("vllm", needs, shares, "H100", H100_GIB, 1, 6144, "t", 57).risk == ""
    risky = memory.plan_servers("vllm", needs, shares, "H100", H100_GIB, 1, 6144, "t", 60)
    assert risky.at_risk and "under 1.1x c=60 (66)" in risky.risk and risky.margin == pytest.approx(63 / 60)
    assert any(line.startswith("  at risk: ") for line in risky.lines())


def test_an_moe_on_vllm_keeps_its_experts_workspaces_beside_the_sampler():
    """Issue #63 item 5: vLLM's fused experts hold (M, topk, max(I, H)) + (M, topk, max(2I, H)) + (M, H) bf16
    elements (TritonExperts.workspace_shapes) beside the sampler's logits. Qwen3-30B-A3B on one H100 (vLLM 0.19.0,
    8,192 batched tokens, 1,024 requests) logged 2.68 GiB; the sampler alone gave 2.32."""
    from dflashbench.plan import budget_terms as bt

    shape = bt.MoeShape(experts_per_token=8, intermediate_size=768, hidden_size=2048)
    by_hand = 2 * (8192 * 8 * 2048 + 8192 * 8 * 2048 + 8192 * 2048)  # I = 768 < H: both take H
    assert bt.moe_workspace_bytes(shape, 8192, 1) == by_hand
    assert bt.moe_workspace_bytes(shape, 32768, 1) == bt.moe_workspace_bytes(shape, 16384, 1)  # one chunk at most
    before = bt.activation("vllm", 151936, 8192, 1024, True, "0.19.0").gib
    now = bt.activation("vllm", 151936, 8192, 1024, True, "0.19.0", shape, 1)
    assert before == pytest.approx(2.32, abs=0.01) and now.gib == pytest.approx(2.32 + by_hand / GIB, abs=0.01)
    assert 1.0 <= now.gib / 2.68 <= 1.1 and "TritonExperts.workspace_shapes" in now.source
    # Mixtral-8x7B at tp 2 (I 14,336 over 2 GPUs > H): 1.21 GiB logged, the forward term's own fit row
    mixtral = bt.activation("vllm", 32000, 8192, 1024, True, "0.19.0", bt.MoeShape(2, 14336, 4096), 2)
    assert mixtral.gib == pytest.approx(1.21, abs=0.02)
    # SGLang subtracts no activation peak; TensorRT-LLM keeps the forward's MoE figure
    assert bt.activation("trtllm", 151936, 8192, 1024, True, None, shape, 1).gib == pytest.approx(1.21, abs=0.01)


def test_the_registry_and_a_local_config_give_the_experts_shape(tmp_path, monkeypatch):
    import json

    from dflashbench.plan.local_model import local_entry
    from dflashbench.plan.models import lookup

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    qwen36 = lookup("qwen3.6-35b-a3b")
    assert (qwen36.moe_experts.experts_per_token, qwen36.moe_experts.intermediate_size) == (8, 512)
    assert lookup("gpt-oss-120b").moe_experts is None  # MXFP4 experts: another kernel, not this term
    (tmp_path / "config.json").write_text(json.dumps({**QWEN3_CODER_30B, "moe_intermediate_size": 768,
                                                      "vocab_size": 151936, "intermediate_size": 6144}))  # fmt: skip
    local = local_entry(str(tmp_path))
    assert local is not None and local.moe_experts.hidden_size == 2048 and local.moe_experts.intermediate_size == 768
