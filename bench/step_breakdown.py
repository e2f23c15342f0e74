"""Where one decode step of the target goes, against this machine's memory-bandwidth floor (issue #17).

For each weight format the engine can load (its own, e.g. q4_1, and the float32 export), in one
process, interleaved:
- the engine's plain greedy decode over the same context: ms per generated token, from
  `generate(..., "none")` timings (forward + sampling + the generation loop's own Python);
- one bare forward of one token over a ~`--context`-token cache, timed alone, then again with
  timers around each module call, which split it into: the linear layers (qkv, o, gate|up, down),
  attention (RoPE, the KV cache write and read, SDPA), the lm_head, the embedding, and the rest of
  the forward (RMSNorms, SiLU·up, residual adds: small ops whose cost is mostly dispatch). Where the
  decode steps run the fused decode layer (kernels/decode_layer.py), the layers are one C++ call each
  and are timed as one part. The timers' own cost is reported (hooked forward minus bare forward);
- greedy sampling of one row of logits (what `sampling.sample` does for temperature 0);
- the floor: the bytes a step must read (every weight once, plus the context's K/V) over the read
  bandwidth measured here (a sum over a 1 GiB float32 tensor, best of 5, same thread count).

    python bench/step_breakdown.py --engine engines/smollm2-135m-demo [--threads 1] \
        [--out docs/bench/step_breakdown.json] [--plot docs/bench/step_breakdown.png]
"""
import argparse
import json
import statistics
import time
from collections import defaultdict

ap = argparse.ArgumentParser()
ap.add_argument("--engine", default="engines/smollm2-135m-demo")
ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the daemon's default here: 1)")
ap.add_argument("--context", type=int, default=512, help="tokens in the cache the step attends over")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--out")
ap.add_argument("--plot")
a = ap.parse_args()

import torch  # noqa: E402

from orin_llm.bench.common import machine  # noqa: E402
from orin_llm.kernels.packed import PackedLinear  # noqa: E402
from orin_llm.kernels.quant import QuantLinear  # noqa: E402
from orin_llm.runtime.engine import Engine  # noqa: E402
from orin_llm.runtime.engine_config import EngineConfig  # noqa: E402
from orin_llm.runtime.llama import Item, RMSNorm  # noqa: E402
from orin_llm.runtime.sampling import SamplingParams, sample  # noqa: E402

LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def read_bandwidth_gbs() -> float:
    x = torch.ones(256 * 1024 * 1024)  # 1 GiB of float32
    x.sum()
    best = min(_timed(x.sum) for _ in range(5))
    return x.numel() * 4 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def step_bytes(engine: Engine, context: int) -> int:
    """Bytes one decode step reads at least: every linear layer's weights once (the lm_head included;
    the embedding lookup reads one row), the norms, and the context's K/V."""
    total = 0
    for mod in engine.model.modules():
        if isinstance(mod, QuantLinear):  # (a Q8Head's int8 pass is one: counted as its `approx`)
            total += mod.nbytes
        elif isinstance(mod, PackedLinear):
            total += mod.in_features * mod.out_features * 4  # float32, in oneDNN's layout
        elif isinstance(mod, (torch.nn.Linear, RMSNorm)):
            total += mod.weight.numel() * mod.weight.element_size()
    return total + context * engine.cache.target_pool.bytes_per_token


def _kind(name: str):
    leaf = name.rpartition(".")[2]
    if leaf in LINEARS:
        return "linear layers"
    return {"self_attn": "attention", "lm_head": "lm_head", "embed_tokens": "embedding"}.get(leaf)


class Timers:
    """Wall time per module kind from forward pre-hooks and hooks. Attention's hook spans its own qkv
    and o projections: `parts()` takes them out, so each kind counts once."""

    def __init__(self, model):
        self.ms, self._t0, self.handles = defaultdict(float), {}, []
        self.model = model
        if model.plan.fused_decode:  # decode steps run every layer in one C++ call each (decode_layer.py)
            layers = model._fused_layers

            def timed(*args):
                t0 = time.perf_counter()
                layers(*args)
                self.ms["fused decoder layers"] += (time.perf_counter() - t0) * 1e3
            model._fused_layers = timed  # (an instance attribute over the method; remove() deletes it)
        for name, mod in model.named_modules():
            kind = _kind(name)
            if kind:
                inner = name.rpartition(".")[2] in ("qkv_proj", "o_proj")
                self.handles.append(mod.register_forward_pre_hook(self._pre(id(mod))))
                self.handles.append(mod.register_forward_hook(self._post(id(mod), kind, inner)))

    def _pre(self, key):
        def hook(mod, args):
            self._t0[key] = time.perf_counter()
        return hook

    def _post(self, key, kind, inner):
        def hook(mod, args, out):
            ms = (time.perf_counter() - self._t0[key]) * 1e3
            self.ms[kind] += ms
            if inner:
                self.ms["projections inside attention"] += ms
        return hook

    def parts(self, runs: int) -> dict:
        ms = defaultdict(float, {k: v / runs for k, v in self.ms.items()})
        ms["attention"] -= ms.pop("projections inside attention", 0.0)
        return {"linear layers": ms["linear layers"], "attention (RoPE, KV write and read, SDPA)": ms["attention"],
                "fused decoder layers (all of the above, one C++ call a layer)": ms["fused decoder layers"],
                "lm_head": ms["lm_head"], "embedding": ms["embedding"]}

    def remove(self):
        for h in self.handles:
            h.remove()
        self.model.__dict__.pop("_fused_layers", None)


