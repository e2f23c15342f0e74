"""One exception type for everything a user can fix.

The CLI prints an OrinError as a single line (no traceback) and exits non-zero; the
server turns it into a 4xx. Anything else is a bug and keeps its traceback.
"""


class OrinError(Exception):
    """A problem the user can fix; the message says what and how."""


class PromptTooLong(OrinError):
    """A prompt over the engine's max_input_len (the server answers 413, not 422)."""

    def __init__(self, tokens: int, limit: int, message: str = ""):
        super().__init__(message or f"the prompt has {tokens} tokens, over this engine's max_input_len of "
                                    f"{limit}; shorten the task, observations or messages")
        self.tokens, self.limit = tokens, limit


class EnvironmentTooLong(PromptTooLong):
    """An environment whose prefix leaves no room for a task under max_input_len (also a 413)."""

    def __init__(self, name: str, tokens: int, limit: int):
        super().__init__(tokens, limit, f"the environment {name!r} renders to {tokens} prefix tokens; this "
                         f"engine's max_input_len is {limit}, which leaves {max(0, limit - tokens)} tokens for a "
                         "task (it needs at least 1): describe the home more briefly (fewer rooms, objects or "
                         "examples), or build the engine with a larger max_input_len")
        self.name = name


class EngineRestarted(OrinError):
    """The engine ended a request because it had to restart (a stalled TensorRT-LLM executor:
    backends/trtllm/watchdog.py); the same request may succeed if sent again."""
