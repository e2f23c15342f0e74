"""Planning on a site server: an OpenAI-compatible engine (vLLM first) generates, the robot's own engine
answers when the remote cannot (backends/remote/hedged.py). settings.py: what may be called and how;
client.py: one streamed completion over HTTP(S)."""
