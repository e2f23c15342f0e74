"""Side by side with llama.cpp's llama-server (issue #17): the same GGUF, the same prompt token ids,
greedy, both served over Unix sockets, interleaved request by request.

Our daemon runs once per weight format the engine holds (q4_1, and its float32 export), and each
plan is asked with every drafter (none, lookup, draft_model; the draft model's requests on a daemon of
their own, since the draft loads on first use and stays). llama-server gets the very token ids
our planner builds for the same task (home prefix + task, invariant 2) as a token array; the counts
are checked against what our daemon reports. Both get the same CPUs and threads, nice 0. Measured:
- on the home the tasks belong to (~0.5k tokens, cached after the first request): decode tokens/s,
  TTFT as each server reports it (engine side, without the HTTP round trip), and a `--max-tokens`
  (64) plan's time at each request's own rates (TTFT + 63 / decode rate: each server stops at its own
  EOS, so their plans differ in length; their own-length times are reported too);
- on a ~4k-token home: warm TTFT (one token) and one cold prefill of it;
- resident memory (VmRSS) of each server process after the runs: our daemon that served plain and
  lookup requests (and the 4k home) never loaded the draft model.

Skipped, with a line that says why, when no llama-server is found: $ORIN_LLM_LLAMA_SERVER, else PATH.
CI does not need it.

    python bench/peer_llamacpp.py --engine engines/smollm2-135m-demo [--threads 2] [--tasks 6] \
        [--rounds 2] [--out docs/bench/peer_llamacpp.json]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from orin_llm.bench.common import machine, scaled_environment
from orin_llm.build.source import resolve_source
from orin_llm.manifest import load_manifest
from orin_llm.planning.calibration_data import home_names, load_home, load_split
from orin_llm.planning.home import prefix_messages, task_message
from orin_llm.runtime.engine_files import EngineText, load_tokenizer

ap = argparse.ArgumentParser()
ap.add_argument("--engine", default="engines/smollm2-135m-demo")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--cpus", default="all", help="CPU list for both servers (taskset syntax), all: as inherited")
ap.add_argument("--tasks", type=int, default=6)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--max-tokens", type=int, default=64)
ap.add_argument("--long-home", type=int, default=4000, help="tokens of the home for the warm TTFT (0: skip)")
ap.add_argument("--drafters", default="none,lookup,draft_model")
ap.add_argument("--out")
a = ap.parse_args()


DRAFT_MODES = ("draft_model", "combined")


def find_llama_server():
    path = os.environ.get("ORIN_LLM_LLAMA_SERVER") or shutil.which("llama-server")
    return path if path and os.access(path, os.X_OK) else None


class Text(EngineText):
    """The engine's tokenizer and chat template, without its weights."""

    def __init__(self, engine_dir: Path):
        self.manifest = load_manifest(engine_dir)
        self.tokenizer = load_tokenizer(engine_dir / "tokenizer")

    def prompt(self, env, task: str) -> list[int]:  # as Planner.prompt_ids builds it
        prefix = self.chat_text(prefix_messages(env), add_generation_prompt=False)
        full = self.chat_text(prefix_messages(env) + [task_message(task)])
        assert full.startswith(prefix)
        return self.encode(prefix) + self.encode(full[len(prefix):])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def uds(sock: Path, timeout: float = 600) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://local", timeout=timeout)


def wait_ready(proc: subprocess.Popen, client: httpx.Client, path: str, what: str, log: Path) -> None:
    t0 = time.time()
    while time.time() - t0 < 600:
        if proc.poll() is not None:
            sys.exit(f"{what} exited ({proc.returncode}); its log: {log}\n{log.read_text()[-2000:]}")
        try:
            r = client.get(path)
            if r.status_code == 200 and (path != "/health" or r.json().get("ready", True)):
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    sys.exit(f"{what} not ready after 600 s; its log: {log}")


def taskset() -> list[str]:
    return [] if a.cpus == "all" else ["taskset", "-c", a.cpus]


