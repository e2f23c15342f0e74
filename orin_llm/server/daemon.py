"""`serve()`: the planning daemon on a Unix socket (and TCP only when asked).

Start-up order matters: claim the socket path first (a second daemon fails in a second, not
after loading an engine), bind and listen at once (clients that connect while the engine loads
wait in the backlog instead of being refused), load the engine and pin the environment, then
serve and tell systemd READY=1.

Next to a robot's policy the daemon gives way (docs/BENCHMARKS.md, "The policy next door"): its
placement (`--cpus`, `--nice`) is applied before any thread starts, so the engine's
OpenMP team inherits it; `--threads` sets the engine's intra-op threads; `--prefill-chunk-tokens`
asks the runtime to prefill long prompts in chunks (refused while the runtime cannot).

SIGTERM (or SIGINT) is graceful: the listening sockets close, queued and running requests get
`grace_s` to finish (a stream still running then ends with an error event), the worker stops,
the socket file is removed, and the process exits 0.

Run it without the CLI: `python -m orin_llm.server.daemon --engine DIR --socket PATH`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Optional

from .. import placement
from ..errors import OrinError
from .sockets import bind_tcp, bind_unix, claim, default_socket_path, notify, same_file

log = logging.getLogger("orin_llm.server")


def serve(engine_dir: str | Path, environment: Optional[str | Path] = None,
          socket_path: Optional[str | Path] = None, socket_group: Optional[str] = None,
          tcp: Optional[str] = None, queue_size: int = 16, grace_s: float = 10.0, device: str = "auto",
          max_tokens_limit: Optional[int] = None, log_level: str = "info",
          where: placement.Placement = placement.Placement(), threads: Optional[int] = None,
          prefill_chunk_tokens: Optional[int] = None, max_batch: Optional[int] = None,
          state_dir: Optional[str | Path] = None, weights: Optional[str] = None) -> None:
    """Serve until SIGTERM/SIGINT. Problems a user can fix raise OrinError before serving.
    `state_dir`: where the lookup drafter's histories persist (None: default_state_dir(); "none": not
    at all). `weights`: "fp32" runs a q4_1 engine's float32 export (Engine.load)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if queue_size < 1 or grace_s < 0 or (max_tokens_limit is not None and max_tokens_limit < 1):
        raise OrinError("--queue-size and --max-tokens-limit must be ≥ 1, --grace-s ≥ 0")
    if any(v is not None and v < 1 for v in (threads, prefill_chunk_tokens, max_batch)):
        raise OrinError("--threads, --prefill-chunk-tokens and --max-batch must be ≥ 1")
    in_force = placement.apply(where)  # before any thread: the engine's threads inherit it
    if threads is not None:  # read by the torch runtime when it loads (runtime/engine.py apply_thread_setting)
        os.environ["ORIN_LLM_THREADS"] = str(threads)
    if where != placement.Placement() or threads is not None:
        log.info("placement: CPUs %s, nice %d, %s; engine threads %s", in_force["cpus"], in_force["nice"],
                 in_force["scheduler"], threads or "default")
    path = Path(socket_path) if socket_path else default_socket_path()
    claim(path)
    sockets = [bind_unix(path, socket_group)]
    ours = path.lstat()  # remove the socket file at exit only if it is still this one
    server = None

    def on_signal(signum: int, frame: object) -> None:
        if server is None:  # still loading: nothing to drain
            raise SystemExit(0)
        # else uvicorn handled it already and re-raises it at its exit: nothing more to do

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if tcp:
            sockets.append(bind_tcp(tcp))
            log.warning("also listening on TCP %s: anyone who can reach it can use the planner", tcp)
        server = _build_server(engine_dir, environment, device, queue_size, grace_s, max_tokens_limit,
                               log_level, path, prefill_chunk_tokens, max_batch, state_dir, weights)
        server.run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
        if same_file(path, ours):
            path.unlink()
        for s, handler in previous.items():
            signal.signal(s, handler)


