import json

import torch

from dflashbench.bench.common import median_seconds, torch_threads, write_json


def test_median_seconds_times_each_run_on_a_fresh_setup_and_skips_warmups():
    calls, states = [], iter(range(100))
    seconds = median_seconds(calls.append, 3, setup=lambda: next(states), warmup=2)
    assert calls == [0, 1, 2, 3, 4]  # every run got its own fresh state; 2 warm-ups + 3 timed
    assert 0 <= seconds < 1


def test_torch_threads_restores_the_setting():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


def test_write_json_round_trips(tmp_path):
    out = write_json(tmp_path / "r.json", {"tok_per_s": 1.5})
    assert json.loads(out.read_text()) == {"tok_per_s": 1.5}


def test_the_load_generator_benchmarks_import_no_torch():
    """``bench loadgen --json`` writes through write_json: loading torch for it would cost seconds for nothing."""
    import subprocess
    import sys

    code = ("import sys; import dflashbench.bench.common, dflashbench.bench.client_capacity, dflashbench.bench.overhead, "
            "dflashbench.bench.standin; print('torch' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
