"""Answer extraction and normalisation (dflashbench.workloads.grading) on the answer formats of the real datasets: the
fixtures in tests/fixtures/datasets (each dataset's own schema and layout), real MATH-500 rows, and the outputs
a model writes for the DFlash prompts ("... put your final answer within \\boxed{}")."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashbench.workloads import load_requests
from dflashbench.workloads.base import read_data_file
from dflashbench.workloads.grading import (
    Grade,
    extract_number,
    grade,
    gsm8k_reference,
    last_boxed,
    math_equal,
    normalize_math,
    normalize_number,
)
from dflashbench.workloads.spec import WorkloadSpec

DATASETS = Path(__file__).parent.parent / "fixtures" / "datasets"
GSM8K = DATASETS / "openai--gsm8k"
MATH500 = DATASETS / "HuggingFaceH4--MATH-500"
AIME = DATASETS / "MathArena--aime_2025"

# Three rows of HuggingFaceH4/MATH-500 as published (test split): the solution boxes the answer.
REAL_MATH500 = [
    {"solution": "We have that $r = \\sqrt{0^2 + 3^2} = 3.$ Also, if we draw the line connecting the origin and "
                 "$(0,3),$ this line makes an angle of $\\frac{\\pi}{2}$ with the positive $x$-axis. Therefore, the "
                 "polar coordinates are $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
     "answer": "\\left( 3, \\frac{\\pi}{2} \\right)", "unique_id": "test/precalculus/807.json"},
    {"solution": "$f(-2)+f(-1)+f(0)=\\frac{3(-2)-2}{-2-2}+\\frac{3(-1)-2}{-1-2}+\\frac{3(0)-2}{0-2}=\\frac{-8}{-4}+"
                 "\\frac{-5}{-3}+\\frac{-2}{-2}=2+\\frac{5}{3}+1=\\boxed{\\frac{14}{3}}$",
     "answer": "\\frac{14}{3}", "unique_id": "test/algebra/2584.json"},
    {"solution": "First prime factorize $196=2^2\\cdot7^2$. [...] In total, there are $3\\times 3=9$ possibilities "
                 "for the prime factorization of a divisor of 196. Distinct prime factorizations correspond to "
                 "distinct integers, so there are $\\boxed{9}$ divisors of 196.",
     "answer": "9", "unique_id": "test/number_theory/572.json"},
]  # fmt: skip


# --- GSM8K ------------------------------------------------------------------------------------------------------


def test_gsm8k_reference_is_the_number_after_the_last_hashes_of_each_fixture_row():
    rows = read_data_file(GSM8K / "main" / "test-00000-of-00001.parquet")
    assert [gsm8k_reference(r["answer"]) for r in rows] == ["18", "5", "105", "18", "6"]
    # and the workload puts it, with its rule, on every request (the order of the dataset without sampling)
    reqs = load_requests(WorkloadSpec(name="gsm8k"), num_prompts=None, seed=0, data=str(GSM8K))
    assert [(r.metadata["answer"], r.metadata["grader"]) for r in reqs] == [
        ("18", "gsm8k"), ("5", "gsm8k"), ("105", "gsm8k"), ("18", "gsm8k"), ("6", "gsm8k")]  # fmt: skip


def test_gsm8k_worked_solutions_of_the_dataset_grade_as_correct():
    """The dataset's own answers (calculator annotations, then "#### N") pass the strict "####" rule."""
    for row in read_data_file(GSM8K / "main" / "test-00000-of-00001.parquet"):
        assert grade("gsm8k", row["answer"], gsm8k_reference(row["answer"])).correct, row["answer"]
    janet = ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day at "
             "the farmer’s market.\n#### 18")  # the first row of the real test split
    assert gsm8k_reference(janet) == "18"
    assert grade("gsm8k", janet, "18") == Grade("18", True)


@pytest.mark.parametrize(
    ("output", "found", "correct"),
    [
        ("She bakes 4*12=48 rolls. 48-30=18 are left.\n\nThe answer is \\boxed{18}.", "18", True),
        ("So \\boxed{18} rolls are left. Check: 48 - 30.", "18", True),  # the box beats later numbers
        ("The total is $\\boxed{\\$18.00}$", "18", True),
        ("\\boxed{18 \\text{ rolls}}", "18", True),
        ("\\boxed{1,018}", "1018", False),
        ("So 48 - 30 = 18 are left.", "18", True),  # no box, no "####": the last number (flexible-extract)
        ("The answer is 18. Check: 48 - 30.", "18", True),  # "The answer is" beats a later stray number
        ("#### 18", "18", True),
        ("She has 17 left.\n\\boxed{17}", "17", False),
        ("I cannot tell.", None, False),
        ("\\boxed{-3}", "-3", False),
    ],
)
def test_gsm8k_final_number(output, found, correct):
    assert grade("gsm8k", output, "18") == Grade(found, correct)