class Ours:
    def __init__(self, tmp: Path, home_file: Path, weights: str | None, tag: str = ""):
        self.name = f"orin-llm {weights or 'engine default'}{tag}"
        self.sock, self.log = tmp / f"ours-{weights}{tag}.sock", tmp / f"ours-{weights}{tag}.log"
        cmd = [sys.executable, "-m", "orin_llm.cli", "serve", "--engine", a.engine, "--socket", str(self.sock),
               "--environment", str(home_file), "--cpus", "all", "--nice", "0", "--threads", str(a.threads),
               "--state-dir", "none"] + (["--weights", weights] if weights else [])
        self.proc = subprocess.Popen(taskset() + cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        self.http = uds(self.sock)
        wait_ready(self.proc, self.http, "/health", self.name, self.log)

    def plan(self, task: str, ids: list[int], drafter: str, max_tokens: int) -> dict:
        t0 = time.perf_counter()
        r = self.http.post("/v1/plan", json={"task": task, "max_tokens": max_tokens, "temperature": 0.0,
                                             "speculation": drafter, "constrained": False})
        wall = time.perf_counter() - t0
        r.raise_for_status()
        t = r.json()["timings"]
        if t["prompt_tokens"] != len(ids):
            sys.exit(f"token ids differ: our daemon prompted {t['prompt_tokens']} tokens, the bench built {len(ids)}")
        return {"ttft_ms": t["ttft_ms"], "decode_tok_s": t["decode_tokens_per_s"], "total_s": t["total_ms"] / 1e3,
                "client_s": wall, "completion_tokens": t["completion_tokens"],
                "cached_prompt_tokens": t["cached_prompt_tokens"]}

    def put_home(self, env) -> None:
        self.http.put("/v1/environment", json=env.model_dump(mode="json", exclude_none=True)).raise_for_status()

    def stop(self) -> float:
        mb = rss_mb(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        return mb


class Llama:
    def __init__(self, tmp: Path, binary: str, gguf: Path):
        self.name = f"llama.cpp {gguf.stem.rsplit('.', 1)[-1]}"
        self.sock, self.log = tmp / "llama.sock", tmp / "llama.log"
        cmd = [binary, "-m", str(gguf), "--host", str(self.sock), "-t", str(a.threads), "-tb", str(a.threads),
               "-c", "8192", "-np", "1", "--no-webui"]
        self.proc = subprocess.Popen(taskset() + cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        self.http = uds(self.sock)
        wait_ready(self.proc, self.http, "/health", self.name, self.log)

    def plan(self, ids: list[int], max_tokens: int) -> dict:
        t0 = time.perf_counter()
        r = self.http.post("/completion", json={"prompt": ids, "n_predict": max_tokens, "temperature": 0.0,
                                                "top_k": 1, "cache_prompt": True, "stream": False})
        wall = time.perf_counter() - t0
        r.raise_for_status()
        body = r.json()
        t = body["timings"]
        return {"ttft_ms": t["prompt_ms"], "decode_tok_s": t.get("predicted_per_second") or 0.0,
                "total_s": (t["prompt_ms"] + t["predicted_ms"]) / 1e3, "client_s": wall,
                "completion_tokens": t["predicted_n"], "computed_prompt_tokens": t["prompt_n"]}

    def stop(self) -> float:
        mb = rss_mb(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        return mb


def med(samples: list[dict], key: str) -> float:
    return statistics.median(s[key] for s in samples)


def plan_at(s: dict, tokens: int) -> float:
    """A `tokens`-token plan's seconds at this request's own rates: TTFT + (tokens - 1) / decode rate.
    The servers stop at their own EOS (their plans differ in length), so this is what compares."""
    return s["ttft_ms"] / 1e3 + (tokens - 1) / s["decode_tok_s"] if s["decode_tok_s"] else float("nan")


def main() -> None:
    binary = find_llama_server()
    if binary is None:
        print("peer benchmark skipped: no llama-server found (set ORIN_LLM_LLAMA_SERVER to its path, or put it "
              "on PATH; llama.cpp's tools/server builds it)")
        return
    engine = Path(a.engine)
    manifest = load_manifest(engine)
    source = resolve_source(manifest.target.source)
    if source.kind != "gguf":
        print(f"peer benchmark skipped: the engine's target comes from {source.path}, not a GGUF llama.cpp can load")
        return
    text = Text(engine)
    items = load_split("heldout")
    home_name = items[0].home
    tasks = [it.task for it in items if it.home == home_name][: a.tasks]
    home = load_home(home_name)
    weights = [None] + (["fp32"] if manifest.target.weights == "q4_1" else [])
    drafters = a.drafters.split(",")
    with tempfile.TemporaryDirectory(prefix="peer-") as tmpdir:
        tmp = Path(tmpdir)
        home_file = tmp / "home.json"
        home_file.write_text(json.dumps(home.model_dump(mode="json", exclude_none=True)))
        print(f"starting servers: orin-llm ({', '.join(w or manifest.target.weights for w in weights)}) and "
              f"{binary} on {source.path.name}, {a.threads} threads each", flush=True)
        ours = {w or manifest.target.weights: Ours(tmp, home_file, w) for w in weights}
        # The draft model loads on a daemon's first request for it, and stays. Its requests go to a
        # daemon of their own, so that the first one's memory is what serving auto, lookup and plain
        # requests holds (the memory goal), and the second's what the draft model adds.
        uses_draft = [d for d in drafters if d in DRAFT_MODES]
        drafting = Ours(tmp, home_file, None, " +draft") if uses_draft else None
        llama = Llama(tmp, binary, source.path)
        configs = [(f"orin-llm {w}, {d}", lambda task, ids, o=o, d=d: o.plan(task, ids, d, a.max_tokens))
                   for w, o in ours.items() for d in drafters if d not in DRAFT_MODES]
        configs += [(f"orin-llm {manifest.target.weights}, {d}",
                     lambda task, ids, d=d: drafting.plan(task, ids, d, a.max_tokens)) for d in uses_draft]
        configs.append((llama.name, lambda task, ids: llama.plan(ids, a.max_tokens)))
        samples: dict[str, list[dict]] = {name: [] for name, _ in configs}
        for _name, fn in configs:  # one untimed request each: the home gets cached on every server
            fn(tasks[0], text.prompt(home, tasks[0]))
        total = a.rounds * len(tasks) * len(configs)
        done, t_start = 0, time.time()
        for r in range(a.rounds):
            for task in tasks:
                ids = text.prompt(home, task)
                for name, fn in configs:  # interleaved request by request
                    samples[name].append(fn(task, ids))
                    done += 1
                eta = (time.time() - t_start) / done * (total - done)
                print(f"round {r + 1}/{a.rounds}, {done}/{total} requests, about {eta:.0f} s left", flush=True)
        long = {}
        if a.long_home:
            env = scaled_environment([load_home(n) for n in home_names()], text.encode,
                                     lambda e: text.chat_text(prefix_messages(e), add_generation_prompt=False),
                                     a.long_home)
            first = ours[next(iter(ours))]
            t0 = time.perf_counter()
            first.put_home(env)  # our cold prefill of the 4k home: the PUT pins it
            long["orin-llm cold prefill s"] = time.perf_counter() - t0  # (with the HTTP round trip)
            cold = llama.plan(text.prompt(env, tasks[0]), 1)
            long["llama.cpp cold prefill s"] = cold["ttft_ms"] / 1e3
            warm = {"orin-llm": [], "llama.cpp": []}
            for task in tasks:
                ids = text.prompt(env, task)
                warm["orin-llm"].append(first.plan(task, ids, "none", 1)["ttft_ms"])
                warm["llama.cpp"].append(llama.plan(ids, 1)["ttft_ms"])
            long.update({"prefix_tokens": len(text.prompt(env, tasks[0])),
                         "orin-llm warm ttft ms": statistics.median(warm["orin-llm"]),
                         "llama.cpp warm ttft ms": statistics.median(warm["llama.cpp"])})
        memory = {f"orin-llm {w}": o.stop() for w, o in ours.items()}
        if drafting is not None:
            memory[f"orin-llm {manifest.target.weights}, draft-model requests"] = drafting.stop()
        memory[llama.name] = llama.stop()
    rows = {name: {"decode_tok_s": med(s, "decode_tok_s"), "plan_s": med(s, "total_s"), "client_s": med(s, "client_s"),
                   "ttft_ms": med(s, "ttft_ms"), "completion_tokens": med(s, "completion_tokens"),
                   "plan_at_max_tokens_s": statistics.median(plan_at(x, a.max_tokens) for x in s)}
            for name, s in samples.items()}
    lc = rows[llama.name]
    q = manifest.target.weights
    best_ours = min(v["plan_at_max_tokens_s"] for k, v in rows.items() if k.startswith(f"orin-llm {q}"))
    plain = rows.get(f"orin-llm {q}, none")
    ratios = {"plain decode, ours / llama.cpp (same precision)": plain["decode_tok_s"] / lc["decode_tok_s"]
              if plain else None,
              f"best {a.max_tokens}-token plan, ours (any drafter) / llama.cpp": best_ours / lc["plan_at_max_tokens_s"],
              "resident memory, ours / llama.cpp (same precision)": memory[f"orin-llm {q}"] / memory[llama.name]}
    if long:
        ratios["warm TTFT on the long home, ours / llama.cpp"] = (long["orin-llm warm ttft ms"]
                                                                  / long["llama.cpp warm ttft ms"])
    out = {"command": "python bench/peer_llamacpp.py " + " ".join(sys.argv[1:]), "machine": machine(),
           "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "llama_server": subprocess.run(
               [binary, "--version"], capture_output=True, text=True).stderr.strip().splitlines()[-2:],
           "gguf": source.path.name, "threads": a.threads, "home": home_name, "tasks": tasks,
           "prompt_tokens": len(text.prompt(home, tasks[0])), "rows": rows, "memory_mb": memory, "long_home": long,
           "ratios": ratios, "samples": samples}
    print(f"\n{'config':34s} {'decode tok/s':>12s} {'TTFT ms':>8s} {f'{a.max_tokens}-token plan s':>18s} "
          f"{'plan s (own length)':>20s} {'tokens':>6s}")
    for name, r in rows.items():
        print(f"{name:34s} {r['decode_tok_s']:12.1f} {r['ttft_ms']:8.0f} {r['plan_at_max_tokens_s']:18.2f} "
              f"{r['plan_s']:20.2f} {r['completion_tokens']:6.0f}")
    print("resident memory (MB): " + ", ".join(f"{k} {v:.0f}" for k, v in memory.items()))
    if long:
        print(f"{long['prefix_tokens']}-token home: warm TTFT {long['orin-llm warm ttft ms']:.0f} ms (ours) vs "
              f"{long['llama.cpp warm ttft ms']:.0f} ms; cold prefill {long['orin-llm cold prefill s']:.1f} s vs "
              f"{long['llama.cpp cold prefill s']:.1f} s")
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}" if v is not None else f"{k}: n/a")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


main()
