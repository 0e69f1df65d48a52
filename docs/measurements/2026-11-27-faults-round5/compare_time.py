"""Wall time of `dflashbench compare ROUNDS SINGLE` (3 repeat rounds against one run, the three methods at c=1,2,4, 24
requests a point: tests/gate/test_compare_power.make_rounds_run) for each dflashbench tree given, paired, 3 times."""
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[3]  # this checkout: its tests make the runs
sys.path[:0] = [str(HERE), str(HERE / "tests"), str(HERE / "tests/gate")]
if __name__ == "__main__":
    from test_compare_power import make_rounds_run
    d = Path(os.environ.get("OUT", "/tmp/cmp-round5"))
    d.mkdir(exist_ok=True)
    rounds = make_rounds_run(d, "rounds", seed=1) if not (d / "rounds").exists() else next((d / "rounds").iterdir())
    single = make_rounds_run(d, "single", rounds=1, seed=101) if not (d / "single").exists() else next((d / "single").iterdir())
    times = {r: [] for r in sys.argv[1:]}
    for _ in range(3):
        for root in sys.argv[1:]:
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "dflashbench", "compare", str(rounds), str(single)], capture_output=True,
                               text=True, env={**os.environ, "PYTHONPATH": root}, cwd=root)
            times[root].append(time.perf_counter() - t)
            last = p.stdout.strip().splitlines()[-1][:60]
            print(root, p.returncode, round(times[root][-1], 2), last, flush=True)
    for root, ts in times.items():
        print(root, "median", round(statistics.median(ts), 2))
