import random

import pytest

from dflashbench.reference.corpus import CATEGORIES, demo_prompts, sample_conversation, training_corpus


def test_corpus_is_deterministic_and_seeded():
    assert training_corpus(12, seed=3) == training_corpus(12, seed=3)
    assert training_corpus(12, seed=3) != training_corpus(12, seed=4)
    assert demo_prompts(9, seed=0) == demo_prompts(9, seed=0)


def test_categories_round_robin_and_filter():
    assert [c.category for c in training_corpus(6, 0)] == list(CATEGORIES) * 2
    assert {c.category for c in demo_prompts(5, 0, categories=["code"])} == {"code"}
    with pytest.raises(ValueError, match="unknown category"):
        demo_prompts(1, 0, categories=["poetry"])


def test_demo_prompts_do_not_come_from_training_streams():
    train_users = {c.user for c in training_corpus(3000, seed=0)}
    demos = demo_prompts(30, seed=0)
    # The key spaces are disjoint; math prompts (a large space) are in practice never repeated verbatim.
    repeated = [d for d in demos if d.category == "math" and d.user in train_users]
    assert len(repeated) == 0


def test_math_and_code_answers_are_determined_by_the_prompt():
    rng = random.Random(1)
    math = sample_conversation("math", rng)
    assert "\\boxed{" in math.assistant and math.user.endswith("within \\boxed{}.")
    code = sample_conversation("code", random.Random(2))
    name = code.user.split("`")[1].split("(")[0]
    assert f"def {name}(" in code.assistant and "```python" in code.assistant


def test_writing_answers_vary_for_the_same_request():
    answers = {sample_conversation("writing", random.Random(i)).assistant for i in range(20)}
    assert len(answers) == 20
