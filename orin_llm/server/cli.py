"""The CLI's `serve` and `plan` commands as plain functions (the typer layer in orin_llm/cli.py
only declares the options). Problems a user can fix raise OrinError: one line, exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from ..errors import OrinError


def serve_command(engine: Path, environment: Optional[Path], socket: Optional[Path],
                  socket_group: Optional[str], tcp: Optional[str], queue_size: int, grace_s: float,
                  device: str, max_tokens_limit: Optional[int] = None, log_level: str = "info",
                  cpus: str = "auto", nice: int = 10, threads: Optional[int] = None,
                  prefill_chunk_tokens: Optional[int] = None) -> None:
    """Run the planning daemon until SIGTERM/SIGINT."""
    import os

    from ..placement import daemon_placement
    from .daemon import serve

    where, derived = daemon_placement(cpus, nice, threads)
    if threads is None and "ORIN_LLM_THREADS" in os.environ:
        derived = None  # a thread count set in the environment wins over the derived one
    serve(engine, environment, socket, socket_group, tcp, queue_size, grace_s, device, max_tokens_limit,
          log_level, where, derived, prefill_chunk_tokens)


def plan_command(task: str, socket: Optional[Path], observations: Optional[list[str]], as_json: bool,
                 stream: bool, max_tokens: Optional[int], temperature: Optional[float], seed: Optional[int],
                 timeout_s: float) -> None:
    """Ask the daemon for a plan. --json prints the response (with --stream: one JSON event per line)."""
    from ..client import PlannerClient, PlannerError

    opts = {"max_tokens": max_tokens, "temperature": temperature, "seed": seed}
    try:
        with PlannerClient(socket, timeout_s=timeout_s) as client:
            if not stream:
                result = client.plan(task, observations, **opts)
                if as_json:
                    print(json.dumps(result))
                    return
                print(result["plan"])
            else:
                result = {}
                for event in client.plan_stream(task, observations, **opts):
                    if as_json:
                        print(json.dumps(event), flush=True)
                    elif "delta" in event:
                        sys.stdout.write(event["delta"])
                        sys.stdout.flush()
                    result = event
                if as_json:
                    return
                print()
    except PlannerError as e:
        raise OrinError(str(e)) from None
    print(summary(result), file=sys.stderr)


def summary(result: dict) -> str:
    steps = "; ".join(f"{s['action']}({', '.join(s['args'])})" for s in result.get("steps", []))
    t = result.get("timings", {})
    return (f"-- {len(result.get('steps', []))} step(s): {steps}\n"
            f"-- environment v{result.get('environment_version')}, {t.get('prompt_tokens')} prompt tokens "
            f"({t.get('cached_prompt_tokens')} cached), {t.get('completion_tokens')} completion tokens, "
            f"TTFT {t.get('ttft_ms', 0):.0f} ms, decode {t.get('decode_tokens_per_s', 0):.1f} tok/s, "
            f"total {t.get('total_ms', 0):.0f} ms")