def test_numbers_normalise_like_lm_evaluation_harness():
    assert normalize_number(" $1,234.50. ") == "1234.5"
    assert normalize_number("18.00") == normalize_number("18") == "18"
    assert normalize_number("-7") == "-7"
    assert normalize_number("...") is None and normalize_number("1.2.3") is None
    assert extract_number("costs $1,200 in all") == "1200"


# --- MATH-500 ---------------------------------------------------------------------------------------------------


def test_math500_fixture_rows_carry_their_answer_and_a_boxed_answer_matches_it():
    reqs = load_requests(WorkloadSpec(name="math500"), num_prompts=None, seed=0, data=str(MATH500))
    assert [(r.metadata["answer"], r.metadata["grader"]) for r in reqs] == [("5", "math")] * 6
    for r in reqs:
        assert grade("math", "We solve: $2x = 10$, so $x = \\boxed{5}$.", r.metadata["answer"]) == Grade("5", True)
        assert grade("math", "so \\boxed{x = 5}", r.metadata["answer"]).correct  # "x =" in front is dropped
        assert not grade("math", "so $x = 5$", r.metadata["answer"]).correct  # no boxed answer: wrong
        assert not grade("math", "\\boxed{6}", r.metadata["answer"]).correct


@pytest.mark.parametrize("row", REAL_MATH500, ids=lambda r: r["unique_id"])
def test_real_math500_solutions_grade_as_correct_against_their_answer(row):
    assert last_boxed(row["solution"]) == row["answer"]
    assert grade("math", row["solution"], row["answer"]).correct


@pytest.mark.parametrize(
    ("output_answer", "reference", "equal"),
    [
        ("(3, \\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)", True),  # \left / \right, spaces
        ("\\dfrac{14}{3}", "\\frac{14}{3}", True),
        ("14/3", "\\frac{14}{3}", True),
        ("\\frac{13}{3}", "\\frac{14}{3}", False),
        ("9.0", "9", True),  # plain numbers compare by value
        ("90^\\circ", "90", True),
        ("\\text{Evelyn}", "\\text{Evelyn}", True),
        ("Evelyn", "\\text{Evelyn}", True),  # PRM800K: the enclosing \text{} goes
        ("10\\%", "10", True),
        ("\\$32,348", "32,\\!348", True),
        ("32348", "32,\\!348", True),  # thousands separators
        ("1,2", "12", False),  # a pair, not twelve
        ("0.75", "\\frac{3}{4}", True),
        ("0.5", "\\frac12", True),
        (".5", "\\frac{1}{2}", True),
        ("3\\sqrt{3}", "3\\sqrt3", True),
        ("\\sqrt{13}", "\\sqrt13", False),  # LaTeX reads \sqrt13 as \sqrt{1}3, and so does the rule
        ("5 \\text{ cm}", "5", True),  # units after "\text{ " go
        ("p - q", "p-q", True),
        ("p + q", "p - q", False),
    ],
)
def test_math_equivalence(output_answer, reference, equal):
    assert math_equal(output_answer, reference) is equal


def test_last_boxed_matches_braces_and_knows_the_other_forms():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert last_boxed("the answer is \\boxed 5$.") == "5"
    assert last_boxed("\\fbox{7}") == "7"
    assert last_boxed("\\boxed{\\frac{1}{2}") is None  # never closed (cut off by max_tokens)
    assert last_boxed("no box") is None
    assert normalize_math("k = 3") == "3" and normalize_math("") == ""


# --- AIME -------------------------------------------------------------------------------------------------------


def test_aime_fixture_answers_are_integers_compared_by_value():
    reqs = load_requests(WorkloadSpec(name="aime25"), num_prompts=None, seed=0, data=str(AIME))
    assert [(r.metadata["answer"], r.metadata["grader"]) for r in reqs] == [
        ("101", "aime"), ("102", "aime"), ("103", "aime"), ("104", "aime")]  # fmt: skip
    assert grade("aime", "so the remainder is $\\boxed{101}$.", "101") == Grade("101", True)
    assert grade("aime", "\\boxed{0101}", "101").correct
    assert not grade("aime", "\\boxed{101.5}", "101").correct
    assert not grade("aime", "the remainder is 101", "101").correct  # AIME answers are boxed
    assert not grade("aime", "\\boxed{102}", 101).correct


# --- the synthetic workload and errors ---------------------------------------------------------------------------


def test_synthetic_math_prompts_carry_the_corpus_answer():
    from dflashbench.reference.corpus import demo_prompts

    reqs = load_requests(WorkloadSpec(name="synthetic"), num_prompts=9, seed=0, data=None)
    convs = demo_prompts(9, 0)
    for r, conv in zip(reqs, convs, strict=True):
        if r.category == "math":
            assert r.metadata["grader"] == "gsm8k"
            assert grade("gsm8k", conv.assistant, r.metadata["answer"]).correct
        else:
            assert "answer" not in r.metadata and "grader" not in r.metadata


def test_unknown_grader_is_an_error():
    with pytest.raises(ValueError, match="unknown grader"):
        grade("humaneval", "def f(): pass", "x")
