"""The shipped EAGLE-3 head: inside the package, small, made as MAKING.md says, lossless and accepted on the
demo prompts."""

from pathlib import Path

from dflashbench.embedded import default_paths
from dflashbench.reference.corpus import demo_prompts
from dflashbench.reference.decode import SamplingParams, generate
from dflashbench.reference.drafters import NullDrafter
from dflashbench.reference.eagle3.drafter import load_eagle3_drafter
from dflashbench.reference.target import load_target

PACKAGE = Path(__file__).resolve().parents[2] / "dflashbench" / "embedded"


def test_the_head_is_shipped_beside_the_pair():
    paths = default_paths()
    assert paths.eagle3 is not None and paths.eagle3.resolve() == (PACKAGE / "eagle3").resolve()
    files = sorted(f.name for f in paths.eagle3.iterdir())
    assert files == ["config.json", "model.safetensors", "training.json"]
    assert sum(f.stat().st_size for f in paths.eagle3.iterdir()) < 3 * 2**20
    assert "dflashbench train eagle3" in (PACKAGE / "MAKING.md").read_text()


def test_shipped_head_is_lossless_with_high_tau_on_every_category():
    paths = default_paths()
    target = load_target(paths.target)
    drafter = load_eagle3_drafter(paths.eagle3, target)
    assert drafter.k == 5
    taus: dict[str, list[float]] = {}
    params = SamplingParams(48, 0.0, tuple(target.stop_token_ids()))
    for conv in demo_prompts(12, seed=0):
        ids = target.tokenizer.apply_chat_template(
            conv.messages(with_answer=False), add_generation_prompt=True, enable_thinking=False,
            tokenize=True, return_dict=False,
        )  # fmt: skip
        ids = list(ids["input_ids"]) if isinstance(ids, dict) else list(ids)
        ar = generate(target, NullDrafter(), ids, params)
        e3 = generate(target, drafter, ids, params)
        assert e3.token_ids == ar.token_ids, conv.user
        taus.setdefault(conv.category, []).append(e3.tau)
    means = {c: sum(t) / len(t) for c, t in taus.items()}
    assert set(means) == {"math", "code", "writing"}
    assert min(means.values()) >= 3.0, means  # k = 5: at most 6 per step; a broken head gives ~1
