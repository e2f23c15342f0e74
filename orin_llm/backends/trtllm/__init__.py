"""The TensorRT-LLM 0.12-jetson backend: the import boundary (bindings.py), the engine (engine.py) and its
loading (loading.py), its requests (stepped.py; generation.py, with drafter.py; prefix_reuse.py), the
executor's requests and responses (request.py, responses.py), its KV stats (kv_stats.py), the plan grammar's
logits post-processor (grammar.py), and 0.12's refusals with their sources (rules.py), which the build and
the memory plan ask too."""
