"""Seeded sampling: stable for a seed, different across seeds, categories balanced, prefix-stable."""

from __future__ import annotations

from collections import Counter

from dflashbench.types import Request
from dflashbench.workloads import sample_requests


def make(counts: dict[str, int]) -> list[Request]:
    return [
        Request(id=f"{cat}-{i}", workload="w", category=cat, messages=({"role": "user", "content": f"{cat} {i}"},),
                max_tokens=8)
        for cat, n in counts.items() for i in range(n)
    ]  # fmt: skip


ROWS = make({"coding": 40, "math": 40, "writing": 10})


def ids(requests: list[Request]) -> list[str]:
    return [r.id for r in requests]


def test_same_seed_same_requests_and_different_seed_differs():
    assert ids(sample_requests(ROWS, 12, seed=0)) == ids(sample_requests(list(ROWS), 12, seed=0))
    assert ids(sample_requests(ROWS, 12, seed=0)) != ids(sample_requests(ROWS, 12, seed=1))


def test_categories_balanced_round_robin_in_sorted_order():
    picked = sample_requests(ROWS, 12, seed=0)
    assert Counter(r.category for r in picked) == {"coding": 4, "math": 4, "writing": 4}
    assert [r.category for r in picked[:3]] == ["coding", "math", "writing"]


def test_small_category_runs_out_and_the_rest_fill_up():
    picked = sample_requests(ROWS, 40, seed=0)
    assert Counter(r.category for r in picked) == {"coding": 15, "math": 15, "writing": 10}


def test_prefix_stable_across_num_prompts():
    long = ids(sample_requests(ROWS, 30, seed=7))
    for n in (1, 5, 11, 29):
        assert ids(sample_requests(ROWS, n, seed=7)) == long[:n]


def test_more_than_available_gives_every_row_once_and_none_gives_dataset_order():
    picked = sample_requests(ROWS, 1000, seed=0)
    assert sorted(ids(picked)) == sorted(ids(ROWS))
    assert ids(sample_requests(ROWS, None, seed=0)) == ids(ROWS)


def test_a_category_sample_does_not_depend_on_other_categories():
    """Adding rows of another category leaves each category's draw as it was (seeded per category)."""
    alone = [r for r in sample_requests(make({"math": 40}), 5, seed=2)]
    mixed = [r for r in sample_requests(make({"math": 40, "code": 40}), 10, seed=2) if r.category == "math"]
    assert ids(alone) == ids(mixed)
