"""Each workload reads its dataset's real layout (tests/fixtures/datasets, made by make_fixtures.py) into the
requests it would send: count, categories, ids, prompt text in the DFlash benchmark's format, later turns."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dflashbench.errors import UserError
from dflashbench.workloads import MATH_SUFFIX, PLACEHOLDER, WORKLOADS, check_spec, get_workload, load_requests
from dflashbench.workloads.spec import WorkloadSpec

pytest.importorskip("pyarrow")  # parquet fixtures; installed with the datasets extra

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"
SPEED_HUB = FIXTURES / "nvidia--SPEED-Bench"
SPEED_PREPARED = FIXTURES / "specdec_bench"


def load(name: str, data: Path | str, num_prompts: int | None = None, seed: int = 0, **spec):
    return load_requests(WorkloadSpec(name=name, **spec), num_prompts=num_prompts, seed=seed, data=str(data))


@pytest.mark.parametrize(
    ("name", "folder", "count", "categories", "first_id", "first_prompt"),
    [
        ("gsm8k", "openai--gsm8k", 5, {"math"}, "0",
         "Ada bakes 4 trays of 12 rolls and sells 30. How many rolls are left?\n"
         "Please reason step by step, and put your final answer within \\boxed{}."),
        ("math500", "HuggingFaceH4--MATH-500", 6, {"math"}, "test/algebra/100.json",
         "Problem 0: find $x$ if $2x + 0 = 10$." + MATH_SUFFIX),
        ("aime25", "MathArena--aime_2025", 4, {"math"}, "1",
         "Find the remainder when $7^{10}$ is divided by $1000$." + MATH_SUFFIX),
        ("humaneval", "openai--openai_humaneval", 3, {"code"}, "HumanEval/0",
         "Write a solution to the following problem and make sure that it passes the tests:\n```python\n"
         'def count_even(xs: list) -> int:\n    """Count the even numbers in xs."""\n\n```'),
        ("mbpp", "google-research-datasets--mbpp", 4, {"code"}, "11",
         "Write a python function to remove the first and last occurrence of a character from a string."),
        ("mt-bench", "HuggingFaceH4--mt_bench_prompts", 3, {"writing", "roleplay", "math"}, "81394810",
         "Write a short travel blog post about a trip to a volcano island."),
        ("speed-bench", "specdec_bench", 8, {"coding", "writing", "math", "multilingual"},
         "00000000000000000000000000000001", "Write a Python function that merges two sorted lists."),
    ],
)  # fmt: skip
def test_fixture_loads_in_dataset_order(name, folder, count, categories, first_id, first_prompt):
    requests = load(name, FIXTURES / folder)
    assert len(requests) == count
    assert {r.category for r in requests} == categories
    first = requests[0]
    assert (first.id, first.workload) == (first_id, name)
    assert first.messages == ({"role": "user", "content": first_prompt},)
    assert first.metadata["chat_template_kwargs"] == {"enable_thinking": False}
    assert len({r.id for r in requests}) == count  # ids are unique and stable


def test_max_tokens_default_and_from_spec():
    assert {r.max_tokens for r in load("gsm8k", FIXTURES / "openai--gsm8k")} == {2048}
    assert {r.max_tokens for r in load("speed-bench", SPEED_PREPARED)} == {4096}
    assert {r.max_tokens for r in load("gsm8k", FIXTURES / "openai--gsm8k", max_tokens=64)} == {64}


def test_thinking_goes_into_chat_template_kwargs():
    (req,) = load("gsm8k", FIXTURES / "openai--gsm8k", num_prompts=1, thinking=True)
    assert req.metadata["chat_template_kwargs"] == {"enable_thinking": True}


def test_data_may_be_the_file_itself():
    path = FIXTURES / "openai--gsm8k" / "main" / "test-00000-of-00001.parquet"
    assert len(load("gsm8k", path)) == 5


def test_livecodebench_reads_every_test_file_with_lcb_format():
    requests = load("livecodebench", FIXTURES / "livecodebench--code_generation_lite")
    assert [r.id for r in requests] == ["abc300_a", "2877", "1873_b"]  # test.jsonl, then test2.jsonl
    assert {r.metadata["difficulty"] for r in requests} == {"easy", "medium", "hard"}
    stdin, starter = requests[0].prompt_text, requests[1].prompt_text
    assert stdin.startswith("You are an expert Python programmer.")
    assert "### Question:\nSum It Up: read N integers and print their sum." in stdin
    assert "### Format: Write your code in the following format:\n```python\n# YOUR CODE HERE\n```" in stdin
    assert "### Format: Use the following code structure:\n```python\nclass Solution:" in starter
    assert stdin.endswith("### Answer: (use the provided format with backticks)")


def test_mt_bench_second_turn_is_a_followup():
    by_id = {r.id: r for r in load("mt-bench", FIXTURES / "HuggingFaceH4--mt_bench_prompts")}
    writing = by_id["81394810"]
    assert writing.prompt_text == "Write a short travel blog post about a trip to a volcano island."
    assert writing.followup_turns == ("Rewrite your previous response, starting every sentence with the letter A.",)


def test_speed_bench_multiturn_rows_and_category_filter():
    requests = load("speed-bench", SPEED_PREPARED, categories=["writing"])
    assert [r.id[-1] for r in requests] == ["3", "4"]
    multi = requests[1]
    assert multi.prompt_text == "Draft a two-paragraph cover letter for a librarian job."
    assert multi.followup_turns == ("Now make it more formal.", "Shorten it to one paragraph.")


def test_speed_bench_prepared_rows_carry_rebuilt_text():
    by_id = {r.id: r for r in load("speed-bench", SPEED_PREPARED)}
    rebuilt = by_id[f"{7:032x}"]
    assert rebuilt.prompt_text == "Solve this problem:\nGiven N numbers, print the largest.\nUse Python."
    assert not any(PLACEHOLDER in r.prompt_text for r in by_id.values())


def test_speed_bench_placeholder_rows_stop_with_the_exact_fix():
    with pytest.raises(UserError) as err:
        load("speed-bench", SPEED_HUB)
    msg = str(err.value)
    assert "2 of 8 rows of nvidia/SPEED-Bench qualitative are placeholders" in msg
    assert "(coding: 1, multilingual: 1)" in msg
    assert "python3 prepare_data.py --dataset speed --config qualitative" in msg
    assert "examples/specdec_bench/data/speed/qualitative/test.parquet" in msg


def test_speed_bench_placeholder_only_counts_selected_categories():
    requests = load("speed-bench", SPEED_HUB, categories=["writing", "math"])
    assert len(requests) == 4  # no placeholder among them: nothing to stop for
    with pytest.raises(UserError, match=r"1 of 3 rows .* \(categories coding\)"):
        load("speed-bench", SPEED_HUB, categories=["coding"])


def test_speed_bench_skip_leaves_placeholders_out_and_says_so(caplog):
    with caplog.at_level(logging.WARNING):
        requests = load("speed-bench", SPEED_HUB, on_placeholder="skip")
    assert len(requests) == 6
    assert not any(PLACEHOLDER in m["content"] for r in requests for m in r.messages)
    assert "2 of 8 rows" in caplog.text and "prepare_data.py" in caplog.text


def test_speed_bench_throughput_tiers():
    requests = load("speed-bench", SPEED_HUB, config="throughput_1k")
    assert len(requests) == 8
    assert sorted({r.category for r in requests}) == ["high_entropy", "low_entropy", "mixed"]
    assert len(load("speed-bench", SPEED_HUB, config="throughput_1k", categories=["mixed"])) == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (WorkloadSpec(name="gsm9k"), "unknown workload 'gsm9k'. Did you mean 'gsm8k'?"),
        (WorkloadSpec(name="speed-bench", config="throughput_4k"), "unknown config 'throughput_4k'"),
        (WorkloadSpec(name="speed-bench", categories=["codeing"]), "unknown category 'codeing'. Did you mean 'coding'?"),
        (WorkloadSpec(name="speed-bench", config="throughput_8k", categories=["coding"]), "Categories: low_entropy"),
        (WorkloadSpec(name="gsm8k", config="main", categories=["math"]), None),
        (WorkloadSpec(name="math500", config="main"), "has no configs"),
    ],
)  # fmt: skip
def test_check_spec(spec, message):
    if message is None:
        check_spec(spec)
    else:
        with pytest.raises(UserError, match=message.replace("(", r"\(").replace("?", r"\?")):
            check_spec(spec)


def test_data_path_errors_say_what_is_expected(tmp_path):
    with pytest.raises(UserError, match="no such file or folder"):
        load("gsm8k", tmp_path / "nope")
    with pytest.raises(UserError, match=r"expected main/test-\*\.parquet \(the dataset's own layout\)"):
        load("gsm8k", tmp_path)
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"question": "a"}\nnot json\n')
    with pytest.raises(UserError, match=r"rows.jsonl:2: not valid JSON Lines"):
        load("gsm8k", bad)


def test_json_list_file(tmp_path):
    path = tmp_path / "test.json"
    path.write_text('[{"question": "What is 2+2?", "answer": "#### 4"}]')
    (req,) = load("gsm8k", path)
    assert req.prompt_text == "What is 2+2?" + MATH_SUFFIX


def test_registry_names_match_the_interface():
    assert set(WORKLOADS) == {"gsm8k", "math500", "humaneval", "mbpp", "mt-bench", "aime25", "livecodebench",
                              "speed-bench", "synthetic"}  # fmt: skip
    assert get_workload("speed-bench").configs == (
        "qualitative", "throughput_1k", "throughput_2k", "throughput_8k", "throughput_16k", "throughput_32k"
    )


def test_synthetic_draws_from_the_corpus():
    from dflashbench.reference.corpus import demo_prompts

    requests = load_requests(WorkloadSpec(name="synthetic", max_tokens=96), num_prompts=6, seed=3)
    expected = demo_prompts(6, 3, ("math", "code", "writing"))
    assert [r.prompt_text for r in requests] == [c.user for c in expected]
    assert [r.category for r in requests] == ["math", "code", "writing"] * 2
    assert [r.id for r in requests] == [f"s3-{i}" for i in range(6)]
    assert {r.max_tokens for r in requests} == {96}
    only_code = load_requests(WorkloadSpec(name="synthetic", categories=["code"]), num_prompts=2, seed=3)
    assert [r.category for r in only_code] == ["code", "code"]
    with pytest.raises(UserError, match="takes no --data"):
        load_requests(WorkloadSpec(name="synthetic"), num_prompts=2, seed=0, data="x")
