"""The daemon's options, declared once: `DaemonConfig`'s fields, each with its help text and range.

Both front ends are generated from these fields: `orin-llm serve` (typer, `typer_command`) and
`python -m orin_llm.server.daemon` (argparse, `add_arguments`), so an option added here exists in
both with the same default and help, and both refuse the same values (`DaemonConfig.check`, before
the socket is claimed). User-facing environment overrides are read here, once, at the edge
(`from_options`): nothing later in the process reads or writes them.

Light on purpose (no torch): the CLI imports it to declare `serve`.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .. import placement
from ..errors import OrinError

DEFAULT_ENGINE = Path("engines/smollm2-135m-demo")
LOG_LEVELS = ("debug", "info", "warning", "error")
THREADS_VARIABLE = "ORIN_LLM_THREADS"  # the user's thread count for the torch runtime (README)
REMOTE_TOKEN_VARIABLE = "ORIN_LLM_REMOTE_TOKEN"  # the remote engine's bearer token (--remote-token-file wins)
STATE_DIRECTORY_VARIABLE = "STATE_DIRECTORY"  # set by systemd for a unit with StateDirectory=
NO_STATE = "none"  # --state-dir none: nothing is kept


def option(default: Any, help: str, minimum: Optional[float] = None, choices: tuple[str, ...] = (),
           daemon_required: bool = False) -> Any:
    """A field of DaemonConfig that is a command-line option (--field-name). `minimum`: the smallest
    value accepted (None passes: the option's "unset"); `daemon_required`: `python -m
    orin_llm.server.daemon` has no default for it (the CLI's default is a demo engine)."""
    return field(default=default, metadata={"help": help, "minimum": minimum, "choices": choices,
                                            "daemon_required": daemon_required})


@dataclass(frozen=True)
class DaemonConfig:
    engine: Path = option(DEFAULT_ENGINE, "Engine directory.", daemon_required=True)
    environment: Optional[Path] = option(None, "Home environment (YAML, JSON or text); default: the example home.")
    socket: Optional[Path] = option(None, "Unix socket (default: $ORIN_LLM_SOCKET, else "
                                    "$XDG_RUNTIME_DIR/orin-llm/planner.sock, else /run/orin-llm/planner.sock).")
    socket_group: Optional[str] = option(None, "Group owning the socket (mode 0660).")
    tcp: Optional[str] = option(None, "Also listen on HOST:PORT (no authentication).")
    queue_size: int = option(16, "Requests that may wait; more get 503 + Retry-After.", minimum=1)
    grace_s: float = option(10.0, "On SIGTERM, time for queued/running requests to finish.", minimum=0)
    device: str = option("auto", "cpu, cuda, or auto.")
    max_tokens_limit: Optional[int] = option(None, "Cap max_tokens below the engine's limit.", minimum=1)
    log_level: str = option("info", "debug, info, warning or error.", choices=LOG_LEVELS)
    cpus: str = option("auto", "CPU list the daemon runs on, e.g. 1-11; auto: all but the lowest CPU, which the "
                       "policy keeps; all: as inherited (jetson/GUIDE.md).")
    nice: int = option(placement.DAEMON_NICE, "Add this niceness (0: none): the policy wins a contended CPU.")
    threads: Optional[int] = option(None, "The engine's intra-op threads (torch; default: one per daemon CPU).",
                                    minimum=1)
    prefill_chunk_tokens: Optional[int] = option(None, "Prompt tokens a request prefills per engine step "
                                                 "(default 256): smaller keeps the others decoding.", minimum=1)
    max_batch: Optional[int] = option(None, "Requests that decode together (default: the engine's max_batch_size).",
                                      minimum=1)
    state_dir: Optional[str] = option(None, "Where the daemon keeps the lookup histories and the homes it was "
                                      "sent, across restarts (default: $STATE_DIRECTORY (systemd), else "
                                      "$XDG_STATE_HOME/orin-llm, else ~/.local/state/orin-llm; none: keep nothing).")
    save_idle_s: float = option(1.0, "Save what changed (histories, homes' state) once no request has run for this "
                                "long; also every 5 s while busy, and at SIGTERM.", minimum=0)
    weights: Optional[str] = option(None, "fp32: run a q4_1 engine's float32 export instead of its Q4_1 blocks "
                                    "(torch; default: the engine's own).")
    trtllm_features: Optional[str] = option(None, "TensorRT-LLM only: turn on just these of the features the engine "
                                            "was built for, a comma list of block_reuse, chunked_context, grammar, "
                                            "lookup, draft_model, or none (default: all; jetson/GUIDE.md, the "
                                            "feature ladder).")
    remote: Optional[str] = option(None, "Generate on this OpenAI-compatible engine (vLLM), e.g. "
                                   "https://site-server:8000; the local engine answers when it cannot "
                                   "(jetson/GUIDE.md, \"Site server\"). https + a token beyond loopback.")
    remote_token_file: Optional[Path] = option(None, "File holding the remote engine's bearer token "
                                               "(default: $ORIN_LLM_REMOTE_TOKEN).")
    remote_model: Optional[str] = option(None, "The remote engine's model name (default: its first /v1/models).")
    remote_first_token_share: float = option(0.5, "Start the local engine when the remote has no first token "
                                             "by this share of the request's deadline.", minimum=0.01)
    remote_timeout_s: float = option(10.0, "A request's budget on the remote when it has no deadline_ms.",
                                     minimum=0.05)
    remote_backoff_s: float = option(1.0, "After a failure the remote rests this long, doubling per failure in "
                                     "a row (up to 60 s).", minimum=0.01)
    remote_flavor: str = option("vllm", "The remote engine's request fields: vllm, sglang or trtllm (trtllm-serve).",
                                choices=("vllm", "sglang", "trtllm"))
    remote_prompt: str = option("auto", "The prompt sent to the remote: ids (the planner's token ids), text (the same "
                                "prompt decoded: SGLang's router takes only text) or auto (text for sglang).",
                                choices=("auto", "ids", "text"))
    remote_plans: str = option("stepwise", "A plan under the home's state on the remote: stepwise (a request per "
                               "step, the steps feasible now) or whole (the home's grammar, checked here).",
                               choices=("stepwise", "whole"))
    # Not an option: $ORIN_LLM_THREADS as the user set it, read by from_options (the edge).
    env_threads: Optional[int] = field(default=None, metadata={"edge": True})
    env_remote_token: Optional[str] = field(default=None, metadata={"edge": True})  # $ORIN_LLM_REMOTE_TOKEN
    # $STATE_DIRECTORY, else $XDG_STATE_HOME/orin-llm (None: neither set): the default --state-dir
    env_state_dir: Optional[str] = field(default=None, metadata={"edge": True})

    @classmethod
    def from_options(cls, values: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> DaemonConfig:
        """The config for a front end's parsed options, with the user's environment read once here."""
        return cls(**{k: v for k, v in values.items() if k in OPTION_NAMES}, env_threads=env_threads(environ),
                   env_remote_token=environ.get(REMOTE_TOKEN_VARIABLE) or None,
                   env_state_dir=env_state_dir(environ))

    @property
    def state_path(self) -> Optional[Path]:
        """Where the daemon keeps its state: --state-dir, else the default one; None for `--state-dir none`.
        An empty --state-dir (a unit's unset variable) means the default, not the working directory."""
        if self.state_dir is not None and self.state_dir.strip().lower() == NO_STATE:
            return None
        if self.state_dir and self.state_dir.strip():
            return Path(self.state_dir)
        if self.env_state_dir:
            return Path(self.env_state_dir)
        return Path.home() / ".local" / "state" / "orin-llm"  # XDG's default for $XDG_STATE_HOME

    @property
    def state_dir_given(self) -> bool:
        """--state-dir names a directory (an unusable one is then an error, not a warning)."""
        return bool(self.state_dir and self.state_dir.strip()) and self.state_path is not None

    def check(self) -> None:
        """Refuse values out of range (before the daemon claims its socket): OrinError, one line."""
        for f in options():
            value, minimum, choices = getattr(self, f.name), f.metadata["minimum"], f.metadata["choices"]
            if minimum is not None and value is not None and value < minimum:
                raise OrinError(f"{flag(f.name)} must be ≥ {minimum:g}, got {value:g}")
            if choices and str(value).lower() not in choices:
                raise OrinError(f"{flag(f.name)} must be one of {', '.join(choices)}, got {value!r}")
        self.remote_settings()  # an unsafe --remote is refused before the socket is claimed

    def remote_settings(self):
        """runtime/remote's RemoteSettings for --remote (None: plan on this device only); OrinError for a
        URL that is not safe to use or a token file that cannot be read."""
        if not self.remote:
            return None
        from ..backends.remote.settings import RemoteSettings  # light: no torch

        token = self.env_remote_token
        if self.remote_token_file is not None:
            try:
                token = Path(self.remote_token_file).read_text().strip()
            except OSError as e:
                raise OrinError(f"--remote-token-file {self.remote_token_file}: {e.strerror}") from None
        return RemoteSettings(self.remote, token or None, self.remote_model, self.remote_first_token_share,
                              self.remote_timeout_s, backoff_s=self.remote_backoff_s, plans=self.remote_plans,
                              flavor=self.remote_flavor, prompt=self.remote_prompt)

    def placement_and_threads(self) -> tuple[placement.Placement, Optional[int]]:
        """Where the daemon runs and the engine's thread count (None: torch's own choice): --threads,
        else $ORIN_LLM_THREADS, else one per CPU of --cpus (placement.daemon_placement)."""
        where, threads = placement.daemon_placement(self.cpus, self.nice, self.threads)
        if self.threads is None and self.env_threads is not None:
            threads = self.env_threads  # a thread count set in the environment wins over the derived one
        return where, threads


def options() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(DaemonConfig) if "help" in f.metadata]


OPTION_NAMES = frozenset(f.name for f in options())


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_threads(environ: Mapping[str, str] = os.environ) -> Optional[int]:
    """$ORIN_LLM_THREADS as a thread count (None: unset or empty); anything but a positive whole
    number is refused, naming the variable."""
    value = environ.get(THREADS_VARIABLE)
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise OrinError(f"{THREADS_VARIABLE}={value!r}: give a positive whole number")
    return int(value)


def env_state_dir(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The default state directory the environment names: systemd's $STATE_DIRECTORY (StateDirectory=;
    the first one where it lists several), else $XDG_STATE_HOME/orin-llm; None when neither is set."""
    systemd = (environ.get(STATE_DIRECTORY_VARIABLE) or "").split(":")[0]
    if systemd:
        return systemd
    xdg = environ.get("XDG_STATE_HOME")
    return str(Path(xdg) / "orin-llm") if xdg else None


def _hints() -> dict[str, Any]:
    return typing.get_type_hints(DaemonConfig)


def _base_type(hint: Any) -> type:
    """int for Optional[int], Path for Path."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option as an argparse argument (`python -m orin_llm.server.daemon`)."""
    hints = _hints()
    for f in options():
        kind, meta = _base_type(hints[f.name]), f.metadata
        kw: dict[str, Any] = {"help": meta["help"], "dest": f.name}
        if meta["daemon_required"]:
            kw["required"] = True
        else:
            kw["default"] = f.default
        if meta["choices"]:
            kw.update(choices=meta["choices"], type=str.lower)
        elif kind is not str:
            kw["type"] = kind
        parser.add_argument(flag(f.name), **kw)


def typer_command(run: Callable[[DaemonConfig], None], doc: str) -> Callable[..., None]:
    """A function typer turns into the `serve` command: one keyword parameter per option (typer reads
    the signature), calling run(DaemonConfig.from_options(...))."""
    import typer

    hints = _hints()

    def command(**values: Any) -> None:
        run(DaemonConfig.from_options(values))

    params = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[f.name],
                                default=typer.Option(f.default, flag(f.name), help=f.metadata["help"]))
              for f in options()]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {f.name: hints[f.name] for f in options()}
    command.__doc__ = doc
    return command
