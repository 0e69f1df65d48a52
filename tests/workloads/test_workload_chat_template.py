"""render_chat: the target tokenizer's chat template, generation prompt added, thinking flag passed through."""

from __future__ import annotations

import pytest

from dflashbench.workloads import load_requests, render_chat
from dflashbench.workloads.spec import WorkloadSpec

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
    "<think></think>{% endif %}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    model = tokenizers.models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]")
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(model), unk_token="[UNK]")
    tok.chat_template = TEMPLATE
    return tok


def test_render_chat_applies_template_and_thinking_flag(tokenizer):
    (req,) = load_requests(WorkloadSpec(name="synthetic", categories=["code"]), num_prompts=1, seed=0)
    text = render_chat(tokenizer, req.messages, req.metadata["chat_template_kwargs"])
    assert text == f"<|user|>{req.prompt_text}\n<|assistant|><think></think>"
    (thinking,) = load_requests(WorkloadSpec(name="synthetic", categories=["code"], thinking=True), num_prompts=1,
                                seed=0)  # fmt: skip
    assert render_chat(tokenizer, thinking.messages, thinking.metadata["chat_template_kwargs"]).endswith(
        "<|assistant|>"
    )