def measure(engine: Engine, ctx_ids: list[int]) -> dict:
    model, cache = engine.model, engine.contiguous_cache(len(ctx_ids) + 8)
    model(torch.tensor(ctx_ids), cache)
    n, x, runs = cache.length, torch.tensor([1000]), 30

    def forward():  # a greedy step, as the engine runs one (a Q8Head then takes its int8 pass)
        cache.crop(n)
        return model.forward_batch([Item(x, cache, 1, greedy=True)])[0]

    forward()
    bare = statistics.mean(_timed(forward) for _ in range(runs)) * 1e3
    timers = Timers(model)
    hooked = statistics.mean(_timed(forward) for _ in range(runs)) * 1e3
    timers.remove()
    parts = timers.parts(runs)
    # the rest of the bare forward (the hooks' own Python runs between the timed regions, so it is not
    # counted here: it shows as hooked - bare)
    parts["norms, SiLU, residual adds (small ops)"] = max(0.0, bare - sum(parts.values()))
    logits = forward()
    params = SamplingParams(max_tokens=1, temperature=0.0)
    sampling = statistics.median(_timed(lambda: sample(logits, params, None)) for _ in range(50)) * 1e3
    per_token = []
    for _ in range(3):  # the same context: the generation's first steps attend over as many keys
        r = engine.run(engine.generate(ctx_ids, SamplingParams(max_tokens=32, temperature=0.0), "none"))
        per_token.append(1e3 / r.timings.decode_tokens_per_s)
    return {"forward_ms": bare, "forward_hooked_ms": hooked, "parts_ms": parts, "sampling_ms": sampling,
            "engine_ms_per_token": statistics.median(per_token), "context_tokens": n}


def main() -> None:
    bw = read_bandwidth_gbs()
    base = Engine.load(a.engine, EngineConfig.at_edge(device="cpu", draft=False, threads=a.threads))
    formats = [base.manifest.target.weights] + (["fp32"] if base.manifest.target.weights == "q4_1" else [])
    engines = {formats[0]: base}
    for w in formats[1:]:
        load = EngineConfig.at_edge(device="cpu", draft=False, weights=w, threads=a.threads)
        engines[w] = Engine.load(a.engine, load)
    ctx = (base.encode("The robot keeps a tidy home. " * 200))[: a.context]
    results: dict = {w: [] for w in engines}
    for r in range(a.rounds):
        for w, eng in engines.items():
            results[w].append(measure(eng, ctx))
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(
            f"{w} forward {results[w][-1]['forward_ms']:.1f} ms" for w in engines), flush=True)
    out = {"command": "python bench/step_breakdown.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v is not None and k != "engine"),
           "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
           "read_bandwidth_gbs": bw, "formats": {}}
    for w, eng in engines.items():
        runs = results[w]
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("forward_ms", "forward_hooked_ms", "sampling_ms", "engine_ms_per_token")}
        med["parts_ms"] = {k: statistics.median(r["parts_ms"][k] for r in runs) for k in runs[0]["parts_ms"]}
        nbytes = step_bytes(eng, runs[0]["context_tokens"])
        med.update(step_bytes=nbytes, floor_ms=nbytes / (bw * 1e9) * 1e3, context_tokens=runs[0]["context_tokens"])
        med["loop_ms"] = med["engine_ms_per_token"] - med["forward_ms"] - med["sampling_ms"]
        out["formats"][w] = med
    print(f"read bandwidth {bw:.1f} GB/s, {a.threads} thread(s); ms per decode step (median of {a.rounds} rounds)")
    for w, m in out["formats"].items():
        print(f"\n{w}: engine {m['engine_ms_per_token']:.2f} ms/token = forward {m['forward_ms']:.2f} + sampling "
              f"{m['sampling_ms']:.2f} + the engine's own (paged KV, scheduler) {m['loop_ms']:.2f}; "
              f"floor {m['floor_ms']:.2f} ms "
              f"({m['step_bytes'] / 1e6:.0f} MB at {bw:.1f} GB/s): "
              f"{m['engine_ms_per_token'] / m['floor_ms']:.1f}× the floor")
        for k, v in m["parts_ms"].items():
            print(f"  {k:42s} {v:6.2f} ms")
        print(f"  (timers' own cost: {m['forward_hooked_ms'] - m['forward_ms']:.2f} ms)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    if a.plot:
        plot(out, a.plot)


def plot(out: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fmts = list(out["formats"])
    keys = list(next(iter(out["formats"].values()))["parts_ms"]) + ["sampling", "engine step beyond the forward"]
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for i, w in enumerate(fmts):
        m, left = out["formats"][w], 0.0
        vals = list(m["parts_ms"].values()) + [m["sampling_ms"], max(0.0, m["loop_ms"])]
        for j, (k, v) in enumerate(zip(keys, vals, strict=True)):
            ax.barh(i, v, left=left, color=f"C{j}", label=k if i == 0 else None)
            left += v
        ax.plot([m["floor_ms"]] * 2, [i - 0.4, i + 0.4], "k--", label="bandwidth floor" if i == 0 else None)
    ax.set_yticks(range(len(fmts)), [f"{w} weights" for w in fmts])
    ax.set_xlabel("ms per decode token")
    ax.set_title(f"one decode step, {out['formats'][fmts[0]]['context_tokens']}-token context, "
                 f"{out['machine']['torch_threads']} thread(s)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


main()
