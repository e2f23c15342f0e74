"""The torch runtime: our own Llama forward, KV cache, sampling and decode loop."""
