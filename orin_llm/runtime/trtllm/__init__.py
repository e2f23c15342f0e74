"""The TensorRT-LLM 0.12-jetson backend: the import boundary (bindings.py), the engine and its
requests (engine.py, generation.py), the plan grammar's logits post-processor (grammar.py), and
0.12's refusals with their sources (rules.py), which the build and the memory plan ask too."""
