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


def test_dense_on_vllm():
    """Qwen3-8B, 15.3 GiB of weights, one H100, vLLM's 0.92: KV = 0.92 x 79.647 - 15.3 = 57.976 GiB; a request of
    6,144 tokens holds 6,144 x 147,456 B = 864 MiB; 57.976 GiB / 864 MiB = 68.7 -> 68."""
    s = server_memory("vllm", ServerNeeds(Method.AR, facts(QWEN3_8B), 15.3), Share(0.92, "t"), H100_GIB, 1, 6144, 128)
    assert s.kv_gib == pytest.approx(0.92 * H100_GIB - 15.3)
    assert s.request_mib == pytest.approx(864.0)
    assert s.requests == 68


def test_sliding_window_on_sglang_and_on_vllm():
    """gpt-oss-120b on one H100 at --mem-fraction-static 0.8: KV = 0.8 x 79.647 - 60.8 = 2.918 GiB (the issue's 2.9).
    SGLang's SWA pool is 0.8 of the full pool's tokens: 6,144 x 36,864 + 4,915.2 x 36,864 = 407,686,349 B a request,
    7 of them. vLLM keeps the window alone in the sliding layers: 6,144 x 36,864 + 128 x 36,864 = 231,211,008 B."""
    needs = ServerNeeds(Method.AR, facts(GPT_OSS_120B), 60.8)
    sgl = server_memory("sglang", needs, Share(0.8, "t"), H100_GIB, 1, 6144, 128)
    assert sgl.kv_gib == pytest.approx(2.918, abs=1e-3)
    assert sgl.request_mib * MIB == pytest.approx(6144 * 36864 + 4915.2 * 36864, abs=1)
    assert sgl.requests == int((0.8 * H100_GIB - 60.8) * GIB // 407_686_349) == 7
    vllm = server_memory("vllm", needs, Share(0.92, "t"), H100_GIB, 1, 6144, 128)
    assert vllm.request_mib * MIB == 6144 * 36864 + 128 * 36864 == 231_211_008


def test_moe_on_trtllm_takes_its_share_of_what_the_weights_leave():
    """Qwen3-Coder-30B-A3B (56.8 GiB) on one H200: TensorRT-LLM's 0.9 of the free memory, 0.9 x (140.401 - 56.8)
    = 75.241 GiB; 48 x 2 x 4 x 128 x 2 = 98,304 B a token, 576 MiB a request: 133 of them."""
    s = server_memory("trtllm", ServerNeeds(Method.AR, facts(QWEN3_CODER_30B), 56.8), Share(0.9, "t"), H200_GIB, 1,
                      6144, 128)  # fmt: skip
    assert s.kv_gib == pytest.approx(0.9 * (H200_GIB - 56.8))
    assert s.request_mib == pytest.approx(576.0)
    assert s.requests == 133


def test_hybrid_on_vllm_keeps_a_state_per_request_and_per_draft_token():
    """Qwen3.6-35B-A3B (65.2 GiB) on one H100 at 0.92: 8.076 GiB. AR: 6,144 x 10 x 2 x 2 x 256 x 2 = 125,829,120 B of KV
    + 64,389,120 B of state = 190,218,240 B, 45 requests. DFlash drafting 15 keeps 1 + 15 states and its drafter's KV
    (6 layers, 5 of them sliding over 4,096, 8 heads of 128) over the 6,160 tokens with the block."""
    kv = facts(QWEN36_35B)
    ar = server_memory("vllm", ServerNeeds(Method.AR, kv, 65.2), Share(0.92, "t"), H100_GIB, 1, 6144, 128)
    assert ar.request_mib * MIB == 125_829_120 + 64_389_120
    assert ar.requests == int((0.92 * H100_GIB - 65.2) * GIB // 190_218_240) == 45
    draft = KvFacts(full_layers=1, kv_heads=8, head_dim=128, sliding_layers=5, sliding_window=4096, source="t")
    dflash = server_memory("vllm", ServerNeeds(Method.DFLASH, kv, 65.2 + 0.72, draft, 16, 15), Share(0.92, "t"),
                           H100_GIB, 1, 6144, 128)  # fmt: skip
    target = 6160 * 20480
    drafter = 6160 * 1 * 2 * 8 * 128 * 2 + (4096 + 16) * 5 * 2 * 8 * 128 * 2
    assert dflash.request_mib * MIB == target + drafter + 16 * 64_389_120
    assert dflash.requests == int((0.92 * H100_GIB - 65.92) * GIB // (target + drafter + 16 * 64_389_120)) == 6


def test_hybrid_on_sglang_splits_states_and_kv():
    """SGLang gives the states 0.9/1.9 of the memory, 5 slots a request (3 + 2 extra-buffer tracking slots); the KV
    cache gets the rest. Qwen3.6-35B-A3B on one H200 at 0.75: rest = 0.75 x 140.401 - 65.2 = 40.101 GiB."""
    kv = facts(QWEN36_35B)
    s = server_memory("sglang", ServerNeeds(Method.AR, kv, 65.2), Share(0.75, "t"), H200_GIB, 1, 6144, 128)
    rest = (0.75 * H200_GIB - 65.2) * GIB
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


def test_every_method_gets_the_tightest_servers_capacity():
    """AR holds more than DFlash (no draft); the plan caps AR to DFlash's capacity in the engine's own unit."""
    kv = facts(QWEN3_8B)
    draft = KvFacts(full_layers=5, kv_heads=8, head_dim=128, source="t")
    needs = {Method.AR: ServerNeeds(Method.AR, kv, 15.3),
             Method.DFLASH: ServerNeeds(Method.DFLASH, kv, 15.3 + 1.95, draft, 16, 15)}
    shares = {m: Share(0.75, "t") for m in needs}
    for engine in ("vllm", "sglang", "trtllm"):
        plan = memory.plan_servers(engine, needs, shares, "H100", H100_GIB, 1, 6144, "t", 64)
        ar, dflash = plan.servers[Method.AR], plan.servers[Method.DFLASH]
        assert ar.requests > dflash.requests == plan.capacity
        assert set(plan.caps) == {Method.AR}
        cap = plan.caps[Method.AR]
        if engine == "vllm":  # a lower share: AR's KV beyond the capacity taken off, so vLLM still subtracts activations
            surplus_gib = ar.kv_gib - plan.capacity * ar.request_mib * MIB / GIB
            assert cap == math.ceil((0.75 - surplus_gib / H100_GIB) * 10_000) / 10_000 < 0.75
            assert int((cap * H100_GIB - 15.3) * GIB // (ar.request_mib * MIB)) == plan.capacity
        else:  # tokens of the target's pool
            assert cap == plan.capacity * 6144
        assert memory.cap_args(engine, cap) == {
            "vllm": ([], ["--gpu-memory-utilization", f"{cap:.4f}"], {}),
            "sglang": (["--max-total-tokens", str(cap)], [], {}),
            "trtllm": ([], [], {"kv_cache_config": {"max_tokens": cap}})}[engine]
