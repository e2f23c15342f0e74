"""One exception type for everything a user can fix.

The CLI prints an OrinError as a single line (no traceback) and exits non-zero; the
server turns it into a 4xx. Anything else is a bug and keeps its traceback.
"""


class OrinError(Exception):
    """A problem the user can fix; the message says what and how."""


class PromptTooLong(OrinError):
    """A prompt over the engine's max_input_len (the server answers 413, not 422)."""

    def __init__(self, tokens: int, limit: int):
        super().__init__(f"the prompt has {tokens} tokens, over this engine's max_input_len of {limit}; "
                         "shorten the task, observations or messages")
        self.tokens, self.limit = tokens, limit
