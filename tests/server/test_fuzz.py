"""The OpenAPI schema, fuzzed with schemathesis: no input makes the daemon fail (5xx).

On the capped daemon (max_tokens ≤ 8, so every generated request is quick), over its `--tcp`
loopback port: schemathesis speaks TCP.
"""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
# after the skip: hypothesis comes with schemathesis
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

pytestmark = pytest.mark.full

OPERATIONS = [("POST", "/v1/plan"), ("POST", "/v1/chat/completions"), ("PUT", "/v1/environment"),
              ("PATCH", "/v1/environment/state")]


@pytest.fixture(scope="module")
def fuzz_schema(capped_daemon):
    return schemathesis.openapi.from_url(f"{capped_daemon.url}/openapi.json")


# Hypothesis strategies rather than schemathesis' pytest plugin: its lazy schemas (from_fixture)
# rely on a pytest internal that pytest 9 removed.
@pytest.mark.parametrize("method, path", OPERATIONS)
def test_no_input_makes_the_daemon_fail(fuzz_schema, method, path):
    operation = fuzz_schema[path][method]
    cases = st.one_of(operation.as_strategy(schemathesis.GenerationMode.POSITIVE),
                      operation.as_strategy(schemathesis.GenerationMode.NEGATIVE))

    @given(case=cases)
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def fuzz(case):
        response = case.call(timeout=60)
        if response.status_code == 504 and "deadline" in response.text:
            return  # a tiny deadline_ms, passed: an answer, not a failure
        case.validate_response(response, checks=[not_a_server_error])

    fuzz()
