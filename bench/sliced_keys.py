"""Why attention.py computes QK^T with one mm per KV head: a prompt block's queries attend to the
keys up to the block's end, a slice `keys[:, :end]` of the sequence's read, which is not
batch-contiguous. torch.bmm copies such an operand before its GEMM; torch.mm takes each head's
[end, D] rows as they are. Shapes of the embedded model (3 KV heads × 3 query heads, D = 64) for a
16-query block at the end of a 4k-token prompt, in bf16, one thread; alternating, median of
--rounds. The results are bit-identical (checked here).

    python bench/sliced_keys.py [--keys 4027] [--rounds 7]
"""
import argparse
import json
import statistics
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--keys", type=int, default=4027)
ap.add_argument("--rounds", type=int, default=7)
a = ap.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
kv, g, n, d = 3, 3, 16, 64
keys = torch.randn(kv, a.keys, d).to(torch.bfloat16)
rows = torch.randn(kv, g * n, d).to(torch.bfloat16)
end = a.keys - 11  # the block before the prompt's last, partial one

ways = {"bmm_on_slice": lambda: torch.bmm(rows, keys[:, :end].transpose(1, 2)),
        "mm_per_head": lambda: torch.stack([torch.mm(rows[i], keys[i, :end].T) for i in range(kv)]),
        "bmm_contiguous_keys": lambda: torch.bmm(rows, keys.transpose(1, 2))}  # the full read: no slice
assert torch.equal(ways["bmm_on_slice"](), ways["mm_per_head"]())
times: dict[str, list[float]] = {k: [] for k in ways}
for _ in range(a.rounds):
    for name, f in ways.items():
        f()
        t = time.perf_counter()
        for _ in range(100):
            f()
        times[name].append((time.perf_counter() - t) / 100 * 1e6)
med = {k: round(statistics.median(v), 1) for k, v in times.items()}
print(json.dumps({"keys": a.keys, "block_keys": end, "median_us": med,
                  "bmm_on_slice_over_mm_per_head": round(med["bmm_on_slice"] / med["mm_per_head"], 2)}))
