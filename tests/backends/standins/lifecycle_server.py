"""A stand-in server for lifecycle tests: plain stdlib, behaviour chosen by flags.

  --port P                  serve GET /health (200) on 127.0.0.1:P
  --ready-after S           sleep S seconds (printing progress lines) before listening
  --exit-code N             print --message to stderr and exit with N instead of serving
  --ignore-sigterm          ignore SIGTERM (only SIGKILL stops it)
  --child-pid-file F        fork a child that also ignores SIGTERM and sleeps; write its pid to F
  --pid-file F              write this process's pid to F
"""

import argparse
import http.server
import os
import signal
import subprocess
import sys
import time


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - stdlib name
        ok = self.path == "/health"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"ok" if ok else b"not found")

    def log_message(self, fmt, *args):
        print("request:", fmt % args, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ready-after", type=float, default=0.0)
    ap.add_argument("--exit-code", type=int)
    ap.add_argument("--message", default="RuntimeError: CUDA out of memory (stand-in)")
    ap.add_argument("--ignore-sigterm", action="store_true")
    ap.add_argument("--child-pid-file")
    ap.add_argument("--pid-file")
    args = ap.parse_args()

    if args.pid_file:
        with open(args.pid_file, "w") as fh:
            fh.write(str(os.getpid()))
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child_pid_file:
        child = subprocess.Popen(
            [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
        )
        with open(args.child_pid_file, "w") as fh:
            fh.write(str(child.pid))
    print("stand-in: loading weights", flush=True)
    for i in range(int(args.ready_after * 10)):
        time.sleep(0.1)
        if i % 5 == 0:
            print(f"stand-in: loading shard {i // 5}", flush=True)
    if args.exit_code is not None:
        for i in range(30):
            print(f"stand-in: log line {i}", flush=True)
        print(args.message, file=sys.stderr, flush=True)
        sys.exit(args.exit_code)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Health)
    print(f"stand-in: listening on {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
