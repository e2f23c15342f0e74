"""Write a torch engine of a model's shape with random weights (orin_llm/bench/shaped.py): honest for
time and memory, never for what it says. For timing ratios on the product's shape (Llama 3.2 3B) where
the embedded SmolLM2-135M's proportions would mislead, e.g. issue #15's interleaved traffic:

    python bench/shaped_engine.py --config jetson/models/llama-3.2-3b-instruct/config.json \\
        --out /tmp/llama-3.2-3b-shaped-random
    orin-llm bench --engine /tmp/llama-3.2-3b-shaped-random --scenario traffic --out /tmp/bench-3b

The 3B engine is 4.1 GB on disk; writing it takes ~1.5 minutes here, and the traffic scenario on it
~30 minutes on 2 cores (each cold request prefills 4k tokens of a 3B model).
"""
import argparse
import sys
from pathlib import Path

from orin_llm.bench.shaped import write_shaped_engine
from orin_llm.errors import OrinError

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--config", type=Path, required=True, help="a config.json, e.g. jetson/models/*/config.json")
p.add_argument("--out", type=Path, required=True, help="the engine directory to write")
p.add_argument("--tokenizer-engine", type=Path, default=Path("engines/smollm2-135m-demo"),
               help="a torch engine whose tokenizer, chat template and EOS ids to use (default: the embedded one)")
p.add_argument("--calibration-size", type=int, default=4, help="calib items for the INT8 KV scales (default 4)")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--force", action="store_true", help="replace --out if it exists")
a = p.parse_args()
try:
    print(write_shaped_engine(a.config, a.out, a.tokenizer_engine, a.calibration_size, a.force, a.seed))
except OrinError as e:
    sys.exit(f"error: {e}")
