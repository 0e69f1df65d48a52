"""Write a 2,000,000-row Azure-format trace (10 requests a second), then time `sweep --trace FILE --trace-window 2s
--dry-run` with the dflashbench tree given: wall seconds and peak RSS. Usage: bigtrace.py ROOT FILE [write]"""
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time

root, path = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:
    start = dt.datetime(2023, 11, 16, 18, 0, 0, tzinfo=dt.UTC)
    with open(path, "w") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for i in range(2_000_000):
            fh.write(f"{(start + dt.timedelta(milliseconds=100 * i)).strftime('%Y-%m-%d %H:%M:%S.%f')},{100 + i % 7},{5 + i % 3}\n")
    sys.exit()
env = {**os.environ, "PYTHONPATH": root}
t = time.perf_counter()
p = subprocess.run([sys.executable, "-m", "dflashbench", "sweep", "--trace", path, "--trace-window", "2s", "--method", "ar",
                    "--dry-run"], capture_output=True, text=True, env=env, cwd=root)
wall = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
line = next((ln for ln in p.stdout.splitlines() if "requests sent" in ln), p.stderr[-200:])
print(json.dumps({"rc": p.returncode, "wall_s": round(wall, 1), "peak_rss_mib": round(rss), "plan": line.strip()[:90]}))
