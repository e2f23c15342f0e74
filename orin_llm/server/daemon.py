"""`serve()`: the planning daemon on a Unix socket (and TCP only when asked).

Start-up order matters: import the server (no torch), claim the socket path (a second daemon fails
in a second, not after loading an engine), bind, listen and serve at once: /health answers
"loading" (503) while a thread imports the runtime and the worker loads the engine and pins the
environment; then the engine's routes open, /health says "ok", and systemd hears READY=1. A failed
load stops the server and serve() raises it (exit 2 for an OrinError, as before).

Next to a robot's policy the daemon gives way (docs/BENCHMARKS.md, "The policy next door"): its
placement (`--cpus`, `--nice`) is applied before any thread starts, so the engine's
OpenMP team inherits it; `--threads` sets the engine's intra-op threads; `--prefill-chunk-tokens`
asks the runtime to prefill long prompts in chunks (refused while the runtime cannot).

SIGTERM (or SIGINT) is graceful: the listening sockets close, queued and running requests get
`grace_s` to finish (a stream still running then ends with an error event), the worker stops and
saves what changed, the socket file is removed, and the process exits 0.

What the daemon keeps across restarts lives in its state directory (server/state_dir.py, on by
default): the lookup histories and the homes it was sent, pinned again when it starts.

Run it without the CLI: `python -m orin_llm.server.daemon --engine DIR --socket PATH`; both take the
options of `DaemonConfig` (server/config.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, TypeVar

from .. import placement
from ..errors import OrinError
from .config import DaemonConfig, add_arguments
from .sockets import bind_tcp, bind_unix, claim, default_socket_path, notify, same_file
from .state_dir import StateDir, open_state_dir

log = logging.getLogger("orin_llm.server")
LOAD_POLL_S = 0.05  # how often the event loop looks whether the worker has loaded
T = TypeVar("T")


def serve(config: DaemonConfig) -> None:
    """Serve until SIGTERM/SIGINT. Problems a user can fix raise OrinError before serving, and a
    failed engine load raises what it raised once the server has stopped (the daemon exits non-zero)."""
    config.check()
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    where, threads = config.placement_and_threads()
    in_force = placement.apply(where)  # before any thread: the engine's threads inherit it
    if where != placement.Placement() or threads is not None:
        log.info("placement: CPUs %s, nice %d, %s; engine threads %s", in_force["cpus"], in_force["nice"],
                 in_force["scheduler"], threads or "default")
    path = Path(config.socket) if config.socket else default_socket_path()
    # the server's own imports (no runtime: the quick ones) come before the socket, so that once bound it
    # answers /health at once; the runtime's (torch) and the engine load come after, behind it
    server = _build_server(config, threads, path)
    claim(path)
    server.orin.state_dir = open_state_dir(config)  # one daemon per state directory: refused here, not later
    sockets = [bind_unix(path, config.socket_group)]
    ours = path.lstat()  # remove the socket file at exit only if it is still this one
    serving = False

    def on_signal(signum: int, frame: object) -> None:
        if not serving:  # before uvicorn took over the signals: nothing to drain
            raise SystemExit(0)
        # else uvicorn handled it already and re-raises it at its exit: nothing more to do

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if config.tcp:
            sockets.append(bind_tcp(config.tcp))
            log.warning("also listening on TCP %s: anyone who can reach it can use the planner", config.tcp)
        serving = True
        server.run(sockets=sockets)
        if server.load_error is not None:
            raise server.load_error
    finally:
        for sock in sockets:
            sock.close()
        if same_file(path, ours):
            path.unlink()
        for s, handler in previous.items():
            signal.signal(s, handler)


def tune_engine(engine, chunk_tokens: Optional[int] = None, max_batch: Optional[int] = None,
                state_dir: Optional[Path] = None) -> Optional[Path]:
    """The daemon's settings for the runtime's scheduler and its lookup histories:

    - chunk_tokens: prefill at most this many prompt tokens per request per engine step, so a long
      prompt does not hold the CPU or GPU for one long step (the engine's `prefill_chunk_tokens`);
    - max_batch: at most this many requests decode together (at most the engine's max_batch_size);
    - state_dir: the lookup drafter's histories persist there, one file per environment; returns
      the directory they persist in (None: they do not).

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
        return directory
    if state_dir is not None:  # the default is on, so a TensorRT-LLM daemon says so rather than refuse
        log.warning("this %s runtime keeps one lookup history in memory: it is not persisted in %s", backend,
                    state_dir)
    return None


def _build_server(config: DaemonConfig, threads: Optional[int], path: Path):
    """The server, serving /health at once; the engine loads behind it (see Server.load)."""
    import uvicorn  # the heavy imports wait until the socket is ours; the runtime's wait for Server.load

    from .app import AppState, ServerConfig, create_app, open_app
    from .protocol import Protocol
    from .routes import engine_routers

    state = AppState(ServerConfig(max_tokens_limit=config.max_tokens_limit))

    class Server(uvicorn.Server):
        orin = state  # what the routes share (serve() adds the state directory once the socket is ours)
        load_error: Optional[BaseException] = None
        _loading: Optional[asyncio.Task] = None

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                log.info("listening on %s; loading the engine", path)
                self._loading = asyncio.create_task(self.load())

        async def load(self) -> None:
            """Import the runtime, make the worker (it loads the engine and pins the home on its own
            thread), wait for it, add the engine's routes, then tell systemd READY=1. A failure is
            logged and stops the server; serve() raises it."""
            try:
                worker = await in_thread(make_worker, config, threads, state.metrics, state.state_dir)
                state.worker = worker
                worker.start()
                while not worker.wait_loaded(0):  # raises what loading raised
                    await asyncio.sleep(LOAD_POLL_S)
                await in_thread(engine_routers)  # the imports, off the event loop
                open_app(app)
            except Exception as e:
                self.load_error = e
                log.error("loading failed: %s", e)
                self.should_exit = True
                return
            log.info("ready on %s", path)
            notify("READY=1")

        def handle_exit(self, sig: int, frame) -> None:
            if not self.should_exit:
                log.info("signal %d: finishing requests (up to %.1f s), then exiting", sig, config.grace_s)
                notify("STOPPING=1")
                if state.worker is not None:
                    state.worker.drain(config.grace_s)
            super().handle_exit(sig, frame)

    app = create_app(state)
    server_config = uvicorn.Config(app, http=Protocol, log_level=config.log_level.lower(), access_log=False,
                                   lifespan="on", timeout_graceful_shutdown=config.grace_s, limit_concurrency=512,
                                   server_header=False)
    return Server(server_config)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) on a daemon thread of its own. Not asyncio.to_thread: at exit, asyncio.run waits for
    the default executor's threads, so a daemon stopped while it imports or loads would wait for that
    to end; a daemon thread is left behind instead, as the worker's is."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(set_it: Callable[[Any], None], value: Any) -> None:
        if not done.done():
            set_it(value)

    def run() -> None:
        try:
            outcome: tuple = (done.set_result, fn(*args))
        except BaseException as e:
            outcome = (done.set_exception, e)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass

    threading.Thread(target=run, name=f"orin-llm-{fn.__name__}", daemon=True).start()
    return await done


def make_worker(config: DaemonConfig, threads: Optional[int], metrics, state_dir: Optional[StateDir] = None):
    """The worker, loading the engine on its thread (this returns at once). Imports the runtime (torch).
    `state_dir`: where the histories and homes are kept (None: nothing is)."""
    from ..backends.loader import load_engine
    from ..backends.trtllm.features import parse_features
    from ..planning.home import EXAMPLE_HOME_PATH, load_environment
    from ..planning.planner import Planner
    from ..runtime.engine_config import EngineConfig
    from .worker import Worker

    env = load_environment(config.environment or EXAMPLE_HOME_PATH)
    remote = config.remote_settings()  # refused here, before the engine loads, when unsafe
    kept = state_dir or StateDir(None, "not asked to keep anything")

    def make_planner() -> Planner:  # on the worker's thread: see Worker
        options = {}
        if config.trtllm_features is not None:  # the feature ladder (backends/trtllm/features.py)
            options["features"] = parse_features(config.trtllm_features)
        # torch or TensorRT-LLM, by the manifest
        load = EngineConfig.at_edge(device=config.device, threads=threads, weights=config.weights)
        engine = load_engine(config.engine, load, **options)
        kept.histories = tune_engine(engine, config.prefill_chunk_tokens, config.max_batch, kept.path)
        if remote is not None:  # plans generate there first; this engine answers when it cannot
            from ..backends.remote.hedged import HedgedBackend

            engine = HedgedBackend(engine, remote)
            log.info("remote engine %s: plans generate there, this engine is the fallback", remote.url)
        planner = Planner(engine, env)
        log.info("engine %s (%s) loaded; environment %r pinned: %d tokens in %.2f s", engine.name,
                 engine.manifest.backend, env.name, len(planner.prefix.ids), planner.prefill_s)
        kept.homes.restore(planner)  # the homes it was sent before a restart, pinned again
        return planner

    def save(planner: Planner) -> None:  # the homes are saved even if the histories could not be
        try:
            planner.engine.save_histories()
        finally:
            kept.homes.save(planner)

    return Worker(make_planner, queue_size=config.queue_size, metrics=metrics, save=save,
                  save_idle_s=config.save_idle_s)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orin_llm.server.daemon", description=__doc__.split("\n")[0])
    add_arguments(p)
    a = p.parse_args(argv)
    try:
        serve(DaemonConfig.from_options(vars(a)))
    except OrinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
