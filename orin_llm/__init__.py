"""orin-llm: build, serve and call a planning LLM next to a robot policy on Jetson AGX Orin."""

__version__ = "0.1.0"
