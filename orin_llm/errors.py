"""One exception type for everything a user can fix.

The CLI prints an OrinError as a single line (no traceback) and exits non-zero; the
server turns it into a 4xx. Anything else is a bug and keeps its traceback.
"""


class OrinError(Exception):
    """A problem the user can fix; the message says what and how."""
