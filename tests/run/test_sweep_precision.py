"""Issue #45 on the reference server: a point sized by precision stops early where its requests agree (one
category) and runs longer where they do not (code, math and writing, whose DFlash tau differ threefold); the
interval it stopped on holds what the full set measures. tau is the figure checked against the full run: with
greedy decoding it is a property of the prompts, not of the machine's mood, so the check cannot flake on a busy
machine (per-user rates move with it: docs/metrics.md, the noise rule)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.plan.order import stratified_order
from dflashbench.types import Request

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

SUITE = """
name = "sized"
backend = "reference"
methods = ["dflash"]
model = "embedded"
concurrency = [1]
num_prompts = 64
requests_per_stream = 1
warmup_requests = 1
max_tokens = 48
[drafts]
dflash = "embedded"
[[workloads]]
name = "synthetic"
{categories}
"""


def _sweep(tmp_path, name: str, categories: str, *flags: str) -> dict:
    suite = tmp_path / f"{name}.toml"
    suite.write_text(SUITE.format(categories=categories))
    out = tmp_path / name
    result = CliRunner().invoke(app, ["sweep", "--suite", str(suite), "-o", str(out), "--no-report", *flags])
    assert result.exit_code == 0, result.output
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run / "points.jsonl").read_text().splitlines()]
    return next(r for r in rows if r["category"] == "all") | {"output": result.output}


def test_a_point_stops_early_where_its_requests_agree_and_its_interval_holds_the_full_runs_value(tmp_path):
    one = _sweep(tmp_path, "code", 'categories = ["code"]', "--precision", "20%")
    mixed = _sweep(tmp_path, "mixed", "", "--precision", "20%")
    full = _sweep(tmp_path, "full", "")
    sized_one, sized_mixed = one["extra"]["precision"], mixed["extra"]["precision"]
    assert sized_one["reason"] == "precise" and sized_one["requests"] < 64, sized_one
    # the mix of categories disagrees where one category agrees: its requests' tau (a property of the prompts under
    # greedy decoding, not of the machine) spreads more, its half-width x sqrt(requests) twice the one category's
    # (1.11 against 0.55 here), so it stops no earlier, or (its per-user timing jittered by a busy neighbour, seen
    # in CI) not before the ceiling, which it then says. Not strictly later: the one category's per-user rate,
    # jittered by the machine, can hold it back to the same check (38 requests both, seen in a fresh-clone run)
    spread = [s["half_width"]["tau"] * s["requests"] ** 0.5 for s in (sized_one, sized_mixed)]
    assert spread[1] > 1.3 * spread[0], (sized_one, sized_mixed)
    assert sized_one["requests"] <= sized_mixed["requests"] <= 64, (sized_one, sized_mixed)
    assert sized_mixed["reason"] == "precise" or sized_mixed["requests"] == 64, sized_mixed
    assert "precise to ±" in one["output"] and "requests" in one["output"]
    # the mixed point's tau interval, as it stopped, holds the full set's tau
    width = sized_mixed["half_width"]["tau"]
    assert full["tau"] / (1 + width) <= mixed["tau"] <= full["tau"] * (1 + width), (mixed["tau"], full["tau"], width)
    assert "precision" not in full["extra"]  # no precision asked: every prompt, as before


def _requests(counts: dict[str, int]) -> list[Request]:
    return [Request(id=f"{c}-{i}", workload="w", category=c, messages=({"role": "user", "content": "x"},), max_tokens=8)
            for c, n in counts.items() for i in range(n)]  # fmt: skip


def test_every_prefix_of_the_stratified_order_holds_each_category_in_its_share():
    requests = _requests({"code": 30, "math": 10, "writing": 20})
    order = stratified_order(requests, seed=3)
    assert sorted(r.id for r in order) == sorted(r.id for r in requests)  # the same prompts, reordered
    for n in range(1, len(order) + 1):
        for category, total in (("code", 30), ("math", 10), ("writing", 20)):
            taken = sum(r.category == category for r in order[:n])
            assert abs(taken - n * total / 60) < 1.0 + 1e-9, (n, category, taken)
    assert [r.id for r in stratified_order(requests, seed=3)] == [r.id for r in order]  # seeded
    assert [r.id for r in stratified_order(requests, seed=4)] != [r.id for r in order]
    code = [r.id for r in order if r.category == "code"]
    assert code != sorted(code, key=lambda i: int(i.split("-")[1]))  # random within its category
