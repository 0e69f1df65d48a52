"""EAGLE-3 checkpoints: the layout vLLM/SGLang load, round trips, one-line errors; the engine runs eagle3."""

import asyncio
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import dflashbench.embedded
from dflashbench.errors import UserError
from dflashbench.reference.decode import ar_decode, dflash_decode
from dflashbench.reference.eagle3.checkpoint import check_eagle3_fits, load_eagle3, save_eagle3
from dflashbench.reference.eagle3.config import default_aux_layer_ids, spread_aux_layer_ids
from dflashbench.reference.eagle3.drafter import Eagle3Drafter, load_eagle3_drafter
from dflashbench.reference.serving.engine import ReferenceEngine
from dflashbench.reference.tiny import tiny_eagle3, tiny_target

LAYER = "midlayer."
NAMES = {
    "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d",
    *(LAYER + n for n in ("input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight",
                          "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                          "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                          "mlp.down_proj.weight")),
}  # fmt: skip


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", seed=2, init_std=0.5, num_layers=6)


def test_saved_layout_is_what_vllm_and_sglang_load(target, tmp_path):
    head = tiny_eagle3(target, k=4, seed=1, draft_vocab_size=40)
    save_eagle3(head, tmp_path, dtype="bfloat16")
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
    assert cfg["num_hidden_layers"] == 1 and cfg["tie_word_embeddings"] is False
    assert cfg["vocab_size"] == target.vocab_size and cfg["draft_vocab_size"] == 40
    assert cfg["target_hidden_size"] == cfg["hidden_size"] == target.hidden_size
    assert cfg["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": [1, 3, 5],
        "use_aux_hidden_state": True,
    }
    assert cfg["dflashbench"]["num_speculative_tokens"] == 4 and cfg["torch_dtype"] == "bfloat16"
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert set(tensors) == NAMES  # no model. prefix, no embed_tokens (the target's is shared)
    H = target.hidden_size
    assert tensors["fc.weight"].shape == (H, 3 * H) and tensors["lm_head.weight"].shape == (40, H)
    assert tensors[LAYER + "self_attn.q_proj.weight"].shape[1] == 2 * H  # [embedding ; hidden] inputs
    assert tensors["d2t"].dtype == torch.int64 and tensors["t2d"].dtype == torch.bool
    assert tensors["fc.weight"].dtype == torch.bfloat16
    ids = torch.arange(40) + tensors["d2t"]  # d2t: target id - draft id
    assert (
        ids.tolist() == sorted(ids.tolist()) and tensors["t2d"].nonzero().flatten().tolist() == ids.tolist()
    )


def test_round_trip_gives_the_same_drafts_and_outputs(target, tmp_path):
    head = tiny_eagle3(target, k=3, seed=5, draft_vocab_size=50)
    save_eagle3(head, tmp_path)
    again = load_eagle3(tmp_path)
    for name, t in head.state_dict().items():
        assert torch.equal(t, again.state_dict()[name]), name
    p = list(range(5, 30))
    a = dflash_decode(target, Eagle3Drafter(head, target), p, max_new_tokens=30)
    b = dflash_decode(target, load_eagle3_drafter(tmp_path, target), p, max_new_tokens=30)
    assert a.token_ids == b.token_ids == ar_decode(target, p, max_new_tokens=30).token_ids
    assert a.accept_lengths == b.accept_lengths


def test_a_full_vocabulary_head_is_saved_without_vocabulary_maps(target, tmp_path):
    """vLLM has no ``draft_id_to_target_id`` to load a ``d2t`` into unless the draft vocabulary is reduced
    (llama_eagle3.py), so a full-vocabulary head must not carry one; the shipped head is such a head."""
    save_eagle3(tiny_eagle3(target, k=2, seed=6), tmp_path)
    assert set(load_file(str(tmp_path / "model.safetensors"))) == NAMES - {"d2t", "t2d"}
    embedded = Path(dflashbench.embedded.__file__).parent / "eagle3"
    cfg = json.loads((embedded / "config.json").read_text())
    assert cfg["draft_vocab_size"] == cfg["vocab_size"]
    assert not {"d2t", "t2d"} & set(load_file(str(embedded / "model.safetensors")))


