"""What every scenario shares: the machine description, repeats, JSON and plots."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import torch

from ..errors import OrinError
from ..planning.home import Environment, Step, environment_from_dict
from ..planning.home.steps import check_steps


def machine() -> dict[str, Any]:
    """Where a run ran: docs/BENCHMARKS.md (orin_llm/bench/results_page.py) names the CPU and the commit
    of every figure from these."""
    info = {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "cpu": cpu_model(),
            "commit": checkout_commit()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (x86: "model name"; ARM: "Model", else the part)."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if ":" in line)
    except OSError:
        fields = {}
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return fields.get("model name") or fields.get("Model") or platform.processor() or platform.machine()


def checkout_commit() -> Optional[str]:
    """The commit of the checkout this package runs from ("-dirty" when it has changes), or None when it is
    not a git checkout (an installed wheel)."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


@contextmanager
def loaded(engine_dir: Path, **options: Any) -> Iterator[Any]:
    """`load_engine(engine_dir, **options)` (torch or TensorRT-LLM, by the manifest) for one scenario; a
    TensorRT-LLM engine's executors are shut down after it, so the next scenario has the memory."""
    from ..backends.loader import load_engine
    from ..runtime.engine_config import EngineConfig

    engine = load_engine(engine_dir, EngineConfig.at_edge(**options))
    try:
        yield engine
    finally:
        engine.close()  # Backend.close: a TrtllmEngine's executors; a torch Engine is freed with its last reference


def manifest_kv(manifest) -> dict[str, Any]:
    """The target's KV cache as the manifest says it was built, with fp16 and int8 bytes per token for scale
    (2 × layers × kv_heads × head_dim × bytes per element, docs/ARCHITECTURE.md, "Memory")."""
    from ..build.memory import KV_BYTES

    arch, dtype = manifest.target.arch, manifest.target.kv_cache.dtype
    return {"kv_bytes_per_token_fp16": arch.kv_bytes_per_token(2),
            "kv_bytes_per_token_int8": arch.kv_bytes_per_token(1), "kv_cache_dtype": dtype,
            "kv_cache_bytes_per_token": arch.kv_bytes_per_token(KV_BYTES[dtype])}


def median_of(n: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(n))


def percentile(xs: list[float], q: float) -> float:
    """The q-quantile of xs (nearest rank): p50 = percentile(xs, 0.5), p99 = percentile(xs, 0.99)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def timed_ms(call: Callable[[], Any]) -> tuple[float, Any]:
    """Wall time of `call()` in ms, and what it returned."""
    t0 = time.perf_counter()
    value = call()
    return (time.perf_counter() - t0) * 1e3, value


def engine_text(engine_dir: Path):
    """The engine's tokenizer and chat template without its models (either backend): what a scenario
    that talks to a daemon needs to build its prompts, e.g. a home of so many tokens."""
    from ..manifest import load_manifest
    from ..runtime.engine_files import EngineText, load_tokenizer

    text = EngineText()
    text.manifest, text.tokenizer = load_manifest(engine_dir), load_tokenizer(engine_dir / "tokenizer")
    return text


def home_file(env: Environment, directory: Path) -> Path:
    """`env` as the YAML file a daemon's `--environment` reads."""
    import yaml

    path = directory / f"{env.name}.yaml"
    path.write_text(yaml.safe_dump(env.model_dump(mode="json", exclude_none=True), sort_keys=False))
    return path


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def write_json(out: Path, name: str, data: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    data = {"scenario": name, "command": " ".join(["orin-llm"] + sys.argv[1:]),
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(), **data}
    path = out / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise OrinError("plots need matplotlib: pip install 'orin-llm[bench]'") from None
    return plt


def floor_examples(home: Environment, prefix: str, rooms: list[dict]) -> list[dict]:
    """`home`'s examples with its things renamed as scaled_environment renames them (`prefix` + name),
    those whose things are all in `rooms` already: a home's examples name only its own things."""
    names = {n for r in rooms for n in [r["name"], *r["places"], *r["objects"], *r["devices"]]}
    out = []
    for ex in home.examples:
        plan = []
        for step in check_steps("\n".join(ex.plan), home)[0]:
            args = [a if t == "text" else prefix + a for a, t in zip(step.args, step.types, strict=True)]
            if any(a not in names for a, t in zip(args, step.types, strict=True) if t != "text"):
                break
            plan.append(str(Step(step.action, args, step.types)))
        else:
            out.append({"task": ex.task, "plan": plan})
    return out


def scaled_environment(base_homes: list[Environment], encode: Callable[[str], list[int]],
                       render: Callable[[Environment], str], target_tokens: int) -> Environment:
    """A home whose rendered prefix has about `target_tokens` tokens: rooms of several homes,
    renamed to stay unique (floor1_kitchen, floor2_kitchen, ...), added until the target."""
    first = base_homes[0]
    rooms: list[dict] = []
    env = None
    floor = 0
    while True:
        for home in base_homes:
            floor += 1
            for room in home.rooms:
                rooms.append({"name": f"f{floor}_{room.name}", "places": [f"f{floor}_{p}" for p in room.places],
                              "objects": [f"f{floor}_{o}" for o in room.objects],
                              "devices": [f"f{floor}_{d}" for d in room.devices or []]})
                candidate = environment_from_dict({
                    "name": f"scaled_{target_tokens}", "description": first.description,
                    "rooms": rooms, "actions": [a.model_dump() for a in first.actions],
                    "examples": floor_examples(first, "f1_", rooms)})
                if len(encode(render(candidate))) > target_tokens:
                    return env or candidate
                env = candidate
        if floor > 400:
            raise OrinError(f"cannot grow an environment to {target_tokens} tokens")
