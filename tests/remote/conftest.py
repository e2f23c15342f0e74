"""The server tests' real daemons (tests/server/conftest.py), for the remote tests that start one."""

from tests.server.conftest import start_daemon  # noqa: F401  (a fixture, re-exported for this directory)

# What the remote engine is asked for is the home's grammar, not the grammar narrowed by the home's state
# (issue #35 has not chosen how to narrow it remotely yet). Under `enforce` (the default) a remote plan with a
# step the state does not allow is refused on the robot and the local engine answers
# (test_hedged.py, "infeasible"); the tests of remote serving ask for `report`: the grammar on the
# remote, the violations listed here.
REMOTE_FEASIBILITY = "report"
