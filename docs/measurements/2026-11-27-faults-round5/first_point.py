"""Seconds from starting `sweep --endpoint` (a trace replay, azure-code 2 s window) to its first request sent, for the
dflashbench tree given, with HF_ENDPOINT refused (a closed port: no network) or silent (takes the connection, never
answers). Usage: first_point.py ROOT refused|silent MODEL OUTDIR"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

root, mode, model, out = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
sys.path[:0] = [root, root + "/tests", root + "/tests/run"]
if __name__ == "__main__":
    from test_reliability import CLI, env_for_children

    from dflashbench.backends.base import LaunchPlan
    from dflashbench.backends.process import ServerProcess, free_port
    from dflashbench.bench.standin import SERVE
    out.mkdir(parents=True, exist_ok=True)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    if mode == "silent":
        srv.listen(64)
        def take():
            while True:
                c, _ = srv.accept()
                c.settimeout(600)
        threading.Thread(target=take, daemon=True).start()
        hub = f"http://127.0.0.1:{srv.getsockname()[1]}"
    else:
        hub = f"http://127.0.0.1:{srv.getsockname()[1]}"
        srv.close()  # nothing listens: refused
    port = free_port()
    gsm = Path(root) / "tests/fixtures/datasets/openai--gsm8k"
    suite = out / "t.toml"
    suite.write_text(f'name = "fp"\nbackend = "standin"\nmethods = ["ar"]\nmodel = "{model}"\nconcurrency = []\nnum_prompts = 3\n'
                     f'warmup_requests = 0\nmax_tokens = 12\ntimeout_s = 20\ntrace = "azure-code"\ntrace_window = "2s"\n'
                     f'[[workloads]]\nname = "gsm8k"\ndata = "{gsm}"\n')
    with ServerProcess(LaunchPlan(argv=(*SERVE, "--port", str(port), "--model", model, "--pace-ms", "2")), out / "s.log") as s:
        s.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=60, progress=False)
        env = {**env_for_children(), "HF_ENDPOINT": hub, "HF_HOME": str(out / "hf"), "TMPDIR": str(out)}
        env.pop("HF_HUB_OFFLINE", None)
        t0 = time.monotonic_ns()
        p = subprocess.Popen([sys.executable, str(CLI), "sweep", "--suite", str(suite), "--endpoint", f"http://127.0.0.1:{port}",
                              "-o", str(out / "r"), "--no-report"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, start_new_session=True)
        try:
            p.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.communicate()
            print(json.dumps({"first_request_s": None, "killed_after_s": 400}))
            sys.exit()
        total = (time.monotonic_ns() - t0) / 1e9
        rows = [json.loads(ln) for ln in next((out / "r").glob("*/requests.jsonl")).read_text().splitlines()]
        first = min(r["sent_ns"] for r in rows)
        print(json.dumps({"first_request_s": round((first - t0) / 1e9, 1), "sweep_s": round(total, 1), "rc": p.returncode}))
