from __future__ import annotations

import pytest

from orin_llm.planning.home import EXAMPLE_HOME_PATH, Environment, load_environment


@pytest.fixture
def home() -> Environment:
    return load_environment(EXAMPLE_HOME_PATH)
