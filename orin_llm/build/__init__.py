"""`orin-llm build`: profile → engine directory (manifest, weights, tokenizer, KV scales)."""
