"""The server tests' real daemons (tests/server/conftest.py), for the remote tests that start one."""

from tests.server.conftest import start_daemon  # noqa: F401  (a fixture, re-exported for this directory)
