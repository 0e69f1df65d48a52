"""The grid: run order, each point's place and label, one launch plan per method carried on its points, and a
planned port that was taken meanwhile moved at launch time."""

from __future__ import annotations

import socket

from dflashbench.backends import get_backend
from dflashbench.plan.grid import build_grid, launch_on_free_port, plan_launches
from dflashbench.plan.pairing import resolve
from dflashbench.plan.suites import load_suite
from dflashbench.types import Method


def _demo(**update):
    suite = load_suite("demo")
    return suite.model_copy(update=update) if update else suite


def test_points_know_their_place_in_run_order_and_say_it():
    suite = _demo(concurrency=[1, 4], repeats=2)
    grid = build_grid(suite, "reference")
    assert [p.index for p in grid] == list(range(1, len(grid) + 1))
    assert len(grid) == 2 * len(suite.methods) * len(suite.workloads) * 2
    first_round = [p for p in grid if p.repeat == 0]
    assert grid[: len(first_round)] == first_round  # round 0 of every method runs before round 1
    last = grid[-1]
    assert last.label("reference", len(grid), 2).startswith(f"[{len(grid)}/{len(grid)}] reference ")
    assert last.label("reference", len(grid), 2).endswith("c=4 repeat 2/2")


def test_a_launch_is_built_once_per_method_and_every_point_of_the_method_carries_it():
    suite, pair = resolve(_demo(concurrency=[1, 2], repeats=2))
    backend = get_backend("reference")
    launches = plan_launches(suite, pair, backend)
    grid = build_grid(suite, "reference", launches)
    for method in suite.methods:
        carried = {id(p.launch) for p in grid if p.method is method}
        assert carried == {id(launches[method])}  # the same object on every point, every round
        assert str(launches[method].spec.port) in launches[method].plan.argv
    assert {launches[m].spec.port for m in suite.methods}.__len__() == len(suite.methods)
    assert Method.AR in launches


def test_a_planned_port_taken_since_is_moved_at_launch_with_a_note():
    suite, pair = resolve(_demo())
    backend = get_backend("reference")
    launch = plan_launches(suite, pair, backend)[Method.AR]
    same, note = launch_on_free_port(launch, backend)
    assert same is launch and note is None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", launch.spec.port))
        squatter.listen()
        moved, note = launch_on_free_port(launch, backend)
    assert moved.spec.port != launch.spec.port
    assert str(moved.spec.port) in moved.plan.argv and str(launch.spec.port) not in moved.plan.argv
    assert note and str(launch.spec.port) in note and str(moved.spec.port) in note


def test_interleaved_grid_runs_every_method_of_one_load_in_turn_with_the_same_ids():
    suite = _demo(concurrency=[1, 4], request_rate=[2.0], repeats=2)
    serial, interleaved = build_grid(suite, "reference"), build_grid(suite, "reference", interleave=True)
    assert sorted(p.point_id for p in serial) == sorted(p.point_id for p in interleaved)  # --resume finds them
    assert [p.index for p in interleaved] == list(range(1, len(interleaved) + 1))
    first = [(p.method.value, p.concurrency, p.request_rate, p.repeat) for p in interleaved[:9]]
    assert first == [(m, 1, None, 0) for m in ("ar", "dflash", "eagle3")] + \
        [(m, 4, None, 0) for m in ("ar", "dflash", "eagle3")] + [(m, 0, 2.0, 0) for m in ("ar", "dflash", "eagle3")]
    assert {p.repeat for p in interleaved[9:]} == {1}  # round 0 of every method before round 1
