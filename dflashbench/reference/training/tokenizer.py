"""Train the embedded target's tokenizer on the synthetic corpus and save it as a Hugging Face tokenizer.

A byte-level BPE (every string is encodable, nothing is ever unknown), digits split one per token (as Qwen does;
it makes the tiny model's arithmetic learnable), a small vocabulary, the Qwen3 chat special tokens, the DFlash
mask token and a Qwen3-style chat template (``add_generation_prompt`` and ``enable_thinking`` supported). The
saved directory loads offline with ``AutoTokenizer.from_pretrained(dir)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dflashbench.reference.corpus import Conversation

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
MASK = "<|MASK|>"
THINK = "<think>"
END_THINK = "</think>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END, MASK, THINK, END_THINK)  # ids 0..5, in this order

# Qwen3's template without tool calling: the final assistant turn (and the generation prompt) carries an empty
# think block, so training text and prompts line up exactly. Unlike Qwen3, thinking is OFF unless the caller
# passes enable_thinking=True: the embedded target was never trained on thinking traces, so a client that does
# not know the flag (plain OpenAI clients, `generate`) gets the prompt format the model knows.
CHAT_TEMPLATE = """\
{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- if message.role == "user" and ns.last_query_index == messages|length - 1 %}
        {%- set ns.last_query_index = messages|length - 1 - loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "system" or message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if not (enable_thinking is defined and enable_thinking) %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""


def _training_texts(conversations: Iterable[Conversation]) -> Iterable[str]:
    for c in conversations:  # with the chat template's role lines, so "user"/"assistant" become single tokens
        yield f"system\nuser\n{c.user}\n"
        yield f"assistant\n\n\n{c.assistant}\n"


def build_tokenizer(conversations: Iterable[Conversation], out_dir: str | Path, *, vocab_size: int = 2048):
    """Train a byte-level BPE on ``conversations``, save it to ``out_dir`` and return the HF tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_texts(conversations), trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START, MASK],
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(out_dir)
    return hf


def encode_conversation(tokenizer, conv: Conversation) -> tuple[list[int], list[int]]:
    """Token ids of ``conv`` as the model sees it, and the loss mask (1 on the answer and the end-of-turn token).

    The prompt is the chat template with the generation prompt (thinking off), tokenized on its own, exactly
    as at inference; the answer is tokenized separately and appended, so no BPE merge crosses the boundary.
    """
    if getattr(tokenizer, "chat_template", None):
        prompt = tokenizer.apply_chat_template(
            conv.messages(with_answer=False), add_generation_prompt=True, enable_thinking=False, tokenize=False
        )
    else:  # a base model's tokenizer: plain text turns
        prompt = f"User: {conv.user}\nAssistant: "
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    end = tokenizer.eos_token_id  # what ends a turn: <|im_end|> for chat models
    answer_ids = tokenizer.encode(conv.assistant, add_special_tokens=False) + ([end] if end is not None else [])
    return prompt_ids + answer_ids, [0] * len(prompt_ids) + [1] * len(answer_ids)