def default_state_dir() -> Path:
    """$XDG_STATE_HOME/orin-llm, else ~/.local/state/orin-llm (the systemd unit uses /var/lib/orin-llm)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "orin-llm"


def tune_engine(engine, chunk_tokens: Optional[int] = None, max_batch: Optional[int] = None,
                state_dir: Optional[Path] = None) -> None:
    """The daemon's settings for the runtime's scheduler and its lookup histories:

    - chunk_tokens: prefill at most this many prompt tokens per request per engine step, so a long
      prompt does not hold the CPU or GPU for one long step (the engine's `prefill_chunk_tokens`);
    - max_batch: at most this many requests decode together (at most the engine's max_batch_size);
    - state_dir: the lookup drafter's histories persist there, one file per environment.

    An engine that cannot honour a setting (TensorRT-LLM batches and paces inside its executor) refuses
    it rather than ignore it."""
    caps = engine.capabilities  # what this runtime can honour (runtime/backend.py)
    backend = caps.backend
    if chunk_tokens is not None:
        if not caps.paced_prefill:
            raise OrinError(f"--prefill-chunk-tokens {chunk_tokens}: this {backend} runtime prefills a prompt in "
                            "one step and cannot pace it; leave the option out")
        engine.tune(prefill_chunk_tokens=chunk_tokens)
    if max_batch is not None:
        if not caps.tunable_batch:
            raise OrinError(f"--max-batch {max_batch}: this {backend} runtime batches inside its executor; "
                            "leave the option out")
        if max_batch > caps.max_batch:
            raise OrinError(f"--max-batch {max_batch} is over this engine's max_batch_size of {caps.max_batch} (its "
                            "KV pool is sized for that many); give at most that, or rebuild with a larger one")
        engine.tune(max_running=max_batch)
    if state_dir is not None and caps.persistent_histories:
        directory = Path(state_dir) / "lookup" / engine.name
        engine.persist_histories(directory)
        log.info("lookup histories persist in %s", directory)
    elif state_dir is not None:  # the default is on, so a TensorRT-LLM daemon says so rather than refuse
        log.warning("this %s runtime keeps one lookup history in memory: it is not persisted in %s", backend,
                    state_dir)


def _build_server(engine_dir, environment, device, queue_size, grace_s, max_tokens_limit, log_level, path,
                  prefill_chunk_tokens=None, max_batch=None, state_dir=None, weights=None):
    import uvicorn  # the heavy imports wait until the socket is ours

    from ..environment import EXAMPLE_HOME_PATH, load_environment
    from ..runtime.loader import load_engine
    from ..runtime.planner import Planner
    from .app import ServerConfig, create_app
    from .protocol import Protocol
    from .worker import Worker

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                log.info("ready on %s", path)
                notify("READY=1")

        def handle_exit(self, sig: int, frame) -> None:
            if not self.should_exit:
                log.info("signal %d: finishing requests (up to %.1f s), then exiting", sig, grace_s)
                notify("STOPPING=1")
                worker.drain(grace_s)
            super().handle_exit(sig, frame)

    env = load_environment(environment or EXAMPLE_HOME_PATH)

    def make_planner() -> Planner:  # on the worker's thread: see Worker
        options = {"weights": weights} if weights else {}
        engine = load_engine(engine_dir, device=device, **options)  # torch or TensorRT-LLM, by the manifest
        state = None if str(state_dir).lower() == "none" else Path(state_dir or default_state_dir())
        tune_engine(engine, prefill_chunk_tokens, max_batch, state)
        planner = Planner(engine, env)
        log.info("engine %s (%s) loaded; environment %r pinned: %d tokens in %.2f s", engine.name,
                 engine.manifest.backend, env.name, len(planner.prefix.ids), planner.prefill_s)
        return planner

    worker = Worker(make_planner, queue_size=queue_size)
    app = create_app(worker, ServerConfig(max_tokens_limit=max_tokens_limit))
    config = uvicorn.Config(app, http=Protocol, log_level=log_level.lower(), access_log=False, lifespan="on",
                            timeout_graceful_shutdown=grace_s, limit_concurrency=512, server_header=False)
    return Server(config)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orin_llm.server.daemon", description=__doc__.split("\n")[0])
    p.add_argument("--engine", required=True, help="engine directory")
    p.add_argument("--environment", help="home environment (YAML or text); default: the example home")
    p.add_argument("--socket", help=f"socket path (default: {default_socket_path()})")
    p.add_argument("--socket-group", help="group that owns the socket (mode 0660)")
    p.add_argument("--tcp", help="also listen on HOST:PORT (no authentication)")
    p.add_argument("--queue-size", type=int, default=16, help="requests that may wait (more: 503)")
    p.add_argument("--grace-s", type=float, default=10.0, help="on SIGTERM, time to finish requests")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--max-tokens-limit", type=int, help="cap max_tokens below the engine's limit")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--max-batch", type=int, help="requests that decode together (default: the engine's "
                                                  "max_batch_size)")
    p.add_argument("--state-dir", help=f"where lookup histories persist (default: {default_state_dir()}; none: off)")
    p.add_argument("--weights", help="fp32: a q4_1 engine's float32 export instead of its Q4_1 blocks (torch)")
    add_placement_args(p)
    a = p.parse_args(argv)
    try:
        where, threads = placement.daemon_placement(a.cpus, a.nice, a.threads)
        if a.threads is None and "ORIN_LLM_THREADS" in os.environ:
            threads = None  # a thread count set in the environment wins over the derived one
        serve(a.engine, a.environment, a.socket, a.socket_group, a.tcp, a.queue_size, a.grace_s, a.device,
              a.max_tokens_limit, a.log_level, where, threads, a.prefill_chunk_tokens, a.max_batch, a.state_dir,
              a.weights)
    except OrinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def add_placement_args(p: argparse.ArgumentParser) -> None:
    """The settings that make the daemon give way to a policy on the same machine (defaults: it does)."""
    p.add_argument("--cpus", default="auto", help="CPU list the daemon runs on, e.g. 1-11; auto (default): all but "
                   "the lowest CPU, which the policy keeps; all: as inherited")
    p.add_argument("--nice", type=int, default=placement.DAEMON_NICE,
                   help=f"add this niceness to the daemon (default {placement.DAEMON_NICE}; 0: none)")
    p.add_argument("--threads", type=int, help="the engine's intra-op threads (torch; default: one per daemon CPU)")
    p.add_argument("--prefill-chunk-tokens", type=int, help="prefill at most this many tokens per engine step")


if __name__ == "__main__":
    sys.exit(main())
