"""Per-token decode time of the target vs its weight-only INT8 draft (torch's packed int8 kernel on
CPUs, and the same layers dequantized per call) and an INT4 (group 64) copy, all through
QuantLinear, side by side (best of 2 rounds of 32 tokens, one thread unless ORIN_LLM_THREADS says).

    python bench/draft_speed.py --engine engines/smollm2-135m-demo
"""
import argparse
import os
import time

import torch

from orin_llm.runtime.engine import Engine
from orin_llm.runtime.kv_cache import KVCache
from orin_llm.runtime.llama import load_llama
from orin_llm.runtime.quant import QuantLinear, quantize

ap = argparse.ArgumentParser()
ap.add_argument("--engine", default="engines/smollm2-135m-demo")
e = Engine.load(ap.parse_args().engine, device="cpu", exact=False)
arch = e.model.arch
def int4_copy():
    os.environ["ORIN_LLM_PACK"] = "0"  # plain nn.Linear layers to quantize (load_llama packs them otherwise)
    m = load_llama(e.dir / 'target', arch, torch.float32, 'cpu', 2048)
    del os.environ["ORIN_LLM_PACK"]
    for name, mod in list(m.named_modules()):
        if isinstance(mod, torch.nn.Linear) and '.layers.' in '.' + name + '.':
            q, s = quantize(mod.weight.data, 'int4_wo', 64)
            m.set_submodule(name, QuantLinear(q, s, torch.float32))
    return m
class Dequantized(torch.nn.Module):
    """The draft with its int8 layers on the dequantize-per-call path (the packed scales set aside)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *a):
        layers = [m for m in self.model.modules() if isinstance(m, QuantLinear)]
        saved = [m.packed_scales for m in layers]
        for m in layers:
            m.packed_scales = None
        try:
            return self.model(*a)
        finally:
            for m, s in zip(layers, saved, strict=True):
                m.packed_scales = s


torch.set_num_threads(int(os.environ.get("ORIN_LLM_THREADS", "1")))
models = {'fp32 target': e.model, 'int8_wo draft (packed kernel)': e.draft_model,
          'int8_wo draft (dequantized per call)': Dequantized(e.draft_model), 'int4_wo (group 64)': int4_copy()}
ids = torch.tensor(e.chat_ids([{"role": "user", "content": "List the rooms of a house."}]))
res = {}
for _round in range(2):
    for name, m in models.items():
        c = KVCache(arch, 512, torch.float32)
        m(ids, c)
        tok = torch.tensor([int(ids[-1])])
        t0 = time.perf_counter()
        for _ in range(32):
            tok = m(tok, c).argmax(-1)
        res.setdefault(name, []).append((time.perf_counter() - t0) / 32 * 1e3)
for name, v in res.items():
    print(f"{name:38s} best {min(v):6.1f} ms/token")
