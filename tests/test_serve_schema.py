"""schemathesis against the OpenAPI schema of ``limelight serve``: no server errors, and
responses that conform to the documented schemas, status codes and content types (the app
in-process, over the real test audit). Each API operation is one test."""

from __future__ import annotations

# schemathesis.specs.openapi.schemas is imported (and assertion-rewritten) here, at collection,
# single-threaded: imported lazily inside a fixture it raced background threads of earlier tests
# in CPython 3.11's non-thread-safe ast.parse (SystemError: recursion depth mismatch)
import pytest
import schemathesis
import schemathesis.specs.openapi.schemas  # noqa: F401
import test_serve_support as support
from hypothesis import HealthCheck, given, settings

audit_dir, service = support.audit_dir, support.service

OPERATIONS = [
    "GET /api/info", "GET /api/search", "GET /api/documents/{docid}", "GET /api/queries",
    "GET /api/queries/{qid}", "GET /api/retrievability", "GET /api/retrievability/documents",
    "GET /api/retrievability/groups", "POST /api/eqi", "GET /api/explain", "GET /api/near-misses",
    "GET /api/fairness", "GET /api/performance", "GET /api/performance/owners", "GET /api/topics",
    "GET /api/performance/queries", "GET /api/compare",
]


@pytest.fixture(scope="session")
def api_schema(service):
    from limelight.service.app import create_app

    return schemathesis.openapi.from_asgi("/openapi.json", create_app(service, max_body=256 * 1024))


def _operations(schema) -> dict:
    return {op.label: op for op in (r.ok() for r in schema.get_all_operations())}


def test_every_operation_is_fuzzed(api_schema):
    assert sorted(_operations(api_schema)) == sorted(OPERATIONS)


@pytest.mark.parametrize("label", OPERATIONS)
def test_operation_conforms_to_the_schema(api_schema, label):
    op = _operations(api_schema)[label]

    @given(case=op.as_strategy())
    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def run(case):
        case.call_and_validate()

    run()
