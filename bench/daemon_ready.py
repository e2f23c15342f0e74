"""How soon a fresh daemon answers: its socket bound, the first /health answer (while the engine
loads), and ready (engine loaded, home pinned), each in seconds from the `orin-llm serve` process's
start. Runs the real CLI on a socket of its own, best of --runs, and prints one JSON line.

    python bench/daemon_ready.py --engine engines/smollm2-135m-demo
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orin_llm.client import PlannerClient, PlannerError

ap = argparse.ArgumentParser()
ap.add_argument("--engine", default="engines/smollm2-135m-demo")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--timeout-s", type=float, default=300)
a = ap.parse_args()


def one_run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        sock = Path(tmp) / "orin-llm.sock"
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "orin_llm.cli", "serve", "--engine", a.engine, "--socket",
                                 str(sock), "--state-dir", "none"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        out: dict = {}
        try:
            while time.monotonic() - t0 < a.timeout_s:
                if proc.poll() is not None:
                    raise SystemExit(f"the daemon exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
                if "bound_s" not in out and sock.exists():
                    out["bound_s"] = time.monotonic() - t0
                if "bound_s" in out:
                    try:
                        h = PlannerClient(sock, timeout_s=5).health()
                    except (PlannerError, OSError):
                        h = None
                    if h is not None:
                        out.setdefault("first_health_s", time.monotonic() - t0)
                        out.setdefault("first_status", h.get("status"))
                        if h.get("status") == "ok":
                            out["ready_s"] = time.monotonic() - t0
                            return out
                time.sleep(0.01)
            raise SystemExit(f"not ready after {a.timeout_s} s: {out}")
        finally:
            proc.terminate()
            proc.wait(30)


runs = [one_run() for _ in range(a.runs)]
best = {k: round(min(r[k] for r in runs), 3) for k in ("bound_s", "first_health_s", "ready_s")}
best["health_after_bind_s"] = round(min(r["first_health_s"] - r["bound_s"] for r in runs), 3)
print(json.dumps({"engine": a.engine, "runs": runs, "best": best}))