def test_vllm_internal_names_and_a_missing_identity_mapping_load(target, tmp_path):
    head = tiny_eagle3(target, k=2, seed=6)  # full vocabulary: d2t all zero
    save_eagle3(head, tmp_path)
    raw = load_file(str(tmp_path / "model.safetensors"))
    renamed = {("model." + k.replace(LAYER, "layers.0.") if k != "lm_head.weight" else k): v
               for k, v in raw.items() if k not in ("d2t", "t2d")}  # fmt: skip
    save_file(renamed, str(tmp_path / "model.safetensors"))
    again = load_eagle3(tmp_path)
    for name, t in head.state_dict().items():
        assert torch.equal(t, again.state_dict()[name]), name


def _write(tmp_path, target, **changes):
    save_eagle3(tiny_eagle3(target, k=2, seed=7), tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    (tmp_path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hidden_size": None}, "required field 'hidden_size' is missing"),
        ({"architectures": ["DFlashDraftModel"]}, "is not an EAGLE-3 head"),
        ({"tie_word_embeddings": True}, "tie_word_embeddings true"),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}, "list of three integers"),
        ({"eagle_config": {"use_aux_hidden_state": False}}, "use_aux_hidden_state false"),
        ({"num_hidden_layers": 2}, "num_hidden_layers 2 is not supported"),
        ({"intermediate_size": 7}, "tensor midlayer.mlp"),
        ({"draft_vocab_size": 10}, "does not match its config.json (missing ['d2t', 't2d']"),  # reduced: needs the maps
        ({"dflashbench": {"num_speculative_tokens": "many"}},
         "field 'dflashbench.num_speculative_tokens' should be a valid integer"),
        ({"rms_norm_eps": "tiny"}, "field 'rms_norm_eps' should be a valid number"),
    ],
)
def test_bad_checkpoints_fail_with_one_line(target, tmp_path, changes, message):
    _write(tmp_path, target, **changes)
    with pytest.raises(UserError) as err:
        load_eagle3(tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_fit_checks(target):
    cfg = tiny_eagle3(target, k=2).config
    check_eagle3_fits(cfg, target.num_layers, target.hidden_size, target.vocab_size)
    for args, message in (
        ((4, 32, 64), "6-layer target, this one has 4"),
        ((6, 48, 64), "hidden sizes"),
        ((6, 32, 65), "vocab_size"),
    ):
        with pytest.raises(UserError, match=message):
            check_eagle3_fits(cfg, *args)
    cfg.num_target_layers, cfg.aux_layer_ids = None, [1, 3, 9]
    with pytest.raises(UserError, match="do not fit a 6-layer target"):
        check_eagle3_fits(cfg, 6, 32, 64)


def test_aux_layer_defaults():
    assert default_aux_layer_ids(36) == [2, 18, 33]  # vLLM's (2, L//2, L-3), e.g. Qwen3-8B
    assert spread_aux_layer_ids(36) == [2, 18, 33]
    assert spread_aux_layer_ids(6) == [1, 3, 5]  # vLLM's rule would repeat layer 3
    assert spread_aux_layer_ids(4) == [1, 2, 3]
    with pytest.raises(UserError):
        spread_aux_layer_ids(2)


def test_engine_runs_eagle3_from_a_checkpoint_lossless_under_batching(target, tmp_path):
    save_eagle3(tiny_eagle3(target, k=3, seed=8), tmp_path)
    drafter = load_eagle3_drafter(tmp_path, target)
    g = torch.Generator().manual_seed(1)
    reqs = [
        (torch.randint(5, 62, (n,), generator=g).tolist(), m)
        for n, m in ((3, 30), (40, 12), (9, 41), (1, 20))
    ]
    expected = [ar_decode(target, p, max_new_tokens=m).token_ids for p, m in reqs]

    async def main():
        eng = ReferenceEngine(None, method="eagle3", target=target, drafter=drafter, max_batch_size=3)
        assert eng.block_size == 4

        async def one(i, p, m):
            await asyncio.sleep(0.004 * i)
            return [s async for s in eng.generate(p, max_new_tokens=m, stop_token_ids=[])]

        out = await asyncio.gather(*[one(i, p, m) for i, (p, m) in enumerate(reqs)])
        counters = eng.counters()
        await eng.close()
        return out, counters

    results, counters = asyncio.run(main())
    for steps, exp in zip(results, expected, strict=True):
        assert [t for s in steps for t in s.token_ids] == exp
    assert counters.num_draft_tokens == 3 * counters.num_drafts > 0


def test_engine_needs_a_head_for_eagle3(target):
    with pytest.raises(UserError, match="needs an EAGLE-3 head"):
        ReferenceEngine(None, None, "eagle3", target=target)
