"""Per-token decode time of the target vs its weight-only INT8 draft and an INT4 (group 64) copy,
all through QuantLinear, side by side (best of 2 rounds of 32 tokens).

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
models = {'fp32 target': e.model, 'int8_wo draft': e.draft_model, 'int4_wo (group 64)': int4_copy()}
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
    print(f"{name:20s} best {min(v):6.1f} ms/token")
